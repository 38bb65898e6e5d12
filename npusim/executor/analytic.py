"""Analytic executor: the same task graph in closed form.

Each task starts when its dependencies have finished and its resources are free;
ready tasks claim resources in order of ready time, as events would, except that a
busy compute unit, once free, takes the oldest task waiting for it (program order, as
the tlm level's priority queue).  A compute or host task holds its unit for its
closed-form time.  A transfer takes its closed-form pipelined time (bottleneck stage +
fill).  A NoC's ports and links are shared between the transfers crossing them, as
routers interleave their packets: ``n`` transfers on an injection port, a link or an
ejection port each get ``1/n`` of it (processor sharing), so a core's concurrent sends
share its injection port, and a transfer that arrives later slows the ones already
there, which then end later (their successors wait for the new end).  Every memory a
transfer touches serves its bytes first-come-first-served (a stream queued behind
another finishes later).  The memory that finishes last sets the transfer's pace (with
the NoC) and is held for its bytes' time; on the others its bytes arrive at that pace,
so there it is a *paced stream* taking its share of the bandwidth until the transfer
ends, and later work gets the rest (a 4 MiB tile from HBM into an SRAM three times
faster than the HBM leaves the SRAM two thirds free for the NoC traffic beside it, as
the tlm level's interleaved chunks do, instead of holding it for 16 us at its start).
A chunked transfer (a weight tile moved in 256 KiB bursts) records where its chunks
fall on each memory it crosses, held or paced; work there no longer than one of them
goes between them, as the tlm level interleaves them: it waits for the chunk in
progress when it arrives (not for the whole tile, and not for nothing as an even paced
share would have it), and the chunks after it move later by what it overlaps.  A
compute op on a core whose scratchpad port is shared (``hw.core.sram.shared_port``)
claims that port for its operand bytes the same way as a transfer: held when the
operands take longer than the computation, paced beside it when they take less.  What
the analytic level leaves out is how concurrent streams interleave inside a memory or a
router (bank conflicts, row misses between streams, arbitration, head-of-line blocking
in a router's one-VC input FIFOs), which the tlm level adds.  On an uncontended graph
the two agree closely, and that agreement is tested.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from functools import partial
from itertools import chain, compress, repeat
from operator import attrgetter, not_
from typing import Any

from npusim.executor.base import (OPERAND_STALL, SRAM_OPERAND_PORT, SRAM_OPERAND_READ,
                                  SRAM_OPERAND_WRITTEN, SegmentRun, host_resource,
                                  operand_port_busy, operand_sram_bytes)
from npusim.executor.chunks import ChunkPatterns
from npusim.executor.sharing import finish as _finish
from npusim.executor.sharing import pace as _pace
from npusim.executor.sharing import share as _share
from npusim.hw.devices.base import Device
from npusim.mapping.taskgraph import ComputeTask, HostTask, TaskGraph, TransferTask


def run_analytic(graph: TaskGraph, device: Device, seed: int = 0) -> SegmentRun:
    """Time ``graph`` (already expanded) on ``device`` without simulation events.

    List scheduling: a task becomes ready when its last dependency ends, and ready
    tasks claim their resources in order of ready time (ties: program order), as the
    event-driven level would serve them, except that a busy compute unit, when free,
    takes the oldest task waiting for it (program order); durations are closed-form.
    """
    tasks = graph.tasks
    count = len(tasks)
    starts, ends = [0] * count, [0] * count
    ready_at = [0] * count
    deps_of = list(map(attrgetter("deps"), tasks))
    waiting = list(map(len, deps_of))
    # Successors in compressed form: ``after[first[i]:first[i + 1]]`` are the tasks that
    # wait for task ``i``, in ascending order.  Built from flat lists of ints by C-level
    # iterators and a stable sort: a list per task would be as many container objects as
    # tasks, which the garbage collector then walks again and again in a long run.
    sources = list(chain.from_iterable(deps_of))
    targets = list(chain.from_iterable(map(repeat, range(count), waiting)))
    after = list(map(targets.__getitem__, sorted(range(len(sources)), key=sources.__getitem__)))
    sources.sort()
    first = list(map(partial(bisect_left, sources), range(count + 1)))
    heap = list(compress(range(count), map(not_, waiting)))  # no dependency: ready at 0
    # ``heap`` is sorted (ids ascend), hence already a heap.  Its entries are
    # ``ready_time * count + id``: ordered as (ready time, id) pairs would be (ids are below
    # ``count``), without a tuple per task.
    unit_free: dict[str, int] = {}
    free_get = unit_free.get
    pop, push = heapq.heappop, heapq.heappush
    # Counters are added once per distinct (unit, op) and per distinct transfer shape at
    # the end rather than per task: integer sums, so the totals are the same.
    # ``computes[(unit, id(op))] = [duration, occurrences, unit, op, port, stalled]``
    # (``port``: ``(name, memory, busy ps)`` on a shared scratchpad port, as
    # :func:`operand_port_busy` gives it, else None; ``stalled``:
    # the time its tasks held the unit waiting for operands, in all): equal ops are
    # shared between tasks by the lowerings, so the closed-form time is looked up once.
    computes: dict[tuple[str, int], list] = {}
    compute_get = computes.get
    transfers: dict[int, list] = {}  # id(accounting) -> [accounting, occurrences]
    transfer_get = transfers.get
    analytic_transfer = device.analytic_transfer
    transfer_cache_get = device.analytic_cache.get
    # Busy time of transfers and of host tasks that hold a resource, gathered on the way.
    transfer_busy = host_busy = 0
    # Per unit (an array, a vector unit, a host resource): the ids of the tasks waiting
    # for it, a heap (oldest in program order first), and the one whose heap entry is
    # the unit's wake-up when it is free.
    lines: dict[str, list[int]] = {}
    woken: dict[str, int] = {}

    def wait_in_line(unit: str, task_id: int, free_at: int) -> None:
        """``task_id`` waits for ``unit``, busy until ``free_at`` (or with a line)."""
        line = lines.get(unit)
        if line is None:
            line = lines[unit] = []
        push(line, task_id)
        if unit not in woken:  # the line's wake-up, when the unit is free
            woken[unit] = task_id
            push(heap, free_at * count + task_id)

    # Streams paced by another resource (a tile from HBM through the SRAM, a compute op's
    # operands on a shared port): per resource, ``[start, end, share]`` of each, using
    # ``share`` of its bandwidth over ``[start, end)`` instead of holding it whole.
    paced: dict[str, list[list]] = {}
    paced_get = paced.get
    # Where the chunks of chunked transfers fall on each memory (npusim.executor.chunks):
    # small work there goes between them.
    chunks = ChunkPatterns(free_get, paced_get)
    chunked, chunked_get, longest = chunks.by_memory, chunks.by_memory.get, chunks.longest
    between_chunks, self_chunks = chunks.between, chunks.record

    # The loop runs once per task of every timed segment: plain comparisons instead of
    # max() and local names keep it cheap (it dominates analytic LLM runs).
    # Per NoC port and link: the transfers crossing it, a state of
    # :func:`~npusim.executor.sharing.share`; ``delays`` collects the transfers a
    # newcomer slows, ``(task id, new end)``.  A task whose dependency ends later once it
    # was queued is queued again when its entry comes up (``requeued``: some entry may
    # be too early).
    sharing: dict[str, Any] = {}
    sharing_get = sharing.get
    delays: list[tuple[int, int]] = []
    # Per NoC transfer: its head's path latency, paid once after its shared flit time
    # (a delay moves its end by the flits' new end plus this).
    net_latency: dict[int, int] = {}
    requeued = False
    while heap:
        key = pop(heap)
        task_id = key % count
        if requeued and key // count < ready_at[task_id]:
            push(heap, ready_at[task_id] * count + task_id)  # ready later: queued again
            continue
        task = tasks[task_id]
        kind = type(task)
        taken = False  # the unit is free and chose this task from its line
        if woken:
            holder = (task.unit if kind is ComputeTask
                      else host_resource(task) if kind is HostTask else None)
            if holder is not None and woken.get(holder) == task_id:
                del woken[holder]
                task_id = pop(lines[holder])
                task, taken = tasks[task_id], True
                kind = type(task)
        ready = ready_at[task_id]
        if kind is ComputeTask:
            unit = task.unit
            key = (unit, id(task.op))
            entry = compute_get(key)
            if entry is None:
                op = task.op
                port = operand_port_busy(device, unit, op)
                entry = computes[key] = [device.compute_unit(unit).op_time_ps(op), 0, unit, op,
                                         port, 0]
            duration = entry[0]
            start = free_get(unit, 0)
            if start < ready:
                start = ready
            port = entry[4]
            # An op that finds its unit busy waits in the unit's line; when the unit is
            # free it takes the oldest op waiting (program order), as a core issues its
            # instruction stream, not the one that became ready first: a later operator
            # whose inputs are ready must not overtake the tiles of the one before it,
            # which hold its tile buffers (and its DMA queue) while they wait.  The op
            # claims a shared scratchpad port only when it takes its unit, as the tlm
            # level asks for it: claimed when the op is ready, the port would be booked
            # ahead of transfers that become ready before the op starts.
            line = lines.get(unit)
            if not taken and (line or start > ready):
                wait_in_line(unit, task_id, start)
                continue
            if port is not None:
                # The operands queue behind earlier transfers on the port, and the op
                # ends when both it and its operands are done.  Operands that take less
                # time than the computation stream through the port at the op's pace,
                # beside other traffic, rather than holding it for their whole time.
                name, _, busy = port
                served = free_get(name, 0)
                if served < start:
                    served = start
                streams = paced_get(name)
                done = _finish(served, busy, streams) if streams else served + busy
                if done < start + duration:
                    _pace(paced, name, served, start + duration, busy, ready)
                else:
                    unit_free[name] = done
                    entry[5] += done - start - duration  # held past its compute time
                    duration = done - start
            entry[1] += 1
            unit_free[unit] = start + duration
            if line:  # wake the unit's line when it is free
                woken[unit] = line[0]
                push(heap, (start + duration) * count + line[0])
        elif kind is TransferTask:
            # The device's cache of closed forms, looked up here without a method call
            # (a stage graph has hundreds of transfers; the key is the cache's own).
            cached = transfer_cache_get((task.src, task.dst, task.size_bytes, task.pattern,
                                         task.chunk_bytes))
            duration, reservations, accounting, shared = (
                cached if cached is not None else analytic_transfer(task, seed))
            start = end = ready
            net_end = ready
            if shared is not None:
                # The NoC's ports and links share their bandwidth between the transfers
                # crossing them (processor sharing: routers interleave their packets);
                # one that arrives slows those already there, whose ends move later.
                # States are never changed in place, so resources that carried the
                # same transfers share one state, and this transfer's next state there
                # is worked out once (its route's ports and links often have one).
                names, busy, latency = shared
                net_latency[task_id] = latency
                end = ready + busy
                alone = (end, task_id)  # its state where it is alone
                before = after_state = None
                for name in names:
                    state = sharing_get(name)
                    if state is None or state[0] <= ready:  # idle: all of it
                        sharing[name] = alone
                    elif state is before:
                        sharing[name] = after_state
                    else:
                        later, after_state = _share(state, ready, busy, task_id, delays)
                        sharing[name] = after_state
                        before = state
                        if later > end:
                            end = later
                end += latency
                net_end = end
            # Each memory is a first-come-first-served bandwidth server: the
            # transfer starts when ready, queues behind earlier work on every resource
            # it needs, and ends when the last of them has carried its bytes.
            if len(reservations) == 1:
                name, busy = reservations[0]
                served = free_get(name, 0)
                if served < ready:
                    served = ready
                streams = paced_get(name) if paced else None
                done = unit_free[name] = (_finish(served, busy, streams) if streams
                                          else served + busy)
                if done > end:
                    end = done
            else:
                # Each resource serves the bytes after the work queued on it, slower
                # while paced streams use part of it; the transfer ends with the last.
                # On the resources that finish before it (a fast SRAM behind a slow
                # HBM), its bytes arrive at the transfer's pace: it is a paced stream
                # there, beside later work, instead of holding them from its start.
                services = []
                waited = 0  # the longest wait for a chunk in progress
                for name, busy in reservations:
                    served = free_get(name, 0)
                    patterns = chunked_get(name) if chunked else None
                    between = (between_chunks(patterns, name, busy, ready, served)
                               if patterns and busy <= longest[name] else None)
                    streams = paced_get(name) if paced else None
                    if between is not None:
                        served = between[0]
                        if served - ready > waited:
                            waited = served - ready
                        if streams:  # the chunks' own paced stream is what it waited for
                            for p in between[1]:
                                own = p[6]
                                if own is not None:
                                    streams = [s for s in streams if s is not own]
                    elif served < ready:
                        served = ready
                    done = _finish(served, busy, streams) if streams else served + busy
                    services.append((name, served, busy, done, between))
                    if done > end:
                        end = done
                if waited:
                    # Work that waited for a chunk in progress then moves as it would
                    # alone: all of it starts that much later (a send's bytes cross the
                    # NoC after they leave the source SRAM).
                    later = start + duration
                    if later < net_end:
                        later = net_end
                    later += waited
                    if later > end:
                        end = later
            if end - start > duration:
                duration = end - start
            if len(reservations) > 1:
                # The last resource to finish holds the transfer's pace (its closed-form
                # fill aside): it is booked whole, the others are paced to its end.
                finish = start + duration
                for name, served, busy, done, between in services:
                    if between is not None:
                        # The chunks after it move later by what it overlaps of them
                        # (the transfer's own end aside), and so does a held resource.
                        for p in between[1]:
                            begin, period = p[0], p[1]
                            index = 0 if served <= begin else -(-(served - begin) // period)
                            if index < p[3]:
                                overlap = served + busy - (begin + index * period)
                                if overlap > 0:
                                    p[0] = begin + overlap
                                    p[7] += overlap
                                    if p[5] is not None:
                                        if unit_free.get(name) == p[5]:
                                            unit_free[name] = p[5] + overlap
                                        p[5] += overlap
                        if free_get(name, 0) > served:
                            continue  # it went before the queue's end: nothing to book
                    if done < end:
                        _pace(paced, name, served, finish, busy, ready)
                    else:
                        unit_free[name] = done
                chunk = task.chunk_bytes
                if chunk and task.size_bytes > chunk:
                    self_chunks(task, services, ready, end)
            transfer_busy += duration
            if delays:  # transfers slowed by this one on a shared port or link
                for other, later in delays:
                    later += net_latency[other]
                    if later > ends[other] > ready:  # (not one already done)
                        transfer_busy += later - ends[other]
                        ends[other] = later
                        for successor in after[first[other]:first[other + 1]]:
                            if ready_at[successor] < later:
                                ready_at[successor] = later
                                if not waiting[successor]:  # queued: for too early
                                    requeued = True
                delays.clear()
            entry = transfer_get(id(accounting))
            if entry is None:
                transfers[id(accounting)] = [accounting, 1]
            else:
                entry[1] += 1
        else:
            assert isinstance(task, HostTask)
            resource = host_resource(task)
            # A host task that holds a unit (a taskgraph workload may name a compute
            # unit) waits in its line like an op.
            start = ready
            line = None
            if resource:
                start = free_get(resource, 0)
                if start < ready:
                    start = ready
                line = lines.get(resource)
                if not taken and (line or start > ready):
                    wait_in_line(resource, task_id, start)
                    continue
            duration = task.duration_ps
            if resource:
                unit_free[resource] = start + duration
                host_busy += duration
            if line:
                woken[resource] = line[0]
                push(heap, (start + duration) * count + line[0])
        end = start + duration
        starts[task_id] = start
        ends[task_id] = end
        for successor in after[first[task_id]:first[task_id + 1]]:
            if ready_at[successor] < end:
                ready_at[successor] = end
            waiting[successor] -= 1
            if not waiting[successor]:
                push(heap, ready_at[successor] * count + successor)
    busy: dict[str, int] = {}
    for duration, occurrences, _, op, _, stalled in computes.values():
        name = op.name or op.kind  # as tlm: from start to end, operand stalls included
        busy[name] = busy.get(name, 0) + duration * occurrences + stalled
    if transfers:
        busy["transfer"] = transfer_busy
    if host_busy:
        busy["host"] = host_busy
    return SegmentRun(graph, starts, ends, _unit_stats(device, computes, transfers), events=0,
                      extra={"busy_by_name": busy})


_COUNTERS = ("busy_ps", "ops", "flops", "bytes_read", "bytes_written", "transactions")


def _unit_stats(device: Device, computes: dict, transfers: dict) -> dict[str, dict[str, int]]:
    """Per-unit counters of one segment, summed straight from the distinct ops and
    transfer shapes it ran: the same dict :meth:`Device.unit_stats` gives after counting
    on the parts (busy parts only, in the device's part order), without resetting and
    reading every part of a large chip for each segment.  A routed network also gets
    ``hop_bytes`` (bytes x router-to-router hops, from each transfer shape's route), so
    that energy charges every hop crossed, as the tlm level's per-link bytes do.  A compute
    unit gets its operands' scratchpad traffic (``sram_operand_bytes_read``/``_written``),
    once per distinct op times its occurrences, when nonzero (as tlm counts them); on a
    shared port also its ``operand_stall_ps``, and the scratchpad its ``operand_port_ps``."""
    names = {id(part): name for name, part in device.parts.items()}
    counts: dict[str, list[int]] = {}
    hop_bytes: dict[str, int] = {}  # only parts whose stages have a known hop count
    extras: dict[str, dict[str, int]] = {}  # part -> its nonzero extra counters
    parts = device.parts

    def add_extra(name: str, key: str, amount: int) -> None:
        if amount:
            into = extras.setdefault(name, {})
            into[key] = into.get(key, 0) + amount

    for duration, occurrences, unit, op, port, stalled in computes.values():
        row = counts.get(unit)
        if row is None:
            row = counts[unit] = [0] * 6
        row[0] += duration * occurrences
        row[1] += occurrences
        row[2] += op.flops * occurrences
        read, written = operand_sram_bytes(parts[unit], op)
        add_extra(unit, SRAM_OPERAND_READ, read * occurrences)
        add_extra(unit, SRAM_OPERAND_WRITTEN, written * occurrences)
        add_extra(unit, OPERAND_STALL, stalled)
        if port is not None:
            add_extra(names[id(port[1])], SRAM_OPERAND_PORT, port[2] * occurrences)
    for accounting, occurrences in transfers.values():
        for part, action, busy, size, chunks, hops_x_bytes in accounting:
            name = names[id(part)]
            row = counts.get(name)
            if row is None:
                row = counts[name] = [0] * 6
            row[0] += busy * occurrences
            row[4 if action == "write" else 3] += size * occurrences
            row[5] += chunks * occurrences
            if hops_x_bytes is not None:
                hop_bytes[name] = hop_bytes.get(name, 0) + hops_x_bytes * occurrences
    order = {name: index for index, name in enumerate(device.parts)}
    out = {}
    # A part is reported when any counter is nonzero, its extras included (a scratchpad
    # that only served operands on a shared port), in the device's part order, with its
    # extras sorted by name after the common counters, as tlm's ``UnitStats.as_dict``.
    for name in sorted(counts.keys() | extras.keys(), key=order.__getitem__):
        row = counts.get(name, [0] * 6)
        extra = extras.get(name)
        if not (any(row) or extra):
            continue
        out[name] = values = dict(zip(_COUNTERS, row))
        if extra:
            values.update(sorted(extra.items()))
        if name in hop_bytes:
            values["hop_bytes"] = hop_bytes[name]
    return out
