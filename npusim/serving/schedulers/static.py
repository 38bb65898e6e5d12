"""Static batching: admit a batch, run it to completion, then admit the next."""

from __future__ import annotations

from typing import Literal

from npusim.core.registry import register
from npusim.serving.schedulers.base import OrderedScheduler, SchedulerConfigBase, admit, decodes
from npusim.serving.state import Entry, SchedulerView


class StaticConfig(SchedulerConfigBase):
    """Static batching (FasterTransformer-style): no request joins a running batch."""

    kind: Literal["static"] = "static"


@register("scheduler", StaticConfig)
class StaticScheduler(OrderedScheduler):
    """Prefill a whole batch, decode it until every request has finished."""

    def __init__(self, config: StaticConfig):
        self.config = config

    def handover_limit(self, busy: bool) -> int | None:
        """A decode pool takes a new batch only once the last one has finished."""
        return 0 if busy else self.config.max_batch_size

    def schedule(self, view: SchedulerView) -> list[Entry]:
        if view.running or view.in_flight:
            return (decodes(self.service_order(view.running), self.config.decode_slots)
                    if not view.in_flight else [])
        return admit(view, self.service_order(view.waiting), self.config.max_batch_size,
                     self.config.max_batch_tokens)
