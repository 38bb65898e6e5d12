"""Decode batches timed by interpolation between grid shapes (and the blends behind it)."""

import pytest

from npusim.api import _as_scenario, build_device, simulate
from npusim.core import registry
from npusim.executor.base import SegmentRun
from npusim.executor.blend import blend_runs, chain_runs
from npusim.executor.session import Session
from npusim.serving.interpolation import decode_corners, token_corners
from npusim.serving.state import Entry, RequestState
from npusim.workload.program import BlendedSegment, LazySegment
from npusim.workload.layer_ops import SequenceChunk
from npusim.workload.traces import Request

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"


@pytest.mark.unit
@pytest.mark.parametrize("count,total", [(3, 3000), (5, 12155), (63, 121212), (2, 100), (7, 7259)])
def test_corners_reproduce_the_batch_as_their_weighted_mean(count, total):
    corners, denominator = decode_corners(count, total, bucket=64, points_per_octave=4)
    assert sum(w for w, _, _ in corners) == denominator
    assert all(w > 0 and c >= 2 and t >= c for w, c, t in corners)
    # Bilinear weights: the weighted count and total are exactly the batch's.
    assert sum(w * c for w, c, _ in corners) == count * denominator
    assert sum(w * t for w, _, t in corners) == total * denominator
    counts = {c for _, c, _ in corners}
    assert all(c & (c - 1) == 0 for c in counts)  # the count grid is the powers of two


@pytest.mark.unit
def test_a_batch_on_the_grid_is_its_own_single_corner():
    assert decode_corners(4, 2048, 64, 4) == ([(512, 4, 2048)], 512)


@pytest.mark.unit
@pytest.mark.parametrize("count,total", [(1, 500), (3, 40), (0, 0)])
def test_single_sequences_and_too_short_contexts_are_not_interpolated(count, total):
    assert decode_corners(count, total, 64, 4) is None


@pytest.mark.unit
def test_blend_rounds_the_weighted_mean_and_keeps_the_parts_for_counters():
    a = SegmentRun(None, [], [1000], {"u": {"busy_ps": 10}}, extra={"lead_ps": 4})
    b = SegmentRun(None, [], [2001], {"u": {"busy_ps": 30}}, extra={"lead_ps": 8})
    run = blend_runs([(1, a), (3, b)], 4)
    assert run.makespan_ps == (1000 + 3 * 2001 + 2) // 4 == 1751   # 1750.75 rounds up
    assert run.extra["lead_ps"] == 7
    assert run.extra["blend"] == ((1, 4, a), (3, 4, b))
    with pytest.raises(ValueError, match="sum"):
        blend_runs([(1, a), (1, b)], 3)


@pytest.mark.unit
def test_a_chain_hides_each_lead_behind_the_attention_part_before_it():
    dense = SegmentRun(None, [], [1000], {}, extra={"lead_ps": 300})
    attention = SegmentRun(None, [], [200], {}, extra={"lead_ps": 0})
    long_attention = SegmentRun(None, [], [500], {}, extra={"lead_ps": 0})
    run = chain_runs([(dense, False), (attention, True), (dense, False),
                      (long_attention, True), (dense, False), (dense, False)])
    # The second dense part hides 200 ps (the attention before it is shorter than its
    # 300 ps lead), the third all 300 ps; the fourth follows a dense part: nothing hidden.
    assert [offset for offset, _ in run.extra["chain"]] == [0, 1000, 1000, 2000, 2200, 3200]
    assert run.makespan_ps == 4 * 1000 + 200 + 500 - 200 - 300 == 4200
    assert run.extra["lead_ps"] == 300
    assert [part for _, _, part in run.extra["blend"]] == [dense, attention, dense,
                                                           long_attention, dense, dense]
    with pytest.raises(ValueError, match="part"):
        chain_runs([])


def _replica_and_session():
    scenario = _as_scenario(FUSION, ["run.trace=false"])
    device = build_device(scenario.hw)
    driver = registry.lookup("workload", "serving").impl(device, config=scenario.workload)
    return driver.replicas[0], Session(device, "analytic", 0, True, False)


def _decodes(contexts):
    return [Entry(RequestState(Request(f"d{i}", 0, 8192, 8)), 1, c, True)
            for i, c in enumerate(contexts)]


