"""Tables for analysis: Pareto fronts, run tables read back (ops, requests, iterations,
capacity probes), per-unit busy time over time.  (Sweep results: :mod:`sweep_results`;
reading and checking the CSV files: :mod:`tables`.)"""

from __future__ import annotations

import difflib
import json
import operator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from npusim.analysis.tables import AnalysisError, check_times, read_table
from npusim.core.json_keys import natural_key

if TYPE_CHECKING:
    import pandas as pd


#: Most time bins a utilisation timeline may have (each unit gets a row of this many).
MAX_BINS = 100_000

#: Time columns of the tables ``npusim run --out`` writes, checked when such a file is
#: read: column -> whether every row must have a value (rejected requests never finish).
OPS_TIMES = {"start_ps": True, "end_ps": True, "duration_ps": True}
REQUEST_TIMES = {"arrival_ps": True, "first_token_ps": False, "finish_ps": False,
                 "ttft_ps": False, "e2e_ps": False, "mean_tbt_ps": False}
ITERATION_TIMES = {"start_ps": True, "end_ps": True}
#: requests.csv columns that are text even when every cell is empty.
REQUEST_TEXT = ("request_id", "status", "reason", "rejected_kind")
#: Columns a serving timeline needs from iterations.csv.
ITERATION_COLUMNS = ("replica", "role", "start_ps", "end_ps", "requests", "kv_used_tokens",
                     "kv_capacity_tokens", "waiting", "running")


def _origin(frame: Any) -> str:
    """``"FILE: "`` for a table read from a file, ``"DIR: "`` for a sweep's results
    (messages name them), else ``""``.  (``source`` is a CSV file only: other messages
    give line numbers in it.)"""
    attrs = getattr(frame, "attrs", {})
    source = attrs.get("source") or attrs.get("sweep_dir")
    return f"{source}: " if source else ""


