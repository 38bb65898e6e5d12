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
@pytest.mark.parametrize("count,total,limit", [(5, 12155, 5), (40, 56000, 48), (47, 70000, 48),
                                               (3, 3000, 5), (40, 56000, 64)])
def test_the_count_grid_stops_at_the_most_sequences_an_iteration_decodes(count, total, limit):
    # A grid shape above the limit would time a batch the replica never runs (8
    # sequences for a 5-sequence batch when at most 5 decode at once), with more
    # activations than its buffers are sized for.
    corners, denominator = decode_corners(count, total, 64, 4, max_count=limit)
    counts = sorted({c for _, c, _ in corners})
    assert max(counts) <= limit
    assert sum(w * c for w, c, _ in corners) == count * denominator
    assert sum(w * t for w, _, t in corners) == total * denominator
    low = 1 << (count.bit_length() - 1)
    assert counts == ([count] if count in (low, limit) else [low, min(2 * low, limit)])


@pytest.mark.component
def test_a_replica_interpolates_decode_batches_below_its_decode_slots(monkeypatch):
    scenario = _as_scenario(FUSION, ["run.trace=false", "workload.scheduler.max_batch_size=5"])
    device = build_device(scenario.hw)
    replica = registry.lookup("workload", "serving").impl(device, config=scenario.workload).replicas[0]
    assert replica.max_decode_count == 5
    seen = []
    blended = replica._blended
    monkeypatch.setattr(replica, "_blended",
                        lambda corners, *rest: seen.append(corners) or blended(corners, *rest))
    entries = [Entry(RequestState(Request(f"d{i}", 0, 2400, 8)), 1, 2400 + 37 * i, True)
               for i in range(5)]
    replica.segments(entries, 64, "part", 4)
    assert seen and {count for _, count, _ in seen[0]} == {5}  # not 4 and 8


@pytest.mark.unit
def test_a_batch_on_the_grid_is_its_own_single_corner():
    assert decode_corners(4, 2048, 64, 4) == ([(512, 4, 2048)], 512)


@pytest.mark.unit
@pytest.mark.parametrize("count,total", [(1, 500), (3, 40), (0, 0)])
def test_single_sequences_and_too_short_contexts_are_not_interpolated(count, total):
    assert decode_corners(count, total, 64, 4) is None


@pytest.mark.unit
def test_blend_rounds_the_weighted_mean_and_keeps_the_parts_for_counters():
    a = SegmentRun(None, [], [1000], {"u": {"busy_ps": 10}},
                   extra={"prefetch_ps": 400, "prefetched_ps": 800})
    b = SegmentRun(None, [], [2001], {"u": {"busy_ps": 30}},
                   extra={"prefetch_ps": 800, "prefetched_ps": 1601})
    run = blend_runs([(1, a), (3, b)], 4)
    assert run.makespan_ps == (1000 + 3 * 2001 + 2) // 4 == 1751   # 1750.75 rounds up
    assert (run.extra["prefetch_ps"], run.extra["prefetched_ps"]) == (700, 1401)
    assert run.extra["blend"] == ((1, 4, a), (3, 4, b))
    # Without a profile on every part (not chain parts), the blend has none either.
    plain = SegmentRun(None, [], [1000], {})
    assert "prefetched_ps" not in blend_runs([(1, a), (1, plain)], 2).extra
    with pytest.raises(ValueError, match="sum"):
        blend_runs([(1, a), (1, b)], 3)


@pytest.mark.unit
def test_a_chain_starts_each_parts_loads_once_the_loads_before_it_are_done():
    # Compute-bound once loaded: 600 ps of loads, 700 ps when they are done.
    dense = SegmentRun(None, [], [1000], {}, extra={"prefetch_ps": 600, "prefetched_ps": 700})
    attention = SegmentRun(None, [], [200], {}, extra={"prefetch_ps": 0, "prefetched_ps": 200})
    run = chain_runs([dense, attention, dense, dense])
    # The second dense part's loads start at 600 (after the first part's): 600 ps head
    # start, so it ends at max(1200 + 700, 600 + 1000); the third's loads start at 1200
    # and it is compute-bound: 1900 + 700.
    assert run.makespan_ps == 2600
    # Traced, each part's rows start with its loads (the attention part has none), and
    # the dense parts are timed again with their head starts of 600 and 700 ps.
    assert [(offset, head) for offset, _, head in run.extra["chain"]] == [
        (0, 0), (1000, 0), (600, 600), (1200, 700)]
    assert [part for _, _, part in run.extra["blend"]] == [dense, attention, dense, dense]
    # Load-bound parts gain nothing: each one's loads wait for the previous one's.
    streaming = SegmentRun(None, [], [1000], {},
                           extra={"prefetch_ps": 1000, "prefetched_ps": 100})
    assert chain_runs([streaming] * 3).makespan_ps == 3000
    # A part without a profile gets no head start.
    plain = SegmentRun(None, [], [1000], {})
    assert chain_runs([dense, plain, plain]).makespan_ps == 3000
    with pytest.raises(ValueError, match="part"):
        chain_runs([])


