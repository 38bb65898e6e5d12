"""A sweep's stored results as one DataFrame (:func:`load_sweep`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from npusim.analysis.frames import AnalysisError

if TYPE_CHECKING:
    import pandas as pd


def load_sweep(out_dir: str | Path, status: str | None = None) -> "pd.DataFrame":
    """The results of the sweep in ``out_dir`` as a DataFrame, one row per point.

    Columns: ``point``, ``status``, the swept and derived parameters by config path,
    ``metrics.*`` (``capacity.*`` for a capacity sweep), ``error``, ``wall_time_s``,
    ``config_hash``, ``key``, ``npusim_version``, ``sweep``.  ``status="ok"`` keeps only
    points that ran.  Whole-number columns are int64, or pandas' nullable Int64 where
    some rows lack a value (a failed point has no metrics).

    ``frame.attrs`` holds ``sweep_dir``, ``points_total`` (the spec's points) and
    ``points_missing`` (points with no row yet: a sweep still running, or one that
    stopped early); missing points are also reported with a warning, since a plot of
    the rows alone looks like the whole sweep.
    """
    from npusim.sweep.store import ResultStore, plain_whole_numbers

    if status not in (None, "ok", "failed", "skipped"):
        raise AnalysisError(f"status: expected 'ok', 'failed', 'skipped' or None, got {status!r}")
    root = _sweep_dir(out_dir)
    store = ResultStore(root)
    if not (root / "manifest.json").is_file() and not (root / "results.parquet").is_file() \
            and not store.parts.is_dir():
        raise AnalysisError(f"{root}: not a sweep output directory (no manifest.json, "
                            "results.parquet or parts/); run `npusim sweep SPEC --out DIR` first")
    _check_point_indices(store)
    frame = store.read()
    # distinct keys: a random axis may draw one point twice, stored (and counted) once
    total = len({p["key"] for p in (store.manifest() or {}).get("points", [])}) or len(frame)
    missing = max(0, total - len(frame))
    if missing:
        _warn_missing(root, missing, total)
    if status is not None:
        frame = frame[frame["status"] == status].reset_index(drop=True)
        # the rows that lacked a whole number may be gone; copy: one block again
        frame = plain_whole_numbers(frame).copy()
    frame.attrs["sweep_dir"] = str(root)  # later messages (a column not there) name it
    frame.attrs["points_total"] = total
    frame.attrs["points_missing"] = missing
    return frame


def _sweep_dir(out_dir: Any, caller: str = "load_sweep") -> Path:
    """The directory ``load_sweep`` (or ``caller``) was given: a path, or what it is
    easily confused with (the summary :func:`run_sweep` returns, a file in the directory:
    results.parquet, a per-request table)."""
    import os

    if hasattr(out_dir, "out_dir") and not isinstance(out_dir, (str, os.PathLike)):
        return Path(out_dir.out_dir)  # a SweepSummary: its directory
    if not isinstance(out_dir, (str, os.PathLike)):
        raise AnalysisError(f"{caller}: expected a sweep output directory (a path), got "
                            f"a {type(out_dir).__name__}; a Result is one run (use its "
                            "metrics), and a DataFrame is already loaded")
    root = Path(out_dir)
    if root.is_file() and root.suffix == ".parquet":
        # DIR/results.parquet, DIR/parts/KEY.parquet or DIR/requests/KEY.parquet
        top = root.parent if root.parent.name not in ("parts", "requests") else root.parent.parent
        raise AnalysisError(f"{root}: a file of a sweep's output; expected its directory, "
                            f"{caller}({str(top)!r})")
    return root


def _warn_missing(root: Path, missing: int, total: int) -> None:
    import warnings

    from npusim.sweep.store import LOCK_FILE

    why = (f"a sweep is writing here ({LOCK_FILE}); load again when it ends"
           if (root / LOCK_FILE).exists() else
           "the sweep stopped before them; run it again with the same --out to finish")
    warnings.warn(f"{root}: {missing} of {total} points have no result yet ({why}); "
                  "frame.attrs['points_missing'] counts them", stacklevel=3)


def _check_point_indices(store: Any) -> None:
    """Point numbers in the manifest are 0 to MAX_POINTS - 1 (the runner numbers a spec's
    points from 0); a hand-edited 10**30 would overflow the int64 ``point`` column."""
    from npusim.sweep.axes import MAX_POINTS
    from npusim.sweep.store import MANIFEST_FILE, StoreError

    manifest = store.manifest()  # StoreError for one that is not a manifest at all
    for i, point in enumerate((manifest or {}).get("points", [])):
        if not 0 <= point["index"] < MAX_POINTS:
            raise StoreError(f"{store.root / MANIFEST_FILE}: points[{i}].index: expected a "
                             f"point number from 0 to {MAX_POINTS - 1:,}, got {point['index']}; "
                             "re-run the sweep (npusim sweep SPEC --out DIR) to rewrite it")
