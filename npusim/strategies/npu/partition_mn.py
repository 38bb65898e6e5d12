"""1-D M/N partition with ring AllGather (NpuSim Fig. 3-a; T10 / WaferLLM style).

Notation: ``P`` cores in ring order, element size ``b = dtype_bytes * batch``.

Layout (``rotate = "weight"``, the paper's choice): core ``i`` holds input rows
``A[M_i, :]`` (M split in ``P``) and weight columns ``W[:, N_i]`` (N split in ``P``).  In
step ``s = 0..P-1`` it multiplies its input by the weight block ``(i - s) mod P`` while
forwarding that block to core ``i + 1``, so the weight blocks travel once around the
ring (a ring AllGather fused with the GEMM).  Step ``s`` computes while the block for
step ``s + 1`` moves (double-buffered receive buffers), tile by tile.  Output left on
core ``i``: ``C[M_i, :]`` (row slice, all columns).

With ``rotate = "input"`` the roles swap: the weight slice ``W[:, N_i]`` stays and the
input blocks ``A[M_j, :]`` rotate; the output left on core ``i`` is ``C[:, N_i]``.

Per-core cost (Table 2; exact when ``P`` divides ``m`` and ``n``, else the largest core):

===============  ======================  ======================
quantity         rotate = weight         rotate = input
===============  ======================  ======================
input_bytes      ``m/P * k * b``         ``m/P * k * b``
weight_bytes     ``k * n/P * b``         ``k * n/P * b``
output_bytes     ``m/P * n * b``         ``m * n/P * b``
comm_bytes       ``(P-1)/P * k*n * b``   ``(P-1)/P * m*k * b``
max_hops         max ring step           max ring step
===============  ======================  ======================

Communication: a ring AllGather of a tensor of ``S`` bytes takes ``P - 1`` steps in which
each core sends one ``S/P`` block, so each core sends ``(P-1)/P * S`` with ``S`` the full
rotating operand.  Every core multiplies ``m/P x k x n`` (or ``m x k x n/P``), so the
FLOPs sum to ``2 m k n`` over the group.

Assumption: the input slice the layout needs is already on each core (the previous
operator leaves it there); weights are in SRAM or streamed from the core's own HBM.
"""

from __future__ import annotations

from typing import Literal, Mapping, Sequence

from pydantic import Field

from npusim.core.registry import PartConfig, register
from npusim.mapping.taskgraph import TaskGraph
from npusim.strategies.npu.lowering_replay import LoweringReplay
from npusim.strategies.npu.partition import (GemmSpec, PartitionCost, Ports,
                                             ceil_div, join_outputs, max_ring_hops,
                                             rotate_rings, rotation_buffer_bytes, splits)
from npusim.strategies.npu.placement import Group


class MnPartitionConfig(PartConfig):
    """1-D M/N partition: operand rotation around the ring (ring AllGather)."""

    kind: Literal["mn"] = "mn"
    rotate: Literal["weight", "input"] = Field(
        "weight", description="Operand that travels around the ring: 'weight' (NpuSim, "
                              "T10: output is row-split) or 'input' (weights stay put: "
                              "output is column-split; cheaper when m < n).")


@register("partition", MnPartitionConfig)
class MnPartition:
    """1-D M/N partition with a ring AllGather of the weights (or inputs)."""

    def __init__(self, config: MnPartitionConfig | None = None):
        self.config = config or MnPartitionConfig()
        self._replay = LoweringReplay(self._lower)

    def lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
              deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """Add the rotation steps of ``gemm`` on ``group``; returns one join id per core
        after which its output slice (``C[M_i, :]`` or ``C[:, N_i]``) is complete."""
        return self._replay(graph, gemm, group, deps, width)

    def _lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
               deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """The lowering itself (:meth:`lower` records it once per shape and replays it)."""
        ring = tuple(group.cores)
        tp = len(ring)
        if self.config.rotate == "weight":
            stationary, rotating = splits(gemm.m, tp), splits(gemm.n, tp)
        else:
            stationary, rotating = splits(gemm.n, tp), splits(gemm.m, tp)
        # A weight column and an input row both hold k elements: one tile size for both.
        per_tile = gemm.columns_per_tile(gemm.k * gemm.elem_bytes)
        outputs = rotate_rings(Ports(graph, gemm.stream_chunk_bytes), gemm, [ring], [gemm.k], stationary, rotating,
                               self.config.rotate, per_tile, deps, gemm.name)
        return join_outputs(graph, gemm.name, outputs)

    def cost(self, gemm: GemmSpec, group: Group, width: int) -> PartitionCost:
        """Per-core Table 2 quantities (see the module docstring)."""
        tp, b = len(group.cores), gemm.elem_bytes
        m_i, n_i = ceil_div(gemm.m, tp), ceil_div(gemm.n, tp)
        weight = gemm.k * n_i * b
        if self.config.rotate == "weight":
            output, block = m_i * gemm.n * b, weight
        else:
            output, block = gemm.m * n_i * b, m_i * gemm.k * b
        return PartitionCost(input_bytes=m_i * gemm.k * b, weight_bytes=weight,
                             output_bytes=output, comm_bytes=(tp - 1) * block,
                             max_hops=max_ring_hops([group.cores], width),
                             buffer_bytes=rotation_buffer_bytes(gemm, tp, self.config.rotate,
                                                                block, weight))