@pytest.mark.unit
def test_a_parts_paced_loads_hold_the_dma_queue_for_the_parts_after_it():
    # A dense part streaming its weights to its end (tile loads wait for computation),
    # then an attention part whose 300 ps of KV loads are prefetchable.
    dense = SegmentRun(None, [], [1000], {},
                       extra={"prefetch_ps": 100, "prefetched_ps": 950, "last_load_ps": 900})
    attention = SegmentRun(None, [], [500], {}, extra={"prefetch_ps": 300, "prefetched_ps": 200})
    # The KV loads queue behind the dense part's last load (ending 1000 - 950 + 900 =
    # 950): a head start of 50 ps, not of 900 as if the queue were free after the
    # dense part's first 100 ps.
    run = chain_runs([dense, attention])
    assert run.makespan_ps == max(1000 + 200, 950 + 500) == 1450
    assert [(offset, head) for offset, _, head in run.extra["chain"]] == [(0, 0), (950, 50)]
    unpaced = SegmentRun(None, [], [1000], {}, extra={"prefetch_ps": 100, "prefetched_ps": 950})
    assert chain_runs([unpaced, attention]).makespan_ps == 1200
    # Blended parts blend it too.
    blended = blend_runs([(1, dense), (1, unpaced)], 2)
    assert blended.extra["last_load_ps"] == 450


@pytest.mark.unit
def test_a_parts_first_loads_wait_for_a_tile_buffer_the_part_before_it_frees():
    # A compute-bound dense part whose tile before the last is in use until 900 ps of
    # its 950 ps warm schedule: the core's two tile buffers are shared with the next
    # part, whose first KV tile can load only once that tile has been used.
    dense = SegmentRun(None, [], [1000], {},
                       extra={"prefetch_ps": 100, "prefetched_ps": 950, "tile_free_ps": 900})
    attention = SegmentRun(None, [], [500], {}, extra={"prefetch_ps": 300, "prefetched_ps": 200})
    run = chain_runs([dense, attention])
    assert run.makespan_ps == (1000 - 950 + 900) + 500 == 1450
    assert [(offset, head) for offset, _, head in run.extra["chain"]] == [(0, 0), (950, 50)]
    # Without the buffer the loads would start after the dense part's own (100 ps).
    free = SegmentRun(None, [], [1000], {}, extra={"prefetch_ps": 100, "prefetched_ps": 950})
    assert chain_runs([free, attention]).makespan_ps == 1200
    assert blend_runs([(1, dense), (3, free)], 4).extra["tile_free_ps"] == 225


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
    # Without interpolation, contexts are rounded up and dense parts timed per token count.
    rounded = replay("workload.decode_interpolation=false", "workload.dense_interpolation=false")
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
        attention = [part.key[1][1] for part in e.parts]  # (role, ("part", attention, id))
        kinds = [(type(part).__name__, att) for part, att in zip(a.parts, attention)]
        assert ("BlendedSegment", False) in kinds and ("BlendedSegment", True) not in kinds
        exact_ps, approx_ps = session.time(e)[0].makespan_ps, session.time(a)[0].makespan_ps
        assert abs(approx_ps / exact_ps - 1) < 0.005


@pytest.mark.component
@pytest.mark.parametrize("chunks", [
    tuple(SequenceChunk(1, 1000 + 37 * i, True) for i in range(8)),              # decode
    (SequenceChunk(420, 1024, True),) + tuple(SequenceChunk(1, 900, True) for _ in range(7)),
    (SequenceChunk(512, 0, True),)],                                             # prefill
    ids=["decode", "mixed", "prefill"])
def test_a_chain_of_parts_is_within_half_a_percent_of_its_stage(chunks):
    replica, session = _replica_and_session()
    stages = replica._stage_segments(chunks, "stage")
    chains = replica._stage_segments(chunks, "part")
    errors = []
    for (_, _, stage), (_, _, chain) in zip(stages, chains):
        parts = [session.time(part)[0] for part in chain.parts]
        stage_ps, chain_ps = session.time(stage)[0].makespan_ps, session.time(chain)[0].makespan_ps
        errors.append(chain_ps / stage_ps - 1)
        # Without the loads' head start the parts would take their sum (4-25% more).
        assert chain_ps < sum(run.makespan_ps for run in parts)
        assert any(run.extra["prefetched_ps"] < run.makespan_ps for run in parts)
    # The mixed batch was 1.6% slower while a part chained each sequence's attention
    # after the one before it (the stage runs one's QK^T beside another's softmax), and
    # every batch 0.1-0.3% slower while the stage let QK^T start before v_proj was done
    # (measured 2026-11-28: within 0.002%).
    assert max(map(abs, errors)) < 0.005


