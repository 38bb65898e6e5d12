"""Bandwidth shared between the transfers on one resource, for the analytic executor
(:mod:`npusim.executor.analytic`): processor sharing on a NoC's ports and links
(:func:`share`), and paced streams on a memory (:func:`finish`, :func:`pace`)."""

from __future__ import annotations

import math
from bisect import insort


def share(state: tuple, at: int, busy: int, task_id: int,
          delays: list[tuple[int, int]]) -> tuple[int, tuple]:
    """When ``busy`` of work that arrives at ``at`` on a shared resource in ``state``
    (work there not yet done at ``at``) is done, and the resource's next state: the
    transfers there are served at an equal share each (processor sharing, as routers
    that interleave packets give it), ``n`` at once each getting ``1/n`` of it.
    Transfers whose end there moves later are appended to ``delays`` as ``(task id,
    new end)``.

    A state is ``(end, task id)`` for one transfer alone there since it came, else
    ``(last end, since, served, flows)``: ``served`` is the work each transfer there
    has had since the resource was last idle, at ``since``, and ``flows`` are ``(served
    when done, task id, end)`` of those not yet done, in order (a transfer is done when
    ``served`` reaches its mark, so later arrivals move only the ends, not the marks).
    States are not changed in place: resources may share one.  Ends are whole
    picoseconds rounded up, so they can be a few ps later than exact processor sharing
    (a rounded end is taken as exact when one transfer is left)."""
    if len(state) == 2:
        end, other = state
    elif state[3][-2][2] <= at:  # the others are done (they end in order of marks)
        _, other, end = state[3][-1]
    else:
        end = 0
    if end:  # one transfer there, alone since the others ended: half each
        left = end - at  # its work left (it ends after ``at``)
        if busy <= left:
            mine, later = at + 2 * busy, end + busy
            flows = [(busy, task_id, mine), (left, other, later)]
        else:
            mine, later = end + busy, end + left
            flows = [(left, other, later), (busy, task_id, mine)]
        delays.append((other, later))
        return mine, (mine if mine > later else later, at, 0, flows)
    _, since, served, flows = state
    # Serve the flows from ``since`` to ``at``: each of the k not yet done at 1/k.
    elapsed, done, n = at - since, 0, len(flows)
    while done < n:
        k = n - done
        need = (flows[done][0] - served) * k
        if need > elapsed:
            served += elapsed / k
            break
        elapsed -= need
        served = flows[done][0]
        done += 1
    flows = flows[done:]
    if not flows:  # all done by ``at`` (their ends rounded up): it is alone
        return at + busy, (at + busy, task_id)
    insort(flows, (served + busy, task_id, 0))
    now, before, k = at, served, len(flows)
    mine = last = at + busy
    out = []
    for mark, other, old in flows:
        now += (mark - before) * k
        before = mark
        k -= 1
        end = int(now)
        if end < now:
            end += 1
        if other == task_id:
            old = mine = end
        elif end > old:
            old = end
            delays.append((other, end))
        out.append((mark, other, old))
        if old > last:
            last = old
    return mine, (last, at, served, out)


def finish(at: int, busy: int, streams: list[list]) -> int:
    """When ``busy`` of work on a resource, started at ``at``, is done: the paced
    ``streams`` keep their share of its bandwidth (they were there first) and the work
    gets what they leave, all of it once they end (streams ended by ``at`` are dropped).
    Work-conserving: a resource already used at its full rate serves nothing new until
    the streams end, as a first-come-first-served server would."""
    streams[:] = [stream for stream in streams if stream[1] > at]
    if not streams:
        return at + busy
    now, remaining = at, busy
    for point in sorted({edge for stream in streams for edge in stream[:2] if edge > at}):
        rate = 1.0 - sum(share for begin, end, share in streams if begin <= now < end)
        if rate > 0:
            if (point - now) * rate >= remaining:
                return now + math.ceil(remaining / rate)
            remaining -= (point - now) * rate
        now = point
    return now + math.ceil(remaining)


def pace(paced: dict[str, list[list]], name: str, start: int, end: int, busy: int,
          now: int) -> None:
    """Record ``busy`` of work on ``name`` spread evenly over ``[start, end)``; ``now``
    is the scheduling time (tasks are taken in order of it, so none asks before it)."""
    if busy > 0 and end > start:
        streams = paced.setdefault(name, [])
        if len(streams) >= 64:  # a resource only ever paced: drop the streams ended by now
            streams[:] = [stream for stream in streams if stream[1] > now]
        streams.append([start, end, busy / (end - start)])
