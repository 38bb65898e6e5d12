"""Tables for analysis: sweep results, Pareto fronts, per-unit busy time over time."""

from __future__ import annotations

import difflib
import json
import operator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from npusim.core.errors import NpusimError

if TYPE_CHECKING:
    import pandas as pd


#: Most time bins a utilisation timeline may have (each unit gets a row of this many).
MAX_BINS = 100_000


class AnalysisError(NpusimError):
    """An analysis input is missing or names an unknown (or non-numeric) column."""


def load_sweep(out_dir: str | Path, status: str | None = None) -> "pd.DataFrame":
    """The results of the sweep in ``out_dir`` as a DataFrame, one row per point.

    Columns: ``point``, ``status``, the swept and derived parameters by config path,
    ``metrics.*``, ``error``, ``wall_time_s``, ``config_hash``, ``key``,
    ``npusim_version``, ``sweep``.  ``status="ok"`` keeps only points that ran.
    """
    from npusim.sweep.store import ResultStore

    if status not in (None, "ok", "failed", "skipped"):
        raise AnalysisError(f"status: expected 'ok', 'failed', 'skipped' or None, got {status!r}")
    root = Path(out_dir)
    store = ResultStore(root)
    if not (root / "manifest.json").is_file() and not (root / "results.parquet").is_file() \
            and not store.parts.is_dir():
        raise AnalysisError(f"{root}: not a sweep output directory (no manifest.json, "
                            "results.parquet or parts/); run `npusim sweep SPEC --out DIR` first")
    frame = store.read()
    if status is not None:
        frame = frame[frame["status"] == status].reset_index(drop=True)
    return frame


