"""Run-time KV bookkeeping of one NPU core on top of its static memory plan
(:func:`npusim.mapping.memory_manager.plan_core_memory`): SRAM blocks first, then a
per-request buffer in the HBM ring (NpuSim §4.2, Fig. 5; ``docs/memory.md``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable

from npusim.mapping.kv_blocks import (HbmRingBuffer, KvAccess, OutOfMemoryError,
                                      SramBlockAllocator, UnknownRequestError)

if TYPE_CHECKING:
    from npusim.mapping.memory_manager import CoreMemoryPlan

__all__ = ["KvPlacement", "CoreKvCache"]


@dataclass(frozen=True, slots=True)
class KvPlacement:
    """Where one request's KV lives on one core."""

    sram_tokens: int
    hbm_tokens: int
    sram_blocks: tuple[int, ...]
    hbm_addr: int | None
    max_tokens: int

    @property
    def tokens(self) -> int:
        return self.sram_tokens + self.hbm_tokens


class CoreKvCache:
    """Run-time KV bookkeeping of one core: SRAM blocks first, HBM ring after.

    ``CoreKvCache(plan, hbm_alignment_bytes=1)``.  Lifecycle of a request:
    :meth:`admit` (reserves its whole HBM buffer for ``max_tokens``, as NpuSim does, so a
    running request never fails for lack of HBM) -> :meth:`step` / :meth:`append` as the
    context grows -> :meth:`release`.  A request's SRAM part is always a prefix: once one
    of its tokens spilled to HBM, later tokens go to HBM too (blocks freed later are not
    used to migrate it back), so reads split into one SRAM part and one sequential HBM part.
    """

    def __init__(self, plan: CoreMemoryPlan, hbm_alignment_bytes: int = 1):
        self.plan = plan
        self.kv_bytes_per_token = plan.kv_bytes_per_token
        self.sram = SramBlockAllocator(plan.kv_sram_blocks, plan.kv_block_tokens)
        # The ring sits above the streamed weights in the core's HBM address space.
        self.hbm = HbmRingBuffer(plan.hbm_kv_capacity_bytes, base_addr=plan.hbm_weight_bytes,
                                 alignment_bytes=hbm_alignment_bytes)
        self._max_tokens: dict[Hashable, int] = {}
        self._hbm_tokens: dict[Hashable, int] = {}

    def buffer_bytes(self, max_tokens: int) -> int:
        """Size of the HBM buffer a request of ``max_tokens`` reserves."""
        return max_tokens * self.kv_bytes_per_token

    def can_admit(self, max_tokens: int) -> bool:
        """Whether a request of up to ``max_tokens`` can be admitted now."""
        if self.plan.hbm_kv_capacity_bytes == 0 or self.kv_bytes_per_token == 0:
            return True  # no HBM: it is admitted and may fail later when SRAM runs out
        return self.hbm.can_allocate(self.buffer_bytes(max_tokens))

    def admit(self, request_id: Hashable, max_tokens: int) -> int | None:
        """Register ``request_id`` (up to ``max_tokens`` tokens); returns its HBM buffer
        address, or None when the core has no HBM KV space.  Raises
        :class:`OutOfMemoryError` if the ring cannot place the buffer now."""
        if request_id in self._max_tokens:
            raise ValueError(f"request {request_id!r} is already admitted")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
        addr = None
        if self.plan.hbm_kv_capacity_bytes > 0 and self.kv_bytes_per_token > 0:
            addr = self.hbm.allocate(request_id, self.buffer_bytes(max_tokens))
        self._max_tokens[request_id] = max_tokens
        self._hbm_tokens[request_id] = 0
        self.sram.grow(request_id, 0)  # register: an empty block list
        return addr

    def placement(self, request_id: Hashable) -> KvPlacement:
        """Tokens, blocks and HBM address of ``request_id``."""
        self._check(request_id)
        return KvPlacement(self.sram.tokens_of(request_id), self._hbm_tokens[request_id],
                           self.sram.blocks_of(request_id),
                           self.hbm.address_of(request_id) if self.hbm.has(request_id) else None,
                           self._max_tokens[request_id])

    def read(self, request_id: Hashable) -> KvAccess:
        """Bytes read to attend over the request's whole cached context."""
        where = self.placement(request_id)
        return KvAccess(read_sram_bytes=where.sram_tokens * self.kv_bytes_per_token,
                        read_hbm_bytes=where.hbm_tokens * self.kv_bytes_per_token)

    def append(self, request_id: Hashable, new_tokens: int) -> KvAccess:
        """Store ``new_tokens`` more tokens (SRAM while blocks are free and the request
        has not spilled, HBM after); returns the bytes written at each level.

        Raises ``ValueError`` past ``max_tokens`` and :class:`OutOfMemoryError` when SRAM
        is full and the core has no HBM buffer for the request.
        """
        where = self.placement(request_id)
        if new_tokens < 0:
            raise ValueError(f"new_tokens must be >= 0, got {new_tokens}")
        if where.tokens + new_tokens > where.max_tokens:
            raise ValueError(f"request {request_id!r}: {where.tokens} + {new_tokens} tokens "
                             f"exceed its max_tokens {where.max_tokens}")
        if self.kv_bytes_per_token == 0:  # this core holds no KV: count tokens only
            self._hbm_tokens[request_id] += new_tokens
            return KvAccess()
        if where.hbm_addr is None:
            # No HBM buffer to spill to: all of it goes to SRAM or nothing does.
            try:
                self.sram.grow(request_id, new_tokens)
            except OutOfMemoryError as exc:
                raise OutOfMemoryError(f"{exc}; this core has no HBM KV space to spill to",
                                       exc.needed, exc.available) from None
            to_sram = new_tokens
        elif where.hbm_tokens == 0:
            to_sram, _ = self.sram.grow_partial(request_id, new_tokens)
        else:
            to_sram = 0
        to_hbm = new_tokens - to_sram
        self._hbm_tokens[request_id] += to_hbm
        return KvAccess(write_sram_bytes=to_sram * self.kv_bytes_per_token,
                        write_hbm_bytes=to_hbm * self.kv_bytes_per_token)

    def step(self, request_id: Hashable, new_tokens: int) -> KvAccess:
        """One forward step: read the cached context, then append ``new_tokens``."""
        return self.read(request_id) + self.append(request_id, new_tokens)

    def release(self, request_id: Hashable) -> None:
        """Free the request's SRAM blocks and HBM buffer (finished or evicted)."""
        self._check(request_id)
        self.sram.free(request_id)
        if self.hbm.has(request_id):
            self.hbm.free(request_id)
        del self._max_tokens[request_id], self._hbm_tokens[request_id]

    @property
    def requests(self) -> tuple[Hashable, ...]:
        return tuple(self._max_tokens)

    def _check(self, request_id: Hashable) -> None:
        if request_id not in self._max_tokens:
            raise UnknownRequestError(f"KV cache: request {request_id!r} is not admitted "
                                      "(never admitted, or already released)")
