"""Expert parallelism (``expert_placement: ep``): each expert whole on one core of the group.

Expert ``e`` lives on group position ``e % tp`` (all three of its matrices, resident or
streamed from that core's HBM as the memory plan decides).  Tokens are sharded over the
group in contiguous blocks (token ``t`` of ``n`` lives on position ``t * tp // n``, the
layout the element-wise ops before the block use).  The layer then runs:

1. **dispatch all-to-all**: every core sends, to every other core, the rows of its
   tokens routed to that core's experts (``rows x hidden x dtype`` bytes per pair of
   cores, one NoC transfer each, a core's sends serialised on its injection port); a
   token routed to two experts on the same core is sent once per pair (no dedup);
2. **experts**: each core runs its experts' SwiGLU (gate, up GEMMs, SiLU * up on the
   vector unit, down GEMM) on the rows they received, one expert after another;
3. **combine all-to-all**: the expert outputs go back to each token's core, which
   scales them by the routing weights and sums them on its vector unit.

A core that holds no token of this iteration (decode on a 4-core group) still runs its
experts; it only sends.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from npusim.core.registry import register
from npusim.mapping.taskgraph import Op
from npusim.strategies.npu.moe_mapping import (COMBINE_FLOPS_PER_ELEMENT, ExpertPlacementConfig,
                                               stream_gemm)
from npusim.strategies.npu.partition import Ports
from npusim.workload.layer_ops import MoEExperts, expert_ffn_ops


class EpConfig(ExpertPlacementConfig):
    """Expert parallelism: experts distributed over the TP group, all-to-all dispatch."""

    kind: Literal["ep"] = "ep"


def dispatch_rows(experts: np.ndarray, kept: np.ndarray, tp: int) -> np.ndarray:
    """``rows[i, j]``: kept token-expert pairs whose token lives on position ``i`` and
    whose expert on position ``j``."""
    tokens = experts.shape[0]
    home = np.repeat((np.arange(tokens) * tp) // max(tokens, 1), experts.shape[1])
    rows = np.zeros((tp, tp), dtype=np.int64)
    np.add.at(rows, (home, experts.reshape(-1) % tp), kept.reshape(-1).astype(np.int64))
    return rows


@register("expert_placement", EpConfig)
class ExpertParallel:
    """Expert ``e`` on core ``e % tp`` of the group; dispatch and combine all-to-all."""

    def __init__(self, config: EpConfig):
        self.config = config

    def plan_weights(self, moe: MoEExperts, tp: int) -> list[tuple[str, int]]:
        """The experts of group position 0 (the one holding the most), whole.  Other
        positions hold the same number or one fewer, so one plan covers them; expert
        ``e`` uses the residency of the expert in the same slot on position 0."""
        return [(op.label, op.weight_bytes) for e in range(0, moe.num_experts, tp)
                for op in expert_ffn_ops(moe, e, 1) if op.weight_bytes]

    @staticmethod
    def weight_name(label: str, expert: int, tp: int) -> str:
        """Plan name of expert ``expert``'s matrix ``label`` (its slot on position 0)."""
        return label.replace(f"[e{expert}]", f"[e{expert - expert % tp}]")

    def lower(self, ctx, graph, group, plan, op, layer: int, deps, assignment):
        """Tasks of ``op`` (a ``moe_experts`` op) on ``group``; returns per-core ready ids."""
        moe: MoEExperts = op.moe
        cores, tp = group.cores, len(group.cores)
        row_bytes = moe.hidden_size * moe.dtype_bytes
        tag = f"L{layer}.moe_experts"
        rows = dispatch_rows(assignment.experts, assignment.kept, tp)
        ports = Ports(graph, ctx.config.stream_chunk_bytes)
        arrived = {p: list(deps.get(core, ())) for p, core in enumerate(cores)}
        for src, dst in np.argwhere(rows):
            if src != dst:
                arrived[dst].append(ports.send(
                    cores[src], cores[dst], int(rows[src, dst]) * row_bytes,
                    deps.get(cores[src], ()), f"{tag}.dispatch:core{cores[src]}->core{cores[dst]}"))
        done: dict[int, list[int]] = {p: [] for p in range(tp)}
        for expert in np.flatnonzero(assignment.computed):
            expert = int(expert)
            p = expert % tp
            core = cores[p]
            gate, up, act, down = expert_ffn_ops(moe, expert, int(assignment.computed[expert]))

            def gemm(item, waits):
                name = self.weight_name(item.label, expert, tp)
                in_hbm = ctx.has_hbm and (layer, name) not in plan.sram_weights
                return stream_gemm(graph, ports, core, f"L{layer}.{item.label}", item.op,
                                   in_hbm, waits, ctx.config.weight_tile_bytes,
                                   ctx.array_cols(group))

            halves = gemm(gate, arrived[p]) + gemm(up, arrived[p])
            mul = graph.compute(f"core{core}.vec", act.op, halves, f"L{layer}.{act.label}@core{core}")
            done[p] += gemm(down, [mul])
        back: dict[int, list[int]] = {p: [] for p in range(tp)}
        for home, expert_core in np.argwhere(rows):
            if home != expert_core:
                back[home].append(ports.send(
                    cores[expert_core], cores[home], int(rows[home, expert_core]) * row_bytes,
                    done[expert_core] or arrived[expert_core],
                    f"{tag}.combine:core{cores[expert_core]}->core{cores[home]}"))
        out = {}
        for p, core in enumerate(cores):
            pairs = int(rows[p].sum())
            waits = back[p] + done[p] + list(deps.get(core, ()))
            if pairs:
                total = Op("elementwise", elements=pairs * moe.hidden_size,
                           flops_per_element=COMBINE_FLOPS_PER_ELEMENT,
                           dtype_bytes=moe.dtype_bytes, name="moe_combine")
                waits = [graph.compute(f"core{core}.vec", total, waits, f"{tag}.combine@core{core}")]
            out[core] = [graph.host(0, sorted(set(waits)), f"{tag}:out@core{core}", resource="none")]
        return out
