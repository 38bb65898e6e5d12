"""Request traces for the serving engine: the :class:`Request` record, the ordered
:class:`RequestTrace`, and readers/writers for CSV, JSONL and the Azure LLM inference
trace format.

Arrival times are integer picoseconds from the start of the trace, as everywhere in
npusim.  Every malformed file raises :class:`~npusim.core.errors.TraceError` whose message
is ``FILE:LINE: column 'NAME': got VALUE; expected ...`` so a user can fix the row without
reading a traceback.  Synthetic traces and presets live in
:mod:`npusim.workload.trace_generators`, the row readers and cell parsers in
:mod:`npusim.workload.trace_rows`; the format is documented in ``docs/traces.md``.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from npusim.core.errors import TraceError
from npusim.core.output_paths import atomic_output, check_output_file
from npusim.core.units import PS_PER_S
from npusim.workload.trace_rows import (Row, csv_rows, integer_cell, jsonl_rows, present,
                                        seconds_cell, timestamp_cell)

__all__ = ["Request", "RequestTrace", "read_trace", "resolve_trace_path", "FORMATS",
           "MAX_ARRIVAL_PS", "MAX_REQUEST_TOKENS"]

#: Formats :func:`read_trace` understands (``auto`` picks one from the file).
FORMATS = ("auto", "csv", "jsonl", "azure")

#: Arrival times must fit a signed 64-bit integer (pandas/numpy columns); ~106 days.
MAX_ARRIVAL_PS = 2**63 - 1
#: Most tokens a request's prompt or output may have: far past any model's context,
#: and small enough that sums over a trace stay exact in 64-bit integers.
MAX_REQUEST_TOKENS = 2**31 - 1

#: Column names of npusim's own CSV/JSONL format, in the order the writers emit them.
COLUMNS = ("id", "arrival_ps", "prompt_tokens", "output_tokens", "priority")
_TIME_COLUMNS = ("arrival_ps", "arrival_s", "timestamp")
_AZURE_COLUMNS = {"timestamp": "TIMESTAMP", "prompt_tokens": "ContextTokens",
                  "output_tokens": "GeneratedTokens"}


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request.

    ``arrival_ps`` is measured from the start of the trace; ``priority`` is opaque here
    (its meaning belongs to the scheduler that reads it).
    """

    request_id: str
    arrival_ps: int
    prompt_tokens: int
    output_tokens: int
    priority: int = 0

    @property
    def arrival_s(self) -> float:
        """Arrival time in seconds (for display; simulation uses ``arrival_ps``)."""
        return self.arrival_ps / PS_PER_S