def require_columns(frame: "pd.DataFrame", columns: Iterable[str | None], what: str = "table") -> None:
    """Raise :class:`AnalysisError` naming any missing column and the closest known one
    (or saying that ``frame`` is not a table at all: a Result, a path)."""
    if not hasattr(frame, "columns"):
        raise AnalysisError(f"expected a sweep DataFrame (analysis.load_sweep(DIR)), got "
                            f"{type(frame).__name__}; for one run's Result use "
                            "plot_latency_cdf or plot_utilisation_timeline")
    for column in columns:
        if column is not None and column not in frame.columns:
            known = [str(c) for c in frame.columns]
            close = difflib.get_close_matches(str(column), known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise AnalysisError(f"no column {column!r} in the {what}{hint}")


def _is_numeric(series: "pd.Series") -> bool:
    """Numbers (or booleans) only: a numeric dtype, or an object column of numbers."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(series):
        return True
    if series.dtype != object:
        return False
    return all(isinstance(v, (int, float)) for v in series.dropna())


def require_numeric(frame: "pd.DataFrame", columns: Iterable[str | None],
                    what: str = "table") -> None:
    """Raise :class:`AnalysisError` for a column that holds text (a plot would fail deep in
    pandas or matplotlib): it names the column, an example value and numeric columns to
    use instead, the closest names first."""
    import pandas as pd

    for column in columns:
        if column is None or _is_numeric(frame[column]):
            continue
        sample = next((v for v in frame[column] if not pd.isna(v)), None)
        numeric = [str(c) for c in frame.columns
                   if c != "point" and frame[c].notna().any() and _is_numeric(frame[c])]
        close = difflib.get_close_matches(str(column), numeric, n=3, cutoff=0.5)
        shown = list(dict.fromkeys(close + numeric))[:8]
        more = f", ... ({len(numeric)} in all)" if len(numeric) > len(shown) else ""
        listing = f"numeric columns: {', '.join(shown)}{more}" if numeric else \
            f"the {what} has no numeric column"
        owner = "" if what == "table" else f" of the {what}"
        raise AnalysisError(f"column {column!r}{owner} is not numeric (values like "
                            f"{sample!r}); {listing}")


def pareto_front(frame: "pd.DataFrame", x: str, y: str,
                 minimize: Sequence[bool] = (True, True)) -> "pd.DataFrame":
    """Rows not dominated in (``x``, ``y``), sorted by ``x``.

    ``minimize`` says per column whether smaller is better (latency) or larger is
    (throughput).  A row is dominated when another is at least as good in both and
    strictly better in one; of rows tied in both, the first is kept.
    """
    require_columns(frame, (x, y))
    require_numeric(frame, (x, y))
    if isinstance(minimize, (str, bytes)) or not hasattr(minimize, "__len__") or len(minimize) != 2 \
            or not all(isinstance(m, bool) for m in minimize):
        raise AnalysisError(f"minimize: expected two booleans (x, y), e.g. (True, False) for "
                            f"low latency and high throughput, got {minimize!r}")
    data = frame.dropna(subset=[x, y])
    sx = 1 if minimize[0] else -1
    sy = 1 if minimize[1] else -1
    ordered = data.assign(_x=sx * data[x].astype(float), _y=sy * data[y].astype(float))
    ordered = ordered.sort_values(["_x", "_y"], kind="stable")
    keep, best_y = [], float("inf")
    for index, value in zip(ordered.index, ordered["_y"]):
        if value < best_y:  # sorted by x: a row survives only if it improves y
            keep.append(index)
            best_y = value
    return data.loc[keep].sort_values(x, kind="stable")


def as_ops(source: Any) -> "pd.DataFrame":
    """The per-task table of a Result, an ops DataFrame, or a run directory (ops.csv)."""
    import pandas as pd

    if hasattr(source, "ops") and hasattr(source, "metrics"):
        return source.ops
    if isinstance(source, pd.DataFrame):
        return source
    path = Path(source)
    csv = path / "ops.csv" if path.is_dir() else path
    if not csv.is_file():
        raise AnalysisError(f"{path}: expected a run directory with ops.csv (npusim run --out DIR)")
    return pd.read_csv(csv)


def utilisation_timeline(source: Any, bins: int = 100, units: Sequence[str] | None = None,
                         ) -> tuple["pd.DataFrame", list[int]]:
    """Busy fraction of each unit in ``bins`` equal time bins.

    Returns ``(frame, edges_ps)``: one row per unit, one column per bin, values in
    [0, 1] (overlapping tasks on one unit count once: a unit cannot be more than busy).
    """
    import numpy as np
    import pandas as pd

    try:
        count = operator.index(bins)  # ints and numpy integers; not 2.5, not "10"
    except TypeError:
        count = 0
    if not 1 <= count <= MAX_BINS:  # 0 bins draws an empty figure, -3 crashes numpy
        raise AnalysisError(f"bins: expected a whole number from 1 to {MAX_BINS:,}, got {bins!r}")
    bins = count
    ops = as_ops(source)
    require_columns(ops, ("unit", "start_ps", "end_ps"), "ops table")
    ops = ops[(ops["end_ps"] > ops["start_ps"]) & (ops["unit"].astype(str) != "")]
    if units is not None:
        units = [units] if isinstance(units, str) else list(units)  # one name, not its letters
        known = set(ops["unit"].astype(str))
        missing = [u for u in units if u not in known]
        if missing and known:
            raise AnalysisError(f"units: no unit {missing[0]!r} in the ops table; units: "
                                f"{', '.join(sorted(known)[:8])}{', ...' if len(known) > 8 else ''}")
        ops = ops[ops["unit"].isin(units)]
    if ops.empty:
        raise AnalysisError("no timed tasks to plot (was the run traced? run.trace=true)")
    start, end = int(ops["start_ps"].min()), int(ops["end_ps"].max())
    edges = np.linspace(start, end, bins + 1)
    rows = {}
    for unit, group in ops.groupby("unit", sort=True):
        busy = np.zeros(bins)
        for lo, hi in _merged(group["start_ps"].to_numpy(), group["end_ps"].to_numpy()):
            overlap = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0, None)
            busy += overlap
        rows[unit] = busy / np.diff(edges)
    frame = pd.DataFrame.from_dict(rows, orient="index").clip(0, 1)
    return frame, [int(e) for e in edges]


def _merged(starts, ends) -> list[tuple[int, int]]:
    """Union of intervals, sorted and non-overlapping."""
    order = sorted(zip(starts, ends))
    merged: list[list[int]] = []
    for lo, hi in order:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def request_table(source: Any) -> "pd.DataFrame | None":
    """The per-request table of a Result or a run directory (requests.csv), if any."""
    import pandas as pd

    tables = getattr(source, "tables", None)
    if isinstance(tables, dict):  # a Result: only runs with a per-request table have one
        return source.table("requests") if "requests" in tables else None
    if isinstance(getattr(source, "requests", None), pd.DataFrame):  # duck-typed results
        return source.requests
    if isinstance(source, (str, Path)) and (Path(source) / "requests.csv").is_file():
        return pd.read_csv(Path(source) / "requests.csv")
    if isinstance(source, pd.DataFrame) and {"arrival_ps", "finish_ps"} <= set(source.columns):
        return source  # a per-request table itself (e.g. one group of it)
    return None


def _expand_lists(values: "pd.Series", column: str) -> "pd.Series":
    """A column of JSON lists (how the store keeps list metrics) as one sample per item."""
    import pandas as pd

    samples = []
    for text in values:
        try:
            items = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            items = None
        if not isinstance(items, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            shown = text if len(str(text)) <= 60 else f"{str(text)[:60]}..."
            raise AnalysisError(f"column {column!r}: expected JSON lists of numbers such as "
                                f"'[1, 2.5]', got {shown!r}")
        samples += items
    return pd.Series(samples, dtype=float)


def latency_samples(source: Any, column: str | None = None) -> tuple["pd.Series", str]:
    """Latency samples for a CDF and the column they came from.

    A Result (or run) with a per-request table uses its latency column; otherwise
    ``column`` of a DataFrame (JSON lists in it are expanded, one sample per element);
    otherwise the ``duration_ps`` of every task in the ops table.
    """
    import pandas as pd

    requests = request_table(source)
    if requests is not None and not requests.empty:
        names = ("e2e_ps", "e2e_latency_ps", "latency_ps")
        if column is None and not set(names) & set(requests) \
                and {"arrival_ps", "finish_ps"} <= set(requests):
            return (requests["finish_ps"] - requests["arrival_ps"]).dropna(), "e2e_ps"
        name = column or next((c for c in names if c in requests), None)
        if name is not None:
            require_columns(requests, (name,), "per-request table")
            require_numeric(requests, (name,), "per-request table")
            return requests[name].dropna(), name
    if isinstance(source, pd.DataFrame) and column is not None:
        require_columns(source, (column,))
        values = source[column].dropna()
        if len(values) and isinstance(values.iloc[0], str) and values.iloc[0].startswith("["):
            return _expand_lists(values, column), column
        require_numeric(source, (column,))
        return values, column
    if isinstance(source, pd.DataFrame) and column is None and "duration_ps" not in source:
        raise AnalysisError("column: this table has no per-task durations; name the column "
                            "to plot, e.g. column='metrics.latency_ps' for a sweep")
    ops = as_ops(source)
    name = column or "duration_ps"
    require_columns(ops, (name,), "ops table")
    require_numeric(ops, (name,), "ops table")
    return ops[name].dropna(), name
