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
  to order columns and to hide rows of points a changed spec no longer has;
* ``requests/<key>.parquet`` – with ``store: {requests: true}``, each serving point's
  per-request table (:mod:`npusim.sweep.request_tables`), untouched by compaction;
* ``.sweep.lock`` – present while a sweep writes here (its process id and host): a second
  sweep into the same directory is refused instead of interleaving its manifest and
  compaction with the first's; a lock whose process is gone (a killed sweep) is taken
  over.

Damaged files are reported, never deleted: a file that is not readable Parquet, or a
manifest that is not the JSON this module writes, raises :class:`StoreError` naming it
(the user decides whether to move it away), and an output path that cannot hold the
store raises :class:`~npusim.core.errors.OutputError` before any point runs.

A row holds ``point``, ``status`` (``ok``/``failed``/``skipped``), the swept and derived
parameters by config path, ``metrics.*`` (scalar metrics, nested dicts flattened with
dots), ``error``, ``wall_time_s``, ``config_hash``, ``key``, ``npusim_version`` and
``sweep``.  A parameter swept with units (``hw.core.sram.capacity_bytes: [4MiB, 8MiB]``)
is stored as written and read back in the field's base unit (bytes, ps, Hz, B/s).
"""

from __future__ import annotations

import json
import os
import re
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from npusim.core.errors import NpusimError, OutputError
from npusim.core.output_paths import atomic_output, check_output_dir
# (flatten_metrics, plain_whole_numbers and INT64_MIN/MAX are part of this module's API)
from npusim.sweep.columns import (INT64_MAX, INT64_MIN, _cell, _in_base_units, _normalise,
                                  flatten_metrics, plain_whole_numbers)

if TYPE_CHECKING:
    import pandas as pd

META_COLUMNS = ("point", "status")
TAIL_COLUMNS = ("error", "wall_time_s", "config_hash", "key", "npusim_version", "sweep")
RESULTS_FILE = "results.parquet"
MANIFEST_FILE = "manifest.json"
#: What ``npusim run`` writes first in its output directory: a sweep refuses to share it.
RUN_METRICS_FILE = "metrics.json"
LOCK_FILE = ".sweep.lock"


#: Times a reader lists and reads the directory when a running sweep's compaction
#: deletes a listed part under it.
_READ_ATTEMPTS = 5


class _Vanished(Exception):
    """A listed part file was deleted before it was read (compacted by a running sweep)."""


class StoreError(NpusimError):
    """A file in a sweep directory is damaged or is not one the store wrote; the message
    names the file and what to do.  The store never deletes such a file itself."""


def _atomic_write(table, path: Path) -> None:
    import pyarrow.parquet as pq

    # Disk full or permissions changed mid-sweep: the earlier files stay.
    with atomic_output(path, "the sweep results", binary=True, durable=True,
                       hint="; points stored so far are kept, re-run to resume") as handle:
        pq.write_table(table, handle)


def _reason(exc: BaseException) -> str:
    """The gist of a reader's exception: first line, without the path it repeats."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^Could not open Parquet input source '.*?': ", "", text)
    return text if len(text) <= 160 else text[:157] + "..."


def _manifest_problem(data: Any) -> str | None:
    """What is wrong with a parsed manifest, or None if it has the shape readers use."""
    if not isinstance(data, Mapping):
        return f"expected a JSON object, got {type(data).__name__}"
    points = data.get("points")
    if not isinstance(points, list):
        return "no 'points' list" if points is None else "'points' is not a list"
    for i, point in enumerate(points):
        if not isinstance(point, Mapping) or not isinstance(point.get("key"), str) \
                or not isinstance(point.get("index"), int) or isinstance(point.get("index"), bool):
            return f"points[{i}] is not {{key: TEXT, index: INTEGER, ...}}"
    params = data.get("params", [])
    if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
        return "'params' is not a list of config paths"
    return None


