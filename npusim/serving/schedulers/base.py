"""What every scheduler shares: admission under a KV budget and batch limits."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from npusim.core.registry import PartConfig
from npusim.serving.schedulers.lanes import DecodeLanes
from npusim.serving.state import Entry, RequestState, SchedulerView

#: Micro-batches of any kind a pipelined replica keeps under way per stage by default:
#: one running and one waiting (assumption: a double-buffered stage input, as the
#: cores' SRAM buffers double-buffer activations; no back-pressure model is built).
IN_FLIGHT_PER_STAGE = 2


class SchedulerConfigBase(PartConfig):
    """Limits common to every policy."""

    max_batch_size: int = Field(64, ge=1, description="Most requests in one iteration.")
    fill_pipeline: bool = Field(
        False, description="Split decoding requests evenly over the replica's pipeline "
                           "stages (one micro-batch per stage, like PP serving engines) "
                           "instead of one micro-batch with all of them. Fills every stage "
                           "but shrinks batches, so weight-bound decode can get slower.")
    max_decode_micro_batches_in_flight: int | None = Field(
        None, ge=1, description="Most micro-batches carrying decodes under way on a replica "
                                "at once. None: one per pipeline stage, as vLLM's "
                                "pipeline-parallel virtual engines and NpuSim's ring of "
                                "micro-batches (the next one launches when one leaves the "
                                "last stage). More lets decode micro-batches queue between "
                                "stages whenever the first stage is free; re-formed ones "
                                "then shrink, each taking only the requests back from the "
                                "pipeline, and TPOT can grow along a long trace (the engine "
                                "before 2026-11-27).")
    max_micro_batches_in_flight: Annotated[int, Field(ge=1)] | Literal["stages"] | None = Field(
        None, description="Most micro-batches of any kind (prompt chunks too) under way on a "
                          "replica at once. None: twice the pipeline stages, one running "
                          "and one waiting at each stage (a double-buffered input), so a "
                          "micro-batch of prompts launches whenever the first stage is free "
                          "(a prompt waits on no earlier iteration) until the pipeline backs "
                          "up. 'stages': one per stage, as vLLM's virtual engines schedule, "
                          "where a big prefill micro-batch holds its slot while small ones "
                          "behind it leave stages idle. Without a bound, a pipeline whose "
                          "later stage is slower fills with one-prompt micro-batches under "
                          "overload.")

    @field_validator("max_micro_batches_in_flight", mode="before")
    @classmethod
    def _a_count_or_stages(cls, value: Any) -> Any:
        # One message instead of one per member of the union.
        if value is None or value == "stages" or (
                isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"expected a whole number >= 1, 'stages' or null (got {value!r})")

    max_batch_tokens: int = Field(
        2048, ge=1, description="Most new tokens in one iteration (prefill tokens + one "
                                "per decode); sizes the activation buffers the memory "
                                "manager reserves (a PD-disaggregation decode pool's: "
                                "at most max_batch_size tokens, one per request). Under "
                                "chunked_prefill the token_budget caps iterations and "
                                "sizes the buffers instead (it must be at most this), "
                                "unless prefill_chunk_units counts it in chunk units.")
    order: Literal["fcfs", "priority"] = Field(
        "fcfs", description="Service order. 'fcfs': by arrival. 'priority': by the trace's "
                            "priority column, lower values first (as vLLM's priority "
                            "policy), then by arrival; it decides which waiting prompts "
                            "are admitted, which running requests decode when they do not "
                            "all fit, which handed-over or swapped-out requests a replica "
                            "takes back first, and which decodes of the batch being formed "
                            "are preempted first (the lowest priority).")
    preempt_lower_priority: bool = Field(
        False, description="With order: priority, a waiting prompt whose KV does not fit "
                           "preempts running requests of a lower priority (a larger "
                           "value), lowest and newest first, until it fits, as vLLM's "
                           "priority scheduling does; their KV is swapped or recomputed "
                           "per workload.preemption. Only when freeing all of them makes "
                           "room; requests in the pipeline are not preempted. On a "
                           "replica that only decodes, a handed-over request whose KV "
                           "does not fit preempts the same way.")

    @model_validator(mode="after")
    def _priority_preemption_needs_priority_order(self) -> "SchedulerConfigBase":
        if self.preempt_lower_priority and self.order != "priority":
            raise ValueError(f"preempt_lower_priority: true needs order: priority (got "
                             f"order: {self.order}); under fcfs no request outranks another")
        return self

    @property
    def iteration_tokens(self) -> int:
        """Most new tokens one iteration can carry (what the activation buffers are
        sized for)."""
        return self.max_batch_tokens

    @property
    def decode_slots(self) -> int:
        """Most requests one decode iteration takes: each decodes one new token, so
        ``max_batch_tokens`` bounds them as much as ``max_batch_size`` does."""
        return min(self.max_batch_size, self.max_batch_tokens)


class PipelinedDecodeConfig(SchedulerConfigBase):
    """Options of policies that keep several decode micro-batches in a pipeline."""

    decode_lanes: Literal["reform", "sticky"] = Field(
        "reform", description="How a pipelined replica forms its decode micro-batches. "
                              "'reform': afresh at every launch, from the decoding "
                              "requests out of the pipeline (in service order). 'sticky': "
                              "a request keeps its micro-batch (lane) until it finishes or "
                              "is preempted, one lane per pipeline stage taking turns (no "
                              "decodes launch while the lane whose turn it is is still in "
                              "the pipeline), and a lane with room takes new requests as it "
                              "re-enters the first stage (vLLM's "
                              "pipeline-parallel virtual engines; NpuSim's scheduler). "
                              "Sticky lanes decode up to stages x max_batch_size requests "
                              "at a time whatever the stage timing; 'reform' may keep fewer "
                              "micro-batches in flight than stages.")

    def new_lanes(self) -> DecodeLanes | None:
        """Per-replica lane state for a scheduler, or None with re-formed batches."""
        return DecodeLanes() if self.decode_lanes == "sticky" else None


Order = Literal["fcfs", "priority"]


def in_service_order(states: list[RequestState], order: Order) -> list[RequestState]:
    """``states`` (in arrival order) in the order they are served: as they are for
    ``fcfs``; for ``priority`` by the trace's priority, lower first (a stable sort, so
    arrival order within a priority)."""
    if order == "fcfs":
        return states
    if order == "priority":
        return sorted(states, key=lambda state: state.request.priority)
    raise ValueError(f"unknown service order {order!r}")


def preemption_order(entries: list[Entry], order: Order) -> list[Entry]:
    """Decoding ``entries`` in the order they give up their KV when it runs out: the
    newest first (vLLM's recompute policy) or, for ``priority``, the lowest priority
    first and the newest within it."""
    # Requests that arrived together go in trace order, so the newest is the last listed
    # (a sort on arrival alone kept ties oldest first, preempting the oldest of a burst).
    if order == "fcfs":
        return sorted(entries, key=lambda e: (e.state.request.arrival_ps, e.state.index),
                      reverse=True)
    if order == "priority":
        return sorted(entries, key=lambda e: (e.state.request.priority,
                                              e.state.request.arrival_ps, e.state.index),
                      reverse=True)
    raise ValueError(f"unknown service order {order!r}")


class OrderedScheduler:
    """What every scheduler decides besides its batches: which request goes first
    (``config.order``).  The engine asks it when it takes back swapped-out or
    handed-over requests and when it must preempt, so that policy stays here."""

    config: SchedulerConfigBase
    lanes: DecodeLanes | None = None  # sticky decode lanes, for the policies with them

    def in_flight_bounds(self, stages: int) -> tuple[int, int]:
        """Most micro-batches under way on a replica of ``stages`` pipeline stages: of
        any kind, and carrying decodes (``max_micro_batches_in_flight``,
        ``max_decode_micro_batches_in_flight``)."""
        most = self.config.max_micro_batches_in_flight
        most_any = IN_FLIGHT_PER_STAGE * stages if most is None else stages if most == "stages" else most
        return most_any, self.config.max_decode_micro_batches_in_flight or stages

    def launched(self, states: list[RequestState]) -> None:
        """The engine launched a micro-batch of ``states`` (what this scheduler proposed,
        less any it preempted): policy state that only a launch commits is updated here."""
        if self.lanes is not None:
            self.lanes.launched(states)

    @property
    def pipelines_chunks(self) -> bool:
        """Whether a prompt's next chunk may enter the pipeline while its previous one
        is still in it (the engine then offers such prompts as waiting)."""
        return bool(getattr(self.config, "pipeline_chunks", False))

    def service_order(self, states: list[RequestState]) -> list[RequestState]:
        """``states`` (in arrival order) in the order this scheduler serves them."""
        return in_service_order(states, self.config.order)

    def preemption_order(self, entries: list[Entry]) -> list[Entry]:
        """Decoding ``entries`` in the order they give up their KV when it runs out."""
        return preemption_order(entries, self.config.order)

    def ahead_of_swapped(self, waiting: list[RequestState],
                         swapped: list[RequestState]) -> list[RequestState]:
        """Of ``waiting``, those that may run before the ``swapped``-out requests come
        back: the admitted ones, and with ``priority`` order new prompts that outrank
        every swapped-out request."""
        top = (min(s.request.priority for s in swapped)
               if self.config.order == "priority" and swapped else None)
        return [s for s in waiting
                if s.admitted or (top is not None and s.request.priority < top)]

    def priority_victims(self, view: SchedulerView) -> list[RequestState]:
        """Running requests to preempt so that the first waiting prompt (in service
        order) that is not yet admitted fits: those of a lower priority, lowest and
        newest first, as few as make room; none unless ``preempt_lower_priority`` is set
        and preempting every lower-priority running request would make room, nor while
        the first in preemption order is in the pipeline (it is waited for)."""
        if not self.config.preempt_lower_priority or view.kv_held is None:
            return []
        head = next((s for s in self.service_order(view.waiting) if not s.admitted), None)
        if head is None:
            return []
        short = view.kv_need(head) - view.kv_free_tokens
        if short <= 0:
            return []
        lower = [Entry(s, 1, s.kv_tokens, True) for s in view.running
                 if s.request.priority > head.request.priority]
        flying = [Entry(s, 1, s.kv_tokens, True) for s in view.in_pipeline
                  if s.request.priority > head.request.priority]
        if flying and any(self.preemption_order(lower + flying)[0] is e for e in flying):
            # The first to give way is in the pipeline: wait for it rather than preempt
            # a request ranked above it (as a decode batch short of KV does).
            return []
        victims: list[RequestState] = []
        for entry in self.preemption_order(lower):
            if short <= 0:
                break
            victims.append(entry.state)
            short -= view.kv_held(entry.state)
        return victims if short <= 0 else []

    def handover_limit(self, busy: bool) -> int | None:
        """Most handed-over requests (their prompts prefilled elsewhere) a decode replica
        takes now; ``busy``: it still holds or runs requests.  None: as many as its KV
        holds (requests join running batches)."""
        return None


def admit(view: SchedulerView, candidates: list[RequestState], slots: int,
          tokens_left: int, chunk: int | None = None, recompute_prefix: bool = False,
          decode_kv_tokens: int = 0, chunk_cost: int | None = None,
          units_left: int = 0) -> list[Entry]:
    """Prefill entries for ``candidates`` in arrival order while KV, batch slots and the
    token budget allow; ``chunk`` caps each request's tokens this iteration.  With
    ``recompute_prefix`` a later chunk runs the prompt tokens before it again (their KV
    was not kept); the budget still counts only the chunk's new tokens.  With
    ``chunk_cost`` every chunk also costs that many of ``units_left`` whatever its length
    (NpuSim §4.3.2's budget units), while ``tokens_left`` still caps the tokens.
    The iteration's decodes take ``decode_kv_tokens`` more KV (see
    :meth:`SchedulerView.decode_kv_tokens`), so that much less is left for new prompts.
    A prompt whose earlier chunks are still in the pipeline continues after them: its
    next chunk's context counts their tokens."""
    entries: list[Entry] = []
    kv_free = view.kv_free_tokens - decode_kv_tokens
    blocked = False
    for state in candidates:
        if slots <= 0 or tokens_left <= 0 or (chunk_cost is not None and units_left < chunk_cost):
            break
        if not state.admitted:
            need = view.kv_need(state)
            if blocked or need > kv_free:
                # FCFS: no later request takes KV before the head of the queue.  Requests
                # already admitted behind it (a recompute victim rejoins the queue ahead
                # of prompts admitted after it) hold their KV and still get their
                # tokens; stopping them too would keep their KV, and the head, waiting.
                blocked = True
                continue
            kv_free -= need
        remaining = state.prefill_unscheduled
        take = min(remaining, tokens_left if chunk is None else min(chunk, tokens_left))
        if chunk is None and take < remaining:
            break  # whole prompts only
        context = state.context_scheduled
        entries.append(Entry(state, take, context, take == remaining,
                             context if recompute_prefix else 0))
        slots -= 1
        tokens_left -= take
        if chunk_cost is not None:
            units_left -= chunk_cost
    return entries


def decodes(running: list[RequestState], slots: int, view: SchedulerView | None = None,
            lanes: DecodeLanes | None = None) -> list[Entry]:
    """One decode token for up to ``slots`` running requests (oldest first); with a
    ``view``, at most its pipeline share, so the micro-batches fill every stage.  With
    ``lanes`` (and a ``view``), the requests of the next sticky micro-batch instead
    (:mod:`npusim.serving.schedulers.lanes`)."""
    if view is not None and not view.decode_room:
        return []  # as many decode micro-batches under way as the replica allows
    if view is not None and view.fill_pipeline:
        slots = min(slots, view.decode_share)
    if lanes is not None and view is not None:
        chosen = lanes.next_batch(running, slots, view.decode_micro_batches)
    else:
        chosen = running[:slots]
    return [Entry(state, 1, state.kv_tokens, True) for state in chosen]
