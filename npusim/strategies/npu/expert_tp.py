"""Expert tensor parallelism (``expert_placement: tp``): every expert split over the group.

Each expert with at least one row this iteration runs as three GEMMs lowered by the
workload's GEMM ``partition`` strategy on the whole TP group (so a ``k`` partition sums
partial outputs with a ring AllReduce), SiLU * up split over the group's vector units,
and every core holds ``1/tp`` of every expert (resident or streamed from its HBM as the
memory plan decides).  Tokens never leave their cores, so there is no all-to-all; the
price is that every expert pays the partition's collective and each core streams a
slice of every touched expert.  The routing-weighted sum of the expert outputs runs on
the vector units, split over the group.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from npusim.core.registry import register
from npusim.mapping.taskgraph import Op
from npusim.strategies.npu.moe_mapping import COMBINE_FLOPS_PER_ELEMENT, ExpertPlacementConfig
from npusim.strategies.npu.partition import GemmSpec
from npusim.workload.layer_ops import MoEExperts, expert_ffn_ops


class TpExpertConfig(ExpertPlacementConfig):
    """Expert tensor parallelism: every expert partitioned over the TP group."""

    kind: Literal["tp"] = "tp"


@register("expert_placement", TpExpertConfig)
class ExpertTensorParallel:
    """Every expert partitioned across the group by the GEMM partition strategy."""

    def __init__(self, config: TpExpertConfig):
        self.config = config

    def plan_weights(self, moe: MoEExperts, tp: int) -> list[tuple[str, int]]:
        """``1/tp`` of every expert matrix, in expert order."""
        return [(op.label, -(-op.weight_bytes // tp)) for e in range(moe.num_experts)
                for op in expert_ffn_ops(moe, e, 1) if op.weight_bytes]

    def lower(self, ctx, graph, group, plan, op, layer: int, deps, assignment):
        """Tasks of ``op`` (a ``moe_experts`` op) on ``group``; returns per-core ready ids."""
        moe: MoEExperts = op.moe
        cores, tp = group.cores, len(group.cores)
        done: dict[int, list[int]] = {core: list(deps.get(core, ())) for core in cores}

        def gemm(item, waits):
            resident = (layer, item.label) in plan.sram_weights or not ctx.has_hbm
            spec = GemmSpec(f"L{layer}.{item.name}", item.op.m, item.op.k, item.op.n,
                            item.op.dtype_bytes, 1, "sram" if resident else "hbm",
                            ctx.config.weight_tile_bytes, ctx.config.stream_chunk_bytes,
                            ctx.array_cols(group))
            return ctx.strategy.lower(graph, spec, group, waits, ctx.width)

        for expert in np.flatnonzero(assignment.computed):
            gate, up, act, down = expert_ffn_ops(moe, int(expert),
                                                 int(assignment.computed[expert]))
            g, u = gemm(gate, deps), gemm(up, deps)
            share = Op(act.op.kind, elements=-(-act.op.elements // tp),
                       flops_per_element=act.op.flops_per_element,
                       dtype_bytes=act.op.dtype_bytes, name=act.name, inputs=act.op.inputs)
            mul = {core: [graph.compute(f"core{core}.vec", share, g[core] + u[core],
                                        f"L{layer}.{act.label}@core{core}")] for core in cores}
            for core, ids in gemm(down, mul).items():
                done[core] += ids
        total = Op("elementwise", elements=max(1, -(-assignment.dispatched * moe.hidden_size // tp)),
                   flops_per_element=COMBINE_FLOPS_PER_ELEMENT, dtype_bytes=moe.dtype_bytes,
                   name="moe_combine")
        return {core: [graph.compute(f"core{core}.vec", total, sorted(set(done[core])),
                                     f"L{layer}.moe_experts.combine@core{core}")]
                for core in cores}
