"""Map an LLM run onto the multi-core NPU (NpuSim §4.1-4.2).

The chip's cores are split into ``pipeline_stages`` TP groups by the chosen placement;
consecutive layers go to consecutive stages.  Every iteration (a prefill chunk or a
decode step) becomes one segment per stage plus one LM-head segment:

* a stage segment receives the activation from the previous stage (pairwise core to
  core, each core's ``1/tp`` slice), runs its layers — GEMMs through the partition
  strategy, vector ops split over the group, attention with heads split over the group
  — and streams weights and spilled KV from HBM where the memory plan says so;
* the LM-head segment broadcasts the sampled rows to every used core and splits the
  ``vocab`` columns over all of them (each core holds ``1/cores`` of the LM head).

Segments run back to back: for one request (or a fixed batch) the pipeline has one
iteration in flight, so a stage never overlaps the next.  Stages on translated core
groups are recognised by the memo as the same segment.  The graphs themselves are built
by :class:`~npusim.strategies.npu.stage_builder.StageBuilder`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

from npusim.core import registry
from npusim.core.errors import MappingError
from npusim.core.units import MS_PER_PS
from npusim.strategies.npu.llm_memory import plan_stages
from npusim.strategies.npu.partition import get_partition
from npusim.strategies.npu.placement import Group
from npusim.strategies.npu.stage_builder import StageBuilder, hand_off, plan_key
from npusim.workload.layer_ops import SequenceChunk
from npusim.workload.llm import layer_counts_problem
from npusim.workload.models import load_model
from npusim.workload.program import LazySegment, Program


@dataclass(frozen=True)
class Iteration:
    """One iteration of the run: its phase label and every sequence's chunk."""

    label: str
    phase: str            # "prefill" or "decode"
    chunks: tuple[SequenceChunk, ...]


