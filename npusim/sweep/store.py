"""Resumable results store: one Parquet row per point under the sweep's directory.

Layout of ``DIR``:

* ``parts/<key>.parquet`` – one file per finished point, written as soon as the point
  finishes: the row goes to a temporary file that is flushed to disk and then renamed
  over the final name (``os.replace`` is atomic), so a sweep killed at any moment leaves
  every part either complete or absent, never half written;
* ``results.parquet`` – the compacted table (all parts merged), written the same way;
  the parts it absorbed are deleted only after it is in place, and readers drop duplicate
  keys, so a crash during compaction loses nothing either;
* ``manifest.json`` – the spec's points (key, index, parameters) of the latest run, used
  to order columns and to hide rows of points a changed spec no longer has.

A row holds ``point``, ``status`` (``ok``/``failed``/``skipped``), the swept and derived
parameters by config path, ``metrics.*`` (scalar metrics, nested dicts flattened with
dots), ``error``, ``wall_time_s``, ``config_hash``, ``key``, ``npusim_version`` and
``sweep``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    import pandas as pd

META_COLUMNS = ("point", "status")
TAIL_COLUMNS = ("error", "wall_time_s", "config_hash", "key", "npusim_version", "sweep")
RESULTS_FILE = "results.parquet"
MANIFEST_FILE = "manifest.json"


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "metrics") -> dict[str, Any]:
    """Scalar metrics as ``{"metrics.a.b": value}``; lists are kept as JSON text."""
    flat: dict[str, Any] = {}
    for name, value in metrics.items():
        key = f"{prefix}.{name}"
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, key))
        elif isinstance(value, (list, tuple)):
            flat[key] = json.dumps(value)
        else:
            flat[key] = value
    return flat


def _atomic_write(table, path: Path) -> None:
    import pyarrow.parquet as pq

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        pq.write_table(table, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _cell(value: Any) -> Any:
    """Parquet-friendly value: containers become JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return value


def _normalise(frame: "pd.DataFrame") -> "pd.DataFrame":
    """Make every column writable by pyarrow: a column mixing types (a swept value given
    as ``32MiB`` in one point and ``33554432`` in another) becomes text."""
    import pandas as pd

    for column in frame.columns:
        series = frame[column]
        if series.dtype == object:
            kinds = {type(v) for v in series if v is not None and not (isinstance(v, float) and pd.isna(v))}
            if len(kinds) > 1 and not kinds <= {int, float}:
                frame[column] = series.map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))
    return frame


class ResultStore:
    """The Parquet results of one sweep directory (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.parts = self.root / "parts"

    # ---------------------------------------------------------------- writing
    def write_manifest(self, name: str, params: list[str], points: Iterable[Any]) -> None:
        """Record the spec's points (key → index, parameters) for readers."""
        self.parts.mkdir(parents=True, exist_ok=True)
        data = {"sweep": name, "params": params,
                "points": [{"index": p.index, "key": p.key, "params": p.params} for p in points]}
        path = self.root / MANIFEST_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
        os.replace(tmp, path)

    def write_row(self, row: Mapping[str, Any]) -> Path:
        """Write one finished point as its own part file, atomically."""
        import pyarrow as pa

        self.parts.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist([{k: _cell(v) for k, v in row.items()}])
        path = self.parts / f"{row['key']}.parquet"
        _atomic_write(table, path)
        return path

    def compact(self) -> Path | None:
        """Merge every part into ``results.parquet`` and delete the absorbed parts."""
        import pyarrow as pa

        parts = sorted(self.parts.glob("*.parquet")) if self.parts.is_dir() else []
        if not parts:
            return None
        frame = self._read_all(filter_manifest=False)
        table = pa.Table.from_pandas(_normalise(frame), preserve_index=False)
        _atomic_write(table, self.root / RESULTS_FILE)
        for part in parts:  # only now: until the rename above the parts are the data
            part.unlink(missing_ok=True)
        return self.root / RESULTS_FILE

    # ---------------------------------------------------------------- reading
    def manifest(self) -> dict[str, Any] | None:
        path = self.root / MANIFEST_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def finished(self) -> dict[str, str]:
        """``{key: status}`` of every point stored so far."""
        frame = self._read_all(filter_manifest=False, columns=["key", "status"])
        return dict(zip(frame["key"], frame["status"])) if len(frame) else {}

    def read(self) -> "pd.DataFrame":
        """All rows, one per point of the latest spec, ordered by point index."""
        return self._read_all(filter_manifest=True)

    def _read_all(self, filter_manifest: bool, columns: list[str] | None = None) -> "pd.DataFrame":
        import pandas as pd
        import pyarrow.parquet as pq

        files = []
        if (self.root / RESULTS_FILE).is_file():
            files.append(self.root / RESULTS_FILE)
        if self.parts.is_dir():
            # Temporary files start with a dot and never match: a killed writer leaves
            # at most a stray .tmp, which is ignored (and overwritten next time).
            files += sorted(self.parts.glob("[!.]*.parquet"))
        frames = []
        for path in files:
            table = pq.read_table(path)
            if columns is not None:
                table = table.select([c for c in columns if c in table.column_names])
            frames.append(table.to_pandas())
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=list(columns or META_COLUMNS + TAIL_COLUMNS))
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        # A part newer than the compacted table wins (a retried point); duplicates left
        # by a compaction that was interrupted are identical and collapse here.
        frame = frame.drop_duplicates("key", keep="last")
        manifest = self.manifest() if filter_manifest else None
        if manifest is not None:
            order = {p["key"]: p["index"] for p in manifest["points"]}
            frame = frame[frame["key"].isin(order)].copy()
            frame["point"] = frame["key"].map(order).astype("int64")
        if "point" in frame:
            frame = frame.sort_values("point", kind="stable").reset_index(drop=True)
        return frame[self._column_order(frame, manifest)] if columns is None else frame

    @staticmethod
    def _column_order(frame: "pd.DataFrame", manifest: Mapping[str, Any] | None) -> list[str]:
        params = [p for p in (manifest or {}).get("params", []) if p in frame.columns]
        fixed = set(META_COLUMNS) | set(TAIL_COLUMNS) | set(params)
        metrics = sorted(c for c in frame.columns if c.startswith("metrics."))
        rest = sorted(c for c in frame.columns if c not in fixed and c not in metrics)
        return ([c for c in META_COLUMNS if c in frame] + params + rest + metrics
                + [c for c in TAIL_COLUMNS if c in frame])


def load_results(root: str | Path) -> "pd.DataFrame":
    """The results table of a sweep directory (parts and compacted file merged)."""
    return ResultStore(root).read()