@pytest.mark.component
def test_spilled_kv_queues_on_the_dma_and_parts_chain_to_the_stage():
    # 24 MiB per core: weights stream and long contexts spill KV to HBM.  Spilled KV
    # loads used to be issued at the stage's start, every layer's at once, slowing
    # its first weight tiles; a chain (each part's KV after the loads before it) was
    # then 2-17% faster than its stage.  On the DMA queue they follow program order.
    scenario = _as_scenario(FUSION, ["run.trace=false", "hw.core.sram.capacity_bytes=24MiB"])
    device = build_device(scenario.hw)
    replica = registry.lookup("workload", "serving").impl(device, config=scenario.workload).replicas[0]
    session = Session(device, "analytic", 0, True, False)
    chunks = tuple(SequenceChunk(1, 3000 + 97 * i, True) for i in range(24))
    _, _, stage = replica._stage_segments(chunks, "stage")[1]
    graph = stage.build()
    kv_loads = [task for task in graph.tasks if ":load KV." in task.name]
    core = kv_loads[0].name.rsplit("@", 1)[1]
    on_core = [task for task in kv_loads if task.name.endswith("@" + core)]
    assert len(on_core) > 2 and all(task.deps for task in on_core)  # each behind another load
    # ... and every tile load, past the core's first two, waits until the tile two loads
    # back (weights or KV, maybe another operator's) has been used: two tile buffers per
    # core, which is what the SRAM plan reserves.
    tiles = [task for task in graph.tasks if ":load " in task.name
             and task.name.endswith("@" + core)]
    assert any(":load W" in task.name for task in tiles)
    users: dict[int, set[int]] = {task.id: set() for task in tiles}
    for task in graph.tasks:
        for dep in task.deps:
            if dep in users and ":load " not in task.name:
                users[dep].add(task.id)
    assert all(users[tiles[i - 2].id] & set(tiles[i].deps) for i in range(2, len(tiles)))
    _, _, chain = replica._stage_segments(chunks, "part")[1]
    stage_ps, chain_ps = session.time(stage)[0].makespan_ps, session.time(chain)[0].makespan_ps
    assert abs(chain_ps / stage_ps - 1) < 0.01


@pytest.mark.component
def test_a_chain_waits_for_the_tile_buffers_the_stage_graph_waits_for():
    # The disaggregated decode replica with 24 MiB per core streams its weights: at each
    # cut the next part's first tile goes into the buffer of the tile before the last,
    # once that is used.  A chain that started those loads with the queue alone was
    # 0.20% faster than the stage on two 4,600-token decodes (measured 2026-11-28).
    # Each tile goes in one burst (stream_chunk_bytes = the 4 MiB tile): in 256 KiB
    # chunks the next part's tile loads delay this part's ring steps in the stage graph,
    # which the chain (its parts timed alone) does not see; tlm sees it too: its stage
    # takes 8,494 us, its chain 8,466 (-0.33%), analytic 8,483 and 8,464 (-0.22%)
    # (measured 2026-11-29).
    scenario = _as_scenario("workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml",
                            ["run.trace=false", "hw.core.sram.capacity_bytes=24MiB",
                             "workload.stream_chunk_bytes=4MiB"])
    device = build_device(scenario.hw)
    driver = registry.lookup("workload", "serving").impl(device, config=scenario.workload)
    replica = next(r for r in driver.replicas if r.role == "decode")
    session = Session(device, "analytic", 0, True, False)
    entries = _decodes([4600, 4600])
    (_, _, stage), (_, _, chain) = (replica.segments(entries, 64, "stage")[0],
                                    replica.segments(entries, 64, "part")[0])
    stage_ps, chain_run = session.time(stage)[0].makespan_ps, session.time(chain)[0]
    assert abs(chain_run.makespan_ps / stage_ps - 1) < 0.0005
    profiles = [run.extra for _, _, run in chain_run.extra["blend"]]
    assert any(0 < extra["tile_free_ps"] <= extra["prefetched_ps"] for extra in profiles)


