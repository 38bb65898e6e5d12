"""Continuous batching (Orca / vLLM default): new prompts join at iteration boundaries."""

from __future__ import annotations

from typing import Literal

from npusim.core.registry import register
from npusim.serving.schedulers.base import OrderedScheduler, PipelinedDecodeConfig, admit, decodes
from npusim.serving.state import Entry, SchedulerView


class ContinuousConfig(PipelinedDecodeConfig):
    """Iteration-level batching; an iteration is either whole prefills or decodes."""

    kind: Literal["continuous"] = "continuous"


@register("scheduler", ContinuousConfig)
class ContinuousScheduler(OrderedScheduler):
    """Prefill-first: admitted prompts run as soon as KV allows (whole prompts, one
    iteration), otherwise every running request decodes one token."""

    def __init__(self, config: ContinuousConfig):
        self.config = config
        self.lanes = config.new_lanes()

    def schedule(self, view: SchedulerView) -> list[Entry]:
        # Admit only as many as a decode iteration can take, or they would queue there.
        slots = self.config.decode_slots - len(view.running)
        prefills = admit(view, self.service_order(view.waiting), max(0, slots),
                         self.config.max_batch_tokens)
        if prefills:
            return prefills
        return decodes(self.service_order(view.running), self.config.decode_slots, view,
                       self.lanes)
