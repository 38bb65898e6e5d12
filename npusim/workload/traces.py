"""Request traces for the serving engine: the :class:`Request` record, the ordered
:class:`RequestTrace`, and readers/writers for CSV, JSONL, the Azure LLM inference trace
format and the Mooncake trace format (prompt block hashes for prefix caching).

Arrival times are integer picoseconds from the start of the trace, as everywhere in
npusim.  Every malformed file raises :class:`~npusim.core.errors.TraceError` whose message
is ``FILE:LINE: column 'NAME': got VALUE; expected ...`` so a user can fix the row without
reading a traceback.  The file readers live in :mod:`npusim.workload.trace_readers`
(:func:`read_trace` is re-exported here), the row readers and cell parsers in
:mod:`npusim.workload.trace_rows`, synthetic traces and presets in
:mod:`npusim.workload.trace_generators`; the formats are documented in ``docs/traces.md``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Iterator

from npusim.core.errors import TraceError
from npusim.core.output_paths import atomic_output, check_output_file
from npusim.core.units import PS_PER_S

__all__ = ["Request", "RequestTrace", "read_trace", "resolve_trace_path", "plain_int", "FORMATS",
           "MAX_ARRIVAL_PS", "MAX_REQUEST_TOKENS"]

#: Formats :func:`read_trace` understands (``auto`` picks one from the file).
FORMATS = ("auto", "csv", "jsonl", "azure", "mooncake")
#: Prompt tokens per hashed block unless a reader is told otherwise (Mooncake's traces).
DEFAULT_HASH_BLOCK_TOKENS = 512

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
# Mooncake (FAST '25) JSONL: timestamp in milliseconds, hash_ids of 512-token blocks.
_MOONCAKE_COLUMNS = {"timestamp_ms": "timestamp", "prompt_tokens": "input_length",
                     "output_tokens": "output_length", "hash_ids": "hash_ids"}


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request.

    ``arrival_ps`` is measured from the start of the trace; ``priority`` is opaque here
    (its meaning belongs to the scheduler that reads it).  ``block_hashes`` name the
    content of the prompt's first blocks of the trace's ``hash_block_tokens`` tokens
    (as Mooncake's ``hash_ids``): two requests whose first ``k`` hashes agree share
    their first ``k`` blocks, which a prefix cache can reuse.  Empty: nothing shared.
    """

    request_id: str
    arrival_ps: int
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    block_hashes: tuple[int, ...] = ()

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

    __slots__ = ("_requests", "source", "hash_block_tokens")

    def __init__(self, requests: Iterable[Request], source: str = "<memory>",
                 hash_block_tokens: int | None = None):
        self._requests: tuple[Request, ...] = tuple(_plain_ints(r) for r in requests)
        self.source = source
        #: Prompt tokens per block ``Request.block_hashes`` name (None: no hashes).
        self.hash_block_tokens = hash_block_tokens
        _check_invariants(self._requests, source, hash_block_tokens)

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
        return (isinstance(other, RequestTrace) and self._requests == other._requests
                and (self.hash_block_tokens == other.hash_block_tokens
                     or not self.has_block_hashes))

    def __hash__(self) -> int:
        return hash(self._requests)

    def __repr__(self) -> str:
        return f"RequestTrace({len(self)} request{'' if len(self) == 1 else 's'} from {self.source})"

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

    @property
    def has_block_hashes(self) -> bool:
        """Whether any request names its prompt blocks (prefix caching can reuse them)."""
        return any(r.block_hashes for r in self._requests)

    def prefix_keys(self) -> list[tuple[int, ...]]:
        """Per request, one key per *full* hashed prompt block, naming the block and
        every block before it: equal keys mean equal prefixes, so a cache keyed by them
        never mistakes a block that follows different text for a hit.  Keys are small
        integers, assigned in trace order (deterministic)."""
        block = self.hash_block_tokens or 1
        interned: dict[tuple[int, int], int] = {}
        out = []
        for r in self._requests:
            keys, parent = [], -1
            for value in r.block_hashes[:r.prompt_tokens // block]:
                parent = interned.setdefault((parent, value), len(interned))
                keys.append(parent)
            out.append(tuple(keys))
        return out

    def reusable_prompt_share(self) -> float:
        """Share of prompt tokens in full blocks an earlier request already had: the
        hit rate of an unbounded prefix cache that keeps every block (an upper bound for
        any real one).  0 without block hashes."""
        block = self.hash_block_tokens or 1
        seen: set[int] = set()
        reused = 0
        for keys in self.prefix_keys():
            reused += sum(block for key in keys if key in seen)
            seen.update(keys)
        total = self.total_prompt_tokens
        return reused / total if total else 0.0

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
        if self.has_block_hashes:
            out["hash_block_tokens"] = self.hash_block_tokens
            out["reusable_prompt_share"] = self.reusable_prompt_share()
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
                                     r.prompt_tokens, r.output_tokens, r.priority,
                                     r.block_hashes)
                             for r in self._requests), self.source, self.hash_block_tokens)

    def head(self, n: int) -> "RequestTrace":
        """The first ``n`` requests."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise TraceError(f"{self.source}: head: got {n!r}; expected an integer >= 0")
        return RequestTrace(self._requests[:n], self.source, self.hash_block_tokens)

    # -- export ---------------------------------------------------------------------------
    def to_frame(self):
        """The trace as a pandas DataFrame (columns id, arrival_ps, arrival_s,
        prompt_tokens, output_tokens, priority, and hash_ids (tuples) when requests name
        their prompt blocks; one row per request)."""
        import pandas as pd

        rows = self._requests
        frame = pd.DataFrame({
            "id": pd.Series([r.request_id for r in rows], dtype="object"),
            "arrival_ps": pd.Series([r.arrival_ps for r in rows], dtype="int64"),
            "arrival_s": pd.Series([r.arrival_ps / PS_PER_S for r in rows], dtype="float64"),
            "prompt_tokens": pd.Series([r.prompt_tokens for r in rows], dtype="int64"),
            "output_tokens": pd.Series([r.output_tokens for r in rows], dtype="int64"),
            "priority": pd.Series([r.priority for r in rows], dtype="int64"),
        })
        if self.has_block_hashes:
            frame["hash_ids"] = pd.Series([r.block_hashes for r in rows], dtype="object")
        return frame

    def write_csv(self, path: str | Path) -> Path:
        """Write npusim's CSV format (header ``id,arrival_ps,prompt_tokens,output_tokens,
        priority``, and ``hash_ids`` (space-separated) when requests name their prompt
        blocks); :func:`read_trace` reads it back unchanged (given the same
        ``hash_block_tokens``).  Raises
        :class:`~npusim.core.errors.OutputError` if ``path`` cannot be written; a failed
        write leaves an existing file as it was."""
        path = check_output_file(path, "trace file")
        with atomic_output(path, "the trace file") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            hashes = self.has_block_hashes
            writer.writerow(COLUMNS + (("hash_ids",) if hashes else ()))
            writer.writerows((r.request_id, r.arrival_ps, r.prompt_tokens, r.output_tokens,
                              r.priority) + ((" ".join(map(str, r.block_hashes)),) if hashes else ())
                             for r in self._requests)
        return path

    def write_jsonl(self, path: str | Path) -> Path:
        """Write one JSON object per line with the keys of :data:`COLUMNS` (errors as
        :meth:`write_csv`)."""
        path = check_output_file(path, "trace file")
        with atomic_output(path, "the trace file") as handle:
            for r in self._requests:
                record = {"id": r.request_id, "arrival_ps": r.arrival_ps,
                          "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                          "priority": r.priority}
                if r.block_hashes:
                    record["hash_ids"] = list(r.block_hashes)
                handle.write(json.dumps(record) + "\n")
        return path


def plain_int(value: Any) -> Any:
    """``value`` as a Python int when it is an integer of another type (a NumPy integer,
    a DataFrame cell), else unchanged for the caller's check to name; a bool stays a
    bool (NumPy's bool is no Integral either), so it is refused, not read as 0 or 1."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
        else value


def _plain_ints(request: Any) -> Any:
    """``request`` with NumPy integers (a DataFrame column's cells) as Python ints, so a
    trace built from pandas is checked, compared and hashed like any other; anything
    that is not a Request is left for the invariant check to name."""
    if not isinstance(request, Request):
        return request
    fields = ("arrival_ps", "prompt_tokens", "output_tokens", "priority")
    hashes = request.block_hashes
    listed = isinstance(hashes, (tuple, list))  # anything else: the check names it
    if all(type(getattr(request, name)) is int for name in fields) and \
            (not listed or all(type(h) is int for h in hashes)):
        return request
    return dataclasses.replace(request, **{name: plain_int(getattr(request, name))
                                           for name in fields},
                               block_hashes=tuple(map(plain_int, hashes)) if listed else hashes)


def _check_invariants(requests: tuple[Request, ...], source: str,
                      hash_block_tokens: int | None) -> None:
    if hash_block_tokens is not None and (isinstance(hash_block_tokens, bool) or not
                                          isinstance(hash_block_tokens, int) or hash_block_tokens < 1):
        raise TraceError(f"{source}: hash_block_tokens: got {hash_block_tokens!r}; expected "
                         "an integer >= 1 (prompt tokens per hashed block)")
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
        if r.block_hashes:
            problem = block_hashes_problem(r.block_hashes, r.prompt_tokens, hash_block_tokens)
            if problem:
                raise TraceError(f"{where}: block_hashes: {problem}")


def block_hashes_problem(hashes: Any, prompt_tokens: int, block_tokens: int | None) -> str:
    """Why ``hashes`` cannot name the blocks of a prompt of ``prompt_tokens`` tokens
    ('' if they can): integers >= 0, at most one per (partly filled) block."""
    if block_tokens is None:
        return ("the trace gives no hash_block_tokens; expected the number of prompt "
                "tokens each hash covers")
    if not isinstance(hashes, tuple) or any(isinstance(h, bool) or not isinstance(h, int)
                                            or h < 0 for h in hashes):
        return f"got {hashes!r}; expected integers >= 0"
    blocks = -(-prompt_tokens // block_tokens)
    if len(hashes) > blocks:
        return (f"got {len(hashes)} hashes; a prompt of {prompt_tokens} tokens has "
                f"{blocks} block(s) of {block_tokens} tokens; expected at most {blocks} "
                "(or set the trace's hash_block_tokens to the tokens each hash covers)")
    return ""


def __getattr__(name: str):
    """The readers live in their own module, which imports this one;
    ``from npusim.workload.traces import read_trace`` stays the public spelling, resolved
    on first use so that importing ``npusim.workload.trace_readers`` first works too (an
    import at the end of this module made that a circular import)."""
    if name in ("read_trace", "resolve_trace_path"):
        from npusim.workload import trace_readers

        return getattr(trace_readers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
