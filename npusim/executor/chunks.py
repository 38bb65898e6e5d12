"""Where the chunks of chunked transfers fall on the memories they cross, for the
analytic executor (:mod:`npusim.executor.analytic`; split from it).

A weight tile moved from HBM into the SRAM in 256 KiB bursts reaches each memory as a
row of chunks, not as one block or an even trickle.  Work there no longer than one of
those chunks (a ring step's 1 KiB NoC send beside a 3 MiB tile) goes between them, as
the tlm level interleaves them: it waits for the chunk in progress when it arrives, not
for the whole transfer and not for nothing either (a paced stream's share is spread
evenly, which a chunk's burst is not); the chunks after it move later by what it
overlaps of them.
"""

from __future__ import annotations

from typing import Any, Callable

from npusim.mapping.taskgraph import TransferTask

__all__ = ["ChunkPatterns"]


class ChunkPatterns:
    """Per memory, the chunk patterns of the chunked transfers crossing it.

    A pattern is ``[first, period, length, count, last, held, stream, stop]``: chunk
    ``i`` occupies ``[first + i * period, + length)`` (the last one ``last`` long,
    ending at ``stop``), ``held`` is the resource's free time the transfer booked when
    it holds the resource (its slowest end; else None) and ``stream`` its paced stream
    there (else None).  ``longest``: per memory, its longest chunk there (longer work
    does not look between them).  Lists, not objects: the executor's loop reads them
    for every task that touches such a memory.

    ``free_get`` and ``paced_get`` look up the executor's per-resource free time and
    paced streams (``dict.get`` of each).
    """

    __slots__ = ("by_memory", "longest", "_free_get", "_paced_get")

    def __init__(self, free_get: Callable[[str], Any], paced_get: Callable[[str], Any]):
        self.by_memory: dict[str, list[list]] = {}
        self.longest: dict[str, int] = {}
        self._free_get = free_get
        self._paced_get = paced_get

    def between(self, patterns: list, name: str, busy: int, ready: int,
                served: int) -> tuple | None:
        """``(start, patterns)`` of ``busy`` of work on ``name`` (where the chunked
        transfers are ``patterns``) ready at ``ready`` (its queue there frees at
        ``served``) going between their chunks, or None when none is there with chunks
        at least that long.  The patterns that have ended by ``ready`` are dropped."""
        usable = None
        stale = False
        for p in patterns:
            if p[7] <= ready:
                stale = True
            elif busy <= p[2]:
                if usable is None:
                    usable = [p]
                else:
                    usable.append(p)
        if stale:
            live = [p for p in patterns if p[7] > ready]
            if live:
                self.by_memory[name] = live
                self.longest[name] = max(p[2] for p in live)
            else:
                del self.by_memory[name], self.longest[name]
        if usable is None:
            return None
        at = ready
        if served > ready and not any(p[5] == served for p in usable):
            at = served  # queued behind other work, first come first served
        for _ in range(2):  # a second pass for chunks of two transfers back to back
            for p in usable:
                first, period, length, count, last = p[0], p[1], p[2], p[3], p[4]
                if at > first:  # (work waiting when a chunk would start goes first)
                    index = (at - first) // period
                    begin = first + index * period
                    if index < count and begin < at:
                        chunk_end = begin + (length if index < count - 1 else last)
                        if at < chunk_end:
                            at = chunk_end
        return at, usable

    def record(self, task: TransferTask, services: list, ready: int, end: int) -> None:
        """Record where the chunks of ``task`` (chunked, ready at ``ready``, booked as
        ``services``: ``(name, served, busy, done, between)`` per memory) are on each
        memory: the slowest (the last to finish, ``b``) sets the period; a memory after
        it in the transfer's stages sees each chunk that long after it leaves the one
        before (the fill: one chunk's time on each stage before), a memory before it
        runs at its own pace from its start."""
        size, chunk = task.size_bytes, task.chunk_bytes
        count = -(-size // chunk)
        b, slowest = 0, services[0][3]
        for j in range(1, len(services)):
            if services[j][3] > slowest:
                b, slowest = j, services[j][3]
        base, period = services[b][1], services[b][2] * chunk // size
        if period <= 0:
            return
        by_memory, longest = self.by_memory, self.longest
        fill = j = 0
        for name, served, busy, done, between in services:
            length = busy * chunk // size
            if length > 0 and between is None:
                last = busy - (count - 1) * length
                if last <= 0:
                    last = length
                if done >= end and self._free_get(name) == done:
                    held, stream = done, None
                else:
                    held = stream = None
                    streams = self._paced_get(name)
                    if streams and streams[-1][0] == served:
                        stream = streams[-1]
                if j >= b:
                    first, step = base + fill, period
                else:
                    first, step = served + fill, length
                pattern = [first, step, length, count, last, held, stream,
                           first + (count - 1) * step + last]
                patterns = by_memory.get(name)
                if patterns is None:
                    by_memory[name] = [pattern]
                    longest[name] = length
                else:
                    if patterns[0][7] <= ready:  # drop those ended (not looked at since)
                        patterns[:] = [p for p in patterns if p[7] > ready]
                        longest[name] = max([p[2] for p in patterns], default=0)
                    patterns.append(pattern)
                    if length > longest[name]:
                        longest[name] = length
            fill += length
            j += 1
