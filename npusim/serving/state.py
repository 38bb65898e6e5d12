"""Request state as the engine tracks it, and the batch a scheduler hands back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from npusim.workload.traces import Request


class Refusal(NamedTuple):
    """Why a request is rejected: a ``kind`` from :data:`REFUSAL_KINDS` and the
    request's own ``reason`` (with its numbers)."""

    kind: str
    reason: str


#: Rejection kinds: what each means and what a user can change about it.
REFUSAL_KINDS: dict[str, tuple[str, str]] = {
    "context_window": ("prompt + output exceed the model's context window",
                       "a trace property: the model cannot serve them"),
    "kv_capacity": ("the request's KV does not fit a replica",
                    "give the replicas more KV: hw.hbm, hw.core.sram, "
                    "workload.kv_dtype_bytes, fewer layers per core"),
    "batch_tokens": ("prompt longer than scheduler.max_batch_tokens (whole prompts only)",
                     "raise workload.scheduler.max_batch_tokens or use "
                     "workload.scheduler.kind=chunked_prefill"),
    "recompute_blocked": ("preempted, and too long to prefill again",
                          "use workload.preemption=swap or "
                          "workload.kv_reservation=max_length"),
    "never_scheduled": ("never scheduled: KV or batch limits left no room",
                        "raise the batch or KV limits"),
}

#: Kinds decided when a request arrives, from the request and the configuration alone:
#: the same requests are refused at any load (a capacity search cannot rate them away).
NEVER_SERVABLE_KINDS = frozenset({"context_window", "kv_capacity", "batch_tokens"})


@dataclass
class RequestState:
    """One request's progress.  Times are integer picoseconds."""

    request: Request
    prefilled: int = 0                 # prompt (+ recomputed) tokens whose KV exists
    generated: int = 0                 # output tokens produced
    kv_tokens: int = 0                 # tokens whose KV exists
    admitted: bool = False             # KV reserved on its current replica
    replica: int | None = None
    kv_held_by: int | None = None      # prefill replica keeping its KV until decode takes it
    in_flight: int = 0                 # micro-batches in the pipeline holding it (several
                                       # only for a prompt whose chunks are pipelined)
    prefill_scheduled: int = 0         # prompt tokens in micro-batches not yet finished
    first_token_ps: int | None = None
    first_scheduled_ps: int | None = None  # first launched in an iteration (queueing ends)
    token_times_ps: list[int] = field(default_factory=list)
    finish_ps: int | None = None
    ready_ps: int = 0                  # earliest time it may be scheduled (KV arrival)
    preempted: int = 0
    swapped_out: int = 0               # preemptions that moved its KV to host memory
    swapped: bool = False              # its KV is in host memory now (swap preemption)
    recompute_tokens: int = 0          # generated tokens whose KV a preemption dropped
    chunk_recomputed: int = 0          # prompt tokens later chunks ran again (chunk_kv: recompute)
    preemption_recomputed: int = 0     # KV tokens recompute preemptions dropped (prefilled again)
    rejected: str = ""                 # why it was rejected ('' unless it was)
    rejected_kind: str = ""            # and the kind of reason (REFUSAL_KINDS)
    index: int = 0                     # position in the trace: breaks ties of equal arrivals
    routed: int | None = None          # replica the router bound it to, until it leaves it
    prefix_keys: tuple[int, ...] = ()  # its full prompt blocks' cache keys (prefix caching)
    cache_hit_blocks: int = 0          # of them, cached on the replica considering it now
    prefix_cached_tokens: int = 0      # prompt tokens its admissions found cached (all told)

    @property
    def id(self) -> str:
        return self.request.request_id

    @property
    def prompt_target(self) -> int:
        """Tokens that must be prefilled: the prompt, plus generated tokens after a
        recompute preemption (their KV was dropped)."""
        return self.request.prompt_tokens + self.recompute_tokens

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= self.prompt_target

    @property
    def prefill_unscheduled(self) -> int:
        """Prompt tokens no micro-batch has taken yet (chunks in flight count as taken)."""
        return self.prompt_target - self.prefilled - self.prefill_scheduled

    @property
    def context_scheduled(self) -> int:
        """Tokens whose KV exists once the micro-batches holding it finish: the context
        its next chunk runs after."""
        return self.kv_tokens + self.prefill_scheduled

    @property
    def finished(self) -> bool:
        return self.finish_ps is not None

    @property
    def max_tokens(self) -> int:
        """KV tokens the request holds at its end."""
        return self.request.prompt_tokens + self.request.output_tokens


