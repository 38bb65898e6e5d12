"""1-D K partition with ring AllReduce of partial outputs (NpuSim Fig. 3-b).

Notation: ``P`` cores in ring order, element size ``b = dtype_bytes * batch``.

Layout: core ``i`` holds input columns ``A[:, K_i]`` and weight rows ``W[K_i, :]`` (K split
in ``P``) and computes the partial product ``A[:, K_i] @ W[K_i, :]``, an ``m x n`` partial
sum.  The ring AllReduce is fused with the compute, as the paper iterates it: the output
columns are cut into ``P`` blocks; in reduce-scatter step ``s = 0..P-1`` core ``i``
computes its partial of block ``(i - s - 1) mod P``, adds the running sum of that block
received from core ``i - 1`` (vector unit) and forwards it to ``i + 1``; after the last
step core ``i`` owns the full block ``i``, which a ring all-gather (``P - 1`` steps)
then copies to every core.  Each partial block is computed just before it is needed, so
computing block ``s + 1`` overlaps sending block ``s``.  Output left on every core: the
whole ``C`` (replicated, as AllReduce leaves it).

Per-core cost (Table 2; exact when ``P`` divides ``k`` and ``n``, else the largest core):

* input_bytes  = ``m * k/P * b``
* weight_bytes = ``k/P * n * b``
* output_bytes = ``m * n * b`` (the partial sums, then the result)
* comm_bytes   = ``2 (P-1)/P * m * n * b``: ring reduce-scatter and all-gather of the
  ``m x n`` output each send ``P - 1`` blocks of ``m * n/P`` from every core;
* max_hops     = the longest ring step of the placement.

So K beats M/N (``(P-1)/P * k * n * b``) on communication when ``2 m < k``, and each core
multiplies all ``m`` rows (a long stream on a weight-stationary array), which is why it
wins for short sequences (chunked prefill, NpuSim §5.4, Fig. 9).

Weights in HBM are streamed by the DMA tile by tile into the core's two tile buffers
(a tile loads once the tile two loads back, maybe the previous operator's, has been
multiplied).  Assumption: the input slice
``A[:, K_i]`` is already on core ``i`` (the previous operator leaves it there).
"""

from __future__ import annotations

from typing import Literal, Mapping, Sequence

from npusim.core.registry import PartConfig, register
from npusim.mapping.taskgraph import TaskGraph
from npusim.strategies.npu.lowering_replay import LoweringReplay
from npusim.strategies.npu.partition import (GemmSpec, PartitionCost, Ports,
                                             add_op, ceil_div, gemm_op, join_outputs,
                                             max_ring_hops, splits, tile_extents)
from npusim.strategies.npu.placement import Group


class KPartitionConfig(PartConfig):
    """1-D K partition: partial outputs summed by a ring AllReduce."""

    kind: Literal["k"] = "k"


@register("partition", KPartitionConfig)
class KPartition:
    """1-D K partition with a fused ring AllReduce (reduce-scatter + all-gather)."""

    def __init__(self, config: KPartitionConfig | None = None):
        self.config = config or KPartitionConfig()
        self._replay = LoweringReplay(self._lower)

    def lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
              deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """Add the fused reduce-scatter and the all-gather of ``gemm`` on ``group``;
        returns one join id per core after which it holds the whole ``C``."""
        return self._replay(graph, gemm, group, deps, width)

    def _lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
               deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """The lowering itself (:meth:`lower` records it once per shape and replays it)."""
        ring = tuple(group.cores)
        tp, label, eb = len(ring), gemm.name, gemm.elem_bytes
        k_parts, blocks = splits(gemm.k, tp), splits(gemm.n, tp)
        # Tiles must line up around the ring (a partial tile is added to the same tile of
        # the neighbour), so all cores use the tile width of the largest K slice.
        per_tile = gemm.columns_per_tile(max(k_parts) * eb)
        tiles = [tile_extents(cols, per_tile) for cols in blocks]
        ports = Ports(graph, gemm.stream_chunk_bytes)
        outputs: dict[int, list[int]] = {core: [] for core in ring}
        carried: dict[tuple[int, int], int] = {}  # (position, tile) -> running-sum task
        for s in range(tp):
            sent: dict[tuple[int, int], int] = {}
            for p, core in enumerate(ring):
                block, nxt = (p - s - 1) % tp, ring[(p + 1) % tp]
                for t, cols in enumerate(tiles[block]):
                    ready = list(deps.get(core, ()))
                    if gemm.weights_in == "hbm":
                        ready.append(ports.load_tile(core, k_parts[p] * cols * eb, (),
                                                     f"{label}:load W{block}.{t}@core{core}"))
                    cid = graph.compute(f"core{core}.sa", gemm_op(gemm, gemm.m, k_parts[p], cols),
                                        ready, f"{label}:rs{s} blk{block}.{t}@core{core}")
                    if gemm.weights_in == "hbm":
                        ports.tile_used(core, cid)
                    acc = cid
                    if s > 0:
                        incoming = carried[((p - 1) % tp, t)]
                        acc = graph.compute(f"core{core}.vec", add_op(gemm, gemm.m * cols * gemm.batch),
                                            [cid, incoming], f"{label}:rs{s} add blk{block}.{t}@core{core}")
                    if s < tp - 1:
                        sent[(p, t)] = ports.send(core, nxt, gemm.m * cols * eb, [acc],
                                                  f"{label}:rs{s} blk{block}.{t}:core{core}->core{nxt}")
                    else:
                        sent[(p, t)] = acc  # block p is complete on core p
                        outputs[core].append(acc)
            carried = sent
        # All-gather: step s forwards block (p - s) (own block first, then what arrived).
        have = carried
        for s in range(tp - 1):
            arrived: dict[tuple[int, int], int] = {}
            for p, core in enumerate(ring):
                block, q = (p - s) % tp, (p + 1) % tp
                for t, cols in enumerate(tiles[block]):
                    send = ports.send(core, ring[q], gemm.m * cols * eb, [have[(p, t)]],
                                      f"{label}:ag{s} blk{block}.{t}:core{core}->core{ring[q]}")
                    arrived[(q, t)] = send
                    outputs[ring[q]].append(send)
            have = arrived
        return join_outputs(graph, label, outputs)

    def cost(self, gemm: GemmSpec, group: Group, width: int) -> PartitionCost:
        """Per-core Table 2 quantities (see the module docstring)."""
        tp, b = len(group.cores), gemm.elem_bytes
        k_i, n_i = ceil_div(gemm.k, tp), ceil_div(gemm.n, tp)
        return PartitionCost(input_bytes=gemm.m * k_i * b, weight_bytes=k_i * gemm.n * b,
                             output_bytes=gemm.m * gemm.n * b,
                             comm_bytes=2 * (tp - 1) * gemm.m * n_i * b,
                             max_hops=max_ring_hops([group.cores], width))