def require_columns(frame: "pd.DataFrame", columns: Iterable[str | None], what: str = "table") -> None:
    """Raise :class:`AnalysisError` naming any missing column and the closest known one
    (or saying that ``frame`` is not a table at all: a Result, a path)."""
    if not hasattr(frame, "columns"):
        raise AnalysisError(f"expected a sweep DataFrame (analysis.load_sweep(DIR)), got "
                            f"{type(frame).__name__}; for one run's Result use "
                            "plot_latency_cdf or plot_utilisation_timeline")
    for column in columns:
        if column is not None and not isinstance(column, str):  # a list: one column per call
            raise AnalysisError(f"expected one column name, got {column!r}; draw several "
                                "into one figure by passing ax= to each call")
        if column is not None and column not in frame.columns:
            known = [str(c) for c in frame.columns]
            close = difflib.get_close_matches(str(column), known, n=3, cutoff=0.5)
            if close:
                hint = f"; did you mean {', '.join(map(repr, close))}?"
            else:  # nothing alike: show what there is
                shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)"
                                                 if len(known) > 12 else "")
                hint = f"; its columns: {shown}" if known else ""
            if str(column).startswith("metrics.") and "status" in frame.columns \
                    and not (frame["status"] == "ok").any():
                hint += "; no point of this sweep succeeded, so it has no metrics (see the error column)"
            raise AnalysisError(f"{_origin(frame)}no column {column!r} in the {what}{hint}")


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
        origin = _origin(frame)  # a table read from a file: the file says which table
        owner = "" if what == "table" or origin else f" of the {what}"
        raise AnalysisError(f"{origin}column {column!r}{owner} is not numeric (values like "
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
    return read_table(csv, "ops table", "task", times=OPS_TIMES)


#: Above this many units a timeline shows one row per kind of unit unless told otherwise
#: (a 64-core chip has 288: a figure of one row each is taller than any screen).
AUTO_GROUP_UNITS = 48
TIMELINE_GROUPS = ("unit", "kind")


def unit_kind(unit: str) -> str:
    """The kind of a unit: its name with the index of its first part as ``*``
    (``core12.sa`` -> ``core*.sa``, ``core12`` -> ``core*``: its NoC sends), the glob
    pattern that ``units=`` would match it with."""
    import re

    return re.sub(r"^([A-Za-z_]+)\d+", r"\1*", unit)


def utilisation_timeline(source: Any, bins: int = 100, units: Sequence[str] | None = None,
                         group: str | None = None) -> tuple["pd.DataFrame", list[int]]:
    """Busy fraction of each unit in ``bins`` equal time bins.

    Returns ``(frame, edges_ps)``: one row per unit, one column per bin, values in
    [0, 1] (overlapping tasks on one unit count once: a unit cannot be more than busy).
    ``group="kind"`` gives one row per kind of unit (:func:`unit_kind`, labelled
    ``core*.sa (64)``) holding the mean over its units that ran tasks (a unit with no
    row in the ops table, an idle core's array, is not in the count); ``None`` (default)
    groups only when there are more than :data:`AUTO_GROUP_UNITS` units and ``units``
    does not choose them.  ``frame.attrs["units"]`` is the number of units behind the
    rows either way.
    """
    if group is not None and group not in TIMELINE_GROUPS:
        raise AnalysisError(f"group: expected one of {', '.join(TIMELINE_GROUPS)} (or None: "
                            f"by kind above {AUTO_GROUP_UNITS} units), got {group!r}")
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
    # text or inf would fail deep in numpy (int(inf), object arrays); rows without times
    # are left out, as are empty tasks
    ops = check_times(ops.copy(), {"start_ps": False, "end_ps": False}, "ops table")
    ops = ops[(ops["end_ps"] > ops["start_ps"]) & (ops["unit"].astype(str) != "")]
    if units is not None:
        import fnmatch

        units = [units] if isinstance(units, str) else list(units)  # one name, not its letters
        known = set(ops["unit"].astype(str))
        # names or glob patterns: "*.sa" every systolic array, "core1?.*" cores 10-19
        chosen = {unit: [k for k in known if fnmatch.fnmatchcase(k, str(unit))] for unit in units}
        missing = [u for u, matched in chosen.items() if not matched]
        if missing and known:
            shown = sorted(known, key=natural_key)
            raise AnalysisError(f"units: no unit matches {missing[0]!r} in the ops table "
                                f"(names or glob patterns such as '*.sa'); units: "
                                f"{', '.join(shown[:8])}{', ...' if len(shown) > 8 else ''}")
        ops = ops[ops["unit"].isin({k for matched in chosen.values() for k in matched})]
    if ops.empty:
        raise AnalysisError(f"{_origin(ops)}no timed tasks to plot (was the run traced? "
                            "rerun it with --set run.trace=true)")
    start, end = int(ops["start_ps"].min()), int(ops["end_ps"].max())
    edges = np.linspace(start, end, bins + 1)
    rows = {}
    for unit, tasks in sorted(ops.groupby("unit", sort=False),
                              key=lambda item: natural_key(str(item[0]))):
        busy = np.zeros(bins)
        for lo, hi in _merged(tasks["start_ps"].to_numpy(), tasks["end_ps"].to_numpy()):
            overlap = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0, None)
            busy += overlap
        rows[unit] = busy / np.diff(edges)
    frame = pd.DataFrame.from_dict(rows, orient="index").clip(0, 1)
    if group == "kind" or (group is None and units is None and len(frame) > AUTO_GROUP_UNITS):
        members: dict[str, list[str]] = {}
        for unit in frame.index:
            members.setdefault(unit_kind(str(unit)), []).append(str(unit))
        # a kind of one unit keeps the unit's name
        label = {kind: f"{kind} ({len(names)})" if len(names) > 1 else names[0]
                 for kind, names in members.items()}
        frame = frame.groupby([label[unit_kind(str(u))] for u in frame.index], sort=False).mean()
        frame = frame.loc[[label[kind] for kind in sorted(members, key=natural_key)]]
        frame.attrs["grouped"] = True
    frame.attrs["units"] = len(rows)
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
    """The per-request table of a Result or a run directory (requests.csv), if any.

    A run directory's requests.csv that is there but is not that table (empty, not
    UTF-8, no ``arrival_ps``/``finish_ps`` column, a time that is not a number) is an
    :class:`AnalysisError` naming it, never silently replaced by the ops table."""
    import pandas as pd

    tables = getattr(source, "tables", None)
    if isinstance(tables, dict):  # a Result: only runs with a per-request table have one
        return source.table("requests") if "requests" in tables else None
    if isinstance(getattr(source, "requests", None), pd.DataFrame):  # duck-typed results
        return source.requests
    _check_run_path(source)
    if isinstance(source, (str, Path)) and (Path(source) / "requests.csv").exists():
        return read_table(Path(source) / "requests.csv", "per-request table", "request",
                          required=("arrival_ps", "finish_ps"), times=REQUEST_TIMES,
                          text=REQUEST_TEXT,
                          other=" (if it is a file of your own, move it away to plot the "
                                "task durations of ops.csv)")
    if isinstance(source, pd.DataFrame) and {"arrival_ps", "finish_ps"} <= set(source.columns):
        return source  # a per-request table itself (e.g. one group of it)
    return None


def _check_run_path(source: Any) -> None:
    """A path that names nothing is a typo, not a run without that table."""
    if isinstance(source, (str, Path)) and not Path(source).exists():
        raise AnalysisError(f"{source}: no such file or directory; expected a run directory "
                            "(npusim run --out DIR) or a Result")


