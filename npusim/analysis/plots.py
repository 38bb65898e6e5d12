"""Plots of sweeps and runs with matplotlib's Agg canvas (no pyplot, no display needed).

Every function draws into ``ax`` when given, else into a new Figure, and returns the
Figure; :func:`save_figure` writes it as PNG, SVG or PDF by the file's suffix.  Time
columns (``*_ps``) are shown in a readable unit (ns, us, ms or s), swept sizes,
bandwidths and clocks (``*_bytes``, ``*_bps``, ``*_hz``) as ``128 MiB``, ``16 GB/s``, ``1 GHz``.
The plots of one run (utilisation, serving iterations, capacity probes) are in
:mod:`npusim.analysis.run_plots`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from npusim.analysis.frames import (AnalysisError, latency_samples, pareto_front,
                                    require_columns, require_numeric)
from npusim.core.errors import OutputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_TIME_UNITS = ((1e12, "s"), (1e9, "ms"), (1e6, "us"), (1e3, "ns"), (1, "ps"))
#: The figure formats save_figure writes, chosen by the file's suffix.
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def new_figure(figsize: tuple[float, float]) -> "Figure":
    """A Figure on an Agg canvas that Jupyter shows as an image (see
    :mod:`npusim.analysis.figure`)."""
    from npusim.analysis.figure import new_figure as make

    return make(figsize)


def _axes(ax: "Axes | None", figsize: tuple[float, float] = (6.0, 4.0)) -> "Axes":
    if ax is not None:
        if not hasattr(ax, "plot") or not hasattr(ax, "figure"):
            raise AnalysisError(f"ax: expected matplotlib Axes (e.g. fig.subplots()[0]), got "
                                f"{type(ax).__name__} {ax!r}")
        return ax
    return new_figure(figsize).add_subplot()


def _scale(column: str, values) -> tuple[float, str]:
    """Divisor and axis label for ``column`` (picoseconds shown in a readable unit)."""
    if not str(column).endswith("_ps"):
        return 1.0, str(column)
    top = max((abs(float(v)) for v in values), default=0.0)
    for factor, unit in _TIME_UNITS:
        if top >= factor:
            return factor, f"{str(column)[:-3]} ({unit})"
    return 1.0, f"{str(column)[:-3]} (ps)"


_UNIT_SUFFIXES = ("_bytes", "_bps", "_hz")


def _has_unit(column: str) -> bool:
    return str(column).rsplit(".", 1)[-1].endswith(_UNIT_SUFFIXES)


def _tick(column: str, value: Any) -> str:
    """A swept value as a tick label: sizes, bandwidths and clocks in readable units
    (``128 MiB``, ``16 GB/s``, ``1 GHz``; units live in the column names), else as is."""
    name = str(column).rsplit(".", 1)[-1]
    if _is_null(value):
        return "null"  # a swept null (the default), kept as its own category
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    from npusim.core.units import format_bytes, format_si, format_time_ps

    if name.endswith("_bytes"):
        return format_bytes(number)
    if name.endswith("_ps"):
        return format_time_ps(number)
    for suffix, unit in (("_bps", "B/s"), ("_hz", "Hz")):
        if name.endswith(suffix):
            return format_si(number, unit)
    return f"{number:g}" if isinstance(value, float) else str(value)


def _is_null(value: Any) -> bool:
    import pandas as pd

    return not isinstance(value, (list, tuple, dict)) and bool(pd.isna(value))


def _sorted_keys(values) -> list:
    """Distinct values in order, a null (a swept ``null``) last."""
    distinct = list(dict.fromkeys(values))
    nulls = [v for v in distinct if _is_null(v)][:1]
    return sorted(v for v in distinct if not _is_null(v)) + nulls


def _ok(frame: "pd.DataFrame") -> "pd.DataFrame":
    return frame[frame["status"] == "ok"] if "status" in frame.columns else frame


def plot_metric(frame: "pd.DataFrame", x: str, y: str, hue: str | None = None,
                ax: "Axes | None" = None, logx: bool = False, logy: bool = False,
                title: str | None = None) -> "Figure":
    """``y`` against parameter ``x``, one line per value of ``hue``.

    Points that did not run are left out; other parameters are averaged (the title
    says so when any vary).
    """
    require_columns(frame, (x, y, hue))
    require_numeric(frame, (y, x if logx else None))  # a text x is fine: categories
    data = _ok(frame).dropna(subset=[y])
    if data.empty:
        raise AnalysisError(f"no finished points with a value for {y!r}")
    # A swept null (e.g. workload.pd.prefill_cores: [null, 32]) is a point like any
    # other: pandas' groupby would drop it.  On x it makes the axis categorical.
    categorical_x = bool(data[x].isna().any())
    if categorical_x and logx:
        raise AnalysisError(f"{x!r} is null for some points, which a log axis cannot place; "
                            "drop logx or filter those rows")
    order = _sorted_keys(data[x]) if categorical_x else None  # the null last
    from pandas.api.types import is_numeric_dtype

    ax = _axes(ax)
    factor, ylabel = _scale(y, data[y])
    # a time on x (a swept latency, a metric against another) in a readable unit too
    x_factor, xlabel = _scale(x, data[x]) if order is None and is_numeric_dtype(data[x]) \
        else (1.0, str(x))
    groups = data.groupby(hue, sort=True, dropna=False) if hue else [(None, data)]
    averaged = False
    support: set[int] = set()  # points behind each marker
    for value, group in groups:
        averaged = averaged or bool(group.duplicated(subset=[x]).any())
        by_x = group.groupby(x, sort=True, dropna=False)[y]
        support.update(int(n) for n in by_x.size())
        line = by_x.mean()
        if order is not None:  # categories: positions 0, 1, ..., the null last
            xs = [len(order) - 1 if _is_null(v) else order.index(v) for v in line.index]
        else:
            xs = [float(v) / x_factor if x_factor != 1.0 else v for v in line.index]
        ax.plot(xs, line.to_numpy(dtype=float) / factor, marker="o",
                label=None if hue is None else f"{hue}={_tick(hue, value)}")
    if logx:
        ax.set_xscale("log", base=2)
    if order is not None:
        ax.set_xticks(range(len(order)), [_tick(x, v) for v in order])
    elif logx or (_has_unit(x) and is_numeric_dtype(data[x])):
        ticks = sorted(set(float(v) for v in data[x]))
        if len(ticks) <= 12:  # label the swept values themselves, not powers of two
            ax.set_xticks([t / x_factor for t in ticks],
                          [_tick(x, t) if x_factor == 1.0 else f"{t / x_factor:g}" for t in ticks])
            ax.xaxis.set_minor_locator(_null_locator())
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if hue:
        ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    # Several points per x (other parameters varied): each marker is their mean; when
    # some did not run, markers average different sets, which the title says.
    note = ""
    if averaged:
        note = " (mean over the other parameters" + (
            f"; {min(support)} to {max(support)} points per marker)"
            if len(support) > 1 else ")")
    ax.set_title(title or _wrapped(f"{y} vs {x}{note}"), fontsize="medium")
    return ax.figure


def plot_heatmap(frame: "pd.DataFrame", x: str, y: str, value: str,
                 ax: "Axes | None" = None, annotate: bool = True, cmap: str = "viridis",
                 title: str | None = None) -> "Figure":
    """Mean of ``value`` over the grid of parameters ``x`` (columns) and ``y`` (rows)."""
    require_columns(frame, (x, y, value))
    if len({x, y, value}) < 3:  # pandas fails with "Grouper ... not 1-dimensional"
        raise AnalysisError(f"a heatmap needs three different columns, got x={x!r}, y={y!r}, "
                            f"value={value!r}")
    require_numeric(frame, (value,))  # x and y are tick labels and may be text
    data = _ok(frame).dropna(subset=[value])
    if data.empty:
        raise AnalysisError(f"no finished points with a value for {value!r}")
    # dropna=False: a swept null is a row or column of its own (labelled null)
    table = data.pivot_table(index=y, columns=x, values=value, aggfunc="mean", dropna=False)
    table = table.reindex(index=_sorted_keys(table.index), columns=_sorted_keys(table.columns))
    factor, label = _scale(value, data[value])
    grid = table.to_numpy(dtype=float) / factor
    ax = _axes(ax)
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap=cmap)
    ax.set_xticks(range(len(table.columns)), [_tick(x, c) for c in table.columns])
    ax.set_yticks(range(len(table.index)), [_tick(y, i) for i in table.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.figure.colorbar(image, ax=ax, label=label)
    if annotate:
        mid = (grid[~_nan(grid)].max() + grid[~_nan(grid)].min()) / 2 if (~_nan(grid)).any() else 0
        for (row, col), cell in _cells(grid):
            ax.text(col, row, f"{cell:.3g}", ha="center", va="center", fontsize="small",
                    color="white" if cell < mid else "black")
    ax.set_title(title or _wrapped(f"{label} over {x} x {y}"), fontsize="medium")
    return ax.figure


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _nan(grid):
    import numpy as np

    return np.isnan(grid)


def _cells(grid):
    import numpy as np

    for index in np.ndindex(grid.shape):
        if not np.isnan(grid[index]):
            yield index, float(grid[index])


def plot_pareto(frame: "pd.DataFrame", x: str, y: str, minimize: Sequence[bool] = (True, True),
                label: str | None = None, ax: "Axes | None" = None,
                title: str | None = None) -> "Figure":
    """Every finished point in (``x``, ``y``) with the Pareto front highlighted;
    front points are annotated with the ``label`` column when given."""
    if x == y:  # every point on the diagonal: a front of one point, no trade-off shown
        raise AnalysisError(f"a Pareto front needs two different columns, got x = y = {x!r}")
    require_columns(frame, (x, y, label))
    require_numeric(frame, (x, y))
    data = _ok(frame).dropna(subset=[x, y])
    if data.empty:
        raise AnalysisError(f"no finished points with values for {x!r} and {y!r}")
    front = pareto_front(data, x, y, minimize)
    fx, xlabel = _scale(x, data[x])
    fy, ylabel = _scale(y, data[y])
    ax = _axes(ax)
    ax.scatter(data[x] / fx, data[y] / fy, color="0.7", s=18, label="points")
    # A staircase along the dominated region's edge (the front is sorted by x): with x
    # minimised the region lies to the right, so step across first, else up or down.
    ax.plot(front[x] / fx, front[y] / fy, color="C3", marker="o",
            drawstyle="steps-post" if minimize[0] else "steps-pre", label="Pareto front")
    if label:
        for _, row in front.iterrows():
            ax.annotate(str(row[label]), (row[x] / fx, row[y] / fy), fontsize="x-small",
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    ax.set_title(title or _wrapped(f"Pareto front: {y} vs {x}"), fontsize="medium")
    return ax.figure


def _no_samples(source: Any, name: str) -> str:
    """Why a CDF has nothing to draw: an untraced run, or requests none of which has the
    value (every one rejected), named with the file they came from."""
    import pandas as pd

    from npusim.analysis.frames import _origin, request_table

    if name == "duration_ps":
        return f"no {name} samples to plot (the ops table is empty: was the run traced? " \
               "rerun it with --set run.trace=true)"
    requests = source if isinstance(source, pd.DataFrame) else request_table(source)
    if requests is None or "status" not in getattr(requests, "columns", ()):
        return f"no {name} samples to plot"
    statuses = ", ".join(f"{count} {status}" for status, count in
                         requests["status"].value_counts(dropna=False).items())
    if "request_id" not in requests.columns and "point" in requests.columns:  # a sweep's rows
        return (f"no {name} samples to plot: no point has a value in {name} "
                f"({len(requests)} points: {statuses or 'none'}); expected a column that "
                "the points that ran have (the error column says why the others did not)")
    return (f"{_origin(requests)}no {name} samples to plot: no request has a value in {name} "
            f"({len(requests)} requests: {statuses or 'none'}); expected at least one "
            "finished request (the reason column says why each was not)")


def plot_latency_cdf(source: Any, column: str | None = None,
                     by: str | list[str] | None = None, ax: "Axes | None" = None,
                     title: str | None = None) -> "Figure":
    """Empirical CDF of latencies: per request when the source has a per-request
    table, else of ``column`` of a DataFrame, else of task durations in the ops table;
    one curve per value of ``by`` (e.g. ``type`` of an ops table, a swept parameter), or
    per combination of the values of a list of columns (the swept parameters of
    :func:`~npusim.analysis.load_sweep_requests`: curves labelled
    ``prefill_cores=42, decode_cores=21``)."""
    import numpy as np
    import pandas as pd

    by_columns = [by] if isinstance(by, str) else list(by) if by is not None else []
    if by is not None and not by_columns:
        raise AnalysisError("by: expected a column name or a non-empty list of them, got []")
    if by is not None:
        what = "table"
        if not isinstance(source, pd.DataFrame):
            from npusim.analysis.frames import as_ops, request_table

            # The table whose samples are plotted: a run's requests when it has them
            # (group by status), else its ops (group by type); `by` must be its column.
            requests = request_table(source)
            source, what = (requests, "per-request table") if requests is not None else \
                (as_ops(source), "ops table")
        require_columns(source, by_columns, what)
        grouped = source.groupby(by_columns if len(by_columns) > 1 else by_columns[0],
                                 sort=True, dropna=False)
        groups = [(_curve_label(by_columns, value), group) for value, group in grouped]
    else:
        groups = [(None, source)]
    samples = [(value, *latency_samples(group, column)) for value, group in groups]
    name = samples[0][2]
    if not any(len(series) for _, series, _ in samples):  # not a blank figure
        raise AnalysisError(_no_samples(source, name))
    factor, label = _scale(name, [s.max() for _, s, _ in samples if len(s)])
    ax = _axes(ax)
    for value, series, _ in samples:
        values = np.sort(series.to_numpy(dtype=float)) / factor
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post",
                    label=value)
    ax.set_xlabel(label)
    ax.set_ylabel("fraction of samples")
    ax.set_ylim(0, 1.02)
    if by is not None:
        ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    ax.set_title(title or _wrapped(f"CDF of {name}{_left_out(source)}"), fontsize="medium")
    return ax.figure


def _curve_label(columns: list[str], value: Any) -> str:
    """``name=value`` per column of ``by`` (a dotted config path by its last component,
    unless two columns share it), values as tick labels (``128 MiB``)."""
    values = value if len(columns) > 1 else (value,)
    short = [str(c).rsplit(".", 1)[-1] for c in columns]
    names = short if len(set(short)) == len(short) else [str(c) for c in columns]
    return ", ".join(f"{name}={_tick(column, v)}"
                     for name, column, v in zip(names, columns, values))


def _left_out(source: Any) -> str:
    """`` (2 of 9 requests rejected: not in the CDF)`` for a per-request source with
    requests that never finished: a CDF that reaches 1.0 would hide them."""
    from npusim.analysis.frames import request_table

    try:
        requests = request_table(source)
    except AnalysisError:
        return ""
    if requests is None or "status" not in requests.columns or not len(requests):
        return ""
    unfinished = int((requests["status"] != "finished").sum())
    return (f" ({unfinished} of {len(requests)} requests rejected: not in the CDF)"
            if unfinished else "")


def _wrapped(title: str, width: int = 64) -> str:
    """A generated title on lines of at most ``width`` characters: long config paths
    ran past the figure's edges (a heatmap's title lost its start)."""
    import textwrap

    # (a dotted config path stays whole, even past the width)
    return "\n".join(textwrap.wrap(title, width, break_long_words=False,
                                    break_on_hyphens=False)) or title


def check_figure_path(path: str | Path, option: str | None = None) -> Path:
    """``path`` as a figure file that can be written, checked before drawing: not a
    directory, a file name with a known suffix (:class:`AnalysisError`), under
    directories, writable (:class:`~npusim.core.errors.OutputError`).  ``option``
    (``--out``) prefixes the message."""
    path = Path(path)
    where = f"{option} {path}" if option else str(path)
    suffix = path.suffix.lower()
    if path.is_dir():  # before the suffix: a directory has none, or a misleading one
        example = path / ("plot" + (suffix if suffix in FIGURE_SUFFIXES else ".png"))
        raise OutputError(f"{where}: is a directory; expected a figure file name ending in "
                          f".png, .svg or .pdf, e.g. {example}")
    if not suffix and path.name.lower() in FIGURE_SUFFIXES:  # '.png' is a name, not a suffix
        raise AnalysisError(f"{where}: no file name before {path.name!r}; expected a figure "
                            f"file name such as {path.with_name('plot' + path.name)}")
    if not suffix:
        raise AnalysisError(f"{where}: no file suffix; expected a figure file name ending in "
                            f".png, .svg or .pdf, e.g. {path.with_name(path.name + '.png')}")
    if suffix not in FIGURE_SUFFIXES:
        raise AnalysisError(f"{where}: unsupported figure format {path.suffix!r}; "
                            "use .png, .svg or .pdf")
    ancestor = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if ancestor != path and not ancestor.is_dir():
        raise OutputError(f"{where}: {ancestor} is a file, not a directory; expected a path "
                          "under a directory")
    if not os.access(ancestor, os.W_OK):
        raise OutputError(f"{where}: {'file' if ancestor == path else ancestor} is not writable")
    return path


def save_figure(figure: "Figure", path: str | Path, dpi: int = 120) -> Path:
    """Write ``figure`` to ``path`` (format from the suffix: .png, .svg, .pdf).

    The figure is drawn into a temporary file that replaces ``path`` only once it is
    whole, so a failed or interrupted write leaves an earlier figure of that name as it
    was."""
    from npusim.core.output_paths import atomic_output

    path = check_figure_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what the checks cannot foresee: a full disk, /proc
        raise OutputError(f"{path}: cannot write the figure ({exc.strerror or exc})") from None
    with atomic_output(path, "the figure", binary=True) as handle:
        figure.savefig(handle, dpi=dpi, format=path.suffix[1:].lower())
    return path
