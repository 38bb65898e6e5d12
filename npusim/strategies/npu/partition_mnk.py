"""2-D M/N + K partition: AllReduce along grid rows, AllGather along columns (NpuSim Fig. 3-c).

Notation: the ``P`` cores form an ``R x C`` grid (``grid[r][c]``); element size
``b = dtype_bytes * batch``.  The grid is the placement's own (``mesh2d``) or, for a 1-D
group, its ring order read row by row into the most square factorisation of ``P``
(``R <= C``; ``rows`` in the config forces ``R``).

Layout (``rotate = "weight"``): K is split across the columns (``K_c``, ``C`` parts), M and
N across the rows (``M_r``, ``N_r``, ``R`` parts).  Core ``(r, c)`` holds ``A[M_r, K_c]`` and
``W[K_c, N_r]``.  Each grid column is an M/N ring over its K slice: in step
``s = 0..R-1`` core ``(r, c)`` multiplies ``A[M_r, K_c]`` by the weight block
``W[K_c, N_j]``, ``j = (r - s) mod R``, while forwarding that block to ``(r + 1, c)``
(AllGather along the column).  The result is a partial sum over ``K_c`` of
``C[M_r, N_j]``; the cores of row ``r``, which all hold block ``j`` in step ``s``, sum it
with a ring AllReduce along the row.  These two communications are iterated, tile by
tile, until every block is done; the AllReduce of step ``s`` overlaps the compute of
step ``s + 1``.  Output left on core ``(r, c)``: ``C[M_r, :]`` (replicated along the row).
With ``rotate = "input"`` the input blocks ``A[M_j, K_c]`` rotate instead, ``W[K_c, N_r]``
stays, and core ``(r, c)`` ends with ``C[:, N_r]``.

Per-core cost (Table 2; exact when the splits are even, else the largest core):

* input_bytes  = ``m/R * k/C * b``
* weight_bytes = ``k/C * n/R * b``
* output_bytes = ``m/R * n * b`` (``m * n/R * b`` with ``rotate = "input"``)
* comm_bytes   = ``(R-1)/R * k*n/C * b``  (column AllGather of the ``k/C x n`` weight
  slice) ``+ 2 (C-1)/C * m*n/R * b`` (row AllReduces of ``R`` blocks of ``m/R x n/R``)
  — with ``rotate = "input"`` the first term is ``(R-1)/R * m*k/C * b``;
* max_hops     = the longest step of any row or column ring.

``C = 1`` gives the M/N partition and ``R = 1`` the K partition (with the AllReduce after
the compute instead of fused into it).  For ``P = 4`` on a 2 x 2 grid the communication is
``k n/4 + m n/2`` elements against ``3 k n/4`` (M/N) and ``3 m n/2`` (K).

Assumption: each core's input slice is already in place (the previous operator leaves it
there).
"""

from __future__ import annotations

from typing import Literal, Mapping, Sequence

from pydantic import Field

from npusim.core.registry import PartConfig, register
from npusim.mapping.taskgraph import TaskGraph
from npusim.strategies.npu.lowering_replay import LoweringReplay
from npusim.strategies.npu.partition import (GemmSpec, PartitionCost, Ports,
                                             ceil_div, grid_of, join_outputs, max_ring_hops,
                                             ring_allreduce, rotate_rings,
                                             rotation_buffer_bytes, splits,
                                             tile_extents)
from npusim.strategies.npu.placement import Group


class MnkPartitionConfig(PartConfig):
    """2-D partition: K across grid columns (row AllReduce), M/N across rows (column AllGather)."""

    kind: Literal["mnk"] = "mnk"
    rotate: Literal["weight", "input"] = Field(
        "weight", description="Operand that rotates along each grid column: 'weight' "
                              "(output row-split) or 'input' (output column-split).")
    rows: int = Field(
        0, ge=0, description="Grid rows R (M/N parts); 0 = the placement's grid, or the "
                             "most square R x C with R <= C for a 1-D group.")


@register("partition", MnkPartitionConfig)
class MnkPartition:
    """2-D partition with row AllReduce and column AllGather, iterated tile by tile."""

    def __init__(self, config: MnkPartitionConfig | None = None):
        self.config = config or MnkPartitionConfig()
        self._replay = LoweringReplay(self._lower)

    def _grid(self, group: Group) -> tuple[tuple[int, ...], ...]:
        return grid_of(group, self.config.rows)

    def lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
              deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """Add ``gemm`` on the group's grid; returns one join id per core after which its
        output slice (``C[M_r, :]`` or ``C[:, N_r]``) is complete."""
        return self._replay(graph, gemm, group, deps, width)

    def _lower(self, graph: TaskGraph, gemm: GemmSpec, group: Group,
               deps: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
        """The lowering itself (:meth:`lower` records it once per shape and replays it)."""
        grid = self._grid(group)
        R, C = len(grid), len(grid[0])
        columns = [tuple(grid[r][c] for r in range(R)) for c in range(C)]
        k_parts = splits(gemm.k, C)
        rotate = self.config.rotate
        if rotate == "weight":
            stationary, rotating = splits(gemm.m, R), splits(gemm.n, R)
        else:
            stationary, rotating = splits(gemm.n, R), splits(gemm.m, R)
        # Partial tiles of a row are summed element-wise, so every column must cut its
        # blocks the same way: one tile width, from the largest K slice.
        per_tile = gemm.columns_per_tile(max(k_parts) * gemm.elem_bytes)
        ports = Ports(graph, gemm.stream_chunk_bytes)

        def allreduce_rows(step: int, partials: dict) -> dict[int, list[int]]:
            out: dict[int, list[int]] = {}
            for r in range(R):
                block = (r - step) % R
                for t, ext in enumerate(tile_extents(rotating[block], per_tile)):
                    ids = [partials[(c, r, t)][0] for c in range(C)]
                    done = ring_allreduce(ports, gemm, grid[r], stationary[r] * ext * gemm.batch,
                                          ids, f"{gemm.name}:s{step} row{r} blk{block}.{t}")
                    for core, tids in done.items():
                        out.setdefault(core, []).extend(tids)
            return out

        outputs = rotate_rings(ports, gemm, columns, k_parts, stationary, rotating, rotate,
                               per_tile, deps, gemm.name, on_step=allreduce_rows if C > 1 else None)
        return join_outputs(graph, gemm.name, outputs)

    def cost(self, gemm: GemmSpec, group: Group, width: int) -> PartitionCost:
        """Per-core Table 2 quantities (see the module docstring)."""
        grid = self._grid(group)
        R, C = len(grid), len(grid[0])
        b, dt = gemm.elem_bytes, gemm.dtype_bytes
        m_r, n_r, k_c = ceil_div(gemm.m, R), ceil_div(gemm.n, R), ceil_div(gemm.k, C)
        weight = k_c * n_r * b
        if self.config.rotate == "weight":
            output, block = m_r * gemm.n * b, weight
            reduced = m_r * gemm.n * gemm.batch  # elements each row AllReduces, all steps
        else:
            output, block = gemm.m * n_r * b, m_r * k_c * b
            reduced = gemm.m * n_r * gemm.batch
        allreduce = 2 * (C - 1) * ceil_div(reduced, C) * dt
        columns = [tuple(grid[r][c] for r in range(R)) for c in range(C)]
        return PartitionCost(input_bytes=m_r * k_c * b, weight_bytes=weight,
                             output_bytes=output, comm_bytes=(R - 1) * block + allreduce,
                             max_hops=max_ring_hops(list(grid) + columns, width),
                             buffer_bytes=rotation_buffer_bytes(gemm, R, self.config.rotate,
                                                                block, weight))
