"""LLM inference workload: a single request or a fixed batch, prefill then decode.

``kind: llm`` names a model (a shipped config or any Hugging Face ``config.json``), the
prompt and output lengths and the batch, and how the model is mapped: tensor-parallel
degree, pipeline stages, core placement and GEMM partition (all selectable by name).
The device-specific mapper turns each iteration into segments; the run reports TTFT,
TBT and end-to-end latency next to the per-op breakdown.

Phases: the prefill of ``prompt_len`` tokens (optionally in chunks) produces the first
token; each of the following ``output_len - 1`` decode steps produces one more.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any, Literal, Sequence

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from npusim.core import registry
from npusim.core.errors import MappingError, NpusimError
from npusim.core.registry import IntNotBool, PartConfig, register
from npusim.core.units import Bytes

#: Device kind -> "module:function" of the mapper that lowers an LLM run on it.
MAPPERS = {"npu": "npusim.strategies.npu.llm_mapping:map_llm"}


def _named_part(category: str, value: Any) -> Any:
    """Accept ``"ring"`` or ``{kind: ring, ...}`` for a registered part; return its config."""
    if isinstance(value, PartConfig):
        return value
    data = {"kind": value} if isinstance(value, str) else value
    if not isinstance(data, dict) or "kind" not in data:
        raise ValueError(f"expected a {category} name or a mapping with 'kind', got {value!r}")
    known = registry.entries(category)
    if not isinstance(data["kind"], str):  # a list or mapping cannot name a part
        raise ValueError(f"kind: got {data['kind']!r}; expected a {category} name "
                         f"({', '.join(known)})")
    if data["kind"] not in known:
        import difflib

        lower = {name.lower(): name for name in known}
        close = ([lower[data["kind"].lower()]] if data["kind"].lower() in lower else
                 difflib.get_close_matches(data["kind"], list(known), n=1))
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"kind: unknown {category} {data['kind']!r}; {hint}"
                         f"known: {', '.join(known)}")
    return known[data["kind"]].config.model_validate(data)


class RoutingSpec(PartConfig):
    """Where a MoE run's routing comes from: a trace file or a synthetic generator.

    ``{file: path}`` (``.npz`` from ``write_routing_trace``, path relative to the working
    directory, validated against the model) or ``{kind: balanced | imbalanced | zipf}``
    with ``ratio`` (imbalanced) or ``exponent`` (zipf) and ``seed``; the generated trace
    covers every token of the run (``docs/moe.md``).
    """

    file: str | None = Field(None, description="Routing trace (.npz) to replay.")
    kind: Literal["balanced", "imbalanced", "zipf"] | None = Field(
        None, description="Synthetic routing generator (instead of a file).")
    ratio: float | None = Field(None, ge=1, description="imbalanced: hot-expert load / mean "
                                                        "load (1..experts/top_k).")
    exponent: float | None = Field(None, ge=0, le=1000, description="zipf: popularity exponent "
                                                                   "(0 = uniform; at most 1000).")
    seed: int = Field(0, ge=0, description="Generator seed (same seed, same trace).")

    @model_validator(mode="after")
    def _check(self) -> "RoutingSpec":
        if (self.file is None) == (self.kind is None):
            raise ValueError("give exactly one of routing.file (a trace) or routing.kind "
                             "(balanced, imbalanced, zipf)")
        if self.kind == "imbalanced" and self.ratio is None:
            raise ValueError("routing.kind=imbalanced needs routing.ratio (e.g. 2.0)")
        if self.kind == "zipf" and self.exponent is None:
            raise ValueError("routing.kind=zipf needs routing.exponent (e.g. 1.0)")
        # A field the chosen source does not read would be ignored silently: say so.
        used = {None: ("file",), "balanced": ("seed",), "imbalanced": ("ratio", "seed"),
                "zipf": ("exponent", "seed")}[self.kind]
        unused = [f"routing.{name}={getattr(self, name)!r}" for name in ("ratio", "exponent", "seed")
                  if name not in used and getattr(self, name) != type(self).model_fields[name].default]
        if unused:
            what = f"kind: {self.kind}" if self.kind else "a routing file"
            raise ValueError(f"{', '.join(unused)}: {what} does not use "
                             f"{'it' if len(unused) == 1 else 'them'} (ratio is for kind: "
                             "imbalanced, exponent for kind: zipf, seed for generators); "
                             "remove it")
        return self


def weight_tile_field() -> Any:
    """``weight_tile_bytes`` of the workloads that stream a model's weights."""
    return Field(4 << 20, gt=0, description="Tile of a weight streamed from HBM to SRAM (one "
                                            "DMA per tile, double-buffered; assumption: 4 MiB, "
                                            "so two tiles use 1/8 of a 64 MiB scratchpad). "
                                            "Also the tile of spilled KV read back from HBM "
                                            "and the grain of pipelined collectives.")


