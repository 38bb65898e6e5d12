"""The iteration-level serving engine (NpuSim §3.2, §4.3; Orca/vLLM-style iterations).

Discrete events over integer picoseconds: request arrivals, a replica's first stage
becoming free, an iteration finishing, KV arriving at a decode replica.  Whenever a
replica's first stage is free, its scheduler (policy only) forms the next micro-batch
from requests not already in flight, with decodes only while fewer micro-batches with
decodes than stages are under way (vLLM's virtual engines, NpuSim's ring) and at most
twice the stages in all (the bounds are the scheduler's, ``in_flight_bounds``); the
replica's backend turns it into one segment per pipeline stage (plus the LM head), the
session times them, and the batch flows through the pipeline: stage ``k`` starts when
stage ``k-1`` has finished this batch *and* stage ``k`` the previous one.

Every request ends ``finished`` or ``rejected`` with a reason; the counts are checked.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable

from npusim.config.presets import REPO_ROOT
from npusim.core import registry
from npusim.core.errors import MappingError
from npusim.serving.admission import KvAdmission
from npusim.serving.iterations import IterationLog
from npusim.serving.kv_cache import KvPool
from npusim.serving.metrics import run_info, summarise, window_start_ps
from npusim.serving.notes import settings_notes
from npusim.serving.npu_backend import Replica, build_replicas, kv_swap_graph, kv_transfer_graph
from npusim.serving.state import Entry, Refusal, RequestState, SchedulerView
from npusim.workload.models import load_model
from npusim.workload.program import DriveOutcome


class ServingDriver(KvAdmission):
    """Drives a session through a whole trace (returned by the ``serving`` workload)."""

    def __init__(self, device, config, seed: int = 0):
        self.device, self.config, self.seed = device, config, seed
        if getattr(device.config, "kind", None) != "npu":
            raise MappingError(f"serving has no backend for device kind "
                               f"{getattr(device.config, 'kind', '?')!r} yet (supported: npu)")
        self.model = load_model(config.model)
        self.trace = config.trace.build(base_dir=REPO_ROOT, default_seed=seed)
        longest = max((r.prompt_tokens + r.output_tokens for r in self.trace), default=1)
        self.replicas = build_replicas(device, config, self.model, longest)
        self.prefix_block_tokens = self._check_prefix_caching()
        #: settings this run cannot act on (metrics.json ``notes``; ``npusim run`` prints them)
        self.notes = settings_notes(config, self.trace, self.replicas)
        scheduler_cls = registry.lookup("scheduler", config.scheduler.kind).impl
        self.schedulers = {r.index: scheduler_cls(config.scheduler_for(r.role))
                           for r in self.replicas}
        kv_dtype = config.kv_dtype_bytes or config.dtype_bytes
        self.kv_bytes_per_token_layer = 2 * self.model.kv_size * kv_dtype
        # Swap preemption moves KV to the host memory behind the chip's host link.
        self.swap_host = getattr(device, "host_memory", None) if config.preemption == "swap" else None
        if config.preemption == "swap" and self.swap_host is None:
            raise MappingError(
                "workload.preemption: 'swap' moves a preempted request's KV to host memory "
                "over the chip's host link, and this device has none; add hw.host (e.g. "
                "host: {link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200, "
                "channels: 4}}) "
                "or use preemption: recompute")

    # -- the event loop ------------------------------------------------------------------
    def drive(self, session, progress: Callable[[int, int], None] | None = None) -> DriveOutcome:
        keys = self.trace.prefix_keys() if self.prefix_block_tokens else [()] * len(self.trace)
        states = [RequestState(r, ready_ps=r.arrival_ps, index=i, prefix_keys=keys[i])
                  for i, r in enumerate(self.trace)]
        cache_queries = {"queried": 0, "hit": 0}  # prompt tokens looked up / found cached
        reps = self.replicas
        stage_free = {r.index: [0] * (len(r.groups) + 1) for r in reps}
        pools = self._pools()
        in_flight = {r.index: 0 for r in reps}
        decoding = {r.index: 0 for r in reps}  # those of them with decodes
        bounds = {r.index: self.schedulers[r.index].in_flight_bounds(len(r.groups)) for r in reps}
        pending_decode: dict[int, list[RequestState]] = {r.index: [] for r in reps}
        handed = {r.index: 0 for r in reps}  # KV tokens sent to a decode replica, not yet admitted
        swapped: dict[int, list[RequestState]] = {r.index: [] for r in reps}  # KV on the host
        iterations = {r.index: 0 for r in reps}
        log = IterationLog()
        counter = itertools.count()
        events: list[tuple[int, int, str, Any]] = []
        for state in states:
            heapq.heappush(events, (state.request.arrival_ps, next(counter), "arrive", state))
        arrived: list[RequestState] = []
        done_count = 0
        last_ps = 0
        scheduled_wake: dict[int, int] = {}
        reserve_max = self.config.kv_reservation == "max_length"

        def reserves_max(replica: Replica) -> bool:
            # A prefill replica only ever holds a prompt's KV (it hands the request over
            # after its first token), so it never reserves room for the output.
            return reserve_max and replica.role != "prefill"

        def kv_need(state: RequestState, replica: Replica) -> int:
            return state.max_tokens if reserves_max(replica) else state.prompt_target

        queued: dict[int, int] = {}  # per replica: requests waiting for it (the log's)

        def views(replica: Replica, now: int) -> SchedulerView:
            if replica.role == "decode":
                waiting: list[RequestState] = []
                # Handed over, waiting for KV (or for a static batch to finish).
                queued[replica.index] = len(pending_decode[replica.index])
            else:
                # A prompt with a chunk in flight waits for it, unless the scheduler
                # pipelines a prompt's chunks (its next chunk follows the last through
                # the stages, so its KV is there when the chunk reaches each stage).
                overlap = self.schedulers[replica.index].pipelines_chunks
                waiting = [s for s in arrived if (not s.in_flight or overlap)
                           and not s.finished and not s.rejected
                           and s.prefill_unscheduled > 0
                           and (s.replica is None or s.replica == replica.index)]
                queued[replica.index] = len(waiting)
                if swapped[replica.index]:  # swapped-out requests come back first
                    waiting = self.schedulers[replica.index].ahead_of_swapped(
                        waiting, swapped[replica.index])
                for state in waiting:
                    if not state.admitted:  # what this replica's cache already holds
                        self._look_up_prefix(state, pools[replica.index])
            running = [s for s in arrived if not s.in_flight and not s.finished
                       and s.prefill_done and s.replica == replica.index
                       and s.admitted and s.ready_ps <= now and replica.role != "prefill"]
            flying = [s for s in arrived if s.in_flight and s.replica == replica.index]
            pool = pools[replica.index]
            return SchedulerView(now, waiting, running, pool.free_tokens,
                                 reserves_max(replica), in_flight[replica.index], replica.role,
                                 min(len(replica.groups), bounds[replica.index][1]), len(flying),
                                 self.config.scheduler_for(replica.role).fill_pipeline,
                                 kv_cost=lambda state, tokens: pool.admission_cost(
                                     tokens, state.prefix_keys, state.cache_hit_blocks),
                                 kv_growth=lambda grown: sum(pool.growth_cost(s) for s in grown),
                                 kv_held=lambda held: pool.charge(pool.reserved_tokens(held)),
                                 in_pipeline=tuple(s for s in flying if s.prefill_done),
                                 decode_room=decoding[replica.index] < bounds[replica.index][1])

        # The router (workload.router): which entry replica an arriving request is bound
        # to, and how many unfinished requests each one holds.
        entry_replicas = [r for r in reps if r.role != "decode"]
        routing = self.config.router != "shared_queue" and len(entry_replicas) > 1
        outstanding = {r.index: 0 for r in entry_replicas}
        routed_count = 0

        def route(state: RequestState) -> None:
            nonlocal routed_count
            if self.config.router == "round_robin":
                target = entry_replicas[routed_count % len(entry_replicas)]
            else:  # least_outstanding, the lowest index on a tie
                target = min(entry_replicas, key=lambda r: (outstanding[r.index], r.index))
            routed_count += 1
            state.replica = state.routed = target.index
            outstanding[target.index] += 1

        def unroute(state: RequestState) -> None:
            if state.routed is not None:
                outstanding[state.routed] -= 1
                state.routed = None

        def finish(state: RequestState, now: int) -> None:
            nonlocal done_count
            unroute(state)
            state.finish_ps = now
            if state.admitted and state.replica is not None:
                pools[state.replica].release(state)
            state.admitted = False
            done_count += 1
            if progress is not None:
                progress(done_count, len(states))

        def reject(state: RequestState, refusal: Refusal) -> None:
            nonlocal done_count
            unroute(state)
            state.rejected_kind, state.rejected = refusal
            done_count += 1
            if progress is not None:  # a rejected request is done too: the bar reaches the end
                progress(done_count, len(states))

        def settle(replica: Replica, victims: list[RequestState], now: int) -> None:
            """After ``victims`` were preempted on ``replica``: a recompute victim prefills
            again (or is rejected if it never can); a swap victim's KV goes out to the host,
            a timed transfer, and it queues to come back."""
            for state in victims:
                if not state.swapped:  # recompute: it prefills again, if it can
                    refusal = self._recompute_blocked(state)
                    if refusal:
                        reject(state, refusal)
                    continue
                # swap preemption: KV out to host memory
                graph = kv_swap_graph(replica, state.kv_tokens, self.kv_bytes_per_token_layer,
                                      self.swap_host, out=True)
                run = session.run(graph, f"swap-out {state.id} r{replica.index}", now)
                state.ready_ps = now + run.makespan_ps  # back in only once it is out
                swapped[replica.index].append(state)
                heapq.heappush(events, (state.ready_ps, next(counter), "swap", None))
            # Swapped requests come back oldest first (highest priority first, then
            # oldest, with order: priority).
            swapped[replica.index].sort(key=lambda s: (s.request.arrival_ps, s.index))
            swapped[replica.index] = self.schedulers[replica.index].service_order(
                swapped[replica.index])

        def swap_in_need(replica: Replica, state: RequestState) -> int:
            """KV a swapped-out request reserves coming back: as at admission, the whole
            request under max-length reservation (its decodes then grow nothing), else
            the KV it had."""
            return state.max_tokens if reserves_max(replica) else state.kv_tokens

        def may_enter(replica: Replica, state: RequestState) -> bool:
            """Whether a handed-over request may take KV on decode ``replica`` now: its
            swapped-out requests come back first, unless ``state`` outranks them all."""
            waiting = swapped[replica.index]
            return not waiting or bool(self.schedulers[replica.index].ahead_of_swapped(
                [state], waiting))

        def make_room_for_handover(replica: Replica, head: RequestState, headroom: int,
                                   now: int) -> None:
            """Priority preemption on a decode replica (scheduler.preempt_lower_priority):
            a handed-over request whose KV does not fit preempts running requests of a
            lower class, as a waiting prompt does on the replicas that prefill."""
            pool = pools[replica.index]
            need = pool.charge(self._handover_need(head) + headroom)
            if need <= pool.free_tokens:
                return
            view = views(replica, now)
            view.waiting = [head]
            view.kv_cost = lambda state, tokens: need
            victims = self.schedulers[replica.index].priority_victims(view)
            if not victims:
                return
            for state in victims:
                self._preempt(replica, state, pool)
            settle(replica, victims, now)
            log.record(replica=replica, entries=[], start_ps=now, end_ps=now, kv=pool,
                       waiting=len(pending_decode[replica.index]),
                       running=len(view.running) - len(victims), preempted=len(victims))
            if any(not state.swapped for state in victims):  # the prefill pool redoes them
                heapq.heappush(events, (now, next(counter), "wake", replica))

        def launch(replica: Replica, now: int) -> bool:
            view = views(replica, now)
            scheduler = self.schedulers[replica.index]
            pool = pools[replica.index]
            # Priority preemption (scheduler.preempt_lower_priority): room for a waiting
            # prompt that outranks running requests, before the batch is formed.
            outranked = scheduler.priority_victims(view) if replica.role != "decode" else []
            for state in outranked:
                self._preempt(replica, state, pool)
            if outranked:
                view = views(replica, now)
            entries = scheduler.schedule(view)
            assert view.decode_room or not any(e.state.prefill_done for e in entries), \
                f"{type(scheduler).__name__} launched decodes past the in-flight bound"
            if not entries and not outranked:
                return False
            with pool.batch():  # no cached block is evicted before the batch holds its KV
                chosen = {id(entry.state) for entry in entries}
                entries, victims = self._grow_or_preempt(
                    replica, entries, pool, reserves_max(replica),
                    idle=[s for s in view.running if id(s) not in chosen],
                    in_pipeline=list(view.in_pipeline))
                victims = outranked + victims
                for entry in entries:
                    state = entry.state
                    if state.first_scheduled_ps is None:
                        state.first_scheduled_ps = now
                    if not state.admitted:
                        pool.reserve(state, kv_need(state, replica), state.prefix_keys,
                                     state.cache_hit_blocks)
                        if pool.prefix_block_tokens:
                            cache_queries["queried"] += state.prompt_target
                            cache_queries["hit"] += state.prefilled
                            state.prefix_cached_tokens += state.prefilled
                        state.admitted = True
                        state.replica = replica.index
                    if not state.prefill_done:  # a prompt chunk: taken, not yet done
                        state.prefill_scheduled += entry.new_tokens
                    state.in_flight += 1
            if entries:
                scheduler.launched([entry.state for entry in entries])
            settle(replica, victims, now)
            if not entries:
                if victims:  # the KV they freed may let this replica (or, for a decode
                    # replica's recompute victims, the prefill pool) run something now
                    heapq.heappush(events, (now, next(counter), "wake", replica))
                    # logged as a batch of none, so the table counts every preemption
                    log.record(replica=replica, entries=[], start_ps=now, end_ps=now,
                               kv=pools[replica.index],
                               waiting=queued[replica.index],  # (outranked: not in view)
                               running=len(view.running) - len(victims) + len(outranked),
                               preempted=len(victims))
                return False
            segments = replica.segments(entries, self.config.kv_bucket_tokens,
                                        self.config.segment_granularity,
                                        self.config.decode_grid_points_per_octave
                                        if self.config.decode_interpolation else None,
                                        self.config.dense_grid_points_per_octave
                                        if self.config.dense_interpolation else None)
            free = stage_free[replica.index]
            start = now
            stages = len(replica.groups)
            prefix = f"it{iterations[replica.index]}/"
            for position, label, segment in segments:
                if position == stages:
                    # The LM head is split over every core of the replica.  Each stage
                    # does its share in its own timeline, after this micro-batch's layers
                    # (in steady state it interleaves with the next micro-batches), so
                    # the cores are never booked twice; the token is out one head
                    # makespan after the last stage.
                    run = session.run(segment, prefix + label, start)
                    for k in range(stages):
                        free[k] += run.makespan_ps
                    start = free[position] = start + run.makespan_ps
                    continue
                start = max(start, free[position])  # the stage is free again
                run = session.run(segment, prefix + label, start)
                start = free[position] = start + run.makespan_ps
            iterations[replica.index] += 1
            # this batch's preemption victims are neither in it nor left running
            picked = {id(e.state) for e in entries} | {id(v) for v in victims}
            log.record(replica=replica, entries=entries, start_ps=now, end_ps=start,
                       kv=pools[replica.index],
                       waiting=queued[replica.index]
                       - sum(1 for s in view.waiting if id(s) in picked),
                       running=sum(1 for s in view.running if id(s) not in picked),
                       preempted=len(victims))
            in_flight[replica.index] += 1
            decodes = any(entry.state.prefill_done for entry in entries)
            decoding[replica.index] += decodes
            heapq.heappush(events, (start, next(counter), "done", (replica, entries, decodes)))
            heapq.heappush(events, (free[0], next(counter), "wake", replica))
            scheduled_wake[replica.index] = free[0]
            return True


        def try_launch(now: int) -> None:
            for replica in reps:
                most_any, most_decoding = bounds[replica.index]
                if in_flight[replica.index] >= most_any or (
                        replica.role == "decode" and decoding[replica.index] >= most_decoding):
                    continue
                if stage_free[replica.index][0] > now:
                    if scheduled_wake.get(replica.index) != stage_free[replica.index][0]:
                        heapq.heappush(events, (stage_free[replica.index][0], next(counter),
                                                "wake", replica))
                        scheduled_wake[replica.index] = stage_free[replica.index][0]
                    continue
                launch(replica, now)

        while events:
            now, _, kind, payload = heapq.heappop(events)
            if kind in ("done", "kv_ready", "swap"):  # work ended (not a wake-up or an
                last_ps = max(last_ps, now)           # arrival, which may be rejected)
            if kind == "arrive":
                state = payload
                refusal = self._admissible(state, pools)
                if refusal:
                    reject(state, refusal)
                else:
                    if routing:
                        route(state)
                    arrived.append(state)
            elif kind == "done":
                replica, entries, decodes = payload
                in_flight[replica.index] -= 1
                decoding[replica.index] -= decodes
                for item in entries:
                    if replica.role == "prefill" and item.samples:  # handed over: it left
                        unroute(item.state)
                    self._complete(item, replica, now, pools, handed, finish,
                                   session, events, counter)
            elif kind == "kv_ready":
                state, target = payload
                pending_decode[target.index].append(state)
                # handed over in the order their KV arrives (by priority first, if asked)
                pending_decode[target.index] = self.schedulers[target.index].service_order(
                    pending_decode[target.index])
            # Swapped-out requests come back, in service order, once their KV fits again (with
            # room for the token they decode next); the swap-in is a timed transfer.
            for replica in reps:
                queue = swapped[replica.index]
                pool = pools[replica.index]
                while (queue and queue[0].ready_ps <= now
                       and pool.charge(swap_in_need(replica, queue[0])
                                       + int(not reserves_max(replica))) <= pool.free_tokens):
                    state = queue.pop(0)
                    pool.reserve(state, swap_in_need(replica, state))
                    state.admitted, state.swapped = True, False
                    graph = kv_swap_graph(replica, state.kv_tokens, self.kv_bytes_per_token_layer,
                                          self.swap_host, out=False)
                    run = session.run(graph, f"swap-in {state.id} r{replica.index}", now)
                    state.ready_ps = now + run.makespan_ps
                    heapq.heappush(events, (state.ready_ps, next(counter), "swap", None))
            # Decode replicas admit handed-over requests while their KV fits, once their
            # swapped-out requests are back (those come first).
            for replica in reps:
                queue = pending_decode[replica.index]
                if not queue:
                    continue
                # The scheduler's policy: static batching takes a batch only when idle.
                limit = self.schedulers[replica.index].handover_limit(
                    pools[replica.index].used_tokens > 0 or in_flight[replica.index] > 0)
                taken = 0
                # Incremental KV: room for the token it decodes next too (as a swap-in
                # needs), else its first step would preempt it or a neighbour at once.
                headroom = int(self.config.kv_reservation == "incremental")
                pool = pools[replica.index]
                if (limit is None or limit > 0) and may_enter(replica, queue[0]):
                    make_room_for_handover(replica, queue[0], headroom, now)
                while (queue and may_enter(replica, queue[0]) and pool.free_tokens
                       >= pool.charge(self._handover_need(queue[0]) + headroom)
                       and (limit is None or taken < limit)):
                    taken += 1
                    state = queue.pop(0)
                    need = self._handover_need(state)
                    handed[replica.index] -= need
                    if state.kv_held_by is not None:  # taken over: the prefill copy is freed
                        pools[state.kv_held_by].release(state)
                        state.kv_held_by = None
                    pool.reserve(state, need)
                    state.admitted, state.replica, state.ready_ps = True, replica.index, now
            # Several events may share a timestamp: launch once they are all applied.
            if not events or events[0][0] > now:
                try_launch(now)
            arrived = [s for s in arrived if not s.finished and not s.rejected]

        unfinished = [s for s in states if not s.finished and not s.rejected]
        for state in unfinished:  # nothing left to run them: say why instead of hiding them
            reject(state, Refusal("never_scheduled",
                                  "never scheduled: KV or batch limits left no room for it"))
        finished = sum(1 for s in states if s.finished)
        rejected = sum(1 for s in states if s.rejected)
        assert finished + rejected == len(states), "request conservation violated"
        rows, metrics = summarise(states, self, session, last_ps)
        metrics.update({"prefix_cache_hit_tokens": cache_queries["hit"],
                        "prefix_cache_hit_rate": (cache_queries["hit"] / cache_queries["queried"]
                                                  if cache_queries["queried"] else 0.0),
                        "prefix_cache_evicted_blocks": sum(p.evicted_blocks
                                                           for p in pools.values())})
        by_kind: dict[str, int] = {}
        for state in states:
            if state.rejected:
                by_kind[state.rejected_kind] = by_kind.get(state.rejected_kind, 0) + 1
        metrics.update({"requests_total": len(states), "requests_finished": finished,
                        "requests_rejected": rejected,
                        # rejections by kind of reason (REFUSAL_KINDS), most first
                        "requests_rejected_by_kind": dict(sorted(
                            by_kind.items(), key=lambda item: (-item[1], item[0]))),
                        "iterations": sum(iterations.values()),
                        "iterations_by_replica": log.summary(),
                        "notes": self.notes})
        info = run_info(self, pools)
        # The run's latency is the serving window, as the rates use: from the first
        # arrival of a servable request (a trace need not start at 0) to the end of the
        # last work.
        first_ps = window_start_ps(states)
        return DriveOutcome(max(0, last_ps - first_ps), len(session.segment_rows), info, metrics,
                            {"requests": rows, "iterations": log.columns()})

    # -- completing an iteration ---------------------------------------------------------
    def _complete(self, entry: Entry, replica: Replica, now: int, pools: dict[int, KvPool],
                  handed, finish, session, events, counter) -> None:
        state = entry.state
        state.in_flight -= 1
        state.chunk_recomputed += entry.recomputed_tokens
        state.kv_tokens += entry.new_tokens
        if not state.prefill_done:
            state.prefill_scheduled -= entry.new_tokens
            state.prefilled += entry.new_tokens
            # its prompt blocks prefilled so far are there for later prompts to reuse
            pools[replica.index].cache_prefilled(state, state.prefix_keys, state.prefilled)
        if not entry.samples:
            return
        state.generated += 1
        state.token_times_ps.append(now)
        if state.first_token_ps is None:
            state.first_token_ps = now
        if state.generated >= state.request.output_tokens:
            finish(state, now)
            return
        if replica.role == "prefill":
            # Hand over to the decode replica with the most KV left once the requests
            # already sent to it are admitted (lowest index on a tie); KV moves over the NoC.
            targets = [r for r in self.replicas if r.role == "decode"]
            target = max(targets, key=lambda r: (pools[r.index].free_tokens - handed[r.index],
                                                 -r.index))
            handed[target.index] += self._handover_need(state)
            graph = kv_transfer_graph(replica, target, state.kv_tokens, self.kv_bytes_per_token_layer)
            run = session.run(graph, f"kv {state.id} r{replica.index}->r{target.index}", now)
            # The prefill replica keeps the KV until the decode replica takes it (as
            # DistServe and Splitwise do): KV waiting for a decode slot fills the prefill
            # pool and holds back new prompts, instead of being held nowhere while TTFT
            # stays low and the wait moves into the first decode gap.
            state.kv_held_by = replica.index
            state.admitted = False
            state.replica = None
            heapq.heappush(events, (now + run.makespan_ps, next(counter), "kv_ready", (state, target)))


__all__ = ["ServingDriver"]
