"""Schedulers are pure policy: given request state they form batches within limits."""

import pytest

from npusim.serving.schedulers.chunked_prefill import ChunkedPrefillConfig, ChunkedPrefillScheduler
from npusim.serving.schedulers.continuous import ContinuousConfig, ContinuousScheduler
from npusim.serving.schedulers.static import StaticConfig, StaticScheduler
from npusim.serving.state import RequestState, SchedulerView
from npusim.workload.traces import Request

pytestmark = pytest.mark.unit


def state(i, prompt=100, output=10, prefilled=0, generated=0, priority=0):
    s = RequestState(Request(f"r{i}", i, prompt, output, priority))
    s.prefilled = s.kv_tokens = prefilled
    s.generated = generated
    s.admitted = prefilled > 0
    return s


def view(waiting=(), running=(), kv_free=10**9, in_flight=0):
    return SchedulerView(0, list(waiting), list(running), kv_free, True, in_flight, "fused")


def test_chunked_prefill_puts_decodes_first_and_fills_the_budget_with_chunks():
    sched = ChunkedPrefillScheduler(ChunkedPrefillConfig(token_budget=64, prefill_chunk=40))
    running = [state(i, prefilled=100, generated=1) for i in range(10)]
    waiting = [state(100 + i, prompt=100) for i in range(3)]
    batch = sched.schedule(view(waiting, running))
    assert [e.new_tokens for e in batch[:10]] == [1] * 10          # decodes first
    assert sum(e.new_tokens for e in batch) == 64                   # budget used exactly
    assert [e.new_tokens for e in batch[10:]] == [40, 14]           # chunks, capped at 40
    assert batch[10].samples is False and batch[10].context_len == 0


@pytest.mark.parametrize("chunk_kv, recomputed", [("keep", [0, 0]), ("recompute", [0, 80])])
def test_chunk_kv_says_whether_a_later_chunk_runs_its_prompt_prefix_again(chunk_kv, recomputed):
    sched = ChunkedPrefillScheduler(ChunkedPrefillConfig(token_budget=64, prefill_chunk=40,
                                                         chunk_kv=chunk_kv))
    waiting = [state(0, prompt=100), state(1, prompt=200, prefilled=80)]
    batch = sched.schedule(view(waiting))
    assert [e.new_tokens for e in batch] == [40, 24]   # the budget counts new tokens only
    assert [e.context_len for e in batch] == [0, 80]
    assert [e.recomputed_tokens for e in batch] == recomputed


def test_chunked_prefill_over_budget_decodes_only():
    sched = ChunkedPrefillScheduler(ChunkedPrefillConfig(token_budget=8, prefill_chunk=40))
    running = [state(i, prefilled=100, generated=1) for i in range(12)]
    batch = sched.schedule(view([state(99)], running))
    assert len(batch) == 8 and all(e.new_tokens == 1 for e in batch)


def test_kv_admission_is_first_come_first_served():
    sched = ContinuousScheduler(ContinuousConfig())
    big, small = state(0, prompt=900, output=100), state(1, prompt=10, output=10)
    batch = sched.schedule(view([big, small], kv_free=500))
    assert batch == []  # the small request does not overtake the head of the queue
    # ...and not because nothing is admitted with 500 tokens free: first in line, the
    # small one (10 + 10 tokens) goes; with room for the big one (900 + 100), both go, in
    # arrival order, and with room for the big one only, it goes alone.
    assert [e.state.id for e in sched.schedule(view([small, big], kv_free=500))] == ["r1"]
    assert [e.state.id for e in sched.schedule(view([big, small], kv_free=1020))] == ["r0", "r1"]
    assert [e.state.id for e in sched.schedule(view([big, small], kv_free=1000))] == ["r0"]


def test_prompts_admitted_behind_a_blocked_head_keep_prefilling():
    # A recompute victim rejoins the queue ahead of prompts admitted after it.  Stopping
    # at the victim kept their KV reserved forever, so the victim never fit: deadlock.
    sched = ChunkedPrefillScheduler(ChunkedPrefillConfig(token_budget=8, prefill_chunk=512))
    victim = state(0, prompt=600, output=2000)
    admitted = [state(i, prompt=1200, output=2, prefilled=7) for i in (1, 2)]
    new = state(3, prompt=10, output=2)
    batch = sched.schedule(view([victim, *admitted, new], kv_free=677))
    assert [(e.state.id, e.new_tokens) for e in batch] == [("r1", 8)]  # not r3: FCFS for KV


def test_static_batching_admits_nothing_while_a_batch_runs():
    sched = StaticScheduler(StaticConfig(max_batch_size=4))
    running = [state(i, prefilled=100, generated=2) for i in range(2)]
    batch = sched.schedule(view([state(9)], running))
    assert {e.state.id for e in batch} == {"r0", "r1"} and all(e.new_tokens == 1 for e in batch)
    assert sched.schedule(view([state(9)], running, in_flight=1)) == []


