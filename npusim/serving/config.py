"""The ``kind: serving`` workload: a request trace served by an iteration-level engine.

```yaml
workload:
  kind: serving
  model: qwen3_4b
  trace: {file: traces/ratio_1_1_32.csv}          # or a generator (see docs/traces.md)
  scheduler: {kind: chunked_prefill, token_budget: 512}
  pd: {mode: fusion, tp: 4}                        # or mode: disaggregation
  slo: {ttft_ms: 1000, tbt_ms: 100}
```
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import ConfigDict, Field, field_validator, model_validator

from npusim.core.registry import NumbersNotBooleans, PartConfig, register
from npusim.core.text import counted
from npusim.core.units import Bytes
from npusim.hw.compute.systolic import MAX_ARRAY_SIDE
from npusim.hw.memory.dram import MAX_CHANNELS
from npusim.workload.llm import (LayerCounts, ModelMappingChecks, _named_part,
                                 layer_counts_problem, layers_per_stage_field, pool_stages,
                                 sram_buffers_field, stream_chunk_field, weight_tile_field)
from npusim.workload.trace_spec import TraceSpec


class CoreVariant(NumbersNotBooleans):
    """A different core for one role (NpuSim Fig. 12 "A32H60": systolic size, HBM)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    systolic_size: int | None = Field(None, ge=1, le=MAX_ARRAY_SIDE,
                                      description="Systolic array rows = cols (e.g. 32 for "
                                                  "'A32'; at most 4096).")
    hbm_channels: int | None = Field(None, ge=1, le=MAX_CHANNELS,
                                     description="HBM channels per core (each the preset's "
                                                 "channel bandwidth; power of two, at most "
                                                 "1024).")
    @field_validator("hbm_channels")
    @classmethod
    def _power_of_two(cls, value: int | None) -> int | None:
        # the DRAM address mapping splits addresses by channel bits
        if value is not None and value & (value - 1):
            raise ValueError(f"expected a power of two (1, 2, 4, ...), got {value}")
        return value

    sram_bytes_per_cycle: int | None = Field(
        None, ge=1, description="SRAM port bytes per cycle of these cores. Default (None): "
                                "the preset's, scaled with the array's side when "
                                "systolic_size is given (NpuSim §5.5: SRAM bandwidth is "
                                "adjusted to match the array; large_core_64's 512 B for "
                                "128 columns becomes 128 B for 32).")


def layers_field(role: str) -> str:
    """The ``workload.pd`` field giving a pool's layers per pipeline stage."""
    return "layers_per_stage" if role == "fused" else f"{role}_layers_per_stage"


class Pool(NamedTuple):
    """One pool of pipelines as ``workload.pd`` asks for it: its role ("fused",
    "prefill" or "decode"), cores (None: fusion's default, the whole chip, not known
    before the chip is built), TP and DP."""

    role: str
    cores: int | None
    tp: int
    dp: int

    @property
    def cores_field(self) -> str:
        return "cores" if self.role == "fused" else f"{self.role}_cores"

    @property
    def stage_count(self) -> str:
        """How its stages are counted, in the config's words."""
        return ("cores / (tp x dp)" if self.role == "fused" else
                f"{self.role}_cores / ({self.role} tp x {self.role}_dp)")