def sram_buffers_field() -> Any:
    """``sram_buffers`` of the workloads that plan each core's SRAM (NpuSim §4.2)."""
    return Field(
        "activations",
        description="What each core's SRAM reserves before KV and weights. 'activations' "
                    "(default, NpuSim §4.2's dedicated buffers): two activations of the "
                    "largest width at 1/tp plus two weight tiles; the partition's own "
                    "buffers (the K partition's replicated m x n output, the MN/MNK "
                    "rotation's two blocks) are assumed to fit beside them (assumption). "
                    "'working_set': the largest GEMM's whole per-core working set under "
                    "the chosen partition (input and output slices plus rotation blocks; "
                    "experts too under expert_placement tp) if larger: an upper bound on "
                    "what the lowering holds, so fewer weights stay in SRAM and a long "
                    "prompt may need prefill chunks (docs/partition.md).")


def stream_chunk_field() -> Any:
    """``stream_chunk_bytes`` of the workloads that stream a model's weights."""
    return Field(256 << 10, gt=0, description="Burst group of bulk sequential streams "
                                              "(weights, spilled KV): one simulated memory "
                                              "transaction each. Larger is faster to "
                                              "simulate; the DRAM channel still times every "
                                              "burst inside it.")


def layer_counts_problem(counts: Sequence[int], layers: int, model: str = "the model",
                         stages: int | None = None, stages_from: str = "") -> str | None:
    """Why ``counts`` (layers per pipeline stage) cannot split ``layers`` layers over
    ``stages`` stages (if known; ``stages_from`` says where that number comes from), or
    None: every place a layer list meets a model or a pipeline asks this one question."""
    if sum(counts) != layers:
        return (f"sums to {sum(counts)} layers, but {model} has {layers}; expected counts "
                f"summing to {layers}, one per pipeline stage")
    if stages is not None and len(counts) != stages:
        return (f"gives {len(counts)} stages, but the pipeline has {stages}"
                + (f" ({stages_from})" if stages_from else "")
                + f"; expected {stages} counts")
    return None


