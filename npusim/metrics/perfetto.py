"""Chrome/Perfetto trace export (opens in ui.perfetto.dev and chrome://tracing).

Each unit is a thread (``tid``) grouped under its owner (``pid``: ``core3``, ``noc``,
``host``); a task is a complete event (``ph: X``).  Timestamps are microseconds as the
format requires, printed from integer picoseconds so output is deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

#: Traces beyond this many task events are cut (a note says so) to keep files openable.
MAX_TRACE_EVENTS = 500_000


def _us(ps: int) -> float:
    return ps / 1e6


def build_trace(rows: Iterable[tuple[str, str, str, int, int, dict[str, Any]]]) -> dict[str, Any]:
    """Trace JSON from ``(owner, track, name, start_ps, end_ps, args)`` rows."""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    events: list[dict[str, Any]] = []
    truncated = False
    for owner, track, name, start, end, args in rows:
        if len(events) >= MAX_TRACE_EVENTS:
            truncated = True
            break
        pid = pids.setdefault(owner, len(pids) + 1)
        tid = tids.setdefault((owner, track), len(tids) + 1)
        events.append({"name": name, "ph": "X", "ts": _us(start), "dur": _us(end - start),
                       "pid": pid, "tid": tid, "args": args})
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": owner}}
            for owner, pid in pids.items()]
    meta += [{"name": "thread_name", "ph": "M", "pid": pids[owner], "tid": tid,
              "args": {"name": track}} for (owner, track), tid in tids.items()]
    trace: dict[str, Any] = {"traceEvents": meta + events, "displayTimeUnit": "ns"}
    if truncated:
        trace["otherData"] = {"note": f"truncated to the first {MAX_TRACE_EVENTS} task events"}
    return trace


def write_trace(trace: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(trace, separators=(",", ":")))