class RequestTrace:
    """An immutable sequence of requests in arrival order.

    The constructor checks the invariants every consumer relies on: arrivals are
    non-decreasing and non-negative, ids are unique, both lengths are at least one token.
    (Strictly increasing arrivals are a *file* rule, see :func:`read_trace`; in memory
    simultaneous arrivals are allowed, e.g. an offline batch all at t=0.)
    """

    __slots__ = ("_requests", "source")

    def __init__(self, requests: Iterable[Request], source: str = "<memory>"):
        self._requests: tuple[Request, ...] = tuple(requests)
        self.source = source
        _check_invariants(self._requests, source)

    # -- sequence behaviour -------------------------------------------------------------
    @property
    def requests(self) -> tuple[Request, ...]:
        """The requests, in arrival order."""
        return self._requests

    def __len__(self) -> int:
        return len(self._requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests)

    def __getitem__(self, index: int) -> Request:
        return self._requests[index]

    def __eq__(self, other: object) -> bool:
        # Two traces are equal when they hold the same requests; the source is a label.
        return isinstance(other, RequestTrace) and self._requests == other._requests

    def __hash__(self) -> int:
        return hash(self._requests)

    def __repr__(self) -> str:
        return f"RequestTrace({len(self)} requests from {self.source})"

    # -- summaries ------------------------------------------------------------------------
    @property
    def duration_ps(self) -> int:
        """Time from the first to the last arrival (0 for fewer than two requests)."""
        if len(self._requests) < 2:
            return 0
        return self._requests[-1].arrival_ps - self._requests[0].arrival_ps

    @property
    def total_prompt_tokens(self) -> int:
        """Sum of the prompt lengths."""
        return sum(r.prompt_tokens for r in self._requests)

    @property
    def total_output_tokens(self) -> int:
        """Sum of the output lengths."""
        return sum(r.output_tokens for r in self._requests)

    def stats(self) -> dict[str, Any]:
        """Summary numbers: counts, arrival rate and burstiness, length statistics.

        ``mean_rate_per_s`` is ``(n - 1) / duration`` (arrivals per second between the
        first and the last request); ``interarrival_cv`` is the coefficient of variation
        of the gaps (1 for Poisson arrivals, 0 for a fixed interval).
        """
        import numpy as np

        n = len(self._requests)
        out: dict[str, Any] = {"source": self.source, "num_requests": n,
                               "duration_s": self.duration_ps / PS_PER_S,
                               "total_prompt_tokens": self.total_prompt_tokens,
                               "total_output_tokens": self.total_output_tokens}
        if n == 0:
            return out
        gaps = np.diff(np.array([r.arrival_ps for r in self._requests], dtype=np.float64)) / PS_PER_S
        mean_gap = float(gaps.mean()) if gaps.size else 0.0
        out["mean_interarrival_s"] = mean_gap
        out["mean_rate_per_s"] = (1.0 / mean_gap) if mean_gap > 0 else math.inf
        out["interarrival_cv"] = float(gaps.std() / mean_gap) if mean_gap > 0 else 0.0
        for name in ("prompt_tokens", "output_tokens"):
            values = np.array([getattr(r, name) for r in self._requests], dtype=np.float64)
            out[f"mean_{name}"] = float(values.mean())
            out[f"p50_{name}"] = float(np.percentile(values, 50))
            out[f"p90_{name}"] = float(np.percentile(values, 90))
            out[f"max_{name}"] = int(values.max())
        out["prompt_output_ratio"] = self.total_prompt_tokens / self.total_output_tokens
        return out

    # -- transformations ------------------------------------------------------------------
    def rescale_rate(self, factor: float) -> "RequestTrace":
        """A copy whose arrival rate is ``factor`` times this one's (arrival times are
        divided by ``factor``, rounded to the nearest picosecond; lengths unchanged)."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not math.isfinite(factor) or factor <= 0:
            raise TraceError(f"{self.source}: rate scale factor: got {factor!r}; "
                             "expected a finite number > 0 (2.0 doubles the arrival rate)")
        if factor == 1:
            return self
        # Exact rational arithmetic: float division would lose picoseconds beyond ~2.5 h.
        scale = Fraction(factor)
        last = self._requests[-1].arrival_ps if self._requests else 0
        if round(Fraction(last) / scale) > MAX_ARRIVAL_PS:
            lowest = Fraction(last) / MAX_ARRIVAL_PS
            raise TraceError(f"{self.source}: rate scale factor: got {factor:g}; the last arrival "
                             f"({last / PS_PER_S:g} s) would move past the {MAX_ARRIVAL_PS / PS_PER_S:.0f} s "
                             f"an arrival time can hold; expected at least {float(lowest) * 1.0001:.4g}")
        return RequestTrace((Request(r.request_id, round(Fraction(r.arrival_ps) / scale),
                                     r.prompt_tokens, r.output_tokens, r.priority)
                             for r in self._requests), self.source)

    def head(self, n: int) -> "RequestTrace":
        """The first ``n`` requests."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise TraceError(f"{self.source}: head: got {n!r}; expected an integer >= 0")
        return RequestTrace(self._requests[:n], self.source)

    # -- export ---------------------------------------------------------------------------
    def to_frame(self):
        """The trace as a pandas DataFrame (columns id, arrival_ps, arrival_s,
        prompt_tokens, output_tokens, priority; one row per request)."""
        import pandas as pd

        rows = self._requests
        return pd.DataFrame({
            "id": pd.Series([r.request_id for r in rows], dtype="object"),
            "arrival_ps": pd.Series([r.arrival_ps for r in rows], dtype="int64"),
            "arrival_s": pd.Series([r.arrival_ps / PS_PER_S for r in rows], dtype="float64"),
            "prompt_tokens": pd.Series([r.prompt_tokens for r in rows], dtype="int64"),
            "output_tokens": pd.Series([r.output_tokens for r in rows], dtype="int64"),
            "priority": pd.Series([r.priority for r in rows], dtype="int64"),
        })

    def write_csv(self, path: str | Path) -> Path:
        """Write npusim's CSV format (header ``id,arrival_ps,prompt_tokens,output_tokens,
        priority``); :func:`read_trace` reads it back unchanged.  Raises
        :class:`~npusim.core.errors.OutputError` if ``path`` cannot be written; a failed
        write leaves an existing file as it was."""
        path = check_output_file(path, "trace file")
        with atomic_output(path, "the trace file") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerows((r.request_id, r.arrival_ps, r.prompt_tokens, r.output_tokens,
                              r.priority) for r in self._requests)
        return path

    def write_jsonl(self, path: str | Path) -> Path:
        """Write one JSON object per line with the keys of :data:`COLUMNS` (errors as
        :meth:`write_csv`)."""
        path = check_output_file(path, "trace file")
        with atomic_output(path, "the trace file") as handle:
            for r in self._requests:
                handle.write(json.dumps({"id": r.request_id, "arrival_ps": r.arrival_ps,
                                         "prompt_tokens": r.prompt_tokens,
                                         "output_tokens": r.output_tokens,
                                         "priority": r.priority}) + "\n")
        return path


