"""Two or more sweeps side by side, point by point (:func:`compare_sweeps`;
``npusim compare SWEEP_DIR SWEEP_DIR...``).

The what-if question of :mod:`npusim.analysis.compare` asked over a whole design space:
the same sweep on two chips, or before and after a change to the scenario.  Points are
matched by the values of the parameters the sweeps share (``workload.m=64,
workload.tile_n=128`` in each), and every metric of every point gets its change
relative to the first sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from npusim.analysis.compare import change_percent, choose_metrics, column_names, is_number
from npusim.analysis.frames import AnalysisError
from npusim.sweep.store import META_COLUMNS, TAIL_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

#: Columns of a sweep's results that are neither a parameter nor a metric.
_BOOKKEEPING = frozenset(META_COLUMNS + TAIL_COLUMNS)
_METRIC_PREFIX = "metrics."


def is_sweep_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a sweep's results (``npusim sweep --out DIR``) rather
    than one run's."""
    root = Path(path)
    return not (root / "metrics.json").is_file() and (
        (root / "manifest.json").is_file() or (root / "results.parquet").is_file())


def _frame(sweep: Any) -> tuple["pd.DataFrame", str | None]:
    """The points that ran, and the directory they came from."""
    import pandas as pd

    from npusim.analysis.sweep_results import load_sweep

    if isinstance(sweep, (str, Path)):
        sweep, where = load_sweep(sweep), str(sweep)
    elif isinstance(sweep, pd.DataFrame):
        where = sweep.attrs.get("sweep_dir")
    else:
        raise AnalysisError(f"expected a sweep directory (npusim sweep --out DIR) or a frame "
                            f"from load_sweep, got {type(sweep).__name__}")
    if "status" not in sweep.columns:
        return sweep, where
    ran = sweep[sweep["status"] == "ok"]
    if ran.empty:  # a comparison of nothing would look like sweeps that share no point
        counts = sweep["status"].value_counts()
        held = ", ".join(f"{counts[s]} {s}" for s in ("skipped", "failed") if s in counts)
        raise AnalysisError(f"sweep {where or '(a frame)'} has no point that ran "
                            f"({held or 'no points'}); expected sweeps with points to "
                            "compare (its errors and skip reasons are in its results)")
    return ran, where


def _params(frame: "pd.DataFrame") -> list[str]:
    """The parameter columns of a sweep's results, in their order there."""
    return [column for column in frame.columns if column not in _BOOKKEEPING
            and not column.startswith(_METRIC_PREFIX) and not column.startswith("capacity.")]


def _metric_name(column: str) -> str:
    """A results column as a metric path: ``ttft_ms_mean`` for ``metrics.ttft_ms_mean``
    (as ``metrics.json`` and ``npusim compare RUN_DIR...`` name it)."""
    return column[len(_METRIC_PREFIX):] if column.startswith(_METRIC_PREFIX) else column


def _key(value: Any) -> Any:
    """A parameter value as a matching key: 64 and 64.0 are one point; NaN is no value."""
    try:
        value = value.item()  # numpy scalars
    except (AttributeError, ValueError):
        pass
    if isinstance(value, float):
        if value != value:
            return None
        if value.is_integer():
            return int(value)
    return value


def compare_sweeps(*sweeps: Any, metrics: Iterable[str] | None = None,
                   names: Sequence[str] | None = None) -> "pd.DataFrame":
    """The sweeps' metrics side by side, point by point: one row per metric and point
    (index: ``metric``, then the parameters the sweeps share, by config path), one
    column per sweep, then one ``<name> change %`` column per sweep after the first:
    its change relative to the first sweep's value at that point (NaN where a value is
    missing, not a number, or the first is 0).

    Points are matched on the parameters every sweep has; a point only some sweeps ran
    (or ran without failing) has no value in the others.  ``metrics``: names or glob
    patterns over the metric paths (``ttft_ms_*``, ``energy.*``; a capacity sweep's
    ``capacity.*``), default the headline metrics of :func:`compare_runs` the sweeps
    have.  ``sweeps`` are sweep directories or :func:`load_sweep` frames; ``names``
    name the columns (default: the directories' names).  A parameter only some sweeps
    vary, so that a sweep has several points for one match, is an
    :class:`AnalysisError` naming it."""
    import pandas as pd

    loaded = [_frame(sweep) for sweep in sweeps]
    if len(loaded) < 2:
        raise AnalysisError(f"comparing needs at least two sweeps, got {len(loaded)}")
    columns = column_names([(None, None, where) for _, where in loaded], names, "sweep")
    shared = [p for p in _params(loaded[0][0])
              if all(p in frame.columns for frame, _ in loaded[1:])]
    tables = []
    for (frame, _), name in zip(loaded, columns):
        keys = [tuple(_key(v) for v in row) for row in frame[shared].itertuples(index=False)]
        if len(set(keys)) < len(keys):
            varying = [p for p in _params(frame) if p not in shared
                       and frame[p].astype(str).nunique(dropna=False) > 1]
            what = (f"it also varies {', '.join(varying)}, which "
                    f"{'the others do' if len(loaded) == 2 else 'not every sweep does'} not"
                    if varying else "two of its points have the same parameters")
            matched = ", ".join(shared) if shared else "no parameter (none is in every sweep)"
            raise AnalysisError(f"sweep {name}: points repeat when matched on {matched}: "
                                f"{what}; expected sweeps over the same parameters")
        values = {_metric_name(c): frame[c].tolist() for c in frame.columns
                  if c.startswith((_METRIC_PREFIX, "capacity."))}
        tables.append((keys, values))
    available = list(dict.fromkeys(m for _, values in tables for m in values))
    chosen = choose_metrics(available, metrics, "sweep")
    points = list(dict.fromkeys(key for keys, _ in tables for key in keys))
    lookups = [{key: i for i, key in enumerate(keys)} for keys, _ in tables]
    rows: list[tuple] = []
    data: dict[str, list] = {name: [] for name in columns}
    for metric in chosen:
        for point in points:
            rows.append((metric, *point))
            for (_, values), lookup, name in zip(tables, lookups, columns):
                column, at = values.get(metric), lookup.get(point)
                value = None if column is None or at is None else column[at]
                data[name].append(_key(value) if is_number(_key(value)) else value)
    first = data[columns[0]]
    for name in columns[1:]:
        data[f"{name} change %"] = [change_percent(a, b) for a, b in zip(first, data[name])]
    index = pd.MultiIndex.from_tuples(rows, names=["metric", *shared]) if shared else \
        pd.Index([row[0] for row in rows], name="metric")
    frame = pd.DataFrame(data, index=index)
    for name in columns:  # numbers stay numbers; a column mixing in text is object
        if all(is_number(v) or v is None for v in data[name]):
            frame[name] = pd.to_numeric(frame[name])
    frame.attrs["matched_on"] = shared
    # points more than one sweep ran: what is compared at all
    frame.attrs["points_shared"] = sum(
        sum(point in lookup for lookup in lookups) > 1 for point in points)
    frame.attrs["points"] = {name: len(keys) for name, (keys, _) in zip(columns, tables)}
    return frame
