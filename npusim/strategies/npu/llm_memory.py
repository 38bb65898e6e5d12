"""Where an LLM's weights and KV cache live on each pipeline stage (NpuSim §4.2).

Per core of a stage, SRAM is filled in priority order: activation/input buffers and
compute/communication temporaries first, then KV-cache blocks for the whole run (up to
the requests' final length), then as many weight tensors as fit, in layer order; the
rest of the weights stream from the core's HBM every time they are used, and KV beyond
what SRAM holds spills to the request's HBM ring buffer.  Every core of a stage holds
``1/tp`` of each tensor, so one plan describes them all.

The plan answers the mapping's three questions: is this weight SRAM-resident, what
share of a KV read comes from HBM, and what share of a KV write goes to HBM.  A model
that does not fit (weights + minimum KV > SRAM + HBM of the cores it uses) is rejected
with the shortfall.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npusim.mapping.memory_manager import check_model_fits, hbm_capacity_bytes, plan_core_memory
from npusim.strategies.npu.heads import busiest_kv_heads, kv_bytes_on_core
from npusim.strategies.npu.moe_mapping import expert_placement, expert_plan_weights
from npusim.strategies.npu.partition import PartitionCost
from npusim.workload.layer_ops import SequenceChunk, layer_ops, lm_head_ops

#: Activation buffers kept per core: the current operator's input and output
#: (assumption, NpuSim §4.2 reserves "dedicated buffers"; data in flight over the NoC
#: uses the partition's double-buffered tiles, counted with the weight tiles).
ACTIVATION_BUFFERS = 2
#: Tile buffers per core for what streams from HBM (double buffering): weight tiles and
#: spilled-KV tiles share them across operators (``Ports.load_tile``).
STREAM_BUFFERS = 2


@dataclass
class StagePlan:
    """Memory decisions of one pipeline stage (identical for each of its cores)."""

    layers: range
    sram_weights: set[tuple[int, str]] = field(default_factory=set)
    kv_sram_tokens: int = 0          # tokens of each sequence whose KV sits in SRAM
    lm_head_in_sram: bool = False
    sram_used_bytes: dict[str, int] = field(default_factory=dict)
    hbm_weight_bytes: int = 0        # per core
    kv_capacity_tokens: int = 0      # KV tokens (all sequences) SRAM blocks + HBM ring hold
    #: SRAM buffers per core with ``sram_buffers: working_set`` (the activations or the
    #: largest GEMM working set under the partition, whichever is larger, plus the tiles)
    working_set_buffer_bytes: int = 0

    def summary(self) -> dict[str, int | float]:
        """What one core of the stage keeps where (bytes): SRAM taken by activation and
        tile buffers, KV blocks and resident weights, the weights streamed from HBM on
        every use, the share of the core's weights SRAM holds (1.0 with none), and the
        buffers ``workload.sram_buffers: working_set`` reserves (the largest GEMM's
        input, output and rotation buffers under the partition when larger than the
        activations; above ``sram_buffer_bytes``, the default plan assumes the excess
        fits beside the rest)."""
        weights = self.sram_used_bytes.get("weights", 0)
        total = weights + self.hbm_weight_bytes
        return {"sram_buffer_bytes": self.sram_used_bytes.get("buffers", 0),
                "sram_kv_bytes": self.sram_used_bytes.get("kv", 0),
                "sram_weight_bytes": weights, "hbm_weight_bytes": self.hbm_weight_bytes,
                "weights_in_sram_share": weights / total if total else 1.0,
                "sram_buffer_working_set_bytes": self.working_set_buffer_bytes}

    def kv_read_hbm_fraction(self, context_len: int) -> float:
        """Share of a read of ``context_len`` cached tokens that comes from HBM."""
        if context_len <= 0:
            return 0.0
        return max(0, context_len - self.kv_sram_tokens) / context_len

    def kv_write_hbm_fraction(self, context_len: int, new_tokens: int) -> float:
        """Share of the KV of ``new_tokens`` tokens after ``context_len`` that spills."""
        end = context_len + new_tokens
        spilled = max(0, end - max(self.kv_sram_tokens, context_len))
        return min(1.0, spilled / new_tokens) if new_tokens else 0.0


def _weights_by_layer(model, config, layer: int, tp: int) -> list[tuple[str, int]]:
    """``(name, bytes on one core of the stage)`` of the layer's weights in order of use.

    A MoE layer's routed experts are one tensor per expert matrix
    (``expert_gate_proj[e5]``, ...), sized by the expert placement (``ep``: whole
    experts on their core; ``tp``: ``1/tp`` of every expert), so SRAM takes them expert
    by expert and the rest stream from HBM."""
    chunk = [SequenceChunk(1, 0)]
    out: list[tuple[str, int]] = []
    for op in layer_ops(model, chunk, config.dtype_bytes, layer=layer):
        if op.role == "moe_experts":
            out += expert_plan_weights(config, op.moe, tp)
        elif op.weight_bytes:
            out.append((op.name, -(-op.weight_bytes // tp)))
    return out


def _largest_activation_bytes(model, config) -> int:
    """Largest activation tensor one iteration keeps between operators (whole group).

    Attention scores are not counted: they are produced and consumed tile by tile
    (flash-attention style), never materialised whole for a long prompt.
    """
    tokens = (config.prefill_chunk or config.prompt_len) * config.batch
    width = max(model.hidden_size, model.intermediate_size or 0,
                model.q_size + 2 * model.kv_size,
                # MoE: the dispatched rows, top_k copies of each token (an upper bound
                # on what one core receives or gathers per token of its share).
                model.experts_per_token * model.hidden_size)
    return tokens * width * config.dtype_bytes


def largest_working_set(model, config, layers: range, group, width: int, streamed: bool
                        ) -> tuple[int, str, "PartitionCost | None"]:
    """``(bytes, GEMM name, its cost)`` of the largest per-core working set (input and
    output slices plus the partition's buffers, :attr:`PartitionCost.working_set_bytes`)
    of a GEMM in ``layers`` on ``group``, at the iteration's token count.  Routers count;
    with ``expert_placement: tp`` so does an expert's GEMM at every token of the
    iteration (the most one expert can take), since the partition lowers it; with
    ``ep`` experts stream through the tile buffers and do not.  ``streamed``: cost the
    weights as streamed from HBM (an upper bound when some are SRAM-resident, which the
    plan decides after this)."""
    from npusim.strategies.npu.partition import GemmSpec, get_partition
    from npusim.workload.layer_ops import expert_ffn_ops

    strategy = get_partition(config.partition)
    experts_partitioned = expert_placement(config).config.kind == "tp"
    tokens = (config.prefill_chunk or config.prompt_len) * config.batch
    best: tuple[int, str, PartitionCost | None] = (0, "", None)
    for layer in layers:
        gemms = []
        for op in layer_ops(model, [SequenceChunk(tokens, 0)], config.dtype_bytes, layer=layer):
            if op.role == "moe_experts" and experts_partitioned:
                gemms += [item for item in expert_ffn_ops(op.moe, 0, op.moe.tokens)
                          if item.op.kind == "gemm"]
            elif op.role in ("linear", "router") and op.op.kind == "gemm":
                gemms.append(op)
        for op in gemms:
            gemm = GemmSpec(op.name, op.op.m, op.op.k, op.op.n, op.op.dtype_bytes, op.op.batch,
                            "hbm" if streamed else "sram", config.weight_tile_bytes)
            cost = strategy.cost(gemm, group, width)
            if cost.working_set_bytes > best[0]:
                best = (cost.working_set_bytes, f"L{layer}.{op.name}", cost)
    return best


def check_stream_sizes(config, sram_bytes: int) -> None:
    """The weight tiles (double-buffered) and a stream's burst group must fit a core's
    SRAM: a larger value would be a transfer into memory that does not exist (it was
    blamed on the activation buffers, or accepted and timed)."""
    from npusim.core.errors import MappingError
    from npusim.core.units import format_bytes

    if STREAM_BUFFERS * config.weight_tile_bytes > sram_bytes:
        raise MappingError(
            f"workload.weight_tile_bytes = {format_bytes(config.weight_tile_bytes)}: "
            f"{STREAM_BUFFERS} tiles are buffered in each core's SRAM of "
            f"{format_bytes(sram_bytes)}; expected at most "
            f"{format_bytes(sram_bytes // STREAM_BUFFERS)} (or more hw.core.sram.capacity_bytes)")
    if config.stream_chunk_bytes > sram_bytes:
        raise MappingError(
            f"workload.stream_chunk_bytes = {format_bytes(config.stream_chunk_bytes)}: a burst "
            f"group larger than a core's SRAM ({format_bytes(sram_bytes)}); expected at most "
            "that (the default 256 KiB keeps the timing and simulates fast)")


def _check_working_set(config, model, gemm: str, cost: PartitionCost, buffers: int,
                       sram_bytes: int) -> None:
    """A GEMM working set larger than a core's SRAM is an error that names the GEMM,
    its parts and the settings that size them."""
    if buffers <= sram_bytes:
        return
    from npusim.core.errors import MappingError
    from npusim.core.units import format_bytes

    kind = getattr(config.partition, "kind", config.partition)
    tokens = (config.prefill_chunk or config.prompt_len) * config.batch
    setting = getattr(config, "iteration_tokens_setting",
                      "workload.prefill_chunk x batch (prefill_chunk 0: the whole prompt_len)")
    # fewer tokens help only where the slices, not the rotation blocks, are the bulk
    first = (f"fewer tokens per iteration ({setting} = {tokens}), "
             if cost.input_bytes + cost.output_bytes >= cost.buffer_bytes else "")
    rotation = (f" and {format_bytes(cost.buffer_bytes)} of rotation buffers (weight or "
                "input blocks, whatever the tokens)" if cost.buffer_bytes else "")
    raise MappingError(
        f"{model.name}: with workload.sram_buffers = working_set, {gemm} under the {kind} "
        f"partition needs {format_bytes(cost.working_set_bytes)} per core: "
        f"{format_bytes(cost.input_bytes + cost.output_bytes)} of input and output slices "
        f"at {tokens} tokens{rotation}, plus {STREAM_BUFFERS} weight tiles of "
        f"{format_bytes(config.weight_tile_bytes)}; a core has "
        f"{format_bytes(sram_bytes)} of SRAM; expected {first}another partition "
        f"(workload.partition: k streams weights through the tile buffers), a larger TP "
        f"({getattr(config, 'tp_setting', 'workload.tp')}), more SRAM per core "
        "(hw.core.sram.capacity_bytes) or workload.sram_buffers = activations")


def plan_stages(device, model, config, layer_ranges: list[range], groups, all_cores,
                kv_sram_tokens: int | None = None) -> list[StagePlan]:
    """One :class:`StagePlan` per stage; raises :class:`MappingError` if the model cannot fit.

    SRAM is offered KV for ``kv_sram_tokens`` tokens (default: the whole run's
    ``batch x total_len``), before weights; at least one request of ``total_len`` tokens
    must fit in SRAM + HBM.
    """
    hw = device.config
    tp = config.tp
    sram_bytes = hw.core.sram.capacity_bytes
    check_stream_sizes(config, sram_bytes)
    hbm_bytes = hbm_capacity_bytes(hw.hbm) if hw.hbm is not None else 0
    kv_dtype = config.kv_dtype_bytes or config.dtype_bytes
    kv_per_token_layer = 2 * model.kv_size * kv_dtype      # K and V, one layer
    kv_heads = busiest_kv_heads(model, tp)                 # KV heads on the busiest core
    used_cores = len(all_cores.cores)
    lm_head = lm_head_ops(model, [SequenceChunk(1, 0)], config.dtype_bytes)[-1]
    lm_head_share = -(-lm_head.weight_bytes // used_cores)

    activations = ACTIVATION_BUFFERS * -(-_largest_activation_bytes(model, config) // tp)
    buffers = activations + STREAM_BUFFERS * config.weight_tile_bytes
    # Every stage's largest GEMM working set is reported; with sram_buffers:
    # working_set it is also what the stage reserves when it exceeds the activations.
    working_sets = [largest_working_set(model, config, layers, groups[index], hw.noc.width,
                                        streamed=bool(hbm_bytes))
                    for index, layers in enumerate(layer_ranges)]
    exact_buffers = [max(activations, working) + STREAM_BUFFERS * config.weight_tile_bytes
                     for working, _, _ in working_sets]
    stage_buffers = [buffers] * len(layer_ranges)
    if getattr(config, "sram_buffers", "activations") == "working_set":
        for (working, gemm, cost), exact in zip(working_sets, exact_buffers):
            if working > activations:  # else the activation buffers' check below says why
                _check_working_set(config, model, gemm, cost, exact, sram_bytes)
        stage_buffers = exact_buffers
        buffers = max(stage_buffers)
    if buffers > sram_bytes:  # per core: say what sizes them and what to change
        from npusim.core.errors import MappingError
        from npusim.core.units import format_bytes

        tokens = (config.prefill_chunk or config.prompt_len) * config.batch
        setting = getattr(config, "iteration_tokens_setting",
                          "workload.prefill_chunk x batch (prefill_chunk 0: the whole prompt_len)")
        raise MappingError(
            f"{model.name}: each core needs {format_bytes(buffers)} of SRAM for activation and "
            f"weight-tile buffers ({ACTIVATION_BUFFERS} activations of {tokens} tokens over "
            f"TP {tp}, {STREAM_BUFFERS} tiles of {format_bytes(config.weight_tile_bytes)}) but "
            f"has {format_bytes(sram_bytes)}; expected fewer tokens per iteration ({setting} = "
            f"{tokens}), smaller weight tiles (workload.weight_tile_bytes), a larger TP "
            f"({getattr(config, 'tp_setting', 'workload.tp')}) or more SRAM per core "
            "(hw.core.sram.capacity_bytes)")
    check_model_fits(model.params_total * config.dtype_bytes,
                     config.batch * config.total_len * kv_per_token_layer * model.num_hidden_layers,
                     sram_bytes * used_cores, hbm_bytes * used_cores,
                     model_name=model.name, kv_tokens=config.total_len,
                     kv_requests=config.batch, reserved_sram_bytes=buffers * used_cores,
                     holder=(f"the {used_cores} cores it runs on have" if used_cores != 1 else
                             "the one core it runs on has"))
    plans = []
    for index, layers in enumerate(layer_ranges):
        weights = [(f"{layer}.{name}", size) for layer in layers
                   for name, size in _weights_by_layer(model, config, layer, tp)]
        # Routed experts compete for SRAM after every dense tensor of the stage: a dense
        # tensor is read every iteration, an expert only when a token picks it (top_k / E
        # of a decode step's experts), so a resident dense byte saves more HBM traffic.
        weights.sort(key=lambda item: ".expert_" in item[0])
        # The first stage keeps the embedding table in HBM (rows are gathered by token,
        # never streamed whole), so it never competes for SRAM.  Without HBM it has to
        # sit in the stage's SRAM (a tied table is the LM head's shards, counted below).
        embedding = (-(-model.params_embedding * config.dtype_bytes // tp)
                     if index == 0 else 0)
        if embedding and not hbm_bytes:
            weights.insert(0, ("embedding", embedding))
            embedding = 0
        weights.append(("lm_head", lm_head_share))
        kv_per_token = kv_bytes_on_core(kv_per_token_layer * len(layers), kv_heads,
                                        model.num_key_value_heads)
        tokens = config.batch * config.total_len
        core_plan = plan_core_memory(
            sram_capacity_bytes=sram_bytes, hbm_capacity_bytes=hbm_bytes,
            hbm_reserved_bytes=embedding, hbm_reserved_for="the embedding table",
            buffer_bytes=stage_buffers[index], weights=weights,
            kv_bytes_per_token=kv_per_token,
            kv_sram_tokens=tokens if kv_sram_tokens is None else kv_sram_tokens,
            min_kv_tokens=tokens, core=groups[index].cores[0])
        resident = {name for name, _ in core_plan.sram_weights}
        plans.append(StagePlan(
            layers=layers,
            sram_weights={(layer, name) for layer in layers
                          for name, _ in _weights_by_layer(model, config, layer, tp)
                          if f"{layer}.{name}" in resident},
            kv_sram_tokens=core_plan.kv_sram_tokens // config.batch,
            lm_head_in_sram="lm_head" in resident,
            sram_used_bytes={"buffers": core_plan.buffer_bytes,
                             "kv": core_plan.kv_sram_bytes,
                             "weights": core_plan.sram_weight_bytes},
            hbm_weight_bytes=core_plan.hbm_weight_bytes,
            working_set_buffer_bytes=exact_buffers[index],
            kv_capacity_tokens=core_plan.kv_sram_tokens
            + core_plan.hbm_kv_capacity_bytes // max(1, kv_per_token)))
    return plans


__all__ = ["StagePlan", "plan_stages"]