def test_continuous_batching_prefills_whole_prompts_within_the_batch_limit():
    sched = ContinuousScheduler(ContinuousConfig(max_batch_size=3, max_batch_tokens=250))
    waiting = [state(i, prompt=100) for i in range(5)]
    batch = sched.schedule(view(waiting))
    assert [e.new_tokens for e in batch] == [100, 100]  # a third would exceed 250 tokens
    assert all(e.samples for e in batch)


@pytest.mark.parametrize("scheduler", [ContinuousScheduler(ContinuousConfig(max_batch_size=16,
                                                                           max_batch_tokens=8)),
                                       StaticScheduler(StaticConfig(max_batch_size=16,
                                                                    max_batch_tokens=8))])
def test_a_decode_iteration_stays_within_max_batch_tokens(scheduler):
    # Each decode is a new token: 10 running requests (admitted over several prefill
    # iterations) decoded together in an iteration limited to 8 tokens.
    running = [state(i, prompt=4, prefilled=4, generated=1) for i in range(10)]
    batch = scheduler.schedule(view([], running))
    assert len(batch) == 8 and all(e.new_tokens == 1 for e in batch)
    # and continuous batching admits no prompt that would only queue for a decode slot
    if isinstance(scheduler, ContinuousScheduler):
        batch = scheduler.schedule(view([state(20, prompt=4)], running[:8]))
        assert [e.state.id for e in batch] == [f"r{i}" for i in range(8)]


def test_fill_pipeline_spreads_decodes_over_the_stages():
    sched = ContinuousScheduler(ContinuousConfig(fill_pipeline=True))
    running = [state(i, prefilled=100, generated=1) for i in range(10)]
    v = view(running=running)
    v.decode_micro_batches, v.fill_pipeline = 4, True
    assert len(sched.schedule(v)) == 3          # ceil(10 / 4): one micro-batch per stage
    v.fill_pipeline = False
    assert len(sched.schedule(v)) == 10


@pytest.mark.parametrize("reserve_max, admitted", [(False, []), (True, ["r100"])])
def test_a_new_prompt_leaves_kv_for_the_decodes_of_its_own_iteration(reserve_max, admitted):
    # Incremental KV: 4 decodes each take one more token this iteration, so a prompt that
    # needs all of the free KV must wait (it would overflow the replica); with max-length
    # reservation the decodes' room is already reserved.
    sched = ChunkedPrefillScheduler(ChunkedPrefillConfig(token_budget=512, prefill_chunk=512))
    running = [state(i, prefilled=100, generated=1) for i in range(4)]
    need = 200
    v = SchedulerView(0, [state(100, prompt=need, output=0 if reserve_max else 10)], running,
                      need, reserve_max, 0, "fused")
    batch = sched.schedule(v)
    assert [e.state.id for e in batch if e.new_tokens > 1] == admitted


@pytest.mark.parametrize("scheduler", [
    ContinuousScheduler(ContinuousConfig(order="priority", max_batch_size=2)),
    ChunkedPrefillScheduler(ChunkedPrefillConfig(order="priority", max_batch_size=2)),
    StaticScheduler(StaticConfig(order="priority", max_batch_size=2)),
], ids=["continuous", "chunked_prefill", "static"])
def test_priority_order_admits_the_lowest_value_first_then_by_arrival(scheduler):
    waiting = [state(0, priority=2), state(1, priority=1), state(2, priority=0),
               state(3, priority=1)]
    assert [e.state.id for e in scheduler.schedule(view(waiting))] == ["r2", "r1"]
    fcfs = type(scheduler)(type(scheduler.config)(max_batch_size=2))
    assert [e.state.id for e in fcfs.schedule(view(waiting))] == ["r0", "r1"]


def test_priority_order_picks_which_running_requests_decode():
    sched = ContinuousScheduler(ContinuousConfig(order="priority", max_batch_size=2))
    running = [state(i, prefilled=100, generated=1, priority=p) for i, p in enumerate((1, 1, 0))]
    assert [e.state.id for e in sched.schedule(view((), running))] == ["r2", "r0"]


@pytest.mark.parametrize("order, victims", [("fcfs", ["r3", "r2", "r1", "r0"]),
                                            ("priority", ["r2", "r0", "r3", "r1"])])
def test_preemption_gives_up_the_newest_or_the_lowest_priority_first(order, victims):
    from npusim.serving.schedulers.base import decodes, preemption_order

    running = [state(i, prefilled=100, generated=1, priority=p) for i, p in enumerate((1, 0, 1, 0))]
    assert [e.state.id for e in preemption_order(decodes(running, 4), order)] == victims


