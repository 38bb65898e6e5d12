"""Expand collective tasks into point-to-point transfers (and reductions) over the topology.

Executors only run compute, transfer and host tasks; :func:`expand_collectives` rewrites
a graph so that every :class:`CollectiveTask` becomes the transfers its algorithm sends,
in dependency order, followed by a zero-time join task that its dependants wait on.
Because the transfers cross the real network, hop count and link contention show up in
a collective's time (NpuSim §4.1: ring order and placement matter).

Algorithms (``group`` order is the ring order; a placement strategy chooses it):

* ``allgather`` ring: ``P-1`` steps; in each, member ``i`` forwards ``S/P`` bytes to
  ``i+1`` (the block it received in the previous step);
* ``reduce_scatter`` ring: ``P-1`` steps of ``S/P`` bytes, each followed by an
  element-wise add on the receiver's reduction unit;
* ``allreduce`` ring: ``reduce_scatter`` then ``allgather``;
* ``broadcast`` from ``group[0]``: binomial tree, ``ceil(log2 P)`` rounds;
* ``all_to_all``: every member sends ``S/P`` bytes directly to every other member.
"""

from __future__ import annotations

from typing import Callable

from npusim.core.errors import MappingError
from npusim.mapping.taskgraph import (CollectiveTask, ComputeTask, HostTask, Op, TaskGraph,
                                      TransferTask)

ReduceUnit = Callable[[str], "str | None"]


def expand_collectives(graph: TaskGraph, reduce_unit: ReduceUnit,
                       dtype_bytes: int = 2) -> TaskGraph:
    """A copy of ``graph`` with every collective replaced by transfers and reductions.

    ``reduce_unit(endpoint)`` names the compute unit that adds incoming partial sums at
    ``endpoint`` (or ``None`` if reductions are free, e.g. done in the network).
    """
    if not any(isinstance(task, CollectiveTask) for task in graph.tasks):
        return graph
    out = TaskGraph(name=graph.name)
    remap: dict[int, int] = {}
    for task in graph.tasks:
        deps = tuple(remap[dep] for dep in task.deps)
        if isinstance(task, CollectiveTask):
            remap[task.id] = _expand_one(out, task, deps, reduce_unit, dtype_bytes)
        elif isinstance(task, ComputeTask):
            remap[task.id] = out.add(ComputeTask(task.unit, task.op, deps, task.name))
        elif isinstance(task, TransferTask):
            remap[task.id] = out.add(TransferTask(task.src, task.dst, task.size_bytes, deps,
                                                  task.name, task.pattern, task.chunk_bytes))
        else:
            remap[task.id] = out.add(HostTask(task.duration_ps, task.resource, deps, task.name))
    # The DMA queues and tile buffers name tasks: they follow them to their new ids.
    out.dma_tails = {core: remap[task] for core, task in graph.dma_tails.items()}
    out.tile_slots = {core: [remap[task] for task in used]
                      for core, used in graph.tile_slots.items()}
    return out


def _expand_one(out: TaskGraph, task: CollectiveTask, deps: tuple[int, ...],
                reduce_unit: ReduceUnit, dtype_bytes: int) -> int:
    group = task.group
    if len(group) < 1:
        raise MappingError(f"collective {task.name!r} has an empty group")
    if len(set(group)) != len(group):
        twice = next(member for i, member in enumerate(group) if member in group[:i])
        raise MappingError(f"collective {task.name!r} lists member {twice!r} twice in its group "
                           f"{list(group)}; expected each member once")
    if len(group) == 1 or task.size_bytes == 0:
        return out.add(HostTask(0, "none", deps, task.name))
    if task.kind == "allgather":
        last = _ring(out, task, group, deps, task.size_bytes, "ag", None, dtype_bytes)
    elif task.kind == "reduce_scatter":
        last = _ring(out, task, group, deps, task.size_bytes, "rs", reduce_unit, dtype_bytes)
    elif task.kind == "allreduce":
        mid = _ring(out, task, group, deps, task.size_bytes, "rs", reduce_unit, dtype_bytes)
        last = _ring(out, task, group, mid, task.size_bytes, "ag", None, dtype_bytes)
    elif task.kind == "broadcast":
        last = _tree(out, task, group, deps)
    elif task.kind == "all_to_all":
        block = _block(task.size_bytes, len(group))
        last = tuple(out.transfer(src, dst, block, deps, f"{task.name}:{src}->{dst}")
                     for src in group for dst in group if src != dst)
    else:
        raise MappingError(f"collective {task.name!r}: unknown kind {task.kind!r}; expected "
                           "allgather, reduce_scatter, allreduce, broadcast or all_to_all")
    return out.add(HostTask(0, "none", tuple(last), task.name))


def _block(size_bytes: int, members: int) -> int:
    return -(-size_bytes // members)


def _ring(out: TaskGraph, task: CollectiveTask, group: tuple[str, ...], deps: tuple[int, ...],
          size_bytes: int, phase: str, reduce_unit: ReduceUnit | None,
          dtype_bytes: int) -> tuple[int, ...]:
    """``P-1`` ring steps; returns the ids every member's final step ends with."""
    members = len(group)
    block = _block(size_bytes, members)
    ready = [deps] * members  # what member i must wait for before sending this step
    for step in range(members - 1):
        arrived: list[tuple[int, ...]] = [()] * members
        for i, src in enumerate(group):
            dst_index = (i + 1) % members
            dst = group[dst_index]
            tid = out.transfer(src, dst, block, ready[i],
                               f"{task.name}:{phase}{step}:{src}->{dst}")
            done = (tid,)
            unit = reduce_unit(dst) if reduce_unit is not None else None
            if unit is not None:
                op = Op("elementwise", elements=max(1, block // dtype_bytes), dtype_bytes=dtype_bytes,
                        name="reduce_add", inputs=2)  # the received block + its own
                done = (out.compute(unit, op, done, f"{task.name}:{phase}{step}:add@{dst}"),)
            arrived[dst_index] = done
        ready = arrived
    return tuple(tid for member in ready for tid in member)


def _tree(out: TaskGraph, task: CollectiveTask, group: tuple[str, ...],
          deps: tuple[int, ...]) -> tuple[int, ...]:
    """Binomial-tree broadcast from ``group[0]``: in round ``r`` every member that holds
    the data sends it to the member ``2**r`` places on, so ``P`` members are reached in
    ``ceil(log2 P)`` rounds of ``P - 1`` transfers in all (MPICH's broadcast for short
    messages; a chain forwarding the whole message hop after hop takes ``P - 1`` rounds).
    A member's sends go one after another (one injection port).  Returns every
    transfer."""
    ready: dict[int, tuple[int, ...]] = {0: deps}  # member -> what its next send waits for
    sent: list[int] = []
    step = 1
    while step < len(group):
        for src in range(min(step, len(group) - step)):
            dst = src + step
            tid = out.transfer(group[src], group[dst], task.size_bytes, ready[src],
                               f"{task.name}:{group[src]}->{group[dst]}")
            ready[src] = ready[dst] = (tid,)
            sent.append(tid)
        step *= 2
    return tuple(sent)
