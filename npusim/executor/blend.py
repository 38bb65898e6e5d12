"""Blending timed runs: the run of a shape between grid points, by interpolation.

The serving engine times decode batches at grid shapes and interpolates between them
(:class:`~npusim.workload.program.BlendedSegment`).  A blend is asked for once per
distinct batch, and batches rarely repeat exactly (contexts grow every iteration), so
it must cost next to nothing: the makespan and the start-up lead are blended at once
(``sum(weight * value) / denominator`` rounded, in integer arithmetic, so the result
does not depend on floating-point order), while the counters (per unit, per operator)
are not copied: the blend lists its parts with exact fractional weights, and the
session adds each part's counters with that weight when it records the segment.
"""

from __future__ import annotations

from fractions import Fraction

from npusim.executor.base import SegmentRun


def _mean(pairs: list[tuple[int, int]], denominator: int) -> int:
    """``sum(weight * value) / denominator`` rounded to the nearest integer (ties up)."""
    return (2 * sum(weight * value for weight, value in pairs) + denominator) // (2 * denominator)


def blend_runs(parts: list[tuple[int, SegmentRun]], denominator: int, events: int = 0,
               transactions: int = 0) -> SegmentRun:
    """A run standing for ``sum(weight * run) / denominator``.

    ``parts`` must have positive integer weights summing to ``denominator`` and be placed
    on the same cores.  The returned run has the blended makespan and ``lead_ps``, no
    counters of its own and ``extra["blend"]``: ``(weight, denominator, part run)``
    triples whose counters stand for it.  ``events`` and ``transactions`` are the work done to
    time the blend (the parts that were not memoised yet), which the caller knows.
    """
    if not parts or any(weight <= 0 for weight, _ in parts) \
            or sum(weight for weight, _ in parts) != denominator:
        raise ValueError(f"blend weights {[w for w, _ in parts]} must be positive and sum "
                         f"to {denominator}")
    makespan = _mean([(weight, run.makespan_ps) for weight, run in parts], denominator)
    lead = _mean([(weight, run.extra.get("lead_ps", 0)) for weight, run in parts], denominator)
    blend = tuple((weight, denominator, run) for weight, run in parts)
    return SegmentRun(None, [], [makespan], {},  # type: ignore[arg-type]
                      events=events, transactions=transactions,
                      extra={"lead_ps": lead, "blend": blend})


def tally(weights: dict[int, int], weight: int, denominator: int) -> None:
    """Add ``weight / denominator`` to ``weights`` (numerators by denominator: integer
    additions on the hot path, one fraction per denominator at the end)."""
    weights[denominator] = weights.get(denominator, 0) + weight


def total_weight(weights: dict[int, int]) -> int | Fraction:
    """The sum a :func:`tally` dict stands for (an int when every weight was whole)."""
    if len(weights) == 1 and 1 in weights:
        return weights[1]
    total = sum((Fraction(numerator, denominator) for denominator, numerator in weights.items()),
                Fraction(0))
    return total.numerator if total.denominator == 1 else total


def as_integer(value: int | Fraction) -> int:
    """A counter summed with fractional (blend) weights, rounded to an integer."""
    return value if isinstance(value, int) else round(value)