@pytest.mark.parametrize("order", ["fcfs", "priority"])
def test_requests_arriving_together_are_preempted_newest_first_in_trace_order(order):
    # A burst at t=0: sorting on arrival alone kept ties oldest first, so the oldest
    # request of the burst (the most work to lose) was preempted first.
    from npusim.serving.schedulers.base import decodes, preemption_order

    running = []
    for i in range(4):
        s = RequestState(Request(f"r{i}", 0, 100, 10), index=i)
        s.prefilled = s.kv_tokens = 100
        s.generated, s.admitted = 1, True
        running.append(s)
    assert [e.state.id for e in preemption_order(decodes(running, 4), order)] == \
        ["r3", "r2", "r1", "r0"]


def test_a_chunk_costs_fixed_budget_units_as_in_npusims_scheduler():
    # NpuSim §4.3.2 (its simulator: credit 5, a prefill costs 4): a micro-batch is up to
    # five decodes, or one chunk and at most one decode, whatever the chunk's length.
    cfg = ChunkedPrefillConfig(token_budget=5, prefill_chunk_units=4, prefill_chunk=34,
                               max_batch_size=5)
    sched = ChunkedPrefillScheduler(cfg)
    waiting = [state(100 + i, prompt=100) for i in range(3)]
    one = sched.schedule(view(waiting, [state(0, prefilled=100, generated=1)]))
    assert [e.new_tokens for e in one] == [1, 34]      # a decode, then a 34-token chunk
    two = sched.schedule(view(waiting, [state(i, prefilled=100, generated=1) for i in range(2)]))
    assert [e.new_tokens for e in two] == [1, 1]       # 3 units left: no chunk fits
    none = sched.schedule(view(waiting))
    assert [e.new_tokens for e in none] == [34]        # one chunk: 4 of 5 units


def test_fixed_chunk_units_still_respect_max_batch_tokens():
    cfg = ChunkedPrefillConfig(token_budget=8, prefill_chunk_units=1, prefill_chunk=512,
                               max_batch_tokens=600)
    batch = ChunkedPrefillScheduler(cfg).schedule(view([state(i, prompt=512) for i in range(4)]))
    assert [e.new_tokens for e in batch] == [512, 88]  # the activation buffers' limit


def test_a_pipelined_prompt_continues_after_its_chunks_in_flight():
    # With pipeline_chunks the engine offers a prompt whose chunk is still in the
    # pipeline; its next chunk runs after the tokens already taken.
    cfg = ChunkedPrefillConfig(token_budget=64, prefill_chunk=40, pipeline_chunks=True)
    s = state(0, prompt=100)
    s.admitted, s.in_flight, s.prefill_scheduled = True, 1, 40
    (entry,) = ChunkedPrefillScheduler(cfg).schedule(view([s]))
    assert (entry.new_tokens, entry.context_len, entry.samples) == (40, 40, False)
    s.prefill_scheduled = 80
    (last,) = ChunkedPrefillScheduler(cfg).schedule(view([s]))
    assert (last.new_tokens, last.context_len, last.samples) == (20, 80, True)


@pytest.mark.parametrize("settings, message", [
    ({"pipeline_chunks": True, "chunk_kv": "recompute"}, "expected chunk_kv: keep"),
    ({"token_budget": 4, "prefill_chunk_units": 5}, "no prefill chunk would ever fit"),
    # was capped silently: the run used a budget of 2048, the default max_batch_tokens
    ({"token_budget": 4096}, r"token_budget = 4096 exceeds max_batch_tokens = 2048, .* "
                             r"expected token_budget <= 2048, or raise max_batch_tokens"),
])
def test_chunk_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        ChunkedPrefillConfig(**settings)
    # budget units per chunk are not tokens: max_batch_tokens caps those on its own
    assert ChunkedPrefillConfig(token_budget=4096, prefill_chunk_units=4).token_budget == 4096


def lanes_view(running, stages):
    v = view(running=running)
    v.decode_micro_batches = stages
    return v


def launch(sched, running, stages):
    """Form a batch and launch it, as the engine does: its requests go in flight."""
    batch = sched.schedule(lanes_view(running, stages))
    sched.launched([e.state for e in batch])
    for e in batch:
        e.state.in_flight = 1
    return [e.state.id for e in batch]