@dataclass(frozen=True)
class Entry:
    """One request's share of an iteration: ``new_tokens`` after ``context_len``."""

    state: RequestState
    new_tokens: int
    context_len: int
    samples: bool   # the iteration produces a token for this request
    recomputed_tokens: int = 0  # of the context, run again before the new tokens (KV not kept)

    @property
    def is_decode(self) -> bool:
        """One new token after kept context that samples the next token.  A one-token
        prompt chunk that samples nothing (not the prompt's last), or one that runs its
        prefix again (``chunk_kv: recompute``), is a prefill chunk: timed with its
        recomputed prefix and without an LM head."""
        return (self.new_tokens == 1 and self.context_len > 0 and self.recomputed_tokens == 0
                and self.samples)


@dataclass
class SchedulerView:
    """What a scheduler may look at (no timing internals)."""

    now_ps: int
    waiting: list[RequestState]        # arrived, prompt tokens left to schedule, not in
                                       # flight (unless the scheduler pipelines chunks)
    running: list[RequestState]        # prefill done, decoding, not in flight
    kv_free_tokens: int                # KV tokens the replica can still reserve
    reserve_max_length: bool           # admission reserves prompt + output at once
    in_flight: int                     # batches of this replica in the pipeline
    role: str                          # "fused", "prefill" or "decode"
    decode_micro_batches: int = 1      # decode micro-batches it keeps under way at most
    in_flight_requests: int = 0        # requests of this replica already in the pipeline
    fill_pipeline: bool = False        # scheduler option: one micro-batch per stage
    # Free KV tokens admitting a request for so many tokens takes (whole blocks, less its
    # cached prefix); None: the tokens themselves.
    kv_cost: Callable[[RequestState, int], int] | None = None
    # Free KV tokens one more token for each of these requests takes; None: one each.
    kv_growth: Callable[[list[RequestState]], int] | None = None
    # Free KV tokens preempting this request gives back at least (its own blocks; cached
    # prefix blocks it shares may stay referenced); None: preemption is not offered.
    kv_held: Callable[[RequestState], int] | None = None
    # This replica's decoding requests in the pipeline (they cannot give their KV up now).
    in_pipeline: tuple[RequestState, ...] = ()
    # A micro-batch with decodes may launch (fewer are under way than the bound).
    decode_room: bool = True

    @property
    def decode_share(self) -> int:
        """Decodes per micro-batch that keep every pipeline stage busy: the requests
        decoding on this replica spread evenly over its decode micro-batches (one per
        stage, as PP serving engines keep, unless bounded lower)."""
        active = len(self.running) + self.in_flight_requests
        return max(1, -(-active // self.decode_micro_batches))

    def kv_need(self, state: RequestState) -> int:
        """Free KV tokens admitting ``state`` would take."""
        tokens = state.max_tokens if self.reserve_max_length else state.prompt_target
        return tokens if self.kv_cost is None else self.kv_cost(state, tokens)

    def decode_kv_tokens(self, states: list[RequestState]) -> int:
        """Free KV tokens decoding one more token of each of ``states`` takes
        (none with max-length reservation: it reserved them at admission)."""
        if self.reserve_max_length:
            return 0
        return len(states) if self.kv_growth is None else self.kv_growth(states)
