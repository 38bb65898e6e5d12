"""The task graph: the one IR every device shares.

Strategies lower a batch (or a micro-benchmark) into a :class:`TaskGraph`; executors run
it on a device.  Four task kinds exist:

* :class:`ComputeTask` – an :class:`Op` on one compute unit (``core3.sa``);
* :class:`TransferTask` – bytes from one endpoint to another (``core3.hbm`` →
  ``core3.sram`` is a DMA; ``core0.sram`` → ``core5.sram`` crosses the NoC);
* :class:`CollectiveTask` – an AllGather / AllReduce / … over a group of endpoints, which
  :mod:`npusim.mapping.collectives` expands into transfers over the topology;
* :class:`HostTask` – a fixed delay on a host resource (dispatch, synchronisation).

Tasks refer to their dependencies by integer id; ids are dense and assigned in insertion
order, so a graph built twice the same way is identical (and hashes identically: that is
what memoisation keys on).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Union

from npusim.core.errors import MappingError


@dataclass(frozen=True, slots=True)
class Op:
    """A compute operation with its exact shape.

    ``kind`` is one of ``gemm`` (``m x k`` times ``k x n``, repeated ``batch`` times),
    ``elementwise`` (``elements`` values, ``flops_per_element`` each: norms, activations,
    RoPE, residual adds), ``softmax`` and ``reduce``.  ``dtype_bytes`` is the operand width;
    ``inputs`` how many tensors of ``elements`` values an element-wise op reads (2 for a
    residual add, SiLU(gate) x up, or a partial sum added to a received one).
    """

    kind: str
    m: int = 1
    k: int = 1
    n: int = 1
    batch: int = 1
    elements: int = 0
    flops_per_element: int = 1
    dtype_bytes: int = 2
    name: str = ""
    inputs: int = 1

    @property
    def flops(self) -> int:
        if self.kind == "gemm":
            return 2 * self.batch * self.m * self.k * self.n
        return self.elements * self.flops_per_element

    @property
    def input_bytes(self) -> int:
        if self.kind == "gemm":
            return self.batch * (self.m * self.k + self.k * self.n) * self.dtype_bytes
        return self.inputs * self.elements * self.dtype_bytes

    @property
    def output_bytes(self) -> int:
        if self.kind == "gemm":
            return self.batch * self.m * self.n * self.dtype_bytes
        return self.elements * self.dtype_bytes

    def signature(self) -> tuple:
        return (self.kind, self.m, self.k, self.n, self.batch, self.elements,
                self.flops_per_element, self.dtype_bytes, self.inputs)


@dataclass(slots=True)
class ComputeTask:
    unit: str
    op: Op
    deps: tuple[int, ...] = ()
    name: str = ""
    id: int = -1

    def signature(self) -> tuple:
        return ("C", self.unit, self.op.signature(), self.deps)


@dataclass(slots=True)
class TransferTask:
    """Move ``size_bytes`` from ``src`` to ``dst`` endpoints.

    ``pattern`` is ``sequential`` or ``random``; ``chunk_bytes`` is the request size a
    random access uses (and the burst-group size for memory endpoints, if set).
    """

    src: str
    dst: str
    size_bytes: int
    deps: tuple[int, ...] = ()
    name: str = ""
    pattern: str = "sequential"
    chunk_bytes: int = 0
    id: int = -1

    def signature(self) -> tuple:
        return ("T", self.src, self.dst, self.size_bytes, self.pattern, self.chunk_bytes, self.deps)


@dataclass(slots=True)
class CollectiveTask:
    """A collective over ``group`` endpoints (``allgather``, ``allreduce``, ``reduce_scatter``,
    ``broadcast``, ``all_to_all``); ``size_bytes`` is each member's full output size."""

    kind: str
    group: tuple[str, ...]
    size_bytes: int
    deps: tuple[int, ...] = ()
    name: str = ""
    algorithm: str = "ring"
    id: int = -1

    def signature(self) -> tuple:
        return ("X", self.kind, self.group, self.size_bytes, self.algorithm, self.deps)


@dataclass(slots=True)
class HostTask:
    """A fixed delay on a host-side resource (``host``): dispatch, sync, CPU fallback."""

    duration_ps: int
    resource: str = "host"
    deps: tuple[int, ...] = ()
    name: str = ""
    id: int = -1

    def signature(self) -> tuple:
        return ("H", self.resource, self.duration_ps, self.deps)


Task = Union[ComputeTask, TransferTask, CollectiveTask, HostTask]


@dataclass
class TaskGraph:
    """A DAG of tasks with dense integer ids (insertion order is a topological order)."""

    tasks: list[Task] = field(default_factory=list)
    name: str = ""
    #: While a graph is built: the last off-chip load each DMA queue (a core) has issued.
    #: A core's DMA runs its loads in program order across operators, so an operator's
    #: first weight tile queues behind the previous operator's last one.
    dma_tails: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    #: While a graph is built: per core, the tasks that used the last two tiles loaded
    #: into its two tile buffers (weight tiles and spilled-KV tiles share them, across
    #: operators), so a load waits until the tile two loads back has been used.  Once
    #: built, a chain part's prefetch profile reads when its last tiles were used.
    tile_slots: dict[int, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def add(self, task: Task) -> int:
        """Append ``task`` (its deps must already be in the graph); return its id."""
        task_id = len(self.tasks)
        for dep in task.deps:
            if not 0 <= dep < task_id:
                raise MappingError(f"task {task.name or task_id!r} depends on unknown task {dep}")
        task.id = task_id
        self.tasks.append(task)
        return task_id

    def compute(self, unit: str, op: Op, deps: Iterable[int] = (), name: str = "") -> int:
        return self.add(ComputeTask(unit, op, tuple(deps), name or op.name or op.kind))

    def transfer(self, src: str, dst: str, size_bytes: int, deps: Iterable[int] = (),
                 name: str = "", pattern: str = "sequential", chunk_bytes: int = 0) -> int:
        return self.add(TransferTask(src, dst, int(size_bytes), tuple(deps),
                                     name or f"{src}->{dst}", pattern, chunk_bytes))

    def collective(self, kind: str, group: Iterable[str], size_bytes: int,
                   deps: Iterable[int] = (), name: str = "", algorithm: str = "ring") -> int:
        return self.add(CollectiveTask(kind, tuple(group), int(size_bytes), tuple(deps),
                                       name or kind, algorithm))

    def host(self, duration_ps: int, deps: Iterable[int] = (), name: str = "",
             resource: str = "host") -> int:
        return self.add(HostTask(int(duration_ps), resource, tuple(deps), name or "host"))

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def sinks(self) -> list[int]:
        """Ids of tasks nothing depends on."""
        used = {dep for task in self.tasks for dep in task.deps}
        return [task.id for task in self.tasks if task.id not in used]

    def signature(self) -> str:
        """Stable structural hash: identical graphs (ops, shapes, placement) hash equal."""
        digest = hashlib.blake2b(digest_size=16)
        for task in self.tasks:
            digest.update(repr(task.signature()).encode())
        return digest.hexdigest()

    def to_networkx(self):
        """The graph as a ``networkx.DiGraph`` (for analysis and plotting)."""
        import networkx as nx

        graph = nx.DiGraph()
        for task in self.tasks:
            graph.add_node(task.id, task=task, name=task.name)
            graph.add_edges_from((dep, task.id) for dep in task.deps)
        return graph