def pool_stages(cores: int, tp: int, dp: int, layers: int) -> int:
    """Stages of each of ``dp`` pipelines of TP ``tp`` groups on ``cores`` cores: one per
    group, at most one per layer."""
    return min(cores // (tp * dp), layers)


#: One pipeline stage's layer count (1 or more; a boolean is refused, not read as 1).
LayerCount = Annotated[IntNotBool, Field(gt=0)]


def _layer_list(value: Any) -> Any:
    """A lone number or a string is not a stage list: say what the list holds (pydantic
    only says 'should be a valid list', and a reader may take the field for one count)."""
    if value is not None and not isinstance(value, (list, tuple)):
        raise ValueError(f"got {value!r}; expected a list with one layer count per pipeline "
                         "stage, first to last, summing to the model's layers (e.g. "
                         "[6, 6, 6, 6, 6, 6] for 36 layers over 6 stages)")
    return value


#: A ``layers_per_stage``-style list (checked for its length and sum where the stages
#: are known).
LayerCounts = Annotated[list[LayerCount] | None, BeforeValidator(_layer_list)]


def layers_per_stage_field(stages: str, applies: str = "") -> Any:
    """``layers_per_stage``-style field: layers of each pipeline stage, first to last;
    ``stages`` says how many stages there are, ``applies`` when the field is used."""
    return Field(
        None, min_length=1,
        description=f"{applies}{'l' if applies else 'L'}ayers of each pipeline stage, first "
                    "to last (e.g. [6, 6, 6, 6, 6, 6] for 36 layers over 6 stages, or [8, 7, "
                    f"7, 7, 7] to load the first stage more): one count per stage ({stages}), "
                    "summing to the model's layers. Default: as even as possible, the first "
                    "stages one larger.")


class ModelMappingChecks(BaseModel):
    """Validators shared by workloads that map a model onto a device: the model exists,
    and the placement and partition name registered parts (``"ring"`` or ``{kind: ...}``)."""

    @field_validator("model", check_fields=False)
    @classmethod
    def _model_exists(cls, value: str) -> str:
        from npusim.workload.models import load_model

        if isinstance(value, str) and not value.strip():
            raise ValueError("empty; expected a shipped model name (e.g. qwen3_4b) or a "
                             "path to a config.json")

        try:
            load_model(value)
        except NpusimError as exc:
            raise ValueError(str(exc)) from None
        return value

    def chip_problem(self, cores: int) -> tuple[str, str] | None:
        """``(field path, message)`` if this workload asks for more of a ``cores``-core
        chip than it has, else None: checked when a scenario is read, so a bad point of
        a sweep is refused before anything runs, and again by the mapping."""
        return None

    def hw_problem(self, hw: Any) -> tuple[str, str] | None:
        """:meth:`chip_problem` for the device ``hw`` describes (if it counts cores)."""
        cores = getattr(hw, "num_cores", None)
        return self.chip_problem(cores) if isinstance(cores, int) else None

    @field_validator("placement", check_fields=False)
    @classmethod
    def _placement(cls, value: Any) -> Any:
        return _named_part("placement", value)

    @field_validator("partition", check_fields=False)
    @classmethod
    def _partition(cls, value: Any) -> Any:
        return _named_part("partition", value)


class LlmWorkloadConfig(ModelMappingChecks, PartConfig):
    """A dense or MoE LLM serving one request (or a fixed batch of identical requests)."""

    kind: Literal["llm"] = "llm"
    model: str = Field(description="Shipped model name (qwen3_4b, Qwen3-4B, ...) or a path "
                                   "to a Hugging Face config.json.")
    prompt_len: int = Field(ge=1, description="Prompt tokens per request.")
    output_len: int = Field(1, ge=1, description="Generated tokens per request (the first "
                                                 "comes from prefill; output_len - 1 decode steps).")
    batch: int = Field(1, ge=1, description="Identical requests run together (fixed batch).")
    dtype_bytes: int = Field(2, ge=1, le=8, description="Weight and activation bytes per "
                                                        "element (2 = FP16/BF16).")
    kv_dtype_bytes: int | None = Field(None, ge=1, le=8, description="KV-cache bytes per "
                                                                     "element (default dtype_bytes).")
    tp: int = Field(4, ge=1, description="Tensor-parallel degree: cores per pipeline stage "
                                         "(NpuSim Fig. 8-10 use TP=4).")
    pipeline_stages: int | None = Field(
        None, ge=1, description="Pipeline stages (each a TP group holding consecutive "
                                "layers). Default: as many as the chip holds, at most one "
                                "per layer.")
    layers_per_stage: LayerCounts = layers_per_stage_field(
        "as many as pipeline_stages when that is given; otherwise the list's length is the "
        "number of stages")
    placement: Any = Field("ring", description="Core placement by name or {kind: ...}: "
                                               "linear_seq, linear_interleave, ring, mesh2d.")
    partition: Any = Field("k", description="GEMM tensor partition by name or {kind: ...}: "
                                            "mn (AllGather), k (AllReduce), mnk (2-D).")
    expert_placement: Any = Field(
        "ep", description="MoE experts by name or {kind: ..., capacity_factor, overflow}: "
                          "ep (expert parallel, all-to-all) or tp (every expert "
                          "partitioned). Ignored for dense models.")
    routing: RoutingSpec | None = Field(
        None, description="MoE routing: {file: trace.npz} or {kind: balanced|imbalanced|"
                          "zipf, ratio|exponent, seed}. Default: a balanced assignment.")
    prefill_chunk: int = Field(0, ge=0, description="Prefill chunk in tokens (0: the whole "
                                                    "prompt in one iteration).")
    decode_kv_bucket_tokens: int = Field(
        16, ge=1, description="Time each decode step at its KV length rounded up to a "
                             "multiple of this (1: exact; default 16 tokens). Steps in one "
                             "bucket share one "
                             "simulated segment; attention time is over-estimated by at "
                             "most bucket/context of itself (documented approximation).")
    weight_tile_bytes: Bytes = weight_tile_field()
    stream_chunk_bytes: Bytes = stream_chunk_field()
    sram_buffers: Literal["activations", "working_set"] = sram_buffers_field()

    @field_validator("expert_placement")
    @classmethod
    def _expert_placement(cls, value: Any) -> Any:
        return _named_part("expert_placement", value)

    @model_validator(mode="after")
    def _check(self) -> "LlmWorkloadConfig":
        if self.prefill_chunk and self.prefill_chunk > self.prompt_len:
            raise ValueError(f"prefill_chunk ({self.prefill_chunk}) exceeds prompt_len "
                             f"({self.prompt_len})")
        from npusim.workload.models import load_model

        model = load_model(self.model)
        if self.layers_per_stage is not None:
            problem = layer_counts_problem(
                self.layers_per_stage, model.num_hidden_layers, model.name,
                self.pipeline_stages, f"pipeline_stages = {self.pipeline_stages}; or leave it out")
            if problem:
                raise ValueError(f"layers_per_stage: {self.layers_per_stage} {problem}")
        window = model.max_position_embeddings
        if window and self.total_len > window:
            raise ValueError(f"prompt_len: prompt_len + output_len = {self.total_len} "
                             f"tokens exceed {self.model}'s context window of {window} "
                             "(max_position_embeddings in its config.json)")
        if self.routing is not None:
            from npusim.workload.routing import read_routing_trace

            model = load_model(self.model)
            if not model.is_moe:
                raise ValueError(f"routing is set but {model.name} has no MoE layer")
            if self.routing.file is not None:
                # Validated here so a bad trace (unknown expert, wrong layer count,
                # weights that do not sum to 1) fails before any simulation.
                try:
                    read_routing_trace(self.routing.file, model)
                except NpusimError as exc:
                    raise ValueError(f"routing.file: {exc}") from None
        return self

    @property
    def total_len(self) -> int:
        """Tokens a request holds at its end (prompt + generated)."""
        return self.prompt_len + self.output_len

    def chip_problem(self, cores: int) -> tuple[str, str] | None:
        tp = self.tp
        if tp > cores:
            return "workload.tp", f"{tp} exceeds the chip's {cores} cores"
        counts = self.layers_per_stage
        stages = self.pipeline_stages or (len(counts) if counts else 0)
        if stages * tp > cores:
            field, asked = (("workload.pipeline_stages", f"{stages}")
                            if self.pipeline_stages or not counts else
                            ("workload.layers_per_stage", f"{list(counts)} ({stages} stages)"))
            return field, (f"{asked} x tp={tp} needs {stages * tp} cores; the chip has {cores} "
                           f"(expected at most {cores // tp} stages at tp={tp})")
        return None


def mapper_for(device: Any):
    """The LLM mapper of ``device``'s kind, or a clear error when there is none."""
    kind = getattr(device.config, "kind", "?")
    target = MAPPERS.get(kind)
    if target is None:
        raise MappingError(f"workload kind 'llm' has no mapper for device kind {kind!r} "
                           f"yet (supported: {', '.join(MAPPERS)})")
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


@register("workload", LlmWorkloadConfig)
def lower_llm(device, config: LlmWorkloadConfig, seed: int = 0):
    """Lower an LLM run on ``device`` into a :class:`~npusim.workload.program.Program`."""
    return mapper_for(device)(device, config, seed)