@pytest.mark.component
def test_spilled_kv_streams_in_tiles_that_the_attention_consumes_as_they_arrive():
    # Weights resident (256 MiB), all KV in HBM, 24 decodes of 4,000 tokens: about 12 MiB
    # of keys per core and layer.  Loaded whole, the attention waited for the last byte
    # and the load held the SRAM for a block of time in the analytic executor, delaying
    # the all-reduces beside it: the stage was 2.7% slower than its chain and than tlm.
    scenario = _as_scenario(FUSION, ["run.trace=false", "hw.core.sram.capacity_bytes=256MiB",
                                     "workload.kv_sram_fraction=0"])
    device = build_device(scenario.hw)
    replica = registry.lookup("workload", "serving").impl(device, config=scenario.workload).replicas[0]
    session = Session(device, "analytic", 0, True, False)
    chunks = tuple(SequenceChunk(1, 4000, True) for _ in range(24))
    _, _, stage = replica._stage_segments(chunks, "stage")[4]
    graph = stage.build()
    tile = scenario.workload.weight_tile_bytes
    core = next(t.name for t in graph.tasks if ":load KV." in t.name).rsplit("@", 1)[1]
    loads = [t for t in graph.tasks if ":load KV." in t.name and t.name.endswith("@" + core)]
    layer = loads[0].name.split(".", 1)[0]  # the stage's first layer, "L8"
    qk = [t for t in graph.tasks if t.name.startswith(layer + ".attn_qk")
          and ":load" not in t.name and t.name.endswith("@" + core)]
    assert len(loads) > 8 and all(t.size_bytes <= tile for t in loads)
    assert len(qk) > 2  # one GEMM per tile, not one for the whole attention
    assert sum(t.op.flops for t in qk) == qk[0].op.flops // qk[0].op.n * sum(t.op.n for t in qk)
    _, _, chain = replica._stage_segments(chunks, "part")[4]
    stage_ps, chain_ps = session.time(stage)[0].makespan_ps, session.time(chain)[0].makespan_ps
    assert abs(chain_ps / stage_ps - 1) < 0.005


@pytest.mark.component
def test_a_part_keeps_the_stage_graphs_dependencies_among_its_own_tasks():
    # Two sequences' attention in one part: in the stage graph the second's KV write and
    # QK^T wait only for the projections (in the part before), not for the first's AV.
    replica, session = _replica_and_session()
    chunks = (SequenceChunk(420, 1024, True), SequenceChunk(1, 900, True))
    stage = replica._stage_segments(chunks, "stage")[1][2].build()
    chain = replica._stage_segments(chunks, "part")[1][2]
    stage_deps = {t.name: {stage.tasks[d].name for d in t.deps} for t in stage.tasks}
    for part in chain.parts:
        graph = part.build()
        names = {t.name for t in graph.tasks}
        for task in graph.tasks:
            if task.name not in stage_deps or task.name.startswith("activation"):
                continue  # the entry hand-off is the part's own
            assert {graph.tasks[d].name for d in task.deps} == stage_deps[task.name] & names, \
                task.name


@pytest.mark.component
def test_binary_vector_ops_read_both_operands_on_every_core():
    replica, _ = _replica_and_session()
    graph = replica._stage_segments((SequenceChunk(64, 0, True),), "stage")[1][2].build()
    inputs = {}
    for task in graph.tasks:
        if hasattr(task, "op") and task.unit.endswith(".vec"):
            inputs.setdefault(task.name.split(".", 1)[1].split("@")[0], set()).add(task.op.inputs)
    assert inputs["attn_residual"] == inputs["mlp_residual"] == inputs["act_mul"] == {2}
    assert inputs["input_norm"] == inputs["attn_softmax[s0]"] == {1}


@pytest.mark.component
def test_a_cut_shared_by_stages_with_the_same_plan_builds_each_stages_own_layers():
    replica, _ = _replica_and_session()
    chunks = (SequenceChunk(100, 0, True),)
    first, second = (replica._stage_segments(chunks, "part")[i][2].parts[0] for i in (1, 2))
    assert first.key == second.key  # one cached cut (same plan key)
    layers = [{task.name.split(".")[0] for task in part.build().tasks if task.name.startswith("L")}
              for part in (first, second)]
    assert layers[0] and layers[0].isdisjoint(layers[1])
    assert len(first.build().tasks) == len(second.build().tasks)


@pytest.mark.component
def test_a_one_token_chunk_that_samples_nothing_is_not_timed_as_a_decode():
    # Prefill chunks are timed at their exact size now, so a 1-token middle chunk met
    # a decode at the same context in the segment cache: whichever came first set the
    # other's LM head (a decode without one, or a chunk with one).
    replica, _ = _replica_and_session()
    state = RequestState(Request("a", 0, 1000, 10))
    chunk = replica.segments([Entry(state, 1, 500, False)], 64, "part", None, 4)
    decode = replica.segments([Entry(state, 1, 500, True)], 64, "part", None, 4)
    head = len(replica.groups)
    assert not any(position == head for position, _, _ in chunk)
    assert any(position == head for position, _, _ in decode)