def test_sticky_lanes_take_turns_and_keep_their_members():
    sched = ContinuousScheduler(ContinuousConfig(max_batch_size=2, decode_lanes="sticky"))
    running = [state(i, prefilled=100, generated=1) for i in range(5)]
    assert launch(sched, running, stages=2) == ["r0", "r1"]          # lane 0
    assert launch(sched, running[2:], stages=2) == ["r2", "r3"]      # lane 1
    # Lane 0's turn again, but it is still in the pipeline: nothing launches, and r4
    # (in no lane) does not take its place.
    assert sched.schedule(lanes_view(running[4:], stages=2)) == []
    for s in running[:2]:
        s.in_flight = 0
    assert launch(sched, [running[0], running[1], running[4]], stages=2) == ["r0", "r1"]
    assert sched.lanes.sizes == {0: 2, 1: 2}


def test_a_sticky_lane_keeps_its_turn_when_the_engine_drops_its_batch():
    # The engine may launch nothing (it waits for KV): the lane proposed must go next
    # time, not lose its turn to the lane after it.
    sched = ContinuousScheduler(ContinuousConfig(max_batch_size=1, decode_lanes="sticky"))
    a, b, c = (state(i, prefilled=100, generated=1) for i in range(3))
    assert launch(sched, [a, b, c], stages=3) == ["r0"]
    assert launch(sched, [b, c], stages=3) == ["r1"]
    assert launch(sched, [c], stages=3) == ["r2"]
    a.in_flight = 0
    assert [e.state.id for e in sched.schedule(lanes_view([a], stages=3))] == ["r0"]  # dropped
    b.in_flight = 0
    # still lane 0's turn: a goes, not b
    assert [e.state.id for e in sched.schedule(lanes_view([a, b], stages=3))] == ["r0"]


def test_a_sticky_lane_with_room_takes_new_requests_and_drops_finished_ones():
    sched = ContinuousScheduler(ContinuousConfig(max_batch_size=3, decode_lanes="sticky"))
    a, b, c, d = (state(i, prefilled=100, generated=1) for i in range(4))
    assert launch(sched, [a, b], stages=1) == ["r0", "r1"]
    a.finish_ps, a.in_flight, b.in_flight = 1, 0, 0  # a finished: no longer offered
    assert launch(sched, [b, c, d], stages=1) == ["r1", "r2", "r3"]
    assert sched.lanes.sizes == {0: 3}


def test_reformed_micro_batches_take_whoever_is_out_of_the_pipeline():
    sched = ContinuousScheduler(ContinuousConfig(max_batch_size=2))
    running = [state(i, prefilled=100, generated=1) for i in range(3)]
    assert [e.state.id for e in sched.schedule(lanes_view(running[1:], stages=2))] == ["r1", "r2"]
    assert sched.lanes is None


def test_chunked_prefill_fills_a_busy_lanes_turn_with_prefill_chunks():
    cfg = ChunkedPrefillConfig(max_batch_size=4, token_budget=64, prefill_chunk=32,
                               decode_lanes="sticky")
    sched = ChunkedPrefillScheduler(cfg)
    decoding = state(0, prefilled=100, generated=1)
    batch = sched.schedule(lanes_view([decoding], stages=1))
    assert [e.state.id for e in batch] == ["r0"]
    decoding.in_flight = 1
    v = view(waiting=[state(1, prompt=100)], running=[])
    batch = sched.schedule(v)
    assert [(e.state.id, e.new_tokens) for e in batch] == [("r1", 32)]


def test_a_preempted_member_leaves_its_lane_even_while_it_is_prefilled_again():
    # A recompute victim is prefilled again (on the prefill pool, or in a prefill chunk
    # here): in flight, but no longer in its decode lane, which must not wait for it.
    sched = ContinuousScheduler(ContinuousConfig(max_batch_size=2, decode_lanes="sticky"))
    a, b = (state(i, prefilled=100, generated=1) for i in range(2))
    assert launch(sched, [a, b], stages=2) == ["r0", "r1"]
    b.in_flight = 0
    a.preempted, a.in_flight = 1, 1
    assert launch(sched, [b], stages=2) == ["r1"]
    assert sched.lanes.sizes == {0: 1}


def test_priority_preemption_waits_for_a_lower_ranked_request_in_the_pipeline():
    # An urgent prompt needs KV: the idle class-1 request would make room, but a class-2
    # request in the pipeline ranks lower still, so the scheduler waits for it rather
    # than preempt class 1 (priority inversion).
    sched = ContinuousScheduler(ContinuousConfig(order="priority", preempt_lower_priority=True))
    urgent = state(0, prompt=40, output=10, priority=0)
    idle = state(1, prefilled=100, generated=1, priority=1)
    flying = state(2, prefilled=100, generated=1, priority=2)
    v = view(waiting=[urgent], running=[idle], kv_free=0)
    v.kv_held = lambda s: s.kv_tokens
    assert sched.priority_victims(v) == [idle]          # nothing lower in the pipeline
    v.in_pipeline = (flying,)
    assert sched.priority_victims(v) == []              # wait for class 2 to come back