@pytest.mark.component
def test_an_interpolated_stage_is_within_one_percent_of_the_exact_one():
    replica, session = _replica_and_session()
    # 5 sequences reading 11,776 keys: off the count grid (4, 8) and the total grid
    # (10,240, 12,288), but on the 1/16-octave rounding grid, so the exact path times
    # exactly this batch.
    entries = _decodes([2355, 2355, 2355, 2355, 2356])
    exact = replica.segments(entries, 64, "stage", grid=None)
    blended = replica.segments(entries, 64, "stage", grid=4)
    assert [label for _, label, _ in exact] == [label for _, label, _ in blended]
    stages = [(e, b) for (_, _, e), (_, _, b) in zip(exact, blended) if isinstance(b, BlendedSegment)]
    assert len(stages) == len(replica.groups)  # every stage blended, the LM head exact
    for e, b in stages:
        assert isinstance(e, LazySegment) and len(b.parts) == 4
        exact_ps = session.time(e)[0].makespan_ps
        blended_ps = session.time(b)[0].makespan_ps
        assert abs(blended_ps / exact_ps - 1) < 0.01
    # The same batch again is the same segment objects (one lookup).
    assert replica.segments(entries, 64, "stage", grid=4) is blended


@pytest.mark.component
def test_a_recorded_blend_counts_its_parts_counters_with_their_weights():
    replica, session = _replica_and_session()
    _, label, blend = replica.segments(_decodes([300, 300, 301]), 64, "stage", grid=4)[4]
    session.run(blend, label, 0)
    parts = [(w, session.time(p)[0]) for w, p in blend.parts]
    unit = "core0.sa" if "core0.sa" in parts[0][1].unit_stats else next(iter(parts[0][1].unit_stats))
    expected = sum(w * r.unit_stats.get(unit, {}).get("busy_ps", 0) for w, r in parts) / blend.denominator
    assert abs(session.unit_stats()[unit]["busy_ps"] - expected) <= 0.5


@pytest.mark.component
def test_interpolation_on_the_default_grid_matches_a_fine_grid_end_to_end():
    # Static batching: the same iterations whatever their timing, so the replays differ
    # only by how each iteration is timed (continuous batching would also reshuffle
    # batches, see docs/serving.md on sensitivity).
    def replay(*overrides):
        return simulate(FUSION, overrides=["workload.trace.file=traces/ratio_1_10_32.csv",
                                           "workload.trace.limit=6", "workload.model=qwen3_1_7b",
                                           "workload.scheduler={kind: static}", *overrides]).metrics
    default, fine = replay(), replay("workload.decode_grid_points_per_octave=1024")
    rounded = replay("workload.decode_interpolation=false")
    assert default["iterations"] == fine["iterations"] == rounded["iterations"]
    assert default["memo"]["misses"] < fine["memo"]["misses"]
    assert abs(default["tbt_ms_mean"] / fine["tbt_ms_mean"] - 1) < 0.005
    # Rounding contexts up (the path without interpolation) only ever adds work.
    assert rounded["tbt_ms_mean"] >= fine["tbt_ms_mean"]
    assert "blends" not in rounded["memo"]


@pytest.mark.unit
def test_token_corners_interpolate_between_grid_counts():
    assert token_corners(16, 8) is None and token_corners(9, 8) is None  # small: on the grid
    assert token_corners(512, 8) is None and token_corners(576, 8) is None  # step 64
    corners, denominator = token_corners(530, 8)  # between 512 and 576 (step 64)
    assert denominator == 64 and corners == [(46, 512), (18, 576)]
    assert sum(w * t for w, t in corners) == 530 * denominator


@pytest.mark.component
def test_dense_parts_off_the_token_grid_are_blends_close_to_the_exact_stage():
    replica, session = _replica_and_session()
    # A mixed batch of 427 tokens (a 420-token prefill chunk and 7 decodes): its dense
    # parts interpolate between 416 and 448 tokens; attention parts stay exact.
    chunks = (SequenceChunk(420, 1024, True),) + tuple(SequenceChunk(1, 900 + i, True)
                                                       for i in range(7))
    exact = replica._stage_segments(chunks, "part")
    approx = replica._stage_segments(chunks, "part", token_grid=8)
    for (_, _, e), (_, _, a) in zip(exact, approx):
        kinds = [(type(p).__name__, att) for p, att in a.parts]
        assert ("BlendedSegment", False) in kinds and ("BlendedSegment", True) not in kinds
        assert all(type(p) is LazySegment for p, att in a.parts if att)
        exact_ps, approx_ps = session.time(e)[0].makespan_ps, session.time(a)[0].makespan_ps
        assert abs(approx_ps / exact_ps - 1) < 0.005
