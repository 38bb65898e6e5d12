"""Analytic executor: the same task graph in closed form.

Each task starts when its dependencies have finished and, for compute and host tasks,
when its unit is free (a unit runs one op at a time, in program order).  Transfers take
their uncontended closed-form time: the analytic level deliberately ignores contention
in memories and networks, which is what the tlm level adds.  On an uncontended graph the
two agree closely, and that agreement is tested.
"""

from __future__ import annotations

from npusim.executor.base import SegmentRun, account_compute, host_resource
from npusim.hw.devices.base import Device
from npusim.mapping.taskgraph import ComputeTask, HostTask, TaskGraph, TransferTask


def run_analytic(graph: TaskGraph, device: Device, seed: int = 0) -> SegmentRun:
    """Time ``graph`` (already expanded) on ``device`` without simulation events."""
    device.reset_stats()
    count = len(graph.tasks)
    starts, ends = [0] * count, [0] * count
    unit_free: dict[str, int] = {}
    for task in graph.tasks:
        ready = max((ends[dep] for dep in task.deps), default=0)
        if isinstance(task, ComputeTask):
            duration = device.compute_unit(task.unit).op_time_ps(task.op)
            start = max(ready, unit_free.get(task.unit, 0))
            unit_free[task.unit] = start + duration
            account_compute(device, task, duration)
        elif isinstance(task, TransferTask):
            start = ready
            duration = device.transfer_time_ps(task, seed)
            device.account_transfer(task, duration, seed)
        else:
            assert isinstance(task, HostTask)
            resource = host_resource(task)
            start = max(ready, unit_free.get(resource, 0)) if resource else ready
            duration = task.duration_ps
            if resource:
                unit_free[resource] = start + duration
        starts[task.id], ends[task.id] = start, start + duration
    return SegmentRun(graph, starts, ends, device.unit_stats(), events=0)
