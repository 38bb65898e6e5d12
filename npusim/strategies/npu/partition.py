"""GEMM tensor partitions on a TP group of NPU cores (NpuSim §4.1, Fig. 3, Table 2).

A partition strategy lowers one GEMM ``C[m, n] = A[m, k] @ W[k, n]`` (``batch`` times)
onto the cores of a :class:`~npusim.strategies.npu.placement.Group` as compute tasks on
each core's systolic array (``core{i}.sa``), reductions on its vector unit
(``core{i}.vec``), HBM->SRAM weight loads (``core{i}.hbm -> core{i}.sram``) and NoC
transfers between SRAMs, all in ring order.  Three strategies are registered under the
``partition`` category, one file each:

* ``mn``  (:mod:`.partition_mn`): 1-D M/N partition, operand rotation = ring AllGather;
* ``k``   (:mod:`.partition_k`): 1-D K partition, ring AllReduce of partial outputs;
* ``mnk`` (:mod:`.partition_mnk`): 2-D, AllReduce along grid rows + AllGather along columns.

Each module docstring and ``docs/partition.md`` give the per-core memory and
communication formulas (the paper's Table 2, derived from the ring algorithms) that
:meth:`PartitionStrategy.cost` returns.

Shared assumptions:

* the input activation is already on every core in the slice that strategy needs (the
  previous operator leaves it there; ``deps[core]`` says when) and the output is left in
  the strategy's natural layout (each strategy's docstring says which);
* the unit of pipelining is a *tile* of the rotating operand of about
  ``GemmSpec.weight_tile_bytes``: computing tile ``t`` overlaps moving tile ``t + 1``;
* sends from one core are serialised (one NoC injection port per core, as are the HBM
  loads of one core's DMA), so the analytic executor, which ignores contention, does
  not overlap a core's sends with each other;
* collectives are expanded here into explicit transfers rather than emitted as
  :class:`~npusim.mapping.taskgraph.CollectiveTask`: a collective task waits for every
  member before any member sends, whereas the fused ring steps here let each core start
  as soon as its own data is ready, which is how compute overlaps communication.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
import math
from math import isqrt
from typing import Any, Callable, Literal, Mapping, Protocol, Sequence

from npusim.core import registry
from npusim.core.errors import MappingError
from npusim.core.registry import PartConfig
from npusim.mapping.taskgraph import Op, TaskGraph
from npusim.strategies.npu.placement import Group, ring_hops

__all__ = ["GemmSpec", "PartitionCost", "PartitionStrategy", "get_partition", "split",
           "splits", "ceil_div", "tile_extents", "tile_extent", "Ports", "rotate_rings",
           "ring_allreduce", "join_outputs", "max_ring_hops", "grid_of", "square_rows",
           "rotation_buffer_bytes"]


@dataclass(frozen=True)
class GemmSpec:
    """One GEMM ``C[m, n] = A[m, k] @ W[k, n]`` (repeated ``batch`` times) to partition.

    ``weights_in`` says where each core's weight slice lives: ``sram`` (resident) or
    ``hbm`` (streamed HBM->SRAM by the core's DMA in tiles of ``weight_tile_bytes``,
    double-buffered, before use).  ``weight_tile_bytes`` is also the pipelining grain of
    the rotating operand: larger tiles mean fewer simulated events but less overlap.
    """

    name: str
    m: int
    k: int
    n: int
    dtype_bytes: int = 2
    batch: int = 1
    weights_in: Literal["sram", "hbm"] = "sram"
    weight_tile_bytes: int = 1 << 20
    #: Memory transaction size of weight streams (0: the device's DMA burst group).
    #: Bulk sequential streams can use large burst groups: fewer simulated events,
    #: the DRAM channel still times every burst inside each group.
    stream_chunk_bytes: int = 0
    #: Columns of the systolic array the GEMM runs on (0: unknown; tiles then align to
    #: TILE_ALIGN only).
    array_cols: int = 0

    def columns_per_tile(self, bytes_per_column: int) -> int:
        """Columns per streamed weight tile whose columns take ``bytes_per_column``."""
        return tile_extent(self.weight_tile_bytes, bytes_per_column,
                           tile_align(self.array_cols), self.array_cols)

    def __post_init__(self) -> None:
        for label in ("m", "k", "n", "dtype_bytes", "batch", "weight_tile_bytes"):
            if getattr(self, label) < 1:
                raise MappingError(f"GEMM {self.name!r}: {label}={getattr(self, label)} "
                                   "must be >= 1")
        if self.array_cols < 0:
            raise MappingError(f"GEMM {self.name!r}: array_cols={self.array_cols} must be >= 0 "
                               "(0: unknown)")
        if self.weights_in not in ("sram", "hbm"):
            raise MappingError(f"GEMM {self.name!r}: weights_in={self.weights_in!r}; "
                               "expected 'sram' or 'hbm'")

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n

    @property
    def elem_bytes(self) -> int:
        """Bytes of one ``(i, j)`` element across the batch (``dtype_bytes * batch``)."""
        return self.dtype_bytes * self.batch


@dataclass(frozen=True)
class PartitionCost:
    """NpuSim Table 2 quantities for one core (bytes / hops).

    ``input_bytes``, ``weight_bytes``, ``output_bytes``: the slices a core holds;
    ``buffer_bytes``: what the lowering holds besides them (the MN/MNK rotation's two
    block buffers, and with ``rotate: input`` a streamed weight slice loaded whole; the
    K partition's HBM tiles use the core's shared tile buffers and count 0 here);
    ``comm_bytes``: total bytes one core sends over the NoC during the GEMM (exact when
    every split is even, else the largest core's, up to rounding); ``max_hops``: the
    longest single ring step on the placement.
    """

    input_bytes: int
    weight_bytes: int
    output_bytes: int
    comm_bytes: int
    max_hops: int
    buffer_bytes: int = 0

    @property
    def working_set_bytes(self) -> int:
        """SRAM one core needs for the GEMM besides its weight slice: its input and
        output slices and the lowering's buffers."""
        return self.input_bytes + self.output_bytes + self.buffer_bytes


class PartitionStrategy(Protocol):
    """What the LLM lowering calls to place one GEMM on a TP group."""

    def lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
              deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """Add ``gemm``'s tasks on ``group.cores`` to ``graph``.

        ``deps[core]``: task ids after which that core's input slice is ready (missing
        cores: ready at once).  Returns, per core, the task ids after which that core's
        output slice is complete.  ``width`` is the mesh width (for hop counts)."""
        ...

    def cost(self, gemm: GemmSpec, group: Group, width: int) -> PartitionCost:
        """Closed-form per-core memory, communication and hops (Table 2)."""
        ...


def get_partition(kind_or_config: str | PartConfig | Mapping[str, Any]) -> PartitionStrategy:
    """The strategy for ``"mn"`` / ``"k"`` / ``"mnk"``, a config object, or a mapping such
    as ``{"kind": "mn", "rotate": "input"}`` (validated against the registered config)."""
    if isinstance(kind_or_config, str):
        kind_or_config = {"kind": kind_or_config}
    if isinstance(kind_or_config, Mapping):
        kind = kind_or_config.get("kind")
        entry = registry.lookup("partition", str(kind))
        config = entry.config.model_validate(dict(kind_or_config))
    else:
        config = kind_or_config
    return registry.build("partition", config)


# -- sizes ------------------------------------------------------------------------------

def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def split(total: int, parts: int, index: int) -> int:
    """Size of part ``index`` when ``total`` is split into ``parts`` balanced parts."""
    return total // parts + (1 if index < total % parts else 0)


def splits(total: int, parts: int) -> list[int]:
    return [split(total, parts, i) for i in range(parts)]


#: Tile extents are rounded down to a multiple of this many rows/columns (when at least
#: that large) so that tiling adds no partial systolic-array folds: 128 is a multiple of
#: every preset's array width (32, 64, 128).  Another width aligns to its least common
#: multiple with 128, or to the width itself when a tile is smaller than that.
TILE_ALIGN = 128


def tile_align(array_cols: int) -> int:
    """The tile alignment for an array ``array_cols`` wide (``TILE_ALIGN`` for widths that
    divide it, as every preset's does; else their least common multiple)."""
    return math.lcm(TILE_ALIGN, max(1, array_cols))


def tile_extent(tile_bytes: int, bytes_per_unit: int, align: int = TILE_ALIGN,
                array_cols: int = 0) -> int:
    """Rows/columns per tile so that a tile is at most about ``tile_bytes`` (at least one;
    a multiple of ``align`` when one fits, else of ``array_cols`` when one of those fits:
    a 96- or 112-wide array got partial folds in every tile from a 128 alignment)."""
    extent = max(1, tile_bytes // max(1, bytes_per_unit))
    if extent >= align:
        return extent // align * align
    if array_cols and align != TILE_ALIGN and extent >= array_cols:
        # (a width dividing 128 keeps narrow tiles as they are, as before)
        return extent // array_cols * array_cols
    return extent


def tile_extents(extent: int, per_tile: int) -> list[int]:
    """``extent`` cut into tiles of ``per_tile`` (the last one shorter); ``[]`` if empty."""
    return [min(per_tile, extent - start) for start in range(0, extent, per_tile)]


def gemm_op(gemm: GemmSpec, m: int, k: int, n: int) -> Op:
    return _op("gemm", gemm.name, gemm.dtype_bytes, gemm.batch, m, k, n, 0)


def shared_gemm(name: str, dtype_bytes: int, batch: int, m: int, k: int, n: int) -> Op:
    """A GEMM op shared by every equal tile (see :func:`_op`)."""
    return _op("gemm", name, dtype_bytes, batch, m, k, n, 0)


def add_op(gemm: GemmSpec, elements: int) -> Op:
    """Element-wise add of an incoming partial sum (``elements`` across the batch)."""
    return _op("elementwise", "reduce_add", gemm.dtype_bytes, 1, 1, 1, 1, max(1, elements),
               inputs=2)  # its own partial sum and the received one


@lru_cache(maxsize=4096)
def _op(kind: str, name: str, dtype_bytes: int, batch: int, m: int, k: int, n: int,
        elements: int, inputs: int = 1) -> Op:
    """Equal ops are one shared (immutable) object: a lowering emits the same tile op
    on every core and step, and the analytic executor then looks its time up once."""
    return Op(kind, m=m, k=k, n=n, batch=batch, elements=elements, dtype_bytes=dtype_bytes,
              name=name, inputs=inputs)


# -- placement geometry ----------------------------------------------------------------

def max_ring_hops(rings: Sequence[Sequence[int]], width: int) -> int:
    """The longest single step over every ring (0 if no ring has two members)."""
    return max((h for ring in rings for h in ring_hops(tuple(ring), width)), default=0)


def square_rows(tp: int) -> int:
    """Rows of the most square ``rows x cols`` factorisation of ``tp`` (rows <= cols)."""
    return max(r for r in range(1, isqrt(tp) + 1) if tp % r == 0)


def grid_of(group: Group, rows: int = 0) -> tuple[tuple[int, ...], ...]:
    """The group as a 2-D grid: its own grid if it has one (``rows > 1``) and ``rows`` is
    not forced, else the ring order read row by row into ``rows`` (0: most square)."""
    tp = len(group.cores)
    if rows == 0 and group.rows > 1:
        return group.grid
    rows = rows or square_rows(tp)
    if tp % rows:
        raise MappingError(f"workload.partition.rows: a grid of {rows} rows does not divide the "
                           f"TP group of {tp} cores; expected a divisor of {tp} (or 0 for the "
                           "most square grid)")
    if rows == group.rows:
        return group.grid
    cols = tp // rows
    return tuple(tuple(group.cores[r * cols:(r + 1) * cols]) for r in range(rows))


# -- task building blocks --------------------------------------------------------------

class Ports:
    """Serialises each core's NoC sends (one injection port, per operator) and HBM loads
    (one DMA queue per core for the whole graph, ``graph.dma_tails``), and gives tile
    loads one of the core's two tile buffers (``graph.tile_slots``).

    Every send/load depends on the previous one issued by the same core, in creation
    order; creation order is topological, so this adds no cycle.  Loads queue across
    operators: without that, every operator's first tiles would be issued at once at
    the start of a stage, ahead of the tiles the first operator still needs.  Tile
    buffers are shared across operators and between weight and spilled-KV tiles because
    the SRAM plan reserves two tiles per core (``llm_memory.STREAM_BUFFERS``): the next
    operator's first tile loads once the tile two loads back has been used, not into a
    third buffer."""

    def __init__(self, graph: TaskGraph, load_chunk_bytes: int = 0):
        self.graph = graph
        self.load_chunk_bytes = load_chunk_bytes
        self._send: dict[int, int] = {}
        self.sent_bytes: dict[int, int] = {}

    def send(self, src: int, dst: int, size_bytes: int, deps: Sequence[int], name: str) -> int:
        chain = [self._send[src]] if src in self._send else []
        tid = self.graph.transfer(f"core{src}.sram", f"core{dst}.sram", size_bytes,
                                  _unique(list(deps) + chain), name)
        self._send[src] = tid
        self.sent_bytes[src] = self.sent_bytes.get(src, 0) + int(size_bytes)
        return tid

    def load(self, core: int, size_bytes: int, deps: Sequence[int], name: str) -> int:
        tails = self.graph.dma_tails
        chain = [tails[core]] if core in tails else []
        tid = self.graph.transfer(f"core{core}.hbm", f"core{core}.sram", size_bytes,
                                  _unique(list(deps) + chain), name,
                                  chunk_bytes=self.load_chunk_bytes)
        tails[core] = tid
        return tid

    def load_tile(self, core: int, size_bytes: int, deps: Sequence[int], name: str) -> int:
        """A load into one of ``core``'s two tile buffers: it also waits until the tile
        loaded two tile loads earlier has been used (:meth:`tile_used`)."""
        used = self.graph.tile_slots.get(core)
        free = [used[-2]] if used and len(used) >= 2 else []
        return self.load(core, size_bytes, list(deps) + free, name)

    def tile_used(self, core: int, task: int) -> None:
        """``task`` is the last to use the tile ``core`` loaded last (call once per
        :meth:`load_tile`, in the same order)."""
        used = self.graph.tile_slots.setdefault(core, [])
        used.append(task)
        del used[:-2]


def rotation_buffer_bytes(gemm: GemmSpec, ring_size: int, rotate: str, block_bytes: int,
                          stationary_weight_bytes: int) -> int:
    """SRAM :func:`rotate_rings` holds per core besides the input and output slices (at
    most; tiles computed as they arrive hold less).

    A ring of ``R`` members receives ``R - 1`` blocks of ``block_bytes``, two at a time
    (a block arrives once the one two steps back has been used and forwarded).  A
    streamed own weight block (``rotate == "weight"``) is loaded into one of those two
    buffers, so it needs ``min(2, R)`` for ``R > 1`` (alone, it streams through the
    core's shared tile buffers); a resident one lives with the weights, and an own
    input block is the input slice.  With ``rotate == "input"`` a streamed
    stationary weight slice is loaded whole and kept for every step
    (``stationary_weight_bytes``)."""
    streamed = gemm.weights_in == "hbm"
    received = ring_size if rotate == "weight" and streamed and ring_size > 1 else ring_size - 1
    return (min(2, received) * block_bytes
            + (stationary_weight_bytes if rotate == "input" and streamed else 0))


def _unique(ids: Sequence[int]) -> list[int]:
    return sorted(set(ids))


def join_outputs(graph: TaskGraph, label: str, outputs: Mapping[int, Sequence[int]]
                 ) -> dict[int, list[int]]:
    """One zero-time join per core over the tasks that complete its output, so the next
    operator depends on a single id per core."""
    return {core: [graph.host(0, _unique(ids), f"{label}:out@core{core}", resource="none")]
            for core, ids in outputs.items()}


#: ``on_step(step, partials)`` -> per-core extra output ids; ``partials`` maps
#: ``(ring index, ring position, tile index)`` to ``(compute id, tile extent)``.
StepHook = Callable[[int, dict[tuple[int, int, int], tuple[int, int]]], dict[int, list[int]]]


def rotate_rings(ports: Ports, gemm: GemmSpec, rings: Sequence[Sequence[int]],
                 k_parts: Sequence[int], stationary: Sequence[int], rotating: Sequence[int],
                 rotate: Literal["weight", "input"], per_tile: int,
                 ready: Mapping[int, Sequence[int]], label: str,
                 on_step: StepHook | None = None) -> dict[int, list[int]]:
    """Ring rotation (AllGather fused with compute) on every ring, in lock step.

    Ring ``c`` holds the K slice of ``k_parts[c]`` rows; position ``p`` of each ring keeps
    the *stationary* operand slice of extent ``stationary[p]`` (input rows of A if
    ``rotate == "weight"``, weight columns of W if ``rotate == "input"``) and starts with
    rotating block ``p`` of extent ``rotating[p]`` (W columns / A rows).  In step ``s``
    position ``p`` multiplies block ``(p - s) mod R`` tile by tile while forwarding each
    tile to ``p + 1``; after ``R`` steps every position has met every block.

    Receive buffers hold two blocks: block ``s`` may only arrive once block ``s - 2`` has
    been multiplied and forwarded (double buffering at block granularity, so step ``s``
    computes while step ``s + 1`` moves).  Weights in HBM are loaded by the DMA in tiles,
    the rotating own block into its block slot (``rotate == "weight"``) or the stationary
    slice once (``rotate == "input"``; it is reused every step, assumed to fit in SRAM).

    Returns, per core, the compute ids (plus whatever ``on_step`` adds) of its output.
    """
    graph, R = ports.graph, len(stationary)
    tiles = [tile_extents(extent, per_tile) for extent in rotating]
    outputs: dict[int, list[int]] = {core: [] for ring in rings for core in ring}
    stationary_ready: dict[int, list[int]] = {}
    for ring, k_loc in zip(rings, k_parts):
        for p, core in enumerate(ring):
            own = list(ready.get(core, ()))
            if rotate == "input" and gemm.weights_in == "hbm":
                # A weight column has k_loc elements like an input row, so the rotating
                # tile extent also cuts the stationary slice into ~weight_tile_bytes loads.
                load = -1
                for t, cols in enumerate(tile_extents(stationary[p], per_tile)):
                    load = ports.load(core, k_loc * cols * gemm.elem_bytes, (),
                                      f"{label}:load W.{t}@core{core}")
                own = own + [load]
            stationary_ready[core] = own
    # have[(c, p, t)]: ids after which tile t of the block position p holds is in SRAM.
    have: dict[tuple[int, int, int], list[int]] = {}
    consumed: dict[tuple[int, int, int], list[int]] = {}  # (step, c, p) -> computes+sends
    for s in range(R):
        partials: dict[tuple[int, int, int], tuple[int, int]] = {}
        new_have: dict[tuple[int, int, int], list[int]] = {}
        for c, (ring, k_loc) in enumerate(zip(rings, k_parts)):
            for p, core in enumerate(ring):
                block, prev = (p - s) % R, (p - 1) % R
                used = consumed.setdefault((s, c, p), [])
                for t, ext in enumerate(tiles[block]):
                    tile_bytes = ext * k_loc * gemm.elem_bytes
                    if s == 0:
                        if rotate == "input":
                            data = list(ready.get(core, ()))
                        elif gemm.weights_in == "hbm" and R == 1:
                            # nothing rotates: the weights stream through the core's
                            # two tile buffers, as the K partition's do
                            data = [ports.load_tile(core, tile_bytes, (),
                                                    f"{label}:load W{block}.{t}@core{core}")]
                        elif gemm.weights_in == "hbm":
                            data = [ports.load(core, tile_bytes, (),
                                               f"{label}:load W{block}.{t}@core{core}")]
                        else:
                            data = []
                    else:
                        buffer_free = consumed.get((s - 2, c, p), []) if s >= 2 else []
                        src = ring[prev]
                        send = ports.send(src, core, tile_bytes,
                                          have[(c, prev, t)] + buffer_free,
                                          f"{label}:s{s} blk{block}.{t}:core{src}->core{core}")
                        consumed[(s - 1, c, prev)].append(send)
                        data = [send]
                    new_have[(c, p, t)] = data
                    m, n = (stationary[p], ext) if rotate == "weight" else (ext, stationary[p])
                    cid = graph.compute(f"core{core}.sa", gemm_op(gemm, m, k_loc, n),
                                        _unique(data + stationary_ready[core]),
                                        f"{label}:s{s} blk{block}.{t}@core{core}")
                    if s == 0 and R == 1 and rotate == "weight" and gemm.weights_in == "hbm":
                        ports.tile_used(core, cid)
                    used.append(cid)
                    partials[(c, p, t)] = (cid, ext)
                    outputs[core].append(cid)
        have = new_have
        if on_step is not None:
            for core, ids in on_step(s, partials).items():
                outputs[core].extend(ids)
    return outputs


def ring_allreduce(ports: Ports, gemm: GemmSpec, ring: Sequence[int], elements: int,
                   partial: Sequence[int], label: str) -> dict[int, list[int]]:
    """Ring AllReduce (reduce-scatter then all-gather) of ``elements`` values (across the
    batch) whose partial sums are produced on ``ring[i]`` by task ``partial[i]``.

    Reduce-scatter step ``s``: position ``q`` sends chunk ``q - s`` to ``q + 1``, which adds
    it on its vector unit; after ``C - 1`` steps ``q`` owns the full chunk ``q + 1``.
    All-gather step ``s``: ``q`` forwards chunk ``q + 1 - s``.  Each member sends
    ``2 (C - 1) / C * elements * dtype_bytes``.  Returns, per core, the ids completing
    its copy of the reduced result."""
    C = len(ring)
    graph = ports.graph
    if C == 1:
        return {ring[0]: [partial[0]]}
    chunks = splits(elements, C)
    acc = [[partial[q]] for q in range(C)]  # latest accumulation of the chunk q sends next
    for s in range(C - 1):
        nxt: list[list[int]] = [[] for _ in range(C)]
        for q, src in enumerate(ring):
            chunk, dst = (q - s) % C, (q + 1) % C
            send = ports.send(src, ring[dst], chunks[chunk] * gemm.dtype_bytes, acc[q],
                              f"{label}:rs{s} c{chunk}:core{src}->core{ring[dst]}")
            add = graph.compute(f"core{ring[dst]}.vec", add_op(gemm, chunks[chunk]),
                                [send, partial[dst]], f"{label}:rs{s} add c{chunk}@core{ring[dst]}")
            nxt[dst] = [add]
        acc = nxt
    outputs = {core: list(acc[q]) for q, core in enumerate(ring)}
    have = acc
    for s in range(C - 1):
        nxt = [[] for _ in range(C)]
        for q, src in enumerate(ring):
            chunk, dst = (q + 1 - s) % C, (q + 1) % C
            send = ports.send(src, ring[dst], chunks[chunk] * gemm.dtype_bytes, have[q],
                              f"{label}:ag{s} c{chunk}:core{src}->core{ring[dst]}")
            nxt[dst] = [send]
            outputs[ring[dst]].append(send)
        have = nxt
    return outputs