def _check_invariants(requests: tuple[Request, ...], source: str) -> None:
    seen: dict[str, int] = {}
    previous = 0
    for index, r in enumerate(requests):
        if not isinstance(r, Request):
            raise TraceError(f"{source}: item {index}: got {type(r).__name__}; expected a Request")
        where = f"{source}: request {index} ({r.request_id!r})"
        if not isinstance(r.request_id, str) or not r.request_id:
            raise TraceError(f"{where}: request_id: expected a non-empty string")
        for name, low in (("prompt_tokens", 1), ("output_tokens", 1), ("arrival_ps", 0)):
            value = getattr(r, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise TraceError(f"{where}: {name}: got {value!r}; expected an integer >= {low}")
            if name != "arrival_ps" and value > MAX_REQUEST_TOKENS:
                raise TraceError(f"{where}: {name}: got {value}; expected at most "
                                 f"{MAX_REQUEST_TOKENS} tokens")
        if r.arrival_ps > MAX_ARRIVAL_PS:
            raise TraceError(f"{where}: arrival_ps: got {r.arrival_ps}; expected <= {MAX_ARRIVAL_PS}")
        if isinstance(r.priority, bool) or not isinstance(r.priority, int):
            raise TraceError(f"{where}: priority: got {r.priority!r}; expected an integer")
        if r.arrival_ps < previous:
            raise TraceError(f"{where}: arrival_ps: got {r.arrival_ps}, before the previous "
                             f"request's {previous}; expected requests in arrival order")
        previous = r.arrival_ps
        if r.request_id in seen:
            raise TraceError(f"{where}: request_id: duplicate of request {seen[r.request_id]}; "
                             "expected unique ids")
        seen[r.request_id] = index


# ---------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------

def read_trace(path: str | Path, format: str = "auto", *, limit: int | None = None,
               rate_scale: float = 1.0, allow_simultaneous: bool = False) -> RequestTrace:
    """Read a request trace from CSV, JSONL or the Azure LLM inference format.

    ``format``: ``auto`` (``.jsonl``/``.json`` → jsonl; a CSV header with
    ``ContextTokens`` → azure; otherwise csv), ``csv``, ``jsonl`` or ``azure``.
    ``limit`` keeps the first N requests; ``rate_scale`` multiplies the arrival rate
    (see :meth:`RequestTrace.rescale_rate`).  Arrivals must be strictly increasing
    unless ``allow_simultaneous`` (then equal arrivals pass; decreasing ones never do).

    Raises :class:`TraceError` naming file, line, column, value and expectation.
    """
    path = Path(path)
    source = str(path)
    if format not in FORMATS:
        raise TraceError(f"{source}: unknown trace format {format!r}; expected one of "
                         f"{', '.join(FORMATS)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise TraceError(f"{source}: limit: got {limit!r}; expected an integer >= 1 "
                         "(the number of requests to keep)")
    if not path.is_file():
        raise TraceError(f"{source}: trace file not found")
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: spreadsheets add a BOM
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{source}: cannot read trace file ({exc})") from None
    if not text.strip():
        raise TraceError(f"{source}:1: file is empty; expected a header line (CSV) or one "
                         "JSON object per line (JSONL) followed by at least one request")
    if format == "auto":
        format = _detect_format(path, text)
    rows = jsonl_rows(text, source) if format == "jsonl" else csv_rows(text, source)
    trace = _build(rows, source, format, limit, allow_simultaneous)
    return trace.rescale_rate(rate_scale)  # also validates the factor (returns self for 1)


def _detect_format(path: Path, text: str) -> str:
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith("{"):
        return "jsonl"
    header = {name.strip() for name in next(csv.reader([first]))}
    return "azure" if "ContextTokens" in header else "csv"


def _columns(header: list[str] | None, first: Row, source: str, fmt: str) -> dict[str, str]:
    """Map the logical fields (time, prompt, output, id, priority) to the file's columns."""
    keys = header if header is not None else list(first.values)
    where = f"{source}:{1 if header is not None else first.line}"
    if fmt == "azure":
        missing = [col for col in _AZURE_COLUMNS.values() if col not in keys]
        if missing:
            raise TraceError(f"{where}: missing column {missing[0]!r}; the Azure format "
                             f"expects {', '.join(_AZURE_COLUMNS.values())} (got {', '.join(keys)})")
        return dict(_AZURE_COLUMNS)
    times = [name for name in _TIME_COLUMNS if name in keys]
    if not times:
        raise TraceError(f"{where}: missing arrival-time column; expected one of "
                         f"{', '.join(_TIME_COLUMNS)} (got {', '.join(map(str, keys))})")
    if len(times) > 1:
        raise TraceError(f"{where}: both {times[0]!r} and {times[1]!r} given; expected exactly "
                         "one arrival-time column")
    for name in ("prompt_tokens", "output_tokens"):
        if name not in keys:
            raise TraceError(f"{where}: missing column {name!r}; expected columns "
                             f"{' or '.join(_TIME_COLUMNS)}, prompt_tokens, output_tokens "
                             f"[, id, priority] (got {', '.join(map(str, keys))})")
    columns = {times[0]: times[0], "prompt_tokens": "prompt_tokens", "output_tokens": "output_tokens"}
    for optional in ("id", "priority"):
        if optional in keys:
            columns[optional] = optional
    return columns


def _build(parsed: tuple[list[str] | None, Iterator[Row]], source: str, fmt: str,
           limit: int | None, allow_simultaneous: bool) -> RequestTrace:
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
        elif "arrival_s" in columns:
            absolute = seconds_cell(row, "arrival_s", loc)
        else:
            absolute = timestamp_cell(row, columns["timestamp"], loc)
        if absolute > MAX_ARRIVAL_PS and "timestamp" not in columns:
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
                            "strictly increasing timestamps (pass allow_simultaneous=True, or "
                            "allow_simultaneous: true in a scenario, to accept requests that "
                            "arrive at the same time)")
                raise TraceError(f"{loc}: column {col!r}: got {row.values.get(col)!r}, {relation} "
                                 f"the arrival at line {previous_line}; expected {expected}")
        previous_ps, previous_line = absolute, row.line
        if origin_ps is None:
            origin_ps = absolute if "timestamp" in columns else 0
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
        if "id" in columns and present(row.values.get("id")):
            raw_id = row.values["id"]
            if isinstance(raw_id, (dict, list, bool)) or (isinstance(raw_id, float)):
                raise TraceError(f"{loc}: column 'id': got {raw_id!r}; expected a string or integer")
            request_id = str(raw_id)
        else:
            request_id = f"req-{len(requests)}"
        if request_id in ids:
            raise TraceError(f"{loc}: column 'id': got {request_id!r}, already used at line "
                             f"{ids[request_id]}; expected unique ids")
        ids[request_id] = row.line
        requests.append(Request(request_id, arrival, prompt, output, priority))
        if limit is not None and len(requests) >= limit:
            break
    if not requests:
        raise TraceError(f"{source}:1: no requests (only a header or blank lines); "
                         "expected at least one request")
    return RequestTrace(requests, source)


def _time_column(columns: Mapping[str, str]) -> str:
    for key in _TIME_COLUMNS:
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
    raise TraceError(f"{file}: trace file not found (looked in "
                     f"{', '.join(str(c) for c in dict.fromkeys(candidates))})")
