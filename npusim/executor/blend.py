"""Composite runs: blends (the run of a shape between grid points, by interpolation)
and chains (a stage timed as its parts back to back).

The serving engine times decode batches at grid shapes and interpolates between them
(:class:`~npusim.workload.program.BlendedSegment`).  A blend is asked for once per
distinct batch, and batches rarely repeat exactly (contexts grow every iteration), so
it must cost next to nothing: the makespan (and a chain part's prefetch profile) is
blended at once (``sum(weight * value) / denominator`` rounded, in integer arithmetic,
so the result does not depend on floating-point order), while the counters (per unit,
per operator) are not copied: the blend lists its parts with their integer weights over
the common denominator, and the session adds each part's counters with that weight when
it records the segment (summing numerators per denominator, then once in integers scaled
by the least common denominator, rounded at the end).
"""

from __future__ import annotations

from math import lcm

from npusim.executor.base import SegmentRun


def _mean(pairs: list[tuple[int, int]], denominator: int) -> int:
    """``sum(weight * value) / denominator`` rounded to the nearest integer (ties up)."""
    return (2 * sum(weight * value for weight, value in pairs) + denominator) // (2 * denominator)


def blend_runs(parts: list[tuple[int, SegmentRun]], denominator: int, events: int = 0,
               transactions: int = 0) -> SegmentRun:
    """A run standing for ``sum(weight * run) / denominator``.

    ``parts`` must have positive integer weights summing to ``denominator`` and be placed
    on the same cores.  The returned run has the blended makespan (and prefetch profile,
    see :func:`chain_runs`, if every part has one), no counters of its own and
    ``extra["blend"]``: ``(weight, denominator, part run)`` triples whose counters stand
    for it.  ``events`` and ``transactions`` are the work done to
    time the blend (the parts that were not memoised yet), which the caller knows.
    """
    if not parts or any(weight <= 0 for weight, _ in parts) \
            or sum(weight for weight, _ in parts) != denominator:
        raise ValueError(f"blend weights {[w for w, _ in parts]} must be positive and sum "
                         f"to {denominator}")
    makespan = _mean([(weight, run.makespan_ps) for weight, run in parts], denominator)
    extra: dict = {}
    if all("prefetched_ps" in run.extra for _, run in parts):  # parts of a chain
        for name in ("prefetch_ps", "prefetched_ps", "last_load_ps", "tile_free_ps"):
            extra[name] = _mean([(weight, run.extra.get(name, 0)) for weight, run in parts],
                                denominator)
    # A part may itself be composite (a chain): the session hands counts down level by
    # level.
    blend = tuple((weight, denominator, run) for weight, run in parts)
    return SegmentRun(None, [], [makespan], {},  # type: ignore[arg-type]
                      events=events, transactions=transactions,
                      extra={**extra, "blend": blend})


def chain_runs(parts: list[SegmentRun], events: int = 0, transactions: int = 0) -> SegmentRun:
    """A run standing for ``parts`` run one after another on the same cores, as
    :class:`~npusim.workload.program.ChainedSegment` describes.

    A part's computation starts when the part before it ends; its prefetchable loads
    (``extra["prefetch_ps"]``: how long they take from a cold start) start once the
    loads of the parts before it are done.  With a head start ``h`` of its loads over
    its computation a part takes ``max(prefetched_ps, makespan_ps - h)``: its time falls
    one for one with the head start down to its time with those loads done
    (``extra["prefetched_ps"]``), as measured on the stage graphs (docs/serving.md).  A
    part's other loads wait for its computation (a tile buffer to free up); the loads
    of the parts after it queue behind them on the core's one DMA queue, as in the stage
    graph, from when the last of them ends (``extra["last_load_ps"]``, in its run with
    the prefetchable loads done, placed to end with the part).  Its first loads also
    wait for a tile buffer: the core has two, shared with the parts before it, so they
    start no earlier than the use of the tile before the last one those parts loaded
    has ended (``extra["tile_free_ps"]`` of a part, placed likewise).  A part without
    these keys gets no head start.  Counters are the parts'
    (``extra["blend"]`` with weight 1); ``extra["chain"]`` lists ``(offset, run, head
    start)`` of every part: where its own schedule starts and the head start its loads
    have (a traced part is timed again with that head start for its task rows)."""
    if not parts:
        raise ValueError("a chain needs at least one part")
    end = loads_done = 0
    offsets = []
    for run in parts:
        makespan = run.makespan_ps
        prefetch = run.extra.get("prefetch_ps", 0)
        if prefetch:
            # Its loads start at loads_done, its computation at end (or with its loads).
            offsets.append((loads_done, run, max(end - loads_done, 0)))
            end = max(end + run.extra["prefetched_ps"], loads_done + makespan)
            loads_done += prefetch
        else:
            offsets.append((end, run, 0))
            end += makespan
        last_load = run.extra.get("last_load_ps", 0)
        if last_load:
            # Its other loads wait for its computation (a tile buffer freed) and hold the
            # core's one DMA queue until then: the next part's loads queue behind them.
            loads_done = max(loads_done, end - run.extra["prefetched_ps"] + last_load)
        tile_free = run.extra.get("tile_free_ps", 0)
        if tile_free:
            # The next part's first tile goes into the buffer of this part's tile before
            # its last, once that tile has been used (Ports.load_tile in a stage graph).
            loads_done = max(loads_done, end - run.extra["prefetched_ps"] + tile_free)
    counted = tuple((1, 1, run) for run in parts)
    return SegmentRun(None, [], [end], {},  # type: ignore[arg-type]
                      events=events, transactions=transactions,
                      extra={"blend": counted, "chain": tuple(offsets)})


def tally(weights: dict[int, int], weight: int, denominator: int) -> None:
    """Add ``weight / denominator`` to ``weights`` (numerators by denominator: integer
    additions on the hot path, one fraction per denominator at the end)."""
    weights[denominator] = weights.get(denominator, 0) + weight


def common_scale(tallies) -> int:
    """The least common denominator of every :func:`tally` dict in ``tallies``: counts
    scaled by it are integers, so totals are summed without fractions."""
    return lcm(1, *{denominator for weights in tallies for denominator in weights})


def scaled_count(weights: dict[int, int], scale: int) -> int:
    """``scale`` times the sum a :func:`tally` dict stands for (an integer)."""
    return sum(numerator * (scale // denominator) for denominator, numerator in weights.items())


def unscale(value: int, scale: int) -> int:
    """``value / scale`` rounded to the nearest integer (ties up)."""
    return value if scale == 1 else (2 * value + scale) // (2 * scale)
