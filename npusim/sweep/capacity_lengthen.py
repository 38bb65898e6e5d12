"""Capacity on a trace long enough to settle: :func:`find_steady_capacity` repeats
:func:`~npusim.sweep.capacity.find_capacity` with twice the requests while the answer
is flagged as measured on a trace too short (docs/serving.md, "Trace length")."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Iterable

from npusim.core.errors import ConfigError
from npusim.sweep.capacity import DEFAULTS, CapacityResult, argument_problems, find_capacity
from npusim.sweep.capacity_probes import file_rows

__all__ = ["find_steady_capacity"]


def find_steady_capacity(config: Any, *, doublings: int = 3, overrides: Iterable[str] = (),
                         source: str | None = None, **search: Any) -> CapacityResult:
    """:func:`~npusim.sweep.capacity.find_capacity`, and while the capacity it finds is
    flagged as measured on a trace too short to settle
    (:attr:`~npusim.sweep.capacity.CapacityProbe.short_trace`), or every probe met the
    SLO with the trace arriving as one burst, again with twice the requests, starting
    from the rate found, at most ``doublings`` times (0 to
    :data:`~npusim.sweep.capacity.MAX_DOUBLINGS`).

    A generated trace's ``num_requests`` doubles (its ``limit`` is lifted); a trace
    file's ``limit`` doubles (its first rows) until every row has run, which the note
    then says.  The result is the last search's; its note lists the earlier ones.
    ``search`` takes find_capacity's other arguments."""
    from npusim.api import _as_scenario, override_list

    scenario = _as_scenario(config, override_list(overrides))
    if source is None:
        source = str(config) if isinstance(config, (str, os.PathLike)) else scenario.name
    problems = argument_problems(DEFAULTS["attainment"], DEFAULTS["tolerance"],
                                 DEFAULTS["max_probes"], lengthen=doublings)
    if problems:
        raise ConfigError(source, [("doublings", message) for _, message in problems])
    trace = getattr(scenario.workload, "trace", None)
    result = find_capacity(scenario, source=source, **search)
    earlier: list[str] = []
    exhausted = ""
    for _ in range(doublings):
        best = result.best
        # Too short: the capacity found settles no queue, or every probe met the SLO
        # with the whole trace arriving as one burst (no rate is too high for it).
        if not (result.status == "found" and best.short_trace
                or result.status == "all_meet" and best is not None and best.burst):
            break
        requests = best.requests_per_replay
        rows = file_rows(trace, requests)  # None for a generator
        if rows is not None and requests >= rows:  # a longer replay needs a longer file
            exhausted = (f"the trace file has no more rows than the {requests} replayed, so it "
                         "cannot be lengthened; use a longer file")
            break
        earlier.append(f"{requests} requests: {best.offered_requests_per_s:.4g} req/s, short"
                       if result.status == "found" else
                       f"{requests} requests: all met up to {best.offered_requests_per_s:.4g} "
                       "req/s, one burst")
        size = ([f"workload.trace.limit={2 * requests}"] if rows is not None else
                [f"workload.trace.num_requests={2 * requests}"]
                + (["workload.trace.limit=null"] if trace.limit is not None else []))
        result = find_capacity(scenario, source=source, overrides=[
            *size, f"workload.trace.rate_scale={best.rate_scale!r}"], **search)
    notes = [result.note] if result.note else []
    if exhausted:
        notes.append(exhausted)
    if earlier:
        rounds = "; ".join(earlier)
        final = (f"{result.best.requests_per_replay} requests" if result.best is not None
                 else "the longest trace")
        result = replace(result, note=f"lengthened the trace ({rounds}); {final}"
                                      + (f": {'; '.join(notes)}" if notes else ""))
    elif exhausted:
        result = replace(result, note="; ".join(notes))
    return result
