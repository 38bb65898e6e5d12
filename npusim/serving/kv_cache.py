"""One replica's KV memory: per-request reservations in whole blocks, and a prefix cache.

The engine decides *when* a request takes or gives back KV; a :class:`KvPool` keeps the
books, as a vLLM block manager does:

- a reservation of ``t`` tokens costs ``ceil(t / block_tokens)`` blocks
  (``workload.kv_block_tokens``; 1 is NpuSim's exact per-request buffer, vLLM's
  PagedAttention uses 16), so the last block of each request is partly empty;
- with prefix caching (``workload.prefix_caching``), full prompt blocks a request has
  prefilled are kept under a key naming their content *and everything before it* (the
  trace's block hashes, chained).  A later request whose prompt starts with the same
  blocks references them instead of computing them.  Blocks nobody references stay
  cached but count as free: the least recently used are evicted (the deepest first on a
  tie) only when a reservation needs their room.

Sizes are in tokens (each a multiple of ``block_tokens`` where charged); ``used_tokens``
is what reservations and referenced cached blocks hold, never above ``capacity_tokens``.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from npusim.serving.state import RequestState


class KvPool:
    """KV blocks of one replica (see the module docstring)."""

    def __init__(self, capacity_tokens: int, block_tokens: int = 1,
                 prefix_block_tokens: int | None = None):
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.block_tokens = block_tokens
        # Whole blocks only: the rest of the memory cannot hold a block.
        self.capacity_tokens = capacity_tokens // block_tokens * block_tokens
        #: Tokens per cached prefix block (the trace's hash block); None: no prefix cache.
        self.prefix_block_tokens = prefix_block_tokens
        self.used_tokens = 0
        self._private: dict[int, int] = {}        # id(state) -> tokens it reserves alone
        self._refs: dict[int, list[int]] = {}     # id(state) -> cached block keys it holds
        # id(state) -> state: a holder stays alive while it holds KV, so its id is not
        # reused by another request (the tables above are keyed by id).
        self._holders: dict[int, "RequestState"] = {}
        self._ref_counts: dict[int, int] = {}     # cached block key -> references
        self._idle: OrderedDict[int, None] = OrderedDict()  # unreferenced, oldest first
        self._deferred = False
        self.evicted_blocks = 0

    # -- sizes ---------------------------------------------------------------------------
    def charge(self, tokens: int) -> int:
        """Tokens of memory ``tokens`` tokens of KV take: whole blocks."""
        return -(-tokens // self.block_tokens) * self.block_tokens

    @property
    def free_tokens(self) -> int:
        """Tokens a new reservation may take (unreferenced cached blocks count as free:
        they are evicted when the room is needed)."""
        return self.capacity_tokens - self.used_tokens

    @property
    def cached_idle_tokens(self) -> int:
        """Tokens held by cached blocks nobody references (evictable)."""
        return len(self._idle) * (self.prefix_block_tokens or 0)

    def reserved_tokens(self, state: "RequestState") -> int:
        """Tokens ``state`` reserves alone (not counting cached blocks it references)."""
        return self._private.get(id(state), 0)

    def holds(self, state: "RequestState") -> bool:
        return id(state) in self._private

    # -- prefix cache --------------------------------------------------------------------
    def match(self, keys: tuple[int, ...]) -> int:
        """How many of ``keys`` (a prompt's chained block keys) are cached, from the
        first on."""
        if self.prefix_block_tokens is None:
            return 0
        count = 0
        for key in keys:
            if key not in self._ref_counts:
                break
            count += 1
        return count

    def admission_cost(self, need_tokens: int, keys: tuple[int, ...], hit_blocks: int) -> int:
        """Free tokens reserving ``need_tokens`` takes when its first ``hit_blocks``
        blocks are cached: the rest in whole blocks, plus the cached blocks nobody
        references yet (they stop being free)."""
        shared = hit_blocks * (self.prefix_block_tokens or 0)
        idle = sum(1 for key in keys[:hit_blocks] if key in self._idle)
        return self.charge(max(0, need_tokens - shared)) + idle * (self.prefix_block_tokens or 0)

    # -- reservations --------------------------------------------------------------------
    def reserve(self, state: "RequestState", need_tokens: int, keys: tuple[int, ...] = (),
                hit_blocks: int = 0) -> None:
        """``state`` takes ``need_tokens`` of KV, its first ``hit_blocks`` blocks being
        the cached blocks named by ``keys`` (referenced, not copied)."""
        assert not self.holds(state), f"{state.id} already holds KV here"
        shared = hit_blocks * (self.prefix_block_tokens or 0)
        refs = list(keys[:hit_blocks])
        for key in refs:
            self._ref(key)
        private = max(0, need_tokens - shared)
        self._private[id(state)] = private
        self._refs[id(state)] = refs
        self._holders[id(state)] = state
        self.used_tokens += self.charge(private)
        self._fit()

    def grow(self, state: "RequestState", tokens: int = 1) -> None:
        """``state`` reserves ``tokens`` more (a decode step's new token)."""
        self.used_tokens += self.growth_cost(state, tokens)
        self._private[id(state)] += tokens
        self._fit()

    def growth_cost(self, state: "RequestState", tokens: int = 1) -> int:
        """Free tokens ``grow(state, tokens)`` would take (a new block only when the
        last is full)."""
        private = self._private.get(id(state), 0)
        return self.charge(private + tokens) - self.charge(private)

    def release(self, state: "RequestState") -> int:
        """``state`` gives back everything it holds; returns the tokens freed (cached
        blocks it referenced stay cached, unreferenced ones counting as free)."""
        private = self._private.pop(id(state), None)
        if private is None:
            return 0
        del self._holders[id(state)]
        before = self.used_tokens
        self.used_tokens -= self.charge(private)
        for key in reversed(self._refs.pop(id(state))):  # deepest first: evicted first
            self._unref(key)
        return before - self.used_tokens

    def cache_prefilled(self, state: "RequestState", keys: tuple[int, ...], prefilled: int) -> None:
        """After a prefill chunk: the full blocks of ``state``'s prompt among its first
        ``prefilled`` tokens become cached blocks it references (a block another request
        cached meanwhile stays private to it: its copy is not shared)."""
        block = self.prefix_block_tokens
        if block is None or not self.holds(state):
            return
        refs = self._refs[id(state)]
        for position in range(len(refs), min(len(keys), prefilled // block)):
            key = keys[position]
            if key in self._ref_counts or self._private[id(state)] < block:
                return  # only an unbroken run of this request's own blocks is shared
            before = self.charge(self._private[id(state)])
            self._private[id(state)] -= block
            self.used_tokens += block - (before - self.charge(self._private[id(state)]))
            self._ref_counts[key] = 1
            refs.append(key)
        self._fit()

    @contextmanager
    def batch(self) -> Iterator["KvPool"]:
        """Reservations of one iteration, made as one: no cached block is evicted until
        they are all made, so a request's hit found when the batch was formed is still
        there when its turn comes (the admission costs already counted the hit blocks
        as taken)."""
        self._deferred = True
        try:
            yield self
        finally:
            self._deferred = False
        self._fit()

    # -- internals -----------------------------------------------------------------------
    def _ref(self, key: int) -> None:
        if self._ref_counts[key] == 0:
            del self._idle[key]
            self.used_tokens += self.prefix_block_tokens
        self._ref_counts[key] += 1

    def _unref(self, key: int) -> None:
        self._ref_counts[key] -= 1
        if self._ref_counts[key] == 0:
            self.used_tokens -= self.prefix_block_tokens
            self._idle[key] = None  # most recently used: evicted last

    def _fit(self) -> None:
        """Evict unreferenced cached blocks, least recently used first, until what is
        held fits the memory."""
        if self._deferred:
            return
        assert self.used_tokens <= self.capacity_tokens, "KV reserved beyond its capacity"
        while self._idle and self.used_tokens + self.cached_idle_tokens > self.capacity_tokens:
            key, _ = self._idle.popitem(last=False)
            del self._ref_counts[key]
            self.evicted_blocks += 1


__all__ = ["KvPool"]
