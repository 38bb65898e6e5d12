"""Task graphs of one pipeline stage and of the LM head (NpuSim §4.1-4.2), and the keys
that tell two stages' graphs apart for the memo.

Used by the single-request mapper (:mod:`llm_mapping`) and the serving backend: a stage
receives the activation from the previous stage, runs its layers (GEMMs through the
partition strategy, vector ops split over the group, attention with heads split over
the group) and streams weights and spilled KV from HBM where its memory plan says so.
"""

from __future__ import annotations

from dataclasses import replace

from npusim.core.errors import MappingError
from npusim.mapping.taskgraph import Op, TaskGraph
from npusim.strategies.npu.heads import head_split, kv_bytes_on_core
from npusim.strategies.npu.llm_memory import StagePlan
from npusim.strategies.npu.moe_mapping import MoeRouting, expert_placement, stream_gemm
from npusim.strategies.npu.partition import (GemmSpec, Ports, shared_gemm, tile_align, tile_extent,
                                             tile_extents)
from npusim.strategies.npu.placement import Group
from npusim.workload.layer_ops import LayerOp, SequenceChunk, layer_ops, lm_head_ops

#: Inputs of each layer operator by name; an operator not listed depends on the one
#: before it.  Per-sequence ops (``attn_qk[s3]``) look up their own sequence first.
#: Attention starts once Q, K and V of the new tokens exist, as one attention kernel
#: reads all three (vLLM fuses the projections into one QKV GEMM): QK^T alone needs
#: only Q and K, but started early it would take the array in the middle of v_proj's
#: tiles, delaying v_proj's collective on every core of the group.
INPUTS: dict[str, tuple[str, ...]] = {
    "q_proj": ("input_norm",), "k_proj": ("input_norm",), "v_proj": ("input_norm",),
    "q_norm": ("q_proj",), "k_norm": ("k_proj",),
    "rope": ("q_norm", "k_norm"),
    "kv_write": ("rope", "v_proj"), "attn_qk": ("rope", "v_proj"),
    "attn_softmax": ("attn_qk",), "attn_av": ("attn_softmax", "v_proj"),
    "o_proj": ("attn_av",), "attn_residual": ("o_proj",),
    "post_attention_norm": ("attn_residual",),
    "gate_proj": ("post_attention_norm",), "up_proj": ("post_attention_norm",),
    "act_mul": ("gate_proj", "up_proj"), "down_proj": ("act_mul",),
    "mlp_residual": ("down_proj",),
}
#: Fallbacks for models without an optional op (no QK-norm: RoPE reads the projections).
FALLBACK = {"q_norm": "q_proj", "k_norm": "k_proj"}

Ready = dict[int, list[int]]  # core -> task ids after which its data is ready


def hand_off(device, previous: Group | None, group: Group) -> tuple[int, tuple[int, ...]]:
    """``(lead cores, hop distances)`` of the activation hand-off into a stage: the
    previous stage's cores come first in the segment's cores, and the memo keys the
    stage by how far each activation travels instead of by where the sender sits.

    Stages fed from different directions at the same distances then share one timing.
    Measured on the 100-request Azure replay (Qwen3-4B, 64 cores): of 231 stage shapes
    timed from several directions, 215 took exactly the same time and the others
    differed by at most 0.006% (which activations share a mesh link differs).
    """
    if previous is None:
        return 0, ()
    noc = device.parts["noc"]
    return len(previous.cores), tuple(noc.hops(f"core{src}", f"core{dst}")
                                      for src, dst in zip(previous.cores, group.cores))


def plan_key(model, plan: StagePlan) -> tuple:
    """What makes two stages' graphs identical up to where their cores sit: layer
    kinds, which weights are SRAM-resident (by position in the stage) and the KV split."""
    first = plan.layers.start
    return (tuple(model.layer_kind(layer) for layer in plan.layers),
            tuple(sorted((layer - first, name) for layer, name in plan.sram_weights)),
            plan.kv_sram_tokens)