class ResultStore:
    """The Parquet results of one sweep directory (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.parts = self.root / "parts"

    # ---------------------------------------------------------------- checks
    def check_output(self, option: str | None = None, requests: bool = False) -> None:
        """Raise :class:`OutputError` when the directory cannot hold a store: it, or a
        parent, is a file; ``parts/`` (and ``requests/`` when the sweep keeps per-request
        tables) is a file or a result file a directory; no write permission.  Leaves
        nothing behind (a new directory is created as a probe and removed), so a sweep
        checks this before resolving its points (a long step) and long before running
        any; ``option`` (``--out``) prefixes the message."""
        from npusim.sweep.request_tables import REQUESTS_DIR

        where = f"{option} {self.root}" if option else str(self.root)
        check_output_dir(self.root, option or "", purpose="the sweep results")
        if not self.root.exists():
            return
        for folder in [self.parts] + ([self.root / REQUESTS_DIR] if requests else []):
            if folder.exists() and not folder.is_dir():
                raise OutputError(f"{where}: {folder} is a file, but the store keeps one file "
                                  "per point in that directory; move it away or choose "
                                  "another directory")
            if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
                raise OutputError(f"{where}: {folder} is not writable")
        for name in (RESULTS_FILE, MANIFEST_FILE, LOCK_FILE):
            if (self.root / name).is_dir():
                raise OutputError(f"{where}: {self.root / name} is a directory, but the store "
                                  "writes a file there; move it away or choose another "
                                  "directory")

    def check_same_sweep(self, name: str, option: str | None = None) -> None:
        """Raise :class:`OutputError` when the directory holds another sweep's results: the
        new manifest would hide them from every reader.  The same sweep (by name) may
        come back to resume or to extend its points."""
        try:
            manifest = self.manifest()
        except StoreError:  # a damaged manifest: the run reports it, or rewrites it
            return
        where = f"{option} {self.root}" if option else str(self.root)
        if manifest is None and (self.root / RUN_METRICS_FILE).is_file():
            # A single run's outputs: the sweep's files would be mixed in among them.
            raise OutputError(f"{where}: holds the results of a single run "
                              f"({RUN_METRICS_FILE}, written by npusim run); expected a new "
                              "directory for the sweep, or a sweep's own directory to "
                              "resume it")
        if manifest is None or manifest.get("sweep") in (None, name):
            return
        raise OutputError(f"{where}: holds the results of sweep {manifest['sweep']!r} "
                          f"({len(manifest['points'])} points); this spec is {name!r}; "
                          "expected a new directory, or the same sweep to resume or extend "
                          f"(a spec without name: is named after its file: set name: "
                          f"{manifest['sweep']} to continue that sweep)")

    def _make_dirs(self) -> None:
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, no permission, a read-only file system
            raise OutputError(f"{self.root}: cannot create the sweep directory "
                              f"({exc.strerror or exc}: {exc.filename or self.parts})") from None

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the directory for one sweep: :class:`StoreError` if another sweep (a live
        process) holds it; a lock left by a process that is gone is taken over."""
        self._make_dirs()
        path = self.root / LOCK_FILE
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _lock_holder(path)
                if holder is not None and _alive(holder, me["host"]):
                    raise StoreError(
                        f"{self.root}: another sweep (process {holder.get('pid')} on "
                        f"{holder.get('host')}) is writing here; wait for it to finish or "
                        f"choose another --out (if no sweep runs, remove {path})") from None
                try:
                    path.unlink()  # left by a sweep that was killed
                except FileNotFoundError:
                    pass
                except OSError as exc:  # a directory in the way, no permission
                    raise OutputError(f"{self.root}: cannot remove the stale lock {path} "
                                      f"({exc.strerror or exc}); move it away") from None
                continue
            except OSError as exc:
                raise OutputError(f"{self.root}: cannot create {path} ({exc.strerror or exc})") from None
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(me) + "\n")
            break
        else:
            raise StoreError(f"{self.root}: could not take {path}; another sweep is starting "
                             "here at the same moment")
        try:
            yield
        finally:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # ---------------------------------------------------------------- writing
    def write_manifest(self, name: str, params: list[str], points: Iterable[Any],
                       requests: Iterable[str] | None = None) -> None:
        """Record the spec's points (key → index, parameters) for readers.  ``requests``
        (a sweep with ``store: {requests: true}``): the keys of the points that keep a
        per-request table (serving runs), flagged ``"requests": true``."""
        self._make_dirs()
        keep = None if requests is None else set(requests)
        data: dict[str, Any] = {"sweep": name, "params": params}
        if keep is not None:
            data["store"] = {"requests": True}
        data["points"] = [{"index": p.index, "key": p.key, "params": p.params,
                           **({"requests": True} if keep and p.key in keep else {})}
                          for p in points]
        with atomic_output(self.root / MANIFEST_FILE, "the sweep manifest") as handle:
            handle.write(json.dumps(data, indent=1, default=str) + "\n")

    def write_row(self, row: Mapping[str, Any]) -> Path:
        """Write one finished point as its own part file, atomically."""
        import pyarrow as pa

        self._make_dirs()
        table = pa.Table.from_pylist([{k: _cell(v) for k, v in row.items()}])
        path = self.parts / f"{row['key']}.parquet"
        _atomic_write(table, path)
        return path

    def compact(self) -> Path | None:
        """Merge every part into ``results.parquet`` and delete the absorbed parts."""
        import pyarrow as pa

        parts = self._part_files()
        if not parts:
            return None
        frame = self._read_all(filter_manifest=False, keep_missing_ints=True)
        table = pa.Table.from_pandas(_normalise(frame), preserve_index=False)
        _atomic_write(table, self.root / RESULTS_FILE)
        for part in parts:  # only now: until the rename above the parts are the data
            part.unlink(missing_ok=True)
        return self.root / RESULTS_FILE

    # ---------------------------------------------------------------- reading
    def manifest(self) -> dict[str, Any] | None:
        """The manifest, None when there is none; :class:`StoreError` when it is damaged
        (re-running the sweep rewrites it: the runner never reads it)."""
        path = self.root / MANIFEST_FILE
        if not path.is_file():
            return None
        advice = "re-run the sweep (npusim sweep SPEC --out DIR) to rewrite it"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # ValueError: bad JSON, bad UTF-8
            raise StoreError(f"{path}: not a readable sweep manifest ({_reason(exc)}); "
                             f"{advice}") from None
        problem = _manifest_problem(data)
        if problem is not None:
            raise StoreError(f"{path}: not a sweep manifest ({problem}); {advice}")
        return data

    def finished(self) -> dict[str, str]:
        """``{key: status}`` of every point stored so far."""
        frame = self._read_all(filter_manifest=False, columns=["key", "status"])
        return dict(zip(frame["key"], frame["status"])) if len(frame) else {}

    def read(self) -> "pd.DataFrame":
        """All rows, one per point of the latest spec, ordered by point index.  A
        whole-number column is int64; where some rows lack it (failed points have no
        metrics) it is pandas' nullable Int64, so 12345678901 stays 12345678901 rather
        than turning float64 for the whole column."""
        return self._read_all(filter_manifest=True)

    def _read_all(self, filter_manifest: bool, columns: list[str] | None = None,
                  keep_missing_ints: bool = False) -> "pd.DataFrame":
        import pandas as pd
        import pyarrow as pa

        # Whole-number columns are read as nullable integers: a file that lacks a column
        # (a row of an earlier spec in the same directory) then leaves it missing, not
        # float, and compaction (``keep_missing_ints``) stores it as integers with nulls.
        as_nullable = {pa.int64(): pd.Int64Dtype()}.get
        for attempt in range(_READ_ATTEMPTS):
            files = []
            if (self.root / RESULTS_FILE).is_file():
                files.append(self.root / RESULTS_FILE)
            files += self._part_files()
            try:
                tables = [self._read_table(path, missing_ok=attempt + 1 < _READ_ATTEMPTS)
                          for path in files]
                break
            except _Vanished:
                # A running sweep compacted its parts between the listing and the reads
                # (it writes the merged table first, then deletes them): list again.
                continue
        frames = []
        for table in tables:
            if columns is not None:
                table = table.select([c for c in columns if c in table.column_names])
            frames.append(table.to_pandas(types_mapper=as_nullable))
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
        if not keep_missing_ints:  # readers get int64 where no row lacks the value
            frame = plain_whole_numbers(frame)
            for column in frame.columns:
                if frame[column].dtype == "Float64":  # whole in some files, not in others
                    frame[column] = frame[column].astype("float64")
        if "point" in frame:
            frame = frame.sort_values("point", kind="stable").reset_index(drop=True)
        if manifest is not None:
            frame = _in_base_units(frame, manifest.get("params", []))
        frame = frame[self._column_order(frame, manifest)] if columns is None else frame
        # The dtype fixes above assign column by column, which leaves one pandas block per
        # column: copying consolidates them (else adding a column warns "highly fragmented").
        return frame.copy()

    def _part_files(self) -> list[Path]:
        """The part files, in name order.  Temporary files start with a dot and never
        match: a killed writer leaves at most a stray .tmp, which is ignored (and
        overwritten next time).  Compaction deletes exactly these, after reading them."""
        if not self.parts.is_dir():
            return []
        return sorted(p for p in self.parts.glob("[!.]*.parquet") if p.is_file())

    def _read_table(self, path: Path, missing_ok: bool = False):
        """One stored file as a table; :class:`StoreError` naming it when it is damaged or
        not a results file (checked before anything is merged, written or deleted).
        ``missing_ok``: a file deleted since it was listed raises ``_Vanished``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if missing_ok and not path.exists():
            raise _Vanished(path)

        if path.name == RESULTS_FILE:
            advice = ("move it away to start over (its points run again) or restore it "
                      "from a backup")
        else:
            advice = "move it away; the point it held runs again on the next sweep"
        try:
            table = pq.read_table(path)
        except FileNotFoundError:
            if missing_ok:
                raise _Vanished(path) from None
            raise StoreError(f"{path}: deleted while it was being read (a sweep writing "
                             "here compacted it); read the directory again") from None
        except (pa.ArrowException, OSError, ValueError) as exc:
            if missing_ok and not path.exists():  # deleted part-way through the read
                raise _Vanished(path) from None
            raise StoreError(f"{path}: not a readable Parquet file ({_reason(exc)}); "
                             f"{advice}") from None
        missing = [c for c in ("key", "status") if c not in table.column_names]
        if missing:
            raise StoreError(f"{path}: not a sweep results file (no {' or '.join(map(repr, missing))} "
                             f"column); {advice}")
        return table

    @staticmethod
    def _column_order(frame: "pd.DataFrame", manifest: Mapping[str, Any] | None) -> list[str]:
        params = [p for p in (manifest or {}).get("params", []) if p in frame.columns]
        fixed = set(META_COLUMNS) | set(TAIL_COLUMNS) | set(params)
        from npusim.core.json_keys import natural_key

        # natural order: metrics.unit_utilisation.core2 before ...core10
        metrics = sorted((c for c in frame.columns if c.startswith("metrics.")), key=natural_key)
        rest = sorted((c for c in frame.columns if c not in fixed and c not in metrics),
                      key=natural_key)
        return ([c for c in META_COLUMNS if c in frame] + params + rest + metrics
                + [c for c in TAIL_COLUMNS if c in frame])


def _lock_holder(path: Path) -> dict[str, Any] | None:
    """The process and host a lock file names (None if unreadable: a half-written lock
    of a sweep that died at once, taken as stale)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def _alive(holder: Mapping[str, Any], host: str) -> bool:
    """Whether the lock's process still runs (a lock from another host is taken as
    live: its process cannot be checked from here)."""
    if holder.get("host") != host:
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def load_results(root: str | Path) -> "pd.DataFrame":
    """The results table of a sweep directory (parts and compacted file merged), as
    :func:`npusim.analysis.load_sweep` reads it (an error for a directory that holds no
    sweep, rather than an empty table)."""
    from npusim.analysis.sweep_results import load_sweep

    return load_sweep(root)
