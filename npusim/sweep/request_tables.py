"""Per-request tables of a sweep's serving points, kept with ``store: {requests: true}``.

Each finished serving point's per-request table (the one ``npusim run`` writes as
``requests.csv``) is ``DIR/requests/<key>.parquet``, with a ``key`` column first so
the tables concatenate (no point number: a changed spec renumbers its points, and the
readers join each table to its point by key).  The worker that ran the point turns the table into
Parquet bytes (workers may share no file system with the driver); the driver writes
them atomically, before the point's row, so a stored row of a serving point always has
its table.  A point without one (a GEMM, a single LLM request) writes nothing.

The bytes depend only on the table: no wall time, no host, no pandas version (the
pandas schema metadata is dropped), so the same spec and seed give the same files.
Compaction leaves these files alone; a table of a point a changed spec no longer has
stays on disk, hidden from readers as its row is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npusim.core.errors import OutputError
from npusim.core.output_paths import atomic_output

#: The folder of a sweep directory that holds the tables, one file per point key.
REQUESTS_DIR = "requests"
#: The field of a :func:`~npusim.sweep.runner.run_point` row that carries the table's
#: Parquet bytes to the driver; popped before the row is stored (never a column).
REQUESTS_FIELD = "_requests_parquet"


def request_table_bytes(result: Any, key: str) -> bytes | None:
    """``result``'s per-request table as Parquet bytes, with a ``key`` column first; None for a run without one (not a serving workload).  The columns
    and dtypes are :meth:`Result.table`'s (a whole-number column with gaps is stored
    as integers with nulls, not floats)."""
    if "requests" not in result.tables:
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(result.table("requests"), preserve_index=False)
    table = table.replace_schema_metadata(None)  # names the pandas version: not the data's
    rows = table.num_rows
    table = table.add_column(0, "key", pa.array([key] * rows, pa.string()))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def request_file(root: str | Path, key: str) -> Path:
    """Where the table of the point with ``key`` is kept."""
    return Path(root) / REQUESTS_DIR / f"{key}.parquet"


def write_request_table(root: str | Path, key: str, data: bytes) -> Path:
    """Write one point's table (:func:`request_table_bytes`) atomically, replacing the
    one a point with this key stored before."""
    path = request_file(root, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission
        raise OutputError(f"{Path(root)}: cannot create {path.parent} for the per-request "
                          f"tables ({exc.strerror or exc})") from None
    with atomic_output(path, "a point's per-request table", binary=True, durable=True,
                       hint="; points stored so far are kept, re-run to resume") as handle:
        handle.write(data)
    return path


def stored_request_keys(root: str | Path) -> set[str]:
    """Keys of the points whose table is stored (temporary files, which start with a
    dot, are not tables)."""
    folder = Path(root) / REQUESTS_DIR
    if not folder.is_dir():
        return set()
    return {p.stem for p in folder.glob("[!.]*.parquet") if p.is_file()}