def iteration_table(source: Any) -> "pd.DataFrame | None":
    """The per-iteration table of a serving Result or run directory (iterations.csv):
    one row per launched micro-batch, or None for a run without one.  A damaged file is
    an :class:`AnalysisError` naming it."""
    tables = getattr(source, "tables", None)
    if isinstance(tables, dict):
        return source.table("iterations") if "iterations" in tables else None
    _check_run_path(source)
    if isinstance(source, (str, Path)) and (Path(source) / "iterations.csv").exists():
        return read_table(Path(source) / "iterations.csv", "per-iteration table",
                          "micro-batch", required=ITERATION_COLUMNS, times=ITERATION_TIMES)
    return None


#: The columns of capacity.csv a capacity plot reads.
CAPACITY_COLUMNS = ("offered_requests_per_s", "slo_attainment", "ttft_ms_p90", "tbt_ms_mean",
                    "meets_target")


def capacity_probes(source: Any) -> tuple["pd.DataFrame", dict[str, Any]]:
    """``(probes, summary)`` of a capacity search: a
    :class:`~npusim.sweep.capacity.CapacityResult` or the directory ``npusim capacity
    --out`` wrote (capacity.csv, capacity.json).  The summary has at least
    ``target_attainment`` and ``max_requests_per_s`` (None unless a meeting and a missing
    probe bracket it).  A
    missing or damaged file is an :class:`AnalysisError` naming it."""
    if hasattr(source, "probes") and hasattr(source, "to_dict"):
        return source.table(), source.to_dict()
    directory = Path(source)
    summary_path = directory / "capacity.json"
    if not summary_path.is_file():
        raise AnalysisError(f"{directory}: no capacity.json; expected the directory "
                            "`npusim capacity SCENARIO --out DIR` writes")
    frame = read_table(directory / "capacity.csv", "capacity probes", "probe",
                       required=CAPACITY_COLUMNS, writer="npusim capacity SCENARIO --out DIR",
                       # a probe where no request finished has no latencies (empty)
                       times={"offered_requests_per_s": True, "slo_attainment": True,
                              "ttft_ms_p90": False, "tbt_ms_mean": False})
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        target, best = summary["target_attainment"], summary["max_requests_per_s"]
        if isinstance(target, bool) or not isinstance(target, (int, float)) \
                or (best is not None and not isinstance(best, (int, float))):
            raise TypeError
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise AnalysisError(f"{summary_path}: not the summary `npusim capacity` writes "
                            "(a JSON object with target_attainment and "
                            "max_requests_per_s)") from None
    if frame.empty:
        raise AnalysisError(f"{directory / 'capacity.csv'}: no probes to plot")
    return frame, summary


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


#: The sample name that asks a serving run for every inter-token gap (token_table's).
INTER_TOKEN_GAPS = "gap_ps"


def latency_samples(source: Any, column: str | None = None) -> tuple["pd.Series", str]:
    """Latency samples for a CDF and the column they came from.

    A Result (or run) with a per-request table uses its latency column (``gap_ps``: every
    gap between two tokens of a request, the inter-token latency) over the requests that
    were not rejected, as the ``*_ms_*`` summaries do; otherwise
    ``column`` of a DataFrame (JSON lists in it are expanded, one sample per element);
    otherwise the ``duration_ps`` of every task in the ops table.
    """
    import pandas as pd

    requests = request_table(source)
    if requests is not None and len(requests.columns) == 0:  # a Result with no requests
        return pd.Series(dtype=float), column or "e2e_ps"
    if requests is not None:  # even when empty: its samples, not the ops table's
        if "status" in requests:  # the summaries' samples: a request rejected after its
            requests = requests[requests["status"] != "rejected"]  # first token is none
        names = ("e2e_ps", "e2e_latency_ps", "latency_ps")
        if column is None and not set(names) & set(requests) \
                and {"arrival_ps", "finish_ps"} <= set(requests):
            return (requests["finish_ps"] - requests["arrival_ps"]).dropna(), "e2e_ps"
        name = column or next((c for c in names if c in requests), None)
        if name == INTER_TOKEN_GAPS and name not in requests:
            # every gap between two tokens of a request (vLLM's ITL), from token_times_ps
            from npusim.analysis.tokens import token_table

            tokens = token_table(source)
            return tokens.loc[~tokens["first"], "gap_ps"].reset_index(drop=True), name
        if name is None:
            raise AnalysisError(f"{_origin(requests)}the per-request table has no latency "
                                f"column ({', '.join(names)}, or arrival_ps and finish_ps); "
                                "name the column to plot")
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
