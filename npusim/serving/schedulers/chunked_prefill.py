"""Chunked prefill with a token budget (Sarathi-Serve; NpuSim §4.3.2 PD fusion)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from npusim.core.registry import register
from npusim.serving.schedulers.base import OrderedScheduler, PipelinedDecodeConfig, admit, decodes
from npusim.serving.state import Entry, SchedulerView


class ChunkedPrefillConfig(PipelinedDecodeConfig):
    """Mixed iterations: decodes first, then prefill chunks up to the budget."""

    kind: Literal["chunked_prefill"] = "chunked_prefill"
    token_budget: int = Field(
        512, ge=1, description="Budget units per iteration: a decode costs 1, a prefill "
                               "chunk of N tokens costs N (NpuSim §4.3.2; N not given "
                               "there, assumption: 512 as Sarathi-Serve's default).")
    prefill_chunk: int = Field(
        512, ge=1, description="Most prompt tokens of one request per iteration (unless "
                               "prefill_chunk_units is set, the budget left after the "
                               "decodes caps a chunk too, so a prefill_chunk above "
                               "token_budget acts as token_budget).")
    chunk_kv: Literal["keep", "recompute"] = Field(
        "keep", description="'keep': a prompt's KV stays cached between its chunks, so a "
                            "chunk computes only its own tokens and reads the earlier ones' "
                            "KV (Sarathi-Serve); 'recompute': every chunk runs the prompt "
                            "tokens before it again, as an engine that keeps no KV for "
                            "partly prefilled prompts does (the 'redundant computations "
                            "due to the chunk prefill' NpuSim §5.5 names for PD fusion "
                            "on long prompts). The token budget counts only new tokens.")
    prefill_chunk_units: int | None = Field(
        None, ge=1, description="Budget units one prefill chunk costs whatever its length "
                                "(NpuSim §4.3.2 'the prefill task consumes N units'; its "
                                "simulator uses 4 against a budget of 5: one chunk and at "
                                "most one decode, or up to five decodes). Default: one "
                                "unit per chunk token (Sarathi-Serve's token budget).")
    pipeline_chunks: bool = Field(
        False, description="Let a prompt's next chunk enter the pipeline while its "
                           "previous chunk is still in the later stages (chunked pipeline "
                           "parallelism: TeraPipe, Medha; NpuSim's scheduler queues a "
                           "prompt's chunks on consecutive iterations). Off: a chunk waits "
                           "until the previous one has left the last stage. Needs "
                           "chunk_kv: keep (a chunk reads the KV the one ahead of it "
                           "writes, stage by stage).")

    @property
    def iteration_tokens(self) -> int:
        """The token budget caps an iteration's tokens too, unless it counts fixed chunk
        units rather than tokens."""
        if self.prefill_chunk_units:
            return self.max_batch_tokens
        return min(self.token_budget, self.max_batch_tokens)

    @property
    def decode_slots(self) -> int:
        """A decode takes one unit of the budget as well as one token, so the budget
        bounds an iteration's decodes too (the backend's decode timing grid ends there)."""
        return min(self.max_batch_size, self.max_batch_tokens, self.token_budget)

    @model_validator(mode="after")
    def _pipelined_chunks_keep_kv(self) -> "ChunkedPrefillConfig":
        if self.pipeline_chunks and self.chunk_kv == "recompute":
            raise ValueError("pipeline_chunks: true runs a prompt's chunks one stage apart, "
                             "each reading the KV the one ahead wrote; chunk_kv: recompute "
                             "keeps no KV between chunks; expected chunk_kv: keep")
        if self.prefill_chunk_units is None and self.token_budget > self.max_batch_tokens:
            # counted in tokens, the budget is capped by max_batch_tokens: say so rather
            # than run a budget other than the one written
            raise ValueError(f"token_budget = {self.token_budget} exceeds max_batch_tokens = "
                             f"{self.max_batch_tokens}, which caps an iteration's tokens, so "
                             "the budget above it would never be used; expected token_budget "
                             f"<= {self.max_batch_tokens}, or raise max_batch_tokens")
        if self.prefill_chunk_units is not None and self.prefill_chunk_units > self.token_budget:
            raise ValueError(f"prefill_chunk_units = {self.prefill_chunk_units} exceeds "
                             f"token_budget = {self.token_budget}: no prefill chunk would "
                             f"ever fit; expected at most {self.token_budget}")
        return self


@register("scheduler", ChunkedPrefillConfig)
class ChunkedPrefillScheduler(OrderedScheduler):
    """Decode first (each running request one token); when the budget is not used up,
    fill it with prefill chunks of waiting requests in service order (``order``)."""

    def __init__(self, config: ChunkedPrefillConfig):
        self.config = config
        self.lanes = config.new_lanes()

    def schedule(self, view: SchedulerView) -> list[Entry]:
        cfg = self.config
        tokens = cfg.iteration_tokens  # what the activation buffers hold
        # Budget units: one per token, or per decode plus prefill_chunk_units per chunk.
        units = cfg.token_budget if cfg.prefill_chunk_units else tokens
        entries = decodes(self.service_order(view.running), cfg.decode_slots, view,
                          self.lanes)
        units -= len(entries)
        tokens -= len(entries)
        slots = cfg.max_batch_size - len(entries)
        if units > 0 and slots > 0:
            entries += admit(view, self.service_order(view.waiting), slots,
                             tokens if cfg.prefill_chunk_units else units,
                             chunk=cfg.prefill_chunk,
                             recompute_prefix=cfg.chunk_kv == "recompute",
                             decode_kv_tokens=view.decode_kv_tokens(
                                 [entry.state for entry in entries]),
                             chunk_cost=cfg.prefill_chunk_units, units_left=units)
        return entries
