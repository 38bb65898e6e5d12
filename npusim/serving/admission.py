"""KV admission for the serving engine: which requests a replica can ever hold, the
per-replica KV pools and prefix-cache look-ups, and preemption when KV runs out.

:class:`KvAdmission` is mixed into :class:`~npusim.serving.engine.ServingDriver`; it
reads the driver's ``config``, ``model``, ``trace``, ``replicas``, ``schedulers``,
``swap_host`` and ``prefix_block_tokens`` and keeps no state of its own (the KV books
are :class:`~npusim.serving.kv_cache.KvPool`).
"""

from __future__ import annotations

from npusim.core.errors import MappingError
from npusim.serving.kv_cache import KvPool
from npusim.serving.npu_backend import Replica
from npusim.serving.state import Entry, Refusal, RequestState


class KvAdmission:
    """KV admission, prefix-cache look-ups and preemption (see the module docstring)."""

    def _pools(self) -> dict[int, KvPool]:
        """A fresh KV pool per replica (a prefix cache on those that prefill)."""
        return {r.index: KvPool(r.kv_capacity_tokens, self.config.kv_block_tokens,
                                self.prefix_block_tokens if r.role != "decode" else None)
                for r in self.replicas}

    def _check_prefix_caching(self) -> int | None:
        """Tokens per cached prefix block (None without prefix caching); a trace that
        names no blocks, or blocks KV blocks cannot tile, is a configuration error."""
        if not self.config.prefix_caching:
            return None
        block = self.trace.hash_block_tokens
        if not self.trace.has_block_hashes:
            raise MappingError(
                f"workload.prefix_caching: true, but no request of the trace "
                f"({self.trace.source}) names its prompt blocks, so nothing can be reused; "
                "expected a trace with hash_ids (npusim CSV/JSONL, Mooncake JSONL) or "
                "workload.trace.shared_prefix, or prefix_caching: false")
        if block % self.config.kv_block_tokens:
            raise MappingError(
                f"workload.kv_block_tokens = {self.config.kv_block_tokens} does not divide "
                f"the trace's hash block of {block} tokens (workload.trace.hash_block_tokens "
                "or shared_prefix.block_tokens); expected a divisor, so a cached prompt "
                "block is whole KV blocks")
        return block

    @staticmethod
    def _look_up_prefix(state: RequestState, pool: KvPool) -> None:
        """Before ``state`` is admitted to ``pool``'s replica: its prompt blocks that are
        cached there count as prefilled (at least one prompt token is computed, so the
        prefill samples the first token)."""
        if pool.prefix_block_tokens is None or not state.prefix_keys:
            return
        blocks = pool.match(state.prefix_keys)
        state.cache_hit_blocks = blocks
        state.prefilled = state.kv_tokens = min(blocks * pool.prefix_block_tokens,
                                                state.prompt_target - 1)

    def _admissible(self, state: RequestState, pools: dict[int, KvPool]) -> Refusal | None:
        """Why ``state`` can never be served (None if it can)."""
        window = getattr(self.model, "max_position_embeddings", None)
        # The whole request, not the prompt alone: a trace's output count is what the
        # request generated, which a model cannot take past its window (vLLM's engine
        # stops there; its OpenAI server refuses prompt + max_tokens > max_model_len).
        if window and state.max_tokens > window:
            return Refusal("context_window",
                           f"prompt + output = {state.max_tokens} tokens exceed "
                           f"{self.model.name}'s context window of {window} tokens "
                           "(max_position_embeddings)")
        capacity = {index: pool.capacity_tokens for index, pool in pools.items()}
        decode = [capacity[r.index] for r in self.replicas if r.role == "decode"]
        if decode:  # disaggregation: the prompt must fit a prefill replica, the whole
            # request a decode replica (else it would wait for one forever)
            prefill = max(capacity[r.index] for r in self.replicas if r.role == "prefill")
            if state.request.prompt_tokens > prefill:
                return Refusal("kv_capacity",
                               f"prompt needs KV for {state.request.prompt_tokens} tokens; "
                               f"a prefill replica holds at most {prefill}")
            if state.max_tokens > max(decode):
                return Refusal("kv_capacity",
                               f"needs KV for {state.max_tokens} tokens; a decode replica "
                               f"holds at most {max(decode)}")
        elif state.max_tokens > max(capacity.values()):
            return Refusal("kv_capacity",
                           f"needs KV for {state.max_tokens} tokens; a replica holds at "
                           f"most {max(capacity.values())}")
        if self.config.scheduler.kind != "chunked_prefill" and \
                state.request.prompt_tokens > self.config.scheduler.max_batch_tokens:
            return Refusal("batch_tokens",
                           f"prompt of {state.request.prompt_tokens} tokens exceeds "
                           f"scheduler.max_batch_tokens={self.config.scheduler.max_batch_tokens} "
                           "and this scheduler does not chunk prompts")
        return None

    def _grow_or_preempt(self, replica: Replica, entries: list[Entry], pool: KvPool,
                         reserve_max: bool, idle: list[RequestState] = (),
                         in_pipeline: list[RequestState] = ()
                         ) -> tuple[list[Entry], list[RequestState]]:
        """Incremental KV: each decode of the micro-batch needs one more token; when
        they do not all fit, preempt running requests in the scheduler's preemption order
        (the newest first, or the lowest priority), from the batch's decodes and the
        ``idle`` ones (decoding on this replica, out of the pipeline, not in this batch),
        until the rest fit, as vLLM preempts from its whole running queue.  When the
        first in that order is ``in_pipeline`` (in another micro-batch, so it cannot give
        its KV up now), nothing launches: the replica waits for it to come back rather
        than preempt a request the policy ranks above it (priority inversion).  Returns
        the entries kept and the preempted requests (``swapped`` set with ``preemption:
        swap``; with ``recompute`` their KV is dropped and they prefill again, on a
        prefill replica when this one only decodes)."""
        if reserve_max:
            return entries, []
        growth = sum(pool.growth_cost(e.state) for e in entries if e.state.prefill_done)
        free = pool.free_tokens
        if growth <= free:
            for entry in entries:
                if entry.state.prefill_done:
                    pool.grow(entry.state)
            return entries, []
        in_batch = {id(e.state) for e in entries if e.state.prefill_done}
        candidates = [e for e in entries if e.state.prefill_done] + [
            Entry(state, 1, state.kv_tokens, True) for state in idle
            if state.prefill_done and id(state) not in in_batch]
        order = self.schedulers[replica.index].preemption_order
        flying = [Entry(state, 1, state.kv_tokens, True) for state in in_pipeline]
        if flying and any(order(candidates + flying)[0] is entry for entry in flying):
            return [], []  # its KV comes free for preemption once its batch is back
        victims = order(candidates)
        kept = list(entries)
        preempted: list[RequestState] = []
        for victim in victims:
            if growth <= free:
                break
            if id(victim.state) in in_batch:
                kept.remove(victim)
                growth -= pool.growth_cost(victim.state)
            free += self._preempt(replica, victim.state, pool)
            preempted.append(victim.state)
        for entry in kept:
            if entry.state.prefill_done:
                pool.grow(entry.state)
        return kept, preempted

    def _preempt(self, replica: Replica, state: RequestState, pool: KvPool) -> int:
        """Take ``state``'s KV away (to the host with swap preemption, else dropped for a
        recompute); returns the KV tokens freed.  The caller times the swap-out."""
        freed = pool.release(state)
        if self.swap_host is not None:  # its KV survives on the host
            state.swapped = True
            state.swapped_out += 1
        else:                            # its KV is gone: prefill everything again
            state.preemption_recomputed += state.kv_tokens
            state.kv_tokens = state.prefilled = 0
            state.recompute_tokens = state.generated
            if replica.role == "decode":  # the prefill pool does that
                state.replica = None
        state.preempted += 1
        state.admitted = False
        return freed

    def _recompute_blocked(self, state: RequestState) -> Refusal | None:
        """Why a recompute-preempted request can never prefill again (None if it can): a
        scheduler that runs whole prompts only takes up to max_batch_tokens of them, and
        under disaggregation the prefill pool must hold prompt + generated tokens of KV
        (else the victim would wait at the head of its queue forever, and every later
        request behind it)."""
        block = self.config.kv_block_tokens  # a pool holds whole blocks
        prefill = [r.kv_capacity_tokens // block * block for r in self.replicas
                   if r.role == "prefill"]
        if prefill and state.prompt_target > max(prefill):
            return Refusal(
                "recompute_blocked",
                f"preempted after {state.generated} tokens (preemption: recompute); "
                f"prompt + generated = {state.prompt_target} tokens of KV to prefill "
                f"again, and a prefill replica holds at most {max(prefill)} (use swap "
                "preemption, max_length reservation or more prefill KV)")
        scheduler = self.config.scheduler
        if scheduler.kind != "chunked_prefill" and state.prompt_target > scheduler.max_batch_tokens:
            return Refusal(
                "recompute_blocked",
                f"preempted after {state.generated} tokens (preemption: recompute); "
                f"prompt + generated = {state.prompt_target} tokens exceeds "
                f"scheduler.max_batch_tokens={scheduler.max_batch_tokens} and this "
                "scheduler does not chunk prompts (use chunked_prefill or swap)")
        return None

    def _handover_need(self, state: RequestState) -> int:
        """KV a decode replica reserves when it takes a request over: all of it under
        max_length, else what arrived (each decode step then reserves one more)."""
        return state.max_tokens if self.config.kv_reservation == "max_length" else state.kv_tokens


__all__ = ["KvAdmission"]
