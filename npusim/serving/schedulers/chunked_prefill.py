"""Chunked prefill with a token budget (Sarathi-Serve; NpuSim §4.3.2 PD fusion)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from npusim.core.registry import register
from npusim.serving.schedulers.base import OrderedScheduler, SchedulerConfigBase, admit, decodes
from npusim.serving.state import Entry, SchedulerView


class ChunkedPrefillConfig(SchedulerConfigBase):
    """Mixed iterations: decodes first, then prefill chunks up to the budget."""

    kind: Literal["chunked_prefill"] = "chunked_prefill"
    token_budget: int = Field(
        512, ge=1, description="Budget units per iteration: a decode costs 1, a prefill "
                               "chunk of N tokens costs N (NpuSim §4.3.2; N not given "
                               "there, assumption: 512 as Sarathi-Serve's default).")
    prefill_chunk: int = Field(
        512, ge=1, description="Most prompt tokens of one request per iteration.")
    chunk_kv: Literal["keep", "recompute"] = Field(
        "keep", description="'keep': a prompt's KV stays cached between its chunks, so a "
                            "chunk computes only its own tokens and reads the earlier ones' "
                            "KV (Sarathi-Serve); 'recompute': every chunk runs the prompt "
                            "tokens before it again, as an engine that keeps no KV for "
                            "partly prefilled prompts does (the 'redundant computations "
                            "due to the chunk prefill' NpuSim §5.5 names for PD fusion "
                            "on long prompts). The token budget counts only new tokens.")


@register("scheduler", ChunkedPrefillConfig)
class ChunkedPrefillScheduler(OrderedScheduler):
    """Decode first (each running request one token); when the budget is not used up,
    fill it with prefill chunks of waiting requests in service order (``order``)."""

    def __init__(self, config: ChunkedPrefillConfig):
        self.config = config

    def schedule(self, view: SchedulerView) -> list[Entry]:
        cfg = self.config
        budget = min(cfg.token_budget, cfg.max_batch_tokens)
        entries = decodes(self.service_order(view.running),
                          min(cfg.max_batch_size, budget), view)
        budget -= len(entries)
        slots = cfg.max_batch_size - len(entries)
        if budget > 0 and slots > 0:
            entries += admit(view, self.service_order(view.waiting), slots, budget,
                             chunk=cfg.prefill_chunk,
                             recompute_prefix=cfg.chunk_kv == "recompute",
                             decode_kv_tokens=view.decode_kv_tokens(
                                 [entry.state for entry in entries]))
        return entries