class PdConfig(NumbersNotBooleans):
    """How prefill and decode share the chip (NpuSim §4.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["fusion", "disaggregation"] = Field(
        "fusion", description="'fusion': the same cores run prefill and decode (TP for "
                              "both, chunked prefill mixes them); 'disaggregation': "
                              "separate prefill and decode cores, KV sent over the NoC.")
    tp: int = Field(4, ge=1, description="Cores per pipeline stage (TP group).")
    cores: int | None = Field(None, ge=1, description="Fusion: cores used (default: all, "
                                                      "rounded down to a multiple of tp x "
                                                      "dp; a value given must be one).")
    dp: int = Field(1, ge=1, description="Fusion: data-parallel replicas (each a pipeline "
                                         "holding the whole model).")
    prefill_cores: int | None = Field(None, ge=1, description="Disaggregation: cores for "
                                                              "prefill (e.g. 42 of 63).")
    decode_cores: int | None = Field(None, ge=1, description="Disaggregation: cores for "
                                                             "decode (e.g. 21 of 63).")
    prefill_tp: int | None = Field(None, ge=1, description="TP of prefill stages (default tp).")
    decode_tp: int | None = Field(None, ge=1, description="TP of decode stages (default tp).")
    prefill_dp: int = Field(1, ge=1, description="Prefill replicas (DP-prioritised: more "
                                                 "replicas, fewer stages each).")
    decode_dp: int = Field(1, ge=1, description="Decode replicas.")
    layers_per_stage: LayerCounts = layers_per_stage_field(
        "cores / (tp x dp), at most one per layer", "Fusion: ")
    prefill_layers_per_stage: LayerCounts = layers_per_stage_field(
        "prefill_cores / (prefill tp x prefill_dp)", "Disaggregation, prefill pipelines: ")
    decode_layers_per_stage: LayerCounts = layers_per_stage_field(
        "decode_cores / (decode tp x decode_dp)", "Disaggregation, decode pipelines: ")
    decode_core: CoreVariant | None = Field(
        None, description="Heterogeneous disaggregation: decode cores with a different "
                          "systolic size / HBM bandwidth than the chip preset.")
    decode_scheduler: dict[str, Any] | None = Field(
        None, description="Disaggregation: the decode pool's own scheduler limits, as the "
                          "workload.scheduler fields that differ (e.g. {max_batch_size: "
                          "256, token_budget: 256}; DistServe and Splitwise size each "
                          "pool's batches separately). Default: workload.scheduler limits "
                          "both pools. Not kind: a decode pool runs the workload's "
                          "scheduler on decodes only.")

    def pools(self, chip_cores: int | None = None) -> list[Pool]:
        """The mode's pools; fusion's default cores are ``chip_cores``."""
        if self.mode == "fusion":
            return [Pool("fused", self.cores or chip_cores, self.tp, self.dp)]
        return [Pool("prefill", self.prefill_cores, self.prefill_tp or self.tp, self.prefill_dp),
                Pool("decode", self.decode_cores, self.decode_tp or self.tp, self.decode_dp)]

    def chip_problem(self, cores: int) -> tuple[str, str] | None:
        """``(field path, message)`` if the pools ask for more than a ``cores``-core chip."""
        if self.mode == "fusion" and self.cores is not None and self.cores > cores:
            return "workload.pd.cores", f"{self.cores} exceeds the chip's {cores} cores"
        if self.mode == "fusion" and self.tp * self.dp > (self.cores or cores):
            field = "workload.pd.dp" if self.dp > 1 else "workload.pd.tp"
            holder = "pool" if self.cores else "chip"
            return field, (f"tp {self.tp} x dp {self.dp} needs {self.tp * self.dp} cores; "
                           f"the {holder} has {self.cores or cores}")
        if self.mode == "disaggregation" and self.prefill_cores + self.decode_cores > cores:
            return ("workload.pd", f"prefill_cores + decode_cores = {self.prefill_cores} + "
                    f"{self.decode_cores} = {self.prefill_cores + self.decode_cores} exceeds "
                    f"the chip's {cores} cores")
        return None

    @model_validator(mode="after")
    def _check(self) -> "PdConfig":
        if self.mode == "disaggregation" and (self.prefill_cores is None or self.decode_cores is None):
            raise ValueError("disaggregation needs pd.prefill_cores and pd.decode_cores")
        # A field the mode does not use would be ignored silently: say so instead.
        unused = (("prefill_cores", "decode_cores", "prefill_tp", "decode_tp", "prefill_dp",
                   "decode_dp", "prefill_layers_per_stage", "decode_layers_per_stage",
                   "decode_scheduler")
                  if self.mode == "fusion" else ("cores", "dp", "layers_per_stage"))
        given = [f"pd.{name}={getattr(self, name)}" for name in unused
                 if getattr(self, name) != type(self).model_fields[name].default]
        if given:
            other = "disaggregation" if self.mode == "fusion" else "fusion"
            own = ("pd.layers_per_stage" if self.mode == "fusion" else
                   "pd.prefill_layers_per_stage and pd.decode_layers_per_stage")
            hint = (f"; mode: {self.mode} takes {own}"
                    if any("layers_per_stage=" in name for name in given) else "")
            raise ValueError(f"{', '.join(given)}: only mode: {other} uses "
                             f"{'it' if len(given) == 1 else 'them'}; mode: {self.mode} would "
                             f"ignore it (remove it, or set pd.mode){hint}")
        if self.mode == "fusion" and self.cores is not None and self.cores % (self.tp * self.dp):
            group, idle = self.tp * self.dp, self.cores % (self.tp * self.dp)
            below = self.cores - idle
            nearest = f"{below} or {below + group}" if below else f"{group}"
            raise ValueError(f"pd.cores = {self.cores} is not a multiple of tp x dp = {group}: "
                             f"{counted(idle, 'core')} would sit idle; expected a multiple of "
                             f"{group} "
                             f"({nearest}; or leave pd.cores out: the whole chip, rounded "
                             "down)")
        if self.mode == "disaggregation":
            for role, cores, tp, dp in (("prefill", self.prefill_cores, self.prefill_tp, self.prefill_dp),
                                        ("decode", self.decode_cores, self.decode_tp, self.decode_dp)):
                group = (tp or self.tp) * dp
                if cores < group:
                    raise ValueError(f"pd.{role}_cores = {cores} is fewer than {role} tp x dp = "
                                     f"{group} (a stage of TP {tp or self.tp} in each of "
                                     f"{counted(dp, 'replica')}); expected at least {group} (a multiple of "
                                     f"it), or a smaller {role} tp x dp")
                if cores % group:
                    below = cores - cores % group
                    nearest = f"{below} or {below + group}"
                    raise ValueError(f"pd.{role}_cores = {cores} is not a multiple of {role} tp x dp "
                                     f"= {group}: {counted(cores % group, 'core')} would sit idle; expected "
                                     f"a multiple of {group} ({nearest}), or a {role} tp x dp "
                                     f"that divides {cores}")
        if self.decode_core is not None and self.mode != "disaggregation":
            raise ValueError("pd.decode_core needs mode: disaggregation (fusion runs both "
                             "phases on the same cores)")
        return self


class SloConfig(NumbersNotBooleans):
    """Service-level objectives for goodput."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float = Field(2000.0, gt=0, description="A request meets the SLO if its TTFT "
                                                      "is at most this (ms, or a time such "
                                                      "as '1.5s')...")
    tbt_ms: float = Field(200.0, gt=0, description="... and its mean TBT at most this (ms, "
                                                    "or a time such as '50ms'): the mean of "
                                                    "its gaps after the first token, which "
                                                    "the metrics call TPOT (tpot_ms_*, as "
                                                    "vLLM's TPOT SLO), not every gap "
                                                    "(tbt_ms_*).")

    @field_validator("ttft_ms", "tbt_ms", mode="before")
    @classmethod
    def _time_text(cls, value: Any) -> Any:
        """A time with a unit (``200ms``, ``1.5s``), as other time fields take, in ms."""
        from npusim.core.units import parse_time_ms

        return parse_time_ms(value)