class StageBuilder:
    """Builds the task graphs of stages and of the LM head."""

    def __init__(self, device, model, config, strategy, width: int, kv_dtype: int,
                 merge_decode: bool = False, key_ids: dict | None = None):
        self.device, self.model, self.config = device, model, config
        self.strategy, self.width, self.kv_dtype = strategy, width, kv_dtype
        self.has_hbm = device.config.hbm is not None
        # Serving batches hold many decode sequences of different lengths: merging their
        # attention into one op per kind (keys summed) keeps FLOPs and KV bytes exact
        # and makes batches with the same totals share one simulated segment.
        self.merge_decode = merge_decode
        self._spill: dict[int, tuple[float, float]] = {}
        self._parts_cache: dict[tuple, list] = {}
        # Part signatures are interned to small ints (memo keys are hashed on every lookup).
        self.key_ids = {} if key_ids is None else key_ids
        # MoE: routing per (layer, run tokens) and the expert placement; token_start is
        # the first run token of the iteration being built (0 outside map_llm).
        self.moe_routing = MoeRouting(model, config) if model.is_moe else None
        self.moe_placement = expert_placement(config) if model.is_moe else None
        self.token_start = 0

    def array_cols(self, group: Group) -> int:
        """Columns of the systolic arrays of ``group`` (its cores share one kind: a
        pool's cores are specialised together), for tiles without partial folds."""
        array = self.device.parts.get(f"core{group.cores[0]}.sa")
        return getattr(getattr(array, "config", None), "cols", 0) or 0

    # -- stages ----------------------------------------------------------------------
    def stage(self, group: Group, previous: Group | None, plan: StagePlan,
              chunks: tuple[SequenceChunk, ...], name: str, token_start: int = 0) -> TaskGraph:
        graph = TaskGraph(name=name)
        self.chunks = chunks
        self.token_start = token_start
        ready = self._entry(graph, group, previous, chunks)
        for layer in plan.layers:
            ready = self._layer(graph, group, plan, chunks, layer, ready)
        return graph

    # -- stages cut at attention (serving) ----------------------------------------------
    def stage_parts(self, plan: StagePlan, chunks: tuple[SequenceChunk, ...], first: bool,
                    key: tuple | None = None) -> list[tuple[tuple, tuple]]:
        """The stage as parts separated by barriers at every attention block:
        ``[entry + dense][attention][dense][attention]...[dense]``.

        Returns ``(key, part)`` pairs: the key identifies the part's graph up to where its
        cores sit (dense parts depend only on the batch's token count and which weights
        are resident; attention parts only on the attention shapes), so a serving run with
        thousands of distinct batches times few distinct parts.  Build a part with
        :meth:`build_part`, on any stage with the same :func:`plan_key` (``key``, if the
        caller has it).  Chained, the parts get back most of the overlap the barriers
        cut (see :class:`~npusim.workload.program.ChainedSegment`; measured in
        docs/serving.md).
        """
        cache_key = (first, key or plan_key(self.model, plan), len(plan.layers), chunks)
        cached = self._parts_cache.get(cache_key)
        if cached is not None:
            return cached
        parts: list[list] = [[("entry", "embed" if first else "act")]]
        # Per part, the (layer, op name) pairs emitted by the parts before it: an op
        # whose inputs all come from there starts with its part (in the stage graph it
        # waits only for them), not after the op before it in the part.
        earlier: list[set] = [set()]
        emitted: set[tuple[int, str]] = set()
        attention = False
        for layer in plan.layers:
            ops = layer_ops(self.model, chunks, self.config.dtype_bytes, layer=layer,
                            kv_dtype_bytes=self.kv_dtype)
            self._spill = {}
            if self.merge_decode:
                ops = self._merged(ops, chunks, plan)
            spill = dict(self._spill)
            for op in ops:
                is_attention = op.seq is not None
                if is_attention != attention:
                    parts.append([])
                    earlier.append(set(emitted))
                    attention = is_attention
                parts[-1].append((layer, op, spill))
                emitted.add((layer, op.name))
        out = []
        for part, before in zip(parts, earlier):
            layers = {item[0] for item in part if item[0] != "entry"}
            outside = frozenset((layer, name) for layer, name in before if layer in layers)
            signature = [("outside", tuple(sorted(name for _, name in outside)))]
            for item in part:
                if item[0] == "entry":
                    signature.append(item)
                    continue
                layer, op, spill = item
                resident = (layer, op.name) in plan.sram_weights
                chunk = chunks[op.seq or 0]
                fractions = (spill.get(op.seq) if op.seq in spill else
                             (plan.kv_read_hbm_fraction(chunk.context_len),
                              plan.kv_write_hbm_fraction(chunk.context_len, chunk.new_tokens))
                             if op.seq is not None else None)
                if op.role == "moe_experts":  # which experts are resident shapes the graph
                    resident = tuple(sorted(n for l, n in plan.sram_weights if l == layer
                                            and n.startswith("expert_")))
                signature.append((op.name, op.role, op.op.signature(), op.kv_read_bytes,
                                  op.kv_write_bytes,
                                  resident if op.role in ("linear", "router", "moe_experts")
                                  else None,
                                  fractions))
            attention = any(item[0] != "entry" and item[1].seq is not None for item in part)
            signature_id = self.key_ids.setdefault(tuple(signature), len(self.key_ids))
            out.append((("part", attention, signature_id),
                        (tuple(part), chunks, plan.layers.start, outside)))
        self._parts_cache[cache_key] = out
        return out

    def build_part(self, group: Group, previous: Group | None, plan: StagePlan, part: tuple,
                   name: str) -> TaskGraph:
        """The task graph of one part from :meth:`stage_parts` on ``group``."""
        items, chunks, first_layer, outside = part
        # The cut is cached per plan key, which is relative to the stage's first layer:
        # it may come from another stage with the same key.  Its layers are this plan's.
        shift = plan.layers.start - first_layer
        graph = TaskGraph(name=name)
        self.chunks = chunks
        ready: Ready = {core: [] for core in group.cores}
        produced: dict[str, Ready] = {}
        for item in items:
            if item[0] == "entry":
                ready = self._entry(graph, group, previous, chunks)
                continue
            layer, op, spill = item
            self._spill = spill
            before = {name for at, name in outside if at == layer}
            ready = self._emit(graph, group, plan, layer + shift, op, produced, ready, before)
        return graph

    def _emit(self, graph: TaskGraph, group: Group, plan: StagePlan, layer: int, op: LayerOp,
              produced: dict[str, Ready], ready: Ready,
              before: set[str] | frozenset[str] = frozenset()) -> Ready:
        """Add ``op`` after its inputs (``produced`` so far, else ``ready``) and record
        its outputs; returns what the next operator waits for.  ``before``: ops of this
        layer done before this graph starts (a part's inputs from the parts before it)."""
        deps = self._deps(op, produced, ready, before) if produced else ready
        out = self._op(graph, group, plan, op, layer, deps)
        produced.setdefault(op.name, {core: [] for core in group.cores})
        for core, ids in out.items():
            produced[op.name][core].extend(ids)
        if op.seq is not None:
            produced[op.label] = out
        return out

    def _entry(self, graph: TaskGraph, group: Group, previous: Group | None,
               chunks: tuple[SequenceChunk, ...]) -> Ready:
        dtype, hidden, tp = self.config.dtype_bytes, self.model.hidden_size, len(group.cores)
        tokens = sum(c.new_tokens for c in chunks)
        slice_bytes = -(-tokens * hidden * dtype // tp)
        ready: Ready = {}
        if previous is None:
            # Embedding rows of this iteration's tokens, gathered from the table in HBM.
            for core in group.cores:
                src = f"core{core}.hbm" if self.has_hbm else f"core{core}.sram"
                ready[core] = [graph.transfer(src, f"core{core}.sram", slice_bytes, (),
                                              f"embed_tokens @core{core}",
                                              chunk_bytes=self.config.stream_chunk_bytes)]
        else:
            for src, dst in zip(previous.cores, group.cores):
                ready[dst] = [graph.transfer(f"core{src}.sram", f"core{dst}.sram", slice_bytes,
                                             (), f"activation core{src}->core{dst}")]
        return ready

    def _layer(self, graph: TaskGraph, group: Group, plan: StagePlan,
               chunks: tuple[SequenceChunk, ...], layer: int, ready: Ready) -> Ready:
        ops = layer_ops(self.model, chunks, self.config.dtype_bytes, layer=layer,
                        kv_dtype_bytes=self.kv_dtype)
        if self.merge_decode:
            ops = self._merged(ops, chunks, plan)
        produced: dict[str, Ready] = {}
        for op in ops:
            ready = self._emit(graph, group, plan, layer, op, produced, ready)
        return ready

    def _merged(self, ops: list[LayerOp], chunks: tuple[SequenceChunk, ...],
                plan: StagePlan) -> list[LayerOp]:
        """``ops`` with the per-sequence attention of all decode sequences merged into one
        op per kind: keys (QK^T columns, AV rows), softmax elements and KV bytes summed."""
        decode = [i for i, c in enumerate(chunks) if c.new_tokens == 1]
        if len(decode) < 2:
            return ops
        first = decode[0]
        members = set(decode)
        groups: dict[str, list[LayerOp]] = {}
        out: list[LayerOp] = []
        for op in ops:
            if op.seq is None or op.seq not in members:
                out.append(op)
            elif op.name in groups:
                groups[op.name].append(op)
            else:
                groups[op.name] = [op]
                out.append(op)  # placeholder, replaced below
        # One replace per op kind (sums over the whole group): a large decode batch
        # would otherwise copy the op once per sequence.
        merged: dict[str, LayerOp] = {}
        for name, group in groups.items():
            base, rest = group[0], group[1:]
            if rest:
                inner = base.op
                if name == "attn_qk":
                    inner = replace(inner, n=inner.n + sum(op.op.n for op in rest))
                elif name == "attn_av":
                    inner = replace(inner, k=inner.k + sum(op.op.k for op in rest))
                else:
                    inner = replace(inner, elements=inner.elements
                                    + sum(op.op.elements for op in rest))
                base = replace(base, op=inner,
                               kv_read_bytes=sum(op.kv_read_bytes for op in group),
                               kv_write_bytes=sum(op.kv_write_bytes for op in group))
            merged[name] = base
        reads = sum(c.context_len for i, c in enumerate(chunks) if i in members)
        spilled_reads = sum(c.context_len * plan.kv_read_hbm_fraction(c.context_len)
                            for i, c in enumerate(chunks) if i in members)
        writes = sum(plan.kv_write_hbm_fraction(c.context_len, 1)
                     for i, c in enumerate(chunks) if i in members)
        self._spill[first] = (spilled_reads / reads if reads else 0.0, writes / len(members))
        return [merged[op.name] if op.seq == first and op.name in merged else op
                for op in out]

    def _deps(self, op: LayerOp, produced: dict[str, Ready], previous: Ready,
              before: set[str] | frozenset[str] = frozenset()) -> Ready:
        names = INPUTS.get(op.name)
        if names is None:
            return previous
        deps: Ready = {core: [] for core in previous}
        found = False
        for name in names:
            if name not in produced and name not in before and name in FALLBACK:
                name = FALLBACK[name]
            source = produced.get(f"{name}[s{op.seq}]") if op.seq is not None else None
            source = source or produced.get(name)
            if source is None:
                found = found or name in before  # ready when the graph starts
                continue
            found = True
            for core, ids in source.items():
                deps[core].extend(ids)
        # None of its listed inputs exists (mlp_residual of a MoE layer has no
        # down_proj): it depends on the op before it.
        return deps if found else previous

    def _op(self, graph: TaskGraph, group: Group, plan: StagePlan, op: LayerOp, layer: int,
            deps: Ready) -> Ready:
        tag = f"L{layer}.{op.label}"
        tp = len(group.cores)
        role = op.role
        if role == "router":  # the gate GEMM is a linear layer; softmax and top-k are vector ops
            role = "linear" if op.op.kind == "gemm" else "vector"
        if role == "moe_experts":
            assignment = self.moe_routing.assign(layer, self.token_start, op.moe.tokens)
            return self.moe_placement.lower(self, graph, group, plan, op, layer, deps, assignment)
        if role == "linear":
            spec = GemmSpec(tag, op.op.m, op.op.k, op.op.n, op.op.dtype_bytes, op.op.batch,
                            "sram" if (layer, op.name) in plan.sram_weights or not self.has_hbm
                            else "hbm", self.config.weight_tile_bytes,
                            self.config.stream_chunk_bytes, self.array_cols(group))
            return self.strategy.lower(graph, spec, group, deps, self.width)
        if role == "attention":
            return self._attention(graph, group, plan, op, tag, deps)
        if role == "kv_write":
            return self._kv_write(graph, group, plan, op, tag, deps)
        if role == "vector":
            share = Op(op.op.kind, elements=-(-op.op.elements // tp),
                       flops_per_element=op.op.flops_per_element, dtype_bytes=op.op.dtype_bytes,
                       name=op.name, inputs=op.op.inputs)
            return {core: [graph.compute(f"core{core}.vec", share, deps[core], f"{tag}@core{core}")]
                    for core in group.cores}
        raise MappingError(f"operator {op.name!r} (role {op.role!r}) of {self.model.name} is "
                           "not supported by the NPU mapping")

    def _attention(self, graph, group, plan, op: LayerOp, tag: str, deps: Ready) -> Ready:
        # Heads split over the TP group (:func:`head_split`); with GQA the query heads of
        # one KV head share its keys and values, so they are the rows of one GEMM against
        # that head's K^T (or V) rather than separate GEMMs each loading it again (the
        # grouped-query decode kernels of FlashInfer / FlashDecoding do the same).  Each
        # core: one GEMM per KV head it needs, of its query heads' rows x the new tokens,
        # and it loads (when spilled) the KV of those heads only.
        chunk = self.chunks[op.seq or 0]
        spilled = (self._spill[op.seq][0] if op.seq in self._spill
                   else plan.kv_read_hbm_fraction(chunk.context_len))
        kv_total = self.model.num_key_value_heads
        ports = Ports(graph, self.config.stream_chunk_bytes)
        out: Ready = {}
        for core, (q_heads, kv_heads) in zip(group.cores, self._heads(group)):
            if not q_heads:  # more cores than heads: this core has no attention to do
                out[core] = list(deps[core])
                continue
            hbm_bytes = kv_bytes_on_core(int(op.kv_read_bytes * spilled), kv_heads, kv_total)
            share = Op("gemm", m=op.op.m * -(-q_heads // kv_heads), k=op.op.k, n=op.op.n,
                       batch=kv_heads, dtype_bytes=op.op.dtype_bytes, name=op.name)
            if hbm_bytes and self.has_hbm:
                out[core] = self._streamed_attention(graph, group, core, share, op, kv_heads,
                                                     hbm_bytes, ports, tag, deps[core])
            else:
                out[core] = [graph.compute(f"core{core}.sa", share, deps[core],
                                           f"{tag}@core{core}")]
        return out

    def _streamed_attention(self, graph, group, core: int, share: Op, op: LayerOp,
                            kv_heads: int, hbm_bytes: int, ports: Ports, tag: str,
                            deps: list[int]) -> list[int]:
        """``share`` (QK^T or AV of one core) with the spilled keys or values streamed
        from HBM in tiles of about ``weight_tile_bytes`` through the core's two tile
        buffers, which weight tiles also use: one GEMM per tile, each waiting for its
        tile's load, and one more for the keys already in SRAM (the new tokens' and the
        cached ones SRAM holds), which needs no load and takes the array while a tile is
        still on its way.  The loads go through the core's one DMA queue in program
        order, and a load waits until the tile two loads back has been used
        (:meth:`Ports.load_tile`): loaded whole, one attention's spilled KV would need as
        much SRAM as it has bytes (tens of MiB for a decode batch with long contexts),
        and its computation could not start before the last byte arrived.  Cut along
        the keys (QK^T's columns, AV's reduction rows) at array-aligned multiples, so the
        tiles add no partial folds; AV's tiles accumulate into one output, as
        FlashDecoding's split-KV kernels do."""
        keys = share.n if op.name == "attn_qk" else share.k
        per_key = kv_bytes_on_core(self.model.kv_size * self.kv_dtype, kv_heads,
                                   self.model.num_key_value_heads)
        streamed_keys = min(keys, max(1, -(-hbm_bytes // max(1, per_key))))
        per_tile = tile_extent(self.config.weight_tile_bytes, per_key,
                               tile_align(self.array_cols(group)), self.array_cols(group))

        def tile_op(extent: int) -> Op:
            if op.name == "attn_qk":
                return shared_gemm(share.name, share.dtype_bytes, share.batch, share.m,
                                   share.k, extent)
            return shared_gemm(share.name, share.dtype_bytes, share.batch, share.m, extent,
                               share.n)

        sa = f"core{core}.sa"
        computes = []
        remaining = hbm_bytes
        for index, extent in enumerate(tile_extents(streamed_keys, per_tile)):
            size = min(remaining, extent * per_key)
            remaining -= size
            load = ports.load_tile(core, size, (), f"{tag}:load KV.{index}@core{core}")
            compute = graph.compute(sa, tile_op(extent), deps + [load],
                                    f"{tag}.{index}@core{core}")
            ports.tile_used(core, compute)
            computes.append(compute)
        if keys > streamed_keys:  # the new tokens' keys and the cached keys SRAM holds
            computes.append(graph.compute(sa, tile_op(keys - streamed_keys), deps,
                                          f"{tag}.sram@core{core}"))
        return computes

    def _heads(self, group: Group) -> tuple[tuple[int, int], ...]:
        return head_split(self.model.num_attention_heads, self.model.num_key_value_heads,
                          len(group.cores))

    def _kv_write(self, graph, group, plan, op: LayerOp, tag: str, deps: Ready) -> Ready:
        chunk = self.chunks[op.seq or 0]
        spilled = (self._spill[op.seq][1] if op.seq in self._spill
                   else plan.kv_write_hbm_fraction(chunk.context_len, chunk.new_tokens))
        kv_total = self.model.num_key_value_heads
        out: Ready = {}
        for core, (_, kv_heads) in zip(group.cores, self._heads(group)):
            # A core writes the KV of the heads it reads (replicated heads on each core).
            hbm_bytes = kv_bytes_on_core(int(op.kv_write_bytes * spilled), kv_heads, kv_total)
            if hbm_bytes and self.has_hbm:
                out[core] = [graph.transfer(f"core{core}.sram", f"core{core}.hbm", hbm_bytes,
                                            deps[core], f"{tag}.spill@core{core}",
                                            chunk_bytes=self.config.stream_chunk_bytes)]
            elif kv_heads:
                copy = Op("elementwise", elements=kv_bytes_on_core(op.op.elements, kv_heads, kv_total),
                          flops_per_element=op.op.flops_per_element,
                          dtype_bytes=op.op.dtype_bytes, name=op.name)
                out[core] = [graph.compute(f"core{core}.vec", copy, deps[core], f"{tag}@core{core}")]
            else:
                out[core] = list(deps[core])
        return out

    # -- LM head -----------------------------------------------------------------------
    def lm_head(self, last: Group, cores: Group, plan: StagePlan,
                chunks: tuple[SequenceChunk, ...]) -> TaskGraph:
        graph = TaskGraph(name="lm_head")
        dtype, hidden = self.config.dtype_bytes, self.model.hidden_size
        rows = sum(1 for c in chunks if c.sample)
        root = last.cores[0]
        start = graph.collective("broadcast", [f"core{root}"] + [f"core{c}" for c in cores.cores
                                                                  if c != root],
                                 rows * hidden * dtype, (), "broadcast sampled rows")
        ops = lm_head_ops(self.model, [SequenceChunk(1, c.context_len, c.sample)
                                       for c in chunks], dtype)
        count = len(cores.cores)
        # Weights not resident stream from each core's HBM in double-buffered column
        # tiles, as a stage's GEMMs do, so their loads overlap the head's compute.
        ports = Ports(graph, self.config.stream_chunk_bytes)
        streamed = not plan.lm_head_in_sram and self.has_hbm
        array_cols = self.array_cols(cores)
        for core in cores.cores:
            norm, head = ops[0], ops[-1]
            task = graph.compute(f"core{core}.vec",
                                 Op("elementwise", elements=-(-rows * hidden // count) or 1,
                                    flops_per_element=norm.op.flops_per_element,
                                    dtype_bytes=dtype, name="final_norm"),
                                 [start], f"final_norm@core{core}")
            columns = -(-head.op.n // count)
            stream_gemm(graph, ports, core, "lm_head",
                        Op("gemm", m=rows, k=hidden, n=columns, dtype_bytes=dtype,
                           name="lm_head"), streamed, [task], self.config.weight_tile_bytes,
                        array_cols)
        return graph
