"""A sweep's stored per-request tables as one DataFrame (:func:`load_sweep_requests`):
every request of every serving point, beside the point's swept parameters."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from npusim.analysis.frames import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

#: What a sweep spec sets to keep the tables (named by the errors).
STORE_OPTION = "store: {requests: true}"


def load_sweep_requests(out_dir: str | Path, columns: Iterable[str] | None = None
                        ) -> "pd.DataFrame":
    """Every request of the sweep in ``out_dir``, one row per request of each serving
    point that ran, joined with its point's parameters, so that
    ``frame.groupby("workload.scheduler.kind")["ttft_ps"]`` compares the points'
    distributions.  Needs a sweep run with ``store: {requests: true}``.

    Columns: ``point``, the swept and derived parameters by config path (as
    :func:`~npusim.analysis.load_sweep` gives them: a size swept as ``8MiB`` in bytes),
    the per-request table's columns (``request_id``, ``arrival_ps``, ``status``,
    ``ttft_ps``, ``e2e_ps``, ``mean_tbt_ps``, ``token_times_ps`` ..., as
    :attr:`Result.requests` and ``requests.csv`` have them) and ``key``.  Dtypes are the
    Result's: a whole-number column is int64, or pandas' nullable Int64 where some
    requests lack a value (a rejected request has no ``first_token_ps``).  ``columns``
    reads only those columns of the tables (``["status", "ttft_ps"]``; the long
    ``token_times_ps`` text is most of a table's size).  Rows are in point order, then
    in each table's order.

    ``frame.attrs`` holds ``sweep_dir``, ``params`` (the parameter columns, in the
    spec's order: :func:`varying_params` picks those that tell the points apart),
    ``points_total`` and ``points_missing`` (as
    :func:`load_sweep`), ``points_with_requests`` and ``points_without_requests``
    (serving points that ran but whose table is not stored: they ran while the option
    was not set, and the next run of the sweep with it stores them; also a warning).

    A sweep run without the option, or with no serving point that ran, is an
    :class:`AnalysisError` saying so; a stored table that is not readable Parquet is a
    :class:`~npusim.sweep.store.StoreError` naming the file.
    """
    import pandas as pd
    import pyarrow as pa

    from npusim.analysis.sweep_results import _sweep_dir
    from npusim.sweep.request_tables import stored_request_keys
    from npusim.sweep.store import ResultStore, plain_whole_numbers

    root = _sweep_dir(out_dir, "load_sweep_requests")
    wanted = _wanted_columns(columns)
    points = _points(root)
    manifest = ResultStore(root).manifest() or {}
    stored = stored_request_keys(root)
    ran = points[points["status"] == "ok"]
    keys = [key for key in ran["key"] if key in stored]
    expected = {p["key"] for p in manifest.get("points", []) if p.get("requests")}
    if "metrics.requests_total" in ran.columns:  # a serving point, whatever the last run set
        expected |= set(ran.loc[ran["metrics.requests_total"].notna(), "key"])
    without = [key for key in ran["key"] if key in expected and key not in stored]
    if not keys:
        raise AnalysisError(_why_none(root, manifest, expected, ran, without))
    if without:
        import warnings

        warnings.warn(f"{root}: {len(without)} of {len(without) + len(keys)} serving points "
                      "that ran have no stored per-request table (they ran while "
                      f"{STORE_OPTION} was not set, or the file was moved away); run the "
                      f"sweep again with the same --out and {STORE_OPTION} to store them; "
                      "frame.attrs['points_without_requests'] counts them",
                      stacklevel=2)
    schemas = {key: _read(root, key, schema_only=True) for key in keys}
    known = list(dict.fromkeys(c for names in schemas.values() for c in names
                               if c not in ("key", "point")))  # ("point": tables of before)
    params = [p for p in manifest.get("params", []) if p in points.columns and p not in known]
    if wanted is not None:
        _check_known(root, [c for c in wanted if c not in params], known)
        known = [c for c in known if c in wanted]
    # only the columns asked for are read: token_times_ps is most of a table's bytes
    tables = [_read(root, key, ["key"] + [c for c in known if c in schemas[key]])
              for key in keys]
    # a column all null in one point's table (no request was rejected) takes the others' type
    table = pa.concat_tables(tables, promote_options="permissive")
    frame = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    frame = plain_whole_numbers(frame)  # int64 where no request lacks the value
    frame = frame.merge(points[["point", *params, "key"]], on="key", how="left", sort=False)
    frame = frame[["point", *params, *[c for c in known if c in frame.columns], "key"]].copy()
    frame.attrs.update(sweep_dir=str(root), params=params,
                       points_total=points.attrs["points_total"],
                       points_missing=points.attrs["points_missing"],
                       points_with_requests=len(keys), points_without_requests=len(without))
    return frame


def varying_params(frame: "pd.DataFrame") -> list[str]:
    """The parameter columns of a :func:`load_sweep_requests` frame whose value differs
    between its points (nulls count as a value): what to label its curves by, e.g.
    ``plot_latency_cdf(frame, "ttft_ps", by=varying_params(frame) or "point")``."""
    params = [p for p in frame.attrs.get("params", []) if p in frame.columns]
    per_point = frame.drop_duplicates("point")
    return [p for p in params if per_point[p].astype(str).nunique(dropna=False) > 1]


def _wanted_columns(columns: Any) -> list[str] | None:
    if columns is None:
        return None
    if isinstance(columns, str):  # one name, not its letters
        columns = [columns]
    try:
        wanted = list(columns)
    except TypeError:
        wanted = None
    if wanted is None or not all(isinstance(c, str) for c in wanted):
        raise AnalysisError(f"columns: expected a list of per-request column names such as "
                            f"['status', 'ttft_ps'], got {columns!r}")
    return wanted


def _points(root: Path) -> "pd.DataFrame":
    """The sweep's rows (:func:`load_sweep`), its warning about points with no result yet
    passed on as this function's."""
    import warnings

    from npusim.analysis.sweep_results import load_sweep

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        points = load_sweep(root)
    for warning in caught:
        warnings.warn(str(warning.message), warning.category, stacklevel=3)
    return points


def _why_none(root: Path, manifest: dict, expected: set[str], ran: "pd.DataFrame",
              without: list[str]) -> str:
    """Why a sweep directory has no per-request table to read."""
    run_again = f"run the sweep again with the same --out ({STORE_OPTION} in its spec)"
    if not manifest.get("store", {}).get("requests"):
        return (f"{root}: no per-request tables: the sweep ran without them; add "
                f"{STORE_OPTION} to its spec and run it again with the same --out (its "
                "finished serving points run again to store them)")
    if not expected:
        return (f"{root}: no per-request tables: no point of this sweep is a serving run "
                "(workload.kind: serving); a GEMM or a single LLM request has none")
    if without:
        return (f"{root}: no per-request tables yet: {len(without)} serving points have "
                f"none stored (they ran before {STORE_OPTION} was set, or the files were "
                f"moved away); {run_again} to store them")
    return (f"{root}: no per-request tables: no serving point has a result yet "
            f"({len(ran)} points ran; load_sweep shows each point's status and error)")


def _check_known(root: Path, wanted: list[str], known: list[str]) -> None:
    for column in wanted:
        if column in ("key", "point"):
            continue  # always there
        if column not in known:
            close = difflib.get_close_matches(column, known, n=3, cutoff=0.5)
            hint = (f"; did you mean {', '.join(map(repr, close))}?" if close else
                    f"; its columns: {', '.join(known)}")
            raise AnalysisError(f"{root}: no column {column!r} in the per-request "
                                f"tables{hint}")


def _read(root: Path, key: str, columns: list[str] | None = None, schema_only: bool = False):
    """One point's stored table (only ``columns`` when given; with ``schema_only`` its
    column names); :class:`StoreError` naming the file when it is damaged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from npusim.sweep.request_tables import request_file
    from npusim.sweep.store import StoreError, _reason

    path = request_file(root, key)
    advice = ("move it away; the next run of the sweep (with the same --out) runs its point "
              "again to store it")
    try:
        if schema_only:
            names = pq.read_schema(path).names
        else:
            return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a readable Parquet file ({_reason(exc)}); "
                         f"{advice}") from None
    if "key" not in names:
        raise StoreError(f"{path}: not a sweep's per-request table (no 'key' column); {advice}")
    return names
