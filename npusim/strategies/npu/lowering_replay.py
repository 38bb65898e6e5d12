"""Replaying GEMM lowerings: a partition strategy's ``lower`` recorded once per shape.

Used by every partition strategy (``partition_k``, ``partition_mn``, ``partition_mnk``):
``self._replay = LoweringReplay(self._lower)``.  Split from ``partition.py``, which holds
the strategies' shared geometry and task building blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from npusim.mapping.taskgraph import ComputeTask, HostTask, Op, TaskGraph, TransferTask

if TYPE_CHECKING:
    from npusim.strategies.npu.partition import GemmSpec
    from npusim.strategies.npu.placement import Group

__all__ = ["LoweringReplay"]

#: Stands for the GEMM's name while a lowering is recorded; a replay puts the real one in.
_LABEL = "\x00gemm\x00"

Lowering = Callable[[TaskGraph, "GemmSpec", "Group", Mapping[int, Sequence[int]], int],
                    "dict[int, list[int]]"]


# Task kinds in a recording.
_COMPUTE, _TRANSFER, _HOST, _OTHER = range(4)


@dataclass
class _Recording:
    """Tasks of one lowering on a scratch graph whose first ``placeholders`` tasks stand
    for the ids it waits for (in their order); names and ops carry :data:`_LABEL`.

    Each task is kept as a tuple of strings, ints and its dependency tuple (``_COMPUTE``
    ops by their index in ``ops``): such tuples are not tracked by the garbage collector,
    which would otherwise walk every recorded task on each full collection of a long run.
    """

    placeholders: int
    tasks: list[tuple]
    ops: list[Op]
    outputs: dict[int, list[int]]
    #: Recorded id of the last load each core's DMA queue issued (``TaskGraph.dma_tails``).
    dma_out: dict[int, int]
    #: Recorded ids of the users of each core's last two tiles (``TaskGraph.tile_slots``).
    tiles_out: dict[int, list[int]]
    #: Recorded tasks (by position) that wait for a DMA queue's previous load or a tile
    #: buffer's last user: their dependencies are sorted again on replay, as the
    #: lowering sorts them.
    dma_waiters: frozenset[int]


class LoweringReplay:
    """A strategy's ``lower``, recorded once per shape and replayed with shifted ids.

    A decoder stage lowers the same GEMM shapes on the same cores over and over (q/k/v,
    gate/up, and every layer again), and a lowering is the bulk of building an LLM
    graph.  Between two such calls only the GEMM's name (which only appears in task and
    op names), the ids of the tasks each core waits for and the position of the new
    tasks in the graph differ, and a lowering uses those ids only through their order
    and equality (dependency lists are sorted and de-duplicated).  So a lowering is
    recorded once on a scratch graph, with the ids it waits for replaced by placeholders
    in the same order, and replayed by copying its tasks with the ids mapped back and
    the name put in: the graph is the same as lowering again, task for task.
    """

    def __init__(self, lower: Lowering, size: int = 4096):
        self.lower = lower
        # Recordings kept (least recently used dropped).  A serving run lowers each GEMM
        # at every batch size it meets on every stage's cores: the 300-request Azure
        # replay meets ~2,600 such shapes, and keeping them all (~60 MB) instead of the
        # last 64 saves ~3,100 lowerings, 9.8 s -> 8.6 s of wall time.
        self.size = size
        self._recordings: OrderedDict[tuple, _Recording] = OrderedDict()

    def __call__(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
                 deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        waited = sorted({dep for ids in deps.values() for dep in ids})
        if type(graph) is not TaskGraph or (waited and not 0 <= waited[0] <= waited[-1]
                                            < len(graph)):
            return self.lower(graph, gemm, group, deps, width)  # let it raise as it would
        rank = {dep: index for index, dep in enumerate(waited)}
        pattern = tuple((core, tuple(rank[dep] for dep in ids)) for core, ids in deps.items())
        # The cores whose DMA queue already holds a load (a placeholder each, after the
        # waited ids): usually all of them but for a graph's first operator; then, per
        # core, the users of its tile buffers so far (a placeholder each, up to two).
        queued = tuple(core for core in sorted(graph.dma_tails))
        tiles = tuple((core, len(graph.tile_slots[core])) for core in sorted(graph.tile_slots))
        key = (replace(gemm, name=_LABEL), group, width, pattern, queued, tiles)
        recording = self._recordings.get(key)
        if recording is None:
            recording = self._recordings[key] = self._record(key, len(waited))
            if len(self._recordings) > self.size:
                self._recordings.popitem(last=False)
        else:
            self._recordings.move_to_end(key)
        return _replay(recording, graph, waited + [graph.dma_tails[core] for core in queued]
                       + [task for core, _ in tiles for task in graph.tile_slots[core]],
                       gemm.name)

    def _record(self, key: tuple, waited: int) -> _Recording:
        spec, group, width, pattern, queued, tiles = key
        scratch = TaskGraph()
        for _ in range(waited):
            scratch.host(0, resource="none")
        for core in queued:
            scratch.dma_tails[core] = scratch.host(0, resource="none")
        for core, used in tiles:
            scratch.tile_slots[core] = [scratch.host(0, resource="none") for _ in range(used)]
        placeholders = len(scratch)
        outputs = self.lower(scratch, spec, group, {core: list(ids) for core, ids in pattern},
                             width)
        ops: dict[int, int] = {}  # id(op) -> index in the recording's ops
        shared: list[Op] = []
        tasks: list[tuple] = []
        for task in scratch.tasks[placeholders:]:
            kind = type(task)
            if kind is ComputeTask:
                index = ops.setdefault(id(task.op), len(shared))
                if index == len(shared):
                    shared.append(task.op)
                tasks.append((_COMPUTE, task.deps, task.name, task.unit, index))
            elif kind is TransferTask:
                tasks.append((_TRANSFER, task.deps, task.name, task.src, task.dst,
                              task.size_bytes, task.pattern, task.chunk_bytes))
            elif kind is HostTask:
                tasks.append((_HOST, task.deps, task.name, task.duration_ps, task.resource))
            else:
                tasks.append((_OTHER, task.deps, task.name, task))
        dma_out = {core: tail for core, tail in scratch.dma_tails.items() if tail >= placeholders}
        waiters = frozenset(index for index, task in enumerate(scratch.tasks[placeholders:])
                            if any(waited <= dep < placeholders for dep in task.deps))
        return _Recording(placeholders, tasks, shared, outputs, dma_out,
                          {core: list(used) for core, used in scratch.tile_slots.items()},
                          waiters)


def _replay(recording: _Recording, graph: TaskGraph, waited: list[int], label: str
            ) -> dict[int, list[int]]:
    """Append ``recording``'s tasks to ``graph``, waiting for ``waited`` (the ids the
    lowering waits for, the DMA queues' last loads, then the tile buffers' last users)
    and named after ``label``;
    returns the outputs with real ids."""
    tasks = graph.tasks
    first = len(tasks)
    # Recorded id -> id in ``graph``: placeholders first, then the recorded tasks.
    where = waited + list(range(first, first + len(recording.tasks)))
    at = where.__getitem__
    ops = [replace(op, name=op.name.replace(_LABEL, label)) if _LABEL in op.name else op
           for op in recording.ops]
    append = tasks.append
    waiters = recording.dma_waiters
    for task_id, record in enumerate(recording.tasks, first):
        kind, deps, name = record[0], tuple(map(at, record[1])), record[2].replace(_LABEL, label)
        if task_id - first in waiters:  # a queue's last load may come before a waited id
            deps = tuple(sorted(set(deps)))
        if kind == _COMPUTE:
            append(ComputeTask(record[3], ops[record[4]], deps, name, task_id))
        elif kind == _TRANSFER:
            append(TransferTask(record[3], record[4], record[5], deps, name, record[6],
                                record[7], task_id))
        elif kind == _HOST:
            append(HostTask(record[3], record[4], deps, name, task_id))
        else:
            append(replace(record[3], deps=deps, name=name, id=task_id))
    for core, tail in recording.dma_out.items():
        graph.dma_tails[core] = where[tail]
    for core, used in recording.tiles_out.items():
        graph.tile_slots[core] = [where[task] for task in used]
    return {core: [where[i] for i in ids] for core, ids in recording.outputs.items()}
