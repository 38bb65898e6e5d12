"""Reading request traces: npusim's CSV and JSONL, the Azure LLM inference trace and the
Mooncake trace, with every malformed row named by file, line and column (the record
classes live in :mod:`npusim.workload.traces`, which re-exports :func:`read_trace`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator, Mapping

from npusim.core.errors import TraceError
from npusim.core.text import utf16_hint
from npusim.core.units import PS_PER_S
from npusim.workload.trace_rows import (Row, csv_rows, hash_ids_cell, integer_cell,
                                        jsonl_rows, present, seconds_cell, timestamp_cell)
from npusim.workload.traces import (_AZURE_COLUMNS, _MOONCAKE_COLUMNS, _TIME_COLUMNS,
                                    DEFAULT_HASH_BLOCK_TOKENS, FORMATS, MAX_ARRIVAL_PS,
                                    MAX_REQUEST_TOKENS, Request, RequestTrace,
                                    block_hashes_problem)

__all__ = ["read_trace", "resolve_trace_path"]


def read_trace(path: str | Path, format: str = "auto", *, limit: int | None = None,
               rate_scale: float = 1.0, allow_simultaneous: bool = False,
               hash_block_tokens: int | None = None, settings: str = "") -> RequestTrace:
    """Read a request trace from CSV, JSONL, the Azure LLM inference format or the
    Mooncake format.

    ``format``: ``auto`` (JSON lines whose first object has ``input_length`` →
    mooncake; other ``.jsonl``/``.json`` → jsonl; a CSV header with ``ContextTokens``
    → azure; otherwise csv), ``csv``, ``jsonl``, ``azure`` or ``mooncake``.
    ``limit`` keeps the first N requests; ``rate_scale`` multiplies the arrival rate
    (see :meth:`RequestTrace.rescale_rate`).  Arrivals must be strictly increasing
    unless ``allow_simultaneous`` (then equal arrivals pass; decreasing ones never do;
    the Mooncake format's millisecond timestamps may repeat by definition, so there they
    always pass).
    ``hash_block_tokens``: prompt tokens each ``hash_ids`` entry covers (default
    512, Mooncake's block).  ``settings`` prefixes these options' names in messages
    (``workload.trace.``: where a scenario sets them).

    Raises :class:`TraceError` naming file, line, column, value and expectation.
    """
    path = Path(path)
    source = str(path)
    if format not in FORMATS:
        raise TraceError(f"{source}: {settings}format: unknown trace format {format!r}; "
                         f"expected one of {', '.join(FORMATS)}")
    if hash_block_tokens is not None and (isinstance(hash_block_tokens, bool) or not
                                          isinstance(hash_block_tokens, int) or hash_block_tokens < 1):
        raise TraceError(f"{source}: {settings}hash_block_tokens: got {hash_block_tokens!r}; "
                         "expected an integer >= 1 (prompt tokens per hashed block)")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise TraceError(f"{source}: {settings}limit: got {limit!r}; expected an integer "
                         ">= 1 (the number of requests to keep)")
    if path.is_dir():
        raise TraceError(f"{source}: is a directory; expected a trace file")
    if not path.is_file():
        raise TraceError(f"{source}: trace file not found")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{source}: cannot read trace file ({exc.strerror or exc})") from None
    if data.startswith(UTF8_BOM):  # spreadsheets add one
        data = data[len(UTF8_BOM):]
    if not data.strip():
        raise TraceError(f"{source}:1: file is empty; expected a header line (CSV) or one "
                         "JSON object per line (JSONL) followed by at least one request")
    raw_lines = data.splitlines(keepends=True)
    if format == "auto":
        first = next(number for number, line in enumerate(raw_lines, start=1) if line.strip())
        format = _detect_format(path, _decoded(raw_lines[first - 1], first, source))
    # Decoded line by line as the rows are parsed, so parsing (and decoding) stops at
    # ``limit`` and a byte that is not UTF-8 is named by its line.
    lines = (_decoded(line, number, source) for number, line in enumerate(raw_lines, start=1))
    rows = jsonl_rows(lines, source) if format in ("jsonl", "mooncake") else csv_rows(lines, source)
    trace = _build(rows, source, format, limit, allow_simultaneous or format == "mooncake",
                   hash_block_tokens or DEFAULT_HASH_BLOCK_TOKENS)
    if hash_block_tokens is not None and not trace.has_block_hashes:
        # the setting would be ignored without a word: a trace meant to carry hashes lost them
        raise TraceError(f"{source}: {settings}hash_block_tokens = {hash_block_tokens}, but no "
                         "request of the file has hash_ids; expected a hash_ids column (or "
                         "key), or no hash_block_tokens")
    return trace.rescale_rate(rate_scale)  # also validates the factor (returns self for 1)


UTF8_BOM = b"\xef\xbb\xbf"


def _decoded(line: bytes, number: int, source: str) -> str:
    """Line ``number`` of a trace file as text; TraceError naming the line and the
    first byte that is not UTF-8."""
    if b"\0" in line:  # a binary file: csv and json would read it as empty or garbled
        column = len(line[:line.index(b"\0")].decode("utf-8", "replace")) + 1
        raise TraceError(f"{source}:{number}: NUL byte at column {column}; expected a text "
                         "trace file (CSV or JSONL), not binary data"
                         f"{utf16_hint(line) if number == 1 else ''}")
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        column = len(line[:exc.start].decode("utf-8")) + 1
        raise TraceError(f"{source}:{number}: byte 0x{line[exc.start]:02x} at column {column} "
                         "is not UTF-8; expected a UTF-8 text file (re-save it as UTF-8, "
                         "e.g. iconv -f latin1 -t utf-8)") from None


def _detect_format(path: Path, first: str) -> str:
    """The format of a file whose first non-blank line is ``first``."""
    first = first.strip()
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson") or first.startswith("{"):
        try:
            keys = json.loads(first)
        except (ValueError, RecursionError):
            keys = None  # the JSONL reader names the line and the problem
        return "mooncake" if isinstance(keys, dict) and "input_length" in keys else "jsonl"
    header = {name.strip() for name in next(csv.reader([first]))}
    return "azure" if "ContextTokens" in header else "csv"


def _header_hint(keys: list, fmt: str) -> str:
    """Why a header a person would read as right does not match: another delimiter, or
    the column names in another case (they are matched exactly)."""
    if fmt == "csv" and len(keys) == 1:
        found = [name for d, name in (("\t", "tabs"), (";", "';'"), ("|", "'|'"))
                 if d in str(keys[0])]
        if found:
            return ("; the columns must be separated by commas (this header has "
                    f"{found[0]} in one column)")
    lowered = {str(k).strip().lower(): str(k) for k in keys}
    cased = [lowered[name] for name in _TIME_COLUMNS if name in lowered]
    if cased:
        return f"; column names are case-sensitive: write {cased[0].lower()!r}, not {cased[0]!r}"
    return ""


def _columns(header: list[str] | None, first: Row, source: str, fmt: str) -> dict[str, str]:
    """Map the logical fields (time, prompt, output, id, priority) to the file's columns."""
    keys = header if header is not None else list(first.values)
    where = f"{source}:{1 if header is not None else first.line}"
    if fmt in ("azure", "mooncake"):
        named = _AZURE_COLUMNS if fmt == "azure" else _MOONCAKE_COLUMNS
        required = [col for name, col in named.items() if name != "hash_ids"]
        missing = [col for col in required if col not in keys]
        if missing:
            raise TraceError(f"{where}: missing column {missing[0]!r}; the {fmt.title()} format "
                             f"expects {', '.join(required)} (got {', '.join(map(str, keys))})")
        # JSON objects may leave hash_ids out one by one (it is read where present).
        return {name: col for name, col in named.items()
                if name != "hash_ids" or col in keys or header is None}
    times = [name for name in _TIME_COLUMNS if name in keys]
    if not times:
        raise TraceError(f"{where}: missing arrival-time column; expected one of "
                         f"{', '.join(_TIME_COLUMNS)} (got {', '.join(map(str, keys))})"
                         + _header_hint(keys, fmt))
    if times == ["arrival_ps", "arrival_s"]:
        # As RequestTrace.to_frame() writes them: arrival_ps is exact, and arrival_s is
        # read only to check that it says the same (a column edited by hand would not).
        times = ["arrival_ps"]
        keys_checked = {"arrival_s_check": "arrival_s"}
    elif len(times) > 1:
        raise TraceError(f"{where}: both {times[0]!r} and {times[1]!r} given; expected exactly "
                         "one arrival-time column (arrival_ps with an arrival_s that agrees "
                         "is read as arrival_ps)")
    else:
        keys_checked = {}
    for name in ("prompt_tokens", "output_tokens"):
        if name not in keys:
            raise TraceError(f"{where}: missing column {name!r}; expected columns "
                             f"{' or '.join(_TIME_COLUMNS)}, prompt_tokens, output_tokens "
                             f"[, id, priority] (got {', '.join(map(str, keys))})")
    columns = {times[0]: times[0], "prompt_tokens": "prompt_tokens", "output_tokens": "output_tokens",
               **keys_checked}
    for optional in ("id", "priority", "hash_ids"):
        # A CSV header names its columns once; a JSON object may leave an optional key
        # out (the first object's keys would otherwise hide later objects' priority).
        if optional in keys or header is None:
            columns[optional] = optional
    if "id" not in keys and "request_id" in keys:
        # The per-request table a run writes (requests.csv) names its ids request_id:
        # fed back as a trace, its requests keep them.
        columns["id"] = "request_id"
    return columns


#: How far arrival_s may be from arrival_ps when a file has both (float seconds written
#: with 15+ significant digits stay well within a microsecond, or a part per billion).
_SECONDS_AGREE_PS = 1_000_000


def _check_seconds_agree(row: Row, arrival_ps: int, loc: str) -> None:
    """Raise :class:`TraceError` unless the row's arrival_s is its arrival_ps."""
    seconds_ps = seconds_cell(row, "arrival_s", loc)
    if abs(seconds_ps - arrival_ps) > max(_SECONDS_AGREE_PS, arrival_ps // 10 ** 9):
        raise TraceError(f"{loc}: column 'arrival_s': got {row.values.get('arrival_s')!r}, but "
                         f"arrival_ps is {arrival_ps} ({arrival_ps / PS_PER_S:.9g} s); expected "
                         "the two to agree, or only one of them")


def _build(parsed: tuple[list[str] | None, Iterator[Row]], source: str, fmt: str,
           limit: int | None, allow_simultaneous: bool, hash_block_tokens: int) -> RequestTrace:
    header, rows = parsed
    requests: list[Request] = []
    ids: dict[str, int] = {}
    columns: dict[str, str] | None = None
    previous_ps: int | None = None
    previous_line = 0
    origin_ps: int | None = None   # timestamps are made relative to the first request
    for row in rows:
        if columns is None:
            columns = _columns(header, row, source, fmt)
        loc = f"{source}:{row.line}"
        if "arrival_ps" in columns:
            absolute = integer_cell(row, "arrival_ps", loc, low=0, what="an integer >= 0 (picoseconds)")
            if "arrival_s_check" in columns:
                _check_seconds_agree(row, absolute, loc)
        elif "arrival_s" in columns:
            absolute = seconds_cell(row, "arrival_s", loc)
        elif "timestamp_ms" in columns:
            absolute = seconds_cell(row, columns["timestamp_ms"], loc, unit="milliseconds")
        else:
            absolute = timestamp_cell(row, columns["timestamp"], loc)
        relative = "timestamp" in columns or "timestamp_ms" in columns  # to the first row
        if absolute > MAX_ARRIVAL_PS and not relative:
            # In the column's own unit: picoseconds for arrival_ps, seconds for arrival_s.
            limit = (f"{MAX_ARRIVAL_PS} ps ({MAX_ARRIVAL_PS / PS_PER_S:.0f} s)"
                     if "arrival_ps" in columns else f"{MAX_ARRIVAL_PS / PS_PER_S:.0f} s")
            raise TraceError(f"{loc}: column {_time_column(columns)!r}: got "
                             f"{row.values.get(_time_column(columns))!r}; expected at most {limit}")
        if previous_ps is not None:
            if absolute < previous_ps or (absolute == previous_ps and not allow_simultaneous):
                col = _time_column(columns)
                relation = "before" if absolute < previous_ps else "equal to"
                expected = ("timestamps in non-decreasing order (sort the file by arrival time)"
                            if absolute < previous_ps or allow_simultaneous else
                            "strictly increasing timestamps (--set "
                            "workload.trace.allow_simultaneous=true, allow_simultaneous: true "
                            "in a scenario's trace or allow_simultaneous=True in Python "
                            "accepts requests that arrive at the same time)")
                raise TraceError(f"{loc}: column {col!r}: got {row.values.get(col)!r}, {relation} "
                                 f"the arrival at line {previous_line}; expected {expected}")
        previous_ps, previous_line = absolute, row.line
        if origin_ps is None:
            origin_ps = absolute if relative else 0
        arrival = absolute - origin_ps
        if arrival > MAX_ARRIVAL_PS:
            raise TraceError(f"{loc}: column {_time_column(columns)!r}: got "
                             f"{row.values.get(_time_column(columns))!r}; expected at most "
                             f"{MAX_ARRIVAL_PS / PS_PER_S:.0f} s after the first request")
        prompt = integer_cell(row, columns["prompt_tokens"], loc, low=1,
                              what=f"an integer from 1 to {MAX_REQUEST_TOKENS} (tokens)",
                              high=MAX_REQUEST_TOKENS)
        output = integer_cell(row, columns["output_tokens"], loc, low=1,
                              what=f"an integer from 1 to {MAX_REQUEST_TOKENS} (tokens; a "
                                   "request generates at least one token)",
                              high=MAX_REQUEST_TOKENS)
        priority = (integer_cell(row, "priority", loc, low=None, what="an integer")
                    if "priority" in columns and present(row.values.get("priority")) else 0)
        if "id" in columns and present(row.values.get(columns["id"])):
            raw_id = row.values[columns["id"]]
            if isinstance(raw_id, (dict, list, bool)) or (isinstance(raw_id, float)):
                raise TraceError(f"{loc}: column {columns['id']!r}: got {raw_id!r}; expected a "
                                 "string or integer")
            request_id = str(raw_id)
        else:
            request_id = f"req-{len(requests)}"
        if request_id in ids:
            raise TraceError(f"{loc}: column {columns['id']!r}: got {request_id!r}, already used at line "
                             f"{ids[request_id]}; expected unique ids")
        ids[request_id] = row.line
        hashes = hash_ids_cell(row, columns["hash_ids"], loc) if "hash_ids" in columns else ()
        if hashes:
            problem = block_hashes_problem(hashes, prompt, hash_block_tokens)
            if problem:
                raise TraceError(f"{loc}: column {columns['hash_ids']!r}: {problem}")
        requests.append(Request(request_id, arrival, prompt, output, priority, hashes))
        if limit is not None and len(requests) >= limit:
            break
    if not requests:
        raise TraceError(f"{source}:1: no requests (only a header or blank lines); "
                         "expected at least one request")
    hashed = any(r.block_hashes for r in requests)
    return RequestTrace(requests, source, hash_block_tokens if hashed else None)


def _time_column(columns: Mapping[str, str]) -> str:
    for key in (*_TIME_COLUMNS, "timestamp_ms"):
        if key in columns:
            return columns[key]
    raise AssertionError("no time column")  # _columns guarantees one


def resolve_trace_path(file: str | Path, base_dir: str | Path | None = None) -> Path:
    """``file`` as given if absolute, else the first existing of base_dir/file,
    ./file and <npusim checkout>/file; TraceError listing the places tried."""
    from npusim.config.presets import REPO_ROOT

    if not str(file).strip():  # Path("") is the current directory
        raise TraceError(f"got an empty path {str(file)!r}; expected a trace file")
    path = Path(file)
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = ([Path(base_dir) / path] if base_dir is not None else []) + \
            [Path.cwd() / path, REPO_ROOT / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    folders = [c for c in candidates if c.is_dir()]
    if folders:
        raise TraceError(f"{file}: {folders[0]} is a directory; expected a trace file")
    others = [c for c in candidates if c.exists()]  # a device, a FIFO, a socket
    if others:
        raise TraceError(f"{file}: {others[0]} is not a regular file; expected a trace file")
    beside = "" if path.is_absolute() else "next to the scenario file, then "
    raise TraceError(f"{file}: trace file not found (looked {beside}in "
                     f"{', '.join(str(c) for c in dict.fromkeys(candidates))})")