class ServingWorkloadConfig(ModelMappingChecks, PartConfig):
    """Serve a request trace with an iteration-level scheduler."""

    kind: Literal["serving"] = "serving"
    model: str = Field(description="Shipped model name or a path to a Hugging Face config.json.")
    trace: TraceSpec = Field(description="Requests: a file (CSV/JSONL/Azure) or a generator.")
    scheduler: Any = Field("chunked_prefill", description="Iteration policy by name or "
                                                          "{kind: ...}: static, continuous, "
                                                          "chunked_prefill.")
    pd: PdConfig = Field(default_factory=PdConfig, description="PD fusion or disaggregation.")
    router: Literal["shared_queue", "round_robin", "least_outstanding"] = Field(
        "shared_queue", description="How requests reach the replicas that take new prompts "
                                    "(fusion dp > 1, prefill_dp > 1). 'shared_queue': one "
                                    "queue, the first replica free takes the head (late "
                                    "binding, the most favourable); 'round_robin' / "
                                    "'least_outstanding': bound to one replica on arrival, "
                                    "in turn or to the one with the fewest unfinished "
                                    "requests (as Vidur's global schedulers and vLLM "
                                    "data-parallel load balancers do).")
    placement: Any = Field("ring", description="Core placement of every TP group by name.")
    partition: Any = Field("k", description="GEMM partition by name (mn, k, mnk).")
    dtype_bytes: int = Field(2, ge=1, le=8, description="Weight/activation bytes per element.")
    kv_dtype_bytes: int | None = Field(None, ge=1, le=8, description="KV bytes per element.")
    kv_reservation: Literal["max_length", "incremental"] = Field(
        "max_length", description="'max_length': admission reserves prompt + output tokens "
                                  "(NpuSim's per-request HBM buffer), no preemption; "
                                  "'incremental': reserve as tokens arrive, preempt when full.")
    preemption: Literal["recompute", "swap"] = Field(
        "recompute", description="What a preempted request loses (kv_reservation: "
                                 "incremental): 'recompute' drops its KV and prefills prompt "
                                 "+ generated tokens again; 'swap' moves its KV to host "
                                 "memory over the host link (needs hw.host) and back before "
                                 "it decodes again.")
    kv_block_tokens: int = Field(
        1, ge=1, le=1 << 20,
        description="KV is allocated in blocks of this many tokens (vLLM's PagedAttention "
                    "block_size, 16 by default there): a request's last block is partly "
                    "empty. 1: exact per-request buffers, as NpuSim reserves them.")
    prefix_caching: bool = Field(
        False, description="Keep the KV of full prompt blocks after a request leaves and "
                           "reuse it for later prompts that start with the same blocks "
                           "(vLLM's automatic prefix caching, SGLang's RadixAttention): a "
                           "hit is not computed again, only read by attention. Needs a "
                           "trace whose requests name their blocks (hash_ids, Mooncake "
                           "traces, or the generator's shared_prefix); unreferenced cached "
                           "blocks are evicted least recently used first. On prefill and "
                           "fused replicas.")
    kv_sram_fraction: float = Field(
        0.25, ge=0, le=1, description="Share of each core's SRAM (after buffers) offered to "
                                      "KV blocks before weights (assumption; NpuSim tunes "
                                      "this split per model).")
    kv_bucket_tokens: int = Field(
        64, ge=1, description="Context lengths are rounded up to this many tokens when "
                              "timing an iteration that is not interpolated, so similar "
                              "iterations share one simulated segment (over-estimates "
                              "attention slightly).")
    decode_interpolation: bool = Field(
        True, description="Time a decode-only batch as the bilinear interpolation of "
                          "four grid batches (sequence count between powers of two, or "
                          "the scheduler's most sequences per decode iteration, total "
                          "context on decode_grid_points_per_octave points per octave) "
                          "instead of rounding its contexts up: mean 0.17%, at most 0.72% "
                          "from the exact time over 120 Qwen3-4B stages on 64 cores "
                          "(rounding up: mean +1.1%, up to +4.1%), and far fewer "
                          "distinct batches to time (docs/serving.md).")
    decode_grid_points_per_octave: int = Field(
        2, ge=1, le=1024, description="Grid points per octave of total decode context "
                                      "for decode_interpolation (spaced at least "
                                      "kv_bucket_tokens apart).  Stage time is nearly "
                                      "linear in total context, so 2 is as close as 4 "
                                      "(mean error 0.166% vs 0.156%) with ~1/3 fewer "
                                      "grid batches to time.")
    dense_interpolation: bool = Field(
        True, description="With segment_granularity 'part': time a dense part (GEMMs, "
                          "norms, residuals: work that depends only on the batch's token "
                          "count) whose token count is off the grid as the linear "
                          "interpolation of the dense parts at the two grid counts around "
                          "it, so a trace times a few dozen token counts instead of every "
                          "one it meets (error measured in docs/serving.md).")
    dense_grid_points_per_octave: int = Field(
        4, ge=1, le=1024, description="Grid points per octave of token count for "
                                      "dense_interpolation (every count up to twice this "
                                      "is on the grid).")
    segment_granularity: Literal["stage", "part"] = Field(
        "part", description="'part': a stage is timed as a chain of parts cut at its "
                            "attention blocks, dense parts shared between batches of the "
                            "same token count, each part's weight loads started once the "
                            "loads before it are done (within 0.6% of 'stage' per stage "
                            "on the shipped scenarios; about 2.5x faster in analytic mode "
                            "and 10x in tlm on the Azure replay; measured in "
                            "docs/serving.md).  'stage': each pipeline stage of an "
                            "iteration is one timed graph (exact for its batch shape, "
                            "every overlap inside the stage kept): the reference to check "
                            "chosen points with.")
    slo: SloConfig = Field(default_factory=SloConfig, description="SLO thresholds for goodput.")
    weight_tile_bytes: Bytes = weight_tile_field()
    stream_chunk_bytes: Bytes = stream_chunk_field()
    sram_buffers: Literal["activations", "working_set"] = sram_buffers_field()

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, value: Any) -> Any:
        return _named_part("scheduler", value)

    @model_validator(mode="after")
    def _layer_counts(self) -> "ServingWorkloadConfig":
        # A layer list against the model and, where the config gives its pool's cores,
        # the stages they make (so a sweep refuses a wrong list before it runs).  Fusion's
        # default (the whole chip) is checked when the chip is cut, and so is a pool with
        # more stages than layers, which leaves cores idle whatever the list
        # (npu_backend.build_replicas).
        from npusim.workload.models import load_model

        for pool in self.pd.pools():
            counts = getattr(self.pd, layers_field(pool.role))
            if counts is None:
                continue
            model = load_model(self.model)
            layers = model.num_hidden_layers
            stages, stages_from = None, ""
            if pool.cores is not None and pool.cores // (pool.tp * pool.dp) <= layers:
                stages = pool_stages(pool.cores, pool.tp, pool.dp, layers)
                stages_from = f"{pool.stage_count} = {pool.cores} / ({pool.tp} x {pool.dp})"
            problem = layer_counts_problem(counts, layers, model.name, stages, stages_from)
            if problem:
                raise ValueError(f"pd.{layers_field(pool.role)}: {counts} {problem}")
        return self

    @model_validator(mode="after")
    def _prefix_caching_keeps_chunks(self) -> "ServingWorkloadConfig":
        if self.prefix_caching and getattr(self.scheduler, "chunk_kv", "keep") == "recompute":
            raise ValueError("prefix_caching: true keeps prompt KV for later requests, and "
                             "scheduler.chunk_kv: recompute keeps none between a prompt's "
                             "chunks; expected chunk_kv: keep with prefix caching")
        return self

    @model_validator(mode="after")
    def _decode_scheduler(self) -> "ServingWorkloadConfig":
        self.scheduler_for("decode")  # raises naming pd.decode_scheduler's bad field
        return self

    def scheduler_for(self, role: str):
        """The scheduler config of a pool of ``role`` ("fused", "prefill", "decode"):
        ``scheduler``, with ``pd.decode_scheduler``'s fields on a decode pool."""
        changes = self.pd.decode_scheduler
        if role != "decode" or not changes:
            return self.scheduler
        return _scheduler_with(self.scheduler, changes)

    def chip_problem(self, cores: int) -> tuple[str, str] | None:
        return self.pd.chip_problem(cores)


