"""MoE expert blocks on the multi-core NPU: routing, capacity and the expert placements.

A MoE layer's ``moe_experts`` op (:mod:`npusim.workload.layer_ops`) stands for every
routed token-expert pair.  This module decides, for one iteration's tokens and one MoE
layer, which experts each token goes to (:class:`MoeRouting`: a routing trace, a
synthetic trace from ``routing_generators``, or a balanced assignment) and applies the
capacity rule; an ``expert_placement`` strategy (registered category, one file per kind)
then lowers the experts onto the TP group:

* ``ep`` (:mod:`.expert_ep`): expert ``e`` lives whole on group position ``e % tp``;
  tokens go there and back by all-to-all NoC transfers;
* ``tp`` (:mod:`.expert_tp`): every expert is split over the group by the GEMM
  partition strategy; no all-to-all.

Capacity (GShard-style): with ``capacity_factor`` ``cf`` an expert processes at most
``ceil(cf * tokens * top_k / E)`` tokens.  ``overflow: drop`` drops the pairs beyond
that (first come, first served in token order; reported as ``moe_dropped_tokens``);
``overflow: pad`` drops nothing and pads every expert up to the capacity (static
shapes: the padding rows cost compute, and an expert with no token still runs).

Every expert matrix is a separate weight tensor in the memory plan
(:func:`expert_plan_weights`), so SRAM residency is decided expert by expert.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from npusim.core import registry
from npusim.core.errors import MappingError, NpusimError
from npusim.core.registry import PartConfig
from npusim.mapping.taskgraph import Op, TaskGraph
from npusim.strategies.npu.partition import Ports, tile_align, tile_extent, tile_extents
from npusim.workload.layer_ops import MoEExperts

__all__ = ["ExpertPlacementConfig", "Assignment", "MoeRouting", "expert_placement",
           "expert_plan_weights", "stream_gemm", "apply_capacity", "routing_trace", "COMBINE_FLOPS_PER_ELEMENT"]

#: Weighted sum of the expert outputs: one multiply by the routing weight, one add.
COMBINE_FLOPS_PER_ELEMENT = 2
#: Largest ``capacity_factor``: above every shipped model's ``experts / top_k`` (<= 32).
MAX_CAPACITY_FACTOR = 1000


class ExpertPlacementConfig(PartConfig):
    """Fields shared by every expert placement: the capacity rule."""

    kind: Literal["_base"] = "_base"
    # Bounded so the cap stays an ordinary integer: inf or 1e308 overflow ceil(), and
    # past experts / top_k (16 for Qwen3-30B-A3B) a larger factor only adds padding.
    capacity_factor: float | None = Field(
        None, gt=0, le=MAX_CAPACITY_FACTOR, allow_inf_nan=False,
        description="Cap each expert at ceil(cf * tokens * top_k / experts) tokens per "
                    f"iteration (None: no cap); finite, at most {MAX_CAPACITY_FACTOR} "
                    "(cf >= experts / top_k never drops a token).")
    overflow: Literal["drop", "pad"] = Field(
        "drop", description="drop: pairs beyond the capacity are dropped (counted); pad: "
                            "nothing dropped, every expert padded up to the capacity.")


def expert_placement(config: Any) -> Any:
    """The placement implementation for ``config.expert_placement`` (default ``ep``;
    configs without the field, such as the serving engine's, get ``ep``)."""
    chosen = getattr(config, "expert_placement", None)
    if chosen is None:
        chosen = registry.lookup("expert_placement", "ep").config()
    return registry.build("expert_placement", chosen)


def expert_plan_weights(config: Any, moe: MoEExperts, tp: int) -> list[tuple[str, int]]:
    """``(name, bytes on one core)`` of every expert matrix a core of the group holds, in
    order of use; names are the ops' labels (``expert_gate_proj[e5]``)."""
    return expert_placement(config).plan_weights(moe, tp)


# ------------------------------------------------------------------------- routing
@dataclass(frozen=True)
class Assignment:
    """Routing of one MoE layer for one iteration's tokens, after the capacity rule.

    ``experts[t, j]``: the ``j``-th expert of token ``t``; ``kept[t, j]``: whether that
    pair is dispatched; ``routed[e]``: pairs routed to ``e`` before the cap;
    ``computed[e]``: rows expert ``e``'s GEMMs process (kept pairs plus padding).
    """

    experts: np.ndarray
    kept: np.ndarray
    routed: np.ndarray
    computed: np.ndarray
    capacity: int | None
    dropped: int
    padded: int

    @property
    def tokens(self) -> int:
        return int(self.experts.shape[0])

    @property
    def dispatched(self) -> int:
        """Token-expert pairs sent to an expert: ``tokens * top_k - dropped``."""
        return int(self.kept.sum())

    def key(self) -> str:
        """Identifies the graph this routing produces (which pairs go where)."""
        digest = hashlib.sha1(self.experts.astype(np.int32).tobytes())
        digest.update(self.kept.tobytes())
        digest.update(self.computed.astype(np.int64).tobytes())
        return digest.hexdigest()


def apply_capacity(experts: np.ndarray, num_experts: int, capacity_factor: float | None,
                   overflow: str) -> Assignment:
    """Apply the capacity rule to ``experts`` (``[tokens, top_k]`` ids)."""
    tokens, top_k = experts.shape
    flat = experts.reshape(-1).astype(np.int64)
    routed = np.bincount(flat, minlength=num_experts).astype(np.int64)
    kept = np.ones(flat.shape, dtype=bool)
    computed = routed.copy()
    capacity = None
    if capacity_factor is not None:
        capacity = max(1, math.ceil(capacity_factor * tokens * top_k / num_experts))
        if overflow == "drop":
            # Rank of each pair inside its expert, in token order (earlier tokens win).
            order = np.argsort(flat, kind="stable")
            starts = np.concatenate(([0], np.cumsum(routed)[:-1]))
            rank = np.empty_like(flat)
            rank[order] = np.arange(flat.size) - starts[flat[order]]
            kept = rank < capacity
            computed = np.minimum(routed, capacity)
        else:
            computed = np.maximum(routed, capacity)
    kept = kept.reshape(tokens, top_k)
    return Assignment(experts=experts, kept=kept, routed=routed, computed=computed,
                      capacity=capacity, dropped=int(flat.size - kept.sum()),
                      padded=int((computed - np.minimum(routed, computed)).sum()))


def routing_trace(model, config) -> Any:
    """The routing trace ``config.routing`` names (a file, validated against ``model``,
    or a generated one covering the run's tokens); ``None`` without ``routing``."""
    spec = getattr(config, "routing", None)
    if spec is None:
        return None
    from npusim.workload import routing_generators as gen
    from npusim.workload.routing import read_routing_trace

    if spec.file is not None:
        try:
            return read_routing_trace(spec.file, model)
        except NpusimError as exc:
            raise MappingError(f"workload.routing.file: {exc}") from None
    tokens = config.batch * (config.prompt_len + config.output_len - 1)
    try:
        if spec.kind == "balanced":
            return gen.balanced_trace(model, tokens, seed=spec.seed)
        if spec.kind == "imbalanced":
            return gen.imbalanced_trace(model, tokens, spec.ratio, seed=spec.seed)
        return gen.zipf_trace(model, tokens, spec.exponent, seed=spec.seed)
    except ValueError as exc:
        raise MappingError(f"workload.routing ({spec.kind}): {exc}") from None


class MoeRouting:
    """Per-iteration, per-layer routing of a run (memoised; deterministic).

    Iteration tokens map to trace tokens in run order (``start`` counts every token
    processed before the iteration; a trace shorter than the run wraps around).  Without
    a trace, token ``t`` of the run goes to experts ``(t * top_k + j) % E``: every expert
    gets ``tokens * top_k / E`` pairs (within one) and decode steps rotate through them.
    """

    def __init__(self, model, config):
        self.model = model
        self.placement = getattr(config, "expert_placement", None)
        self.capacity_factor = getattr(self.placement, "capacity_factor", None)
        self.overflow = getattr(self.placement, "overflow", "drop")
        self.trace = routing_trace(model, config)
        self.wrapped = False
        self._moe_index = {layer: i for i, layer in enumerate(model.moe_layers)}
        self._cache: dict[tuple[int, int, int], Assignment] = {}

    def assign(self, layer: int, start: int, tokens: int) -> Assignment:
        """Routing of decoder ``layer`` for run tokens ``start .. start + tokens - 1``."""
        key = (layer, start, tokens)
        found = self._cache.get(key)
        if found is not None:
            return found
        E, k = self.model.num_experts, self.model.experts_per_token
        index = np.arange(start, start + tokens, dtype=np.int64)
        if self.trace is None:
            experts = (index[:, None] * k + np.arange(k)[None, :]) % E
        else:
            available = self.trace.header.tokens
            self.wrapped = self.wrapped or start + tokens > available
            experts = self.trace.experts[self._moe_index[layer], index % available]
        found = apply_capacity(np.asarray(experts, dtype=np.int64), E, self.capacity_factor,
                               self.overflow)
        self._cache[key] = found
        return found

    def key(self, layers, start: int, tokens: int) -> tuple:
        """Routing part of a stage segment's memo key."""
        return tuple(self.assign(layer, start, tokens).key() for layer in layers
                     if layer in self._moe_index)

    def summary(self, windows: list[tuple[int, int]]) -> dict[str, Any]:
        """Run totals for ``Program.info`` over every iteration ``(start, tokens)``."""
        E = self.model.num_experts
        loads = {layer: np.zeros(E, dtype=np.int64) for layer in self._moe_index}
        dropped = dispatched = padded = 0
        for start, tokens in windows:
            for layer in self._moe_index:
                found = self.assign(layer, start, tokens)
                loads[layer] += found.routed
                dropped += found.dropped
                dispatched += found.dispatched
                padded += found.padded
        ratios = [round(float(load.max() / load.mean()), 4) if load.sum() else 0.0
                  for load in loads.values()]
        return {"moe_dropped_tokens": dropped, "moe_dispatched_tokens": dispatched,
                "moe_padded_tokens": padded, "moe_imbalance_by_layer": ratios,
                "moe_max_imbalance": max(ratios, default=0.0),
                "moe_routing": ("balanced assignment" if self.trace is None
                                else self.trace.source or self.trace.header.generator),
                "moe_routing_wrapped": self.wrapped}


# ----------------------------------------------------------------- shared lowering
def stream_gemm(graph: TaskGraph, ports: Ports, core: int, label: str,
                op: Op, in_hbm: bool, deps: list[int], tile_bytes: int,
                array_cols: int = 0) -> list[int]:
    """GEMM ``op`` (``[m, k] @ W[k, n]``) whole on ``core``'s array; ``W`` resident in SRAM
    or streamed from the core's HBM in column tiles of about ``tile_bytes`` through its
    two tile buffers (:meth:`Ports.load_tile`).  Task names start with ``label``."""
    sa = f"core{core}.sa"
    if not in_hbm:
        return [graph.compute(sa, op, deps, f"{label}@core{core}")]
    out = []
    m, k, n, dtype = op.m, op.k, op.n, op.dtype_bytes
    per_tile = tile_extent(tile_bytes, k * dtype, tile_align(array_cols), array_cols)
    for t, cols in enumerate(tile_extents(n, per_tile)):
        load = ports.load_tile(core, k * cols * dtype, (), f"{label}:load W.{t}@core{core}")
        task = graph.compute(sa, Op("gemm", m=m, k=k, n=cols, dtype_bytes=dtype, name=op.name),
                             deps + [load], f"{label}.{t}@core{core}")
        ports.tile_used(core, task)
        out.append(task)
    return out
