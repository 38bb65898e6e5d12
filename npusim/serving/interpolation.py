"""Batches timed by interpolation between grid shapes: decode batches (below) and, with
``segment_granularity: part``, the dense parts of any batch (:func:`token_corners`).

A decode-only iteration's stage graph depends on two numbers: how many sequences it
decodes (``count``, the M of every GEMM) and how many keys their attention reads in
total (``total``; the merged decode attention sums them).  In a serving run these take
hundreds of distinct value pairs (every batch size from 1 to the batch limit, and the
contexts growing by one token per iteration), so timing each pair exactly makes most
iterations a memo miss.  Stage time is smooth in both numbers: the GEMMs of a small M
are bound by weight streaming, and attention grows linearly with the keys.  So a pair
is timed as the bilinear interpolation of four grid shapes: ``count`` between the
powers of two around it, ``total`` between grid points spaced ``points_per_octave`` to
the octave (never closer than the KV bucket).

Measured on the 64-core Qwen3-4B stages (docs/serving.md): at most 0.7% from the exact
time, and unbiased, where rounding contexts up (the alternative) over-estimated
attention by up to 6%.  Grid shapes are memoised like any other, so a long trace times
a few hundred instead of thousands of decode shapes.
"""

from __future__ import annotations


def _axis(value: int, step: int) -> tuple[tuple[int, int], ...]:
    """``(weight numerator, grid value)`` pairs around ``value`` on a grid of ``step``
    (one pair when ``value`` is on the grid); the numerators sum to ``step``."""
    low = value // step * step
    if low == value:
        return ((step, value),)
    return ((low + step - value, low), (value - low, low + step))


def decode_corners(count: int, total: int, bucket: int, points_per_octave: int,
                   max_count: int | None = None) -> tuple[list[tuple[int, int, int]], int] | None:
    """Grid shapes and weights that interpolate a decode batch of ``count`` sequences
    reading ``total`` keys: ``([(weight, count_i, total_i), ...], denominator)``, or
    ``None`` if the batch is not interpolated (a single sequence, whose attention is
    not merged, or contexts too short for the total grid: a grid shape would have a
    sequence without a single token of context).

    The count grid is the powers of two and ``max_count`` (the most sequences one
    iteration decodes), so no grid shape is a batch the replica never runs, whose
    activations its buffers are not sized for; the total grid has
    ``points_per_octave`` points per octave of ``total``, spaced at least ``bucket``
    tokens apart.
    """
    if count < 2 or total < count:
        return None
    low = 1 << (count.bit_length() - 1)
    high = 2 * low if max_count is None or max_count <= low else min(2 * low, max_count)
    if count in (low, high):
        counts, count_denominator = ((1, count),), 1
    else:
        counts = ((high - count, low), (count - low, high))
        count_denominator = high - low
    step = max(bucket, (1 << (total.bit_length() - 1)) // points_per_octave, 1)
    totals = _axis(total, step)
    if totals[0][1] < counts[-1][1]:
        return None
    corners = [(cw * tw, c, t) for cw, c in counts for tw, t in totals if cw * tw]
    return corners, count_denominator * step


def token_corners(tokens: int, points_per_octave: int) -> tuple[list[tuple[int, int]], int] | None:
    """Grid token counts and weights that interpolate a dense part (GEMMs, norms,
    residuals: work that depends only on the batch's token count, the M of every GEMM)
    of ``tokens`` tokens: ``([(weight, tokens_i), ...], denominator)``, or ``None`` on
    the grid.  The grid has ``points_per_octave`` points per octave (every count up to
    ``2 * points_per_octave`` is on it).  A dense part's time is the larger of weight
    streaming (flat in M) and systolic folds (linear in M), so it is piecewise linear in
    M and the interpolation is exact but near the crossing.
    """
    step = max(1, (1 << (tokens.bit_length() - 1)) // points_per_octave)
    axis = _axis(tokens, step)
    if len(axis) == 1:
        return None
    return list(axis), step