def _scheduler_with(scheduler, changes: dict[str, Any]):
    """``scheduler`` with the fields in ``changes`` (``pd.decode_scheduler``), checked
    as the scheduler's own fields are; a problem names ``pd.decode_scheduler.FIELD``."""
    import difflib

    from pydantic import ValidationError

    where = "pd.decode_scheduler"
    fields = type(scheduler).model_fields
    for key in changes:
        if key == "kind":
            raise ValueError(f"{where}.kind: a decode pool runs workload.scheduler's kind "
                             f"({scheduler.kind}) on decodes only; expected only its limits "
                             "here (max_batch_size, max_batch_tokens, token_budget ...)")
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}.{key}: unknown key for kind: {scheduler.kind}{hint} "
                             f"(known keys: {', '.join(sorted(set(fields) - {'kind'}))})")
    try:
        return type(scheduler).model_validate({**scheduler.model_dump(), **changes})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        path = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if path:  # one field's value
            raise ValueError(f"{where}.{path}: {message} (got {error['input']!r})") from None
        # a check across fields, of workload.scheduler with these fields changed
        raise ValueError(f"{where}: {message} (in workload.scheduler with "
                         f"{', '.join(f'{k}={v!r}' for k, v in changes.items())} for the "
                         "decode pool)") from None


@register("workload", ServingWorkloadConfig)
def lower_serving(device, config: ServingWorkloadConfig, seed: int = 0):
    """Serve a request trace: iteration-level scheduling, KV accounting, SLO metrics
    (the driver times its own segments on ``device``)."""
    from npusim.serving.engine import ServingDriver

    return ServingDriver(device, config, seed)
