"""Analytic executor: the same task graph in closed form.

Each task starts when its dependencies have finished and its resources are free;
ready tasks claim resources in order of ready time, as events would.  A compute or host task holds its unit for its closed-form time.  A
transfer takes its closed-form pipelined time (bottleneck stage + fill), and every
memory it touches and every NoC link on its route serves its bytes first-come-first-
served (a stream queued behind another finishes later), so bandwidth is shared; what the analytic level leaves out is how
concurrent streams interleave inside a memory or a router (bank conflicts, row
misses between streams, arbitration), which the tlm level adds.  On an uncontended
graph the two agree closely, and that agreement is tested.
"""

from __future__ import annotations

import heapq

from npusim.executor.base import SegmentRun, account_compute, host_resource
from npusim.hw.devices.base import Device
from npusim.mapping.taskgraph import ComputeTask, HostTask, TaskGraph, TransferTask


def run_analytic(graph: TaskGraph, device: Device, seed: int = 0) -> SegmentRun:
    """Time ``graph`` (already expanded) on ``device`` without simulation events.

    List scheduling: a task becomes ready when its last dependency ends, and ready
    tasks claim their resources in order of ready time (ties: program order), as the
    event-driven level would serve them; durations are closed-form.
    """
    device.reset_stats()
    count = len(graph.tasks)
    starts, ends = [0] * count, [0] * count
    waiting = [len(task.deps) for task in graph.tasks]
    ready_at = [0] * count
    successors: list[list[int]] = [[] for _ in range(count)]
    for task in graph.tasks:
        for dep in task.deps:
            successors[dep].append(task.id)
    heap = [(0, task.id) for task in graph.tasks if not task.deps]
    heapq.heapify(heap)
    unit_free: dict[str, int] = {}
    free_get = unit_free.get
    tasks = graph.tasks
    pop, push = heapq.heappop, heapq.heappush
    # The loop runs once per task of every timed segment: plain comparisons instead of
    # max() and local names keep it cheap (it dominates analytic LLM runs).
    while heap:
        ready, task_id = pop(heap)
        task = tasks[task_id]
        if type(task) is ComputeTask:
            duration = device.compute_unit(task.unit).op_time_ps(task.op)
            start = free_get(task.unit, 0)
            if start < ready:
                start = ready
            unit_free[task.unit] = start + duration
            account_compute(device, task, duration)
        elif type(task) is TransferTask:
            duration, reservations, accounting = device.analytic_transfer(task, seed)
            # Each memory and link is a first-come-first-served bandwidth server: the
            # transfer starts when ready, queues behind earlier work on every resource
            # it needs, and ends when the last of them has carried its bytes.
            start = end = ready
            for name, busy in reservations:
                served = free_get(name, 0)
                if served < ready:
                    served = ready
                served += busy
                unit_free[name] = served
                if served > end:
                    end = served
            if end - start > duration:
                duration = end - start
            for part, action, busy, size, chunks in accounting:
                stats = part.stats
                stats.busy_ps += busy
                if action == "write":
                    stats.bytes_written += size
                else:
                    stats.bytes_read += size
                stats.transactions += chunks
        else:
            assert isinstance(task, HostTask)
            resource = host_resource(task)
            start = max(ready, free_get(resource, 0)) if resource else ready
            duration = task.duration_ps
            if resource:
                unit_free[resource] = start + duration
        end = start + duration
        starts[task_id], ends[task_id] = start, end
        for successor in successors[task_id]:
            if ready_at[successor] < end:
                ready_at[successor] = end
            waiting[successor] -= 1
            if waiting[successor] == 0:
                push(heap, (ready_at[successor], successor))
    return SegmentRun(graph, starts, ends, device.unit_stats(), events=0)