def iterations(config) -> list[Iteration]:
    """Prefill chunks then decode steps of a fixed batch of identical requests."""
    out: list[Iteration] = []
    chunk = config.prefill_chunk or config.prompt_len
    done = 0
    while done < config.prompt_len:
        size = min(chunk, config.prompt_len - done)
        last = done + size == config.prompt_len
        out.append(Iteration(f"prefill[{done}:{done + size}]", "prefill",
                             (SequenceChunk(size, done, last),) * config.batch))
        done += size
    bucket = config.decode_kv_bucket_tokens
    for step in range(1, config.output_len):
        context = config.prompt_len + step - 1
        context = -(-context // bucket) * bucket  # rounded up: never under-estimates
        out.append(Iteration(f"decode[{step}]", "decode",
                             (SequenceChunk.decode(context),) * config.batch))
    return out


def split_layers(layers: int, stages: int) -> list[range]:
    """Consecutive layers per stage, the first ``layers % stages`` stages one larger."""
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for stage in range(stages):
        count = base + (1 if stage < extra else 0)
        out.append(range(start, start + count))
        start += count
    return out


def stage_layers(layers: int, stages: int, counts: Sequence[int] | None = None,
                 setting: str = "layers_per_stage", why: str = "") -> list[range]:
    """Consecutive layers per pipeline stage: ``counts`` (layers of each stage, first to
    last) if given, else :func:`split_layers`.  ``setting`` names the field ``counts``
    came from and ``why`` says where the stage count comes from, for the error when the
    two disagree."""
    if counts is None:
        return split_layers(layers, stages)
    problem = layer_counts_problem(counts, layers, stages=stages, stages_from=why)
    if problem is not None:
        raise MappingError(f"{setting} = {list(counts)}: {problem}")
    out, start = [], 0
    for count in counts:
        out.append(range(start, start + count))
        start += count
    return out


def map_llm(device, config, seed: int = 0) -> Program:
    """Lower ``config`` (an :class:`~npusim.workload.llm.LlmWorkloadConfig`) on the NPU."""
    model = load_model(config.model)
    noc = device.config.noc
    width, height, cores = noc.width, noc.height, device.num_cores
    tp = config.tp
    problem = config.chip_problem(cores)  # (a scenario was checked when read: a backstop)
    if problem:
        raise MappingError("{}: {}".format(*problem))
    layers = model.num_hidden_layers
    counts = config.layers_per_stage
    stages = config.pipeline_stages or (len(counts) if counts else min(cores // tp, layers))
    if stages > layers:
        raise MappingError(f"workload.pipeline_stages={stages} exceeds the model's {layers} layers")
    place = registry.lookup("placement", config.placement.kind).impl
    groups: list[Group] = place(width, height, tp, stages, config=config.placement)
    all_cores = Group(tuple(core for group in groups for core in group.cores))
    strategy = get_partition(config.partition)
    kv_dtype = config.kv_dtype_bytes or config.dtype_bytes
    ranges = stage_layers(layers, stages, counts, "workload.layers_per_stage",
                          "workload.pipeline_stages" if config.pipeline_stages else
                          "the list's length")  # (the config checked the list)
    plans = plan_stages(device, model, config, ranges, groups, all_cores)
    builder = StageBuilder(device, model, config, strategy, width, kv_dtype)
    routing = builder.moe_routing

    program = Program(info={"model": model.name, "tp": tp, "pipeline_stages": stages,
                            "placement": config.placement.kind,
                            "partition": config.partition.kind, "batch": config.batch,
                            "prompt_len": config.prompt_len, "output_len": config.output_len,
                            "memory_by_stage": [plan.summary() for plan in plans]})
    phases: list[str] = []
    windows: list[tuple[int, int]] = []  # MoE: run tokens (first, count) of each iteration
    hand_offs = [hand_off(device, groups[index - 1] if index else None, group)
                 for index, group in enumerate(groups)]
    for iteration in iterations(config):
        shape = tuple((c.new_tokens, c.context_len, c.sample) for c in iteration.chunks)
        window = (sum(w[1] for w in windows), sum(c.new_tokens for c in iteration.chunks))
        windows.append(window)
        for index, (group, plan) in enumerate(zip(groups, plans)):
            previous = groups[index - 1] if index else None
            label = f"{iteration.label}/stage{index}"
            cores = (previous.cores if previous else ()) + group.cores
            moe_key = routing.key(plan.layers, *window) if routing else ()
            lead, hops = hand_offs[index]
            program.append(LazySegment(
                ("stage", previous is None, plan_key(model, plan), shape, moe_key, hops), cores,
                functools.partial(builder.stage, group, previous, plan, iteration.chunks, label,
                                  token_start=window[0]),
                label, exact_key=True, lead_cores=lead), label)
            phases.append(iteration.phase)
        if any(c.sample for c in iteration.chunks):
            label = f"{iteration.label}/lm_head"
            program.append(LazySegment(
                # The LM head sees one row per sequence, whatever its context length.
                ("lm_head", plans[-1].lm_head_in_sram, len(iteration.chunks),
                 sum(c.sample for c in iteration.chunks)), groups[-1].cores + all_cores.cores,
                functools.partial(builder.lm_head, groups[-1], all_cores, plans[-1],
                                  iteration.chunks), label, exact_key=True), label)
            phases.append(iteration.phase)
    if routing:
        program.info.update(routing.summary(windows),
                            expert_placement=config.expert_placement.kind)
    program.finish = lambda ends: _phase_metrics(phases, ends, config)
    return program


def _phase_metrics(phases: list[str], ends: list[int], config) -> dict[str, Any]:
    """TTFT, TBT and end-to-end latency from the end time of every segment."""
    last_prefill = max((i for i, phase in enumerate(phases) if phase == "prefill"), default=-1)
    ttft = ends[last_prefill] if last_prefill >= 0 else 0
    total = ends[-1] if ends else 0
    steps = config.output_len - 1
    tbt = (total - ttft) // steps if steps else 0
    tokens = config.batch * config.output_len
    # The same figures under the serving runs' names and unit (ms; a batch's requests
    # all see them), so a sweep over both kinds of run compares one column.
    return {"ttft_ps": ttft, "tbt_ps": tbt, "e2e_latency_ps": total,
            "ttft_ms_mean": ttft * MS_PER_PS, "tpot_ms_mean": tbt * MS_PER_PS if steps else None,
            "e2e_ms_mean": total * MS_PER_PS,
            "decode_steps": steps, "output_tokens": tokens,
            "tokens_per_s": tokens / (total / 1e12) if total else 0.0}
