"""KV-cache allocators of one NPU core (NpuSim §4.2, Fig. 5).

NpuSim keeps the KV cache at two granularities:

* **SRAM, fine-grained** (:class:`SramBlockAllocator`): the KV space left in a core's
  scratchpad is cut into fixed blocks of ``block_tokens`` tokens.  Each request owns a
  list of (not necessarily contiguous) block ids, the paper's per-request linked list;
  the free blocks form one more list.  Blocks are handed out from the head of the free
  list in the order requests grow, so requests that grow alternately end up with
  interleaved block ids (Fig. 5: requests 1, 2, 3 sharing SRAM).  A finished request's
  blocks go back to the tail of the free list.
* **HBM, coarse-grained** (:class:`HbmRingBuffer`): each request that may spill gets one
  contiguous buffer sized for its maximum length, carved from the head of a ring.  HBM
  is read and written sequentially there (the paper's reason for the coarse grain).

:func:`split_kv_access` turns "the first S tokens of a request are in SRAM" into the
bytes a step reads and writes at each level.

Both allocators are pure bookkeeping: no simulated time passes; the lowering turns the
byte counts they report into DMA :class:`~npusim.mapping.taskgraph.TransferTask` s.
Everything is deterministic (ids and addresses depend only on the call sequence).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Hashable

from npusim.core.errors import MappingError

__all__ = ["OutOfMemoryError", "UnknownRequestError", "SramBlockAllocator", "HbmRingBuffer",
           "RingSegment", "KvAccess", "split_kv_access"]

RequestId = Hashable


class OutOfMemoryError(MappingError):
    """An allocation does not fit (no free KV blocks, no room in the HBM ring).

    At run time a scheduler catches it (or asks ``can_*`` first) and queues the request;
    it subclasses :class:`MappingError` so that a configuration that cannot hold even
    one request ends the run with this message rather than a traceback.
    ``needed`` and ``available`` are in the allocator's unit (blocks or bytes).
    """

    def __init__(self, message: str, needed: int, available: int):
        super().__init__(message)
        self.needed = needed
        self.available = available


class UnknownRequestError(KeyError):
    """A request id that holds nothing here (never allocated, or already freed).

    A caller bug (double free, use after free), not a user error, so it is not an
    :class:`~npusim.core.errors.NpusimError`.
    """

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else "unknown request"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class SramBlockAllocator:
    """Block-granular KV space in one core's SRAM.

    ``SramBlockAllocator(num_blocks, block_tokens)``: ``num_blocks`` blocks of
    ``block_tokens`` tokens each, ids ``0 .. num_blocks - 1``, all free.
    """

    def __init__(self, num_blocks: int, block_tokens: int):
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        if block_tokens <= 0:
            raise ValueError(f"block_tokens must be > 0, got {block_tokens}")
        self.num_blocks = num_blocks
        self.block_tokens = block_tokens
        self._free: deque[int] = deque(range(num_blocks))
        self._blocks: dict[RequestId, list[int]] = {}
        self._tokens: dict[RequestId, int] = {}
        self._freed: set[RequestId] = set()

    # -- accounting ------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        """Blocks on the free list."""
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        """Blocks owned by some request (``used_blocks + free_blocks == num_blocks``)."""
        return self.num_blocks - len(self._free)

    @property
    def capacity_tokens(self) -> int:
        """Tokens all blocks hold together."""
        return self.num_blocks * self.block_tokens

    @property
    def requests(self) -> tuple[RequestId, ...]:
        """Requests holding blocks (or registered with zero tokens), in arrival order."""
        return tuple(self._blocks)

    def free_list(self) -> tuple[int, ...]:
        """The free block ids, head (next handed out) first."""
        return tuple(self._free)

    def has(self, request_id: RequestId) -> bool:
        """Whether ``request_id`` is known here (grown at least once, not yet freed)."""
        return request_id in self._blocks

    def blocks_of(self, request_id: RequestId) -> tuple[int, ...]:
        """Block ids of ``request_id`` in token order (its linked list)."""
        return tuple(self._blocks[self._check(request_id)])

    def tokens_of(self, request_id: RequestId) -> int:
        """Tokens ``request_id`` has stored in its blocks."""
        return self._tokens[self._check(request_id)]

    def slack_tokens_of(self, request_id: RequestId) -> int:
        """Unused token slots in the last block of ``request_id``."""
        request_id = self._check(request_id)
        return len(self._blocks[request_id]) * self.block_tokens - self._tokens[request_id]

    def blocks_needed(self, request_id: RequestId, tokens: int) -> int:
        """New blocks ``grow(request_id, tokens)`` would take (the request may be new)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        held = len(self._blocks.get(request_id, ()))
        stored = self._tokens.get(request_id, 0)
        return max(0, _ceil_div(stored + tokens, self.block_tokens) - held)

    def can_grow(self, request_id: RequestId, tokens: int) -> bool:
        """Whether ``grow(request_id, tokens)`` would succeed."""
        return self.blocks_needed(request_id, tokens) <= len(self._free)

    # -- allocation ------------------------------------------------------------------
    def grow(self, request_id: RequestId, tokens: int) -> list[int]:
        """Append ``tokens`` tokens to ``request_id``'s KV; returns the new block ids.

        Fills the slack of the request's last block first, then takes whole blocks from
        the head of the free list.  All or nothing: raises :class:`OutOfMemoryError` (and
        changes nothing) if the free list is too short.  A new request id is registered
        on first use; a freed id may be reused afterwards.
        """
        needed = self.blocks_needed(request_id, tokens)
        if needed > len(self._free):
            raise OutOfMemoryError(
                f"SRAM KV: request {request_id!r} needs {needed} more block(s) of "
                f"{self.block_tokens} tokens for {tokens} token(s), but only "
                f"{len(self._free)} of {self.num_blocks} are free", needed, len(self._free))
        self._freed.discard(request_id)
        new = [self._free.popleft() for _ in range(needed)]
        self._blocks.setdefault(request_id, []).extend(new)
        self._tokens[request_id] = self._tokens.get(request_id, 0) + tokens
        return new

    def grow_partial(self, request_id: RequestId, tokens: int) -> tuple[int, list[int]]:
        """Store as many of ``tokens`` as the request's slack and the free list allow.

        Returns ``(tokens stored, new block ids)``; never raises for lack of space (the
        caller spills the rest).
        """
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        held = len(self._blocks.get(request_id, ()))
        slack = held * self.block_tokens - self._tokens.get(request_id, 0)
        fit = min(tokens, slack + len(self._free) * self.block_tokens)
        return fit, self.grow(request_id, fit)

    def free(self, request_id: RequestId) -> list[int]:
        """Return every block of ``request_id`` to the tail of the free list.

        Returns the freed ids.  Raises :class:`UnknownRequestError` for an id that was
        never grown or is already freed (double free).
        """
        request_id = self._check(request_id)
        blocks = self._blocks.pop(request_id)
        del self._tokens[request_id]
        self._free.extend(blocks)
        self._freed.add(request_id)
        return blocks

    def _check(self, request_id: RequestId) -> RequestId:
        if request_id not in self._blocks:
            if request_id in self._freed:
                raise UnknownRequestError(f"SRAM KV: request {request_id!r} was already freed "
                                          "(double free or use after free)")
            raise UnknownRequestError(f"SRAM KV: unknown request {request_id!r}")
        return request_id


@dataclass(frozen=True, slots=True)
class RingSegment:
    """One buffer of the HBM ring: ``[offset, offset + size_bytes)`` of the ring."""

    request_id: RequestId
    offset: int
    size_bytes: int
    live: bool = True

    @property
    def end(self) -> int:
        return self.offset + self.size_bytes


class HbmRingBuffer:
    """Whole-request KV buffers in one core's HBM, allocated at the head of a ring.

    ``HbmRingBuffer(capacity_bytes, base_addr=0, alignment_bytes=1)`` manages
    ``[base_addr, base_addr + capacity_bytes)``; every buffer size is rounded up to
    ``alignment_bytes`` (pass the DRAM row size so buffers start on a row).

    Policy (a circular log, as NpuSim Fig. 5 draws it):

    * a new buffer goes at the *head* (just after the newest buffer); if the space
      between the head and the end of the ring is too small it wraps to offset 0,
      provided the space before the *tail* (the oldest buffer still held) is enough;
      the skipped space at the end is lost until the tail wraps too;
    * buffers may be freed in any order; a freed buffer that is not the oldest leaves a
      *hole* that is only reclaimed when every older buffer has been freed too (the tail
      advances over it); freeing the newest buffer moves the head back instead.  Holes are the ring's fragmentation: ``reserved_bytes -
      used_bytes`` counts them (and the wrap gap), and a request can be refused while
      ``capacity_bytes - used_bytes`` would hold it.  The trade is O(1) allocation and
      purely sequential buffers, which suits requests that mostly finish in arrival order.
    """

    def __init__(self, capacity_bytes: int, base_addr: int = 0, alignment_bytes: int = 1):
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        if alignment_bytes <= 0:
            raise ValueError(f"alignment_bytes must be > 0, got {alignment_bytes}")
        self.capacity_bytes = capacity_bytes
        self.base_addr = base_addr
        self.alignment_bytes = alignment_bytes
        self._segments: deque[RingSegment] = deque()  # allocation order, oldest first
        self._index: dict[RequestId, int] = {}  # request -> sequence number of its segment
        self._seq0 = 0  # sequence number of _segments[0]
        self._freed: set[RequestId] = set()

    # -- accounting ------------------------------------------------------------------
    def aligned(self, size_bytes: int) -> int:
        """``size_bytes`` rounded up to the alignment."""
        return _ceil_div(size_bytes, self.alignment_bytes) * self.alignment_bytes

    @property
    def used_bytes(self) -> int:
        """Bytes of live buffers."""
        return sum(s.size_bytes for s in self._segments if s.live)

    @property
    def reserved_bytes(self) -> int:
        """Bytes from the tail to the head: live buffers, holes and the wrap gap."""
        if not self._segments:
            return 0
        tail, head = self._segments[0].offset, self._segments[-1].end
        return head - tail if head > tail else self.capacity_bytes - tail + head

    @property
    def free_bytes(self) -> int:
        """Bytes outside the tail..head span (``capacity_bytes - reserved_bytes``)."""
        return self.capacity_bytes - self.reserved_bytes

    @property
    def fragmented_bytes(self) -> int:
        """Reserved but unusable bytes: holes left by out-of-order frees and the wrap gap."""
        return self.reserved_bytes - self.used_bytes

    @property
    def requests(self) -> tuple[RequestId, ...]:
        """Requests holding a buffer, oldest first."""
        return tuple(s.request_id for s in self._segments if s.live)

    def segments(self) -> tuple[RingSegment, ...]:
        """Live buffers and not-yet-reclaimed holes, oldest first."""
        return tuple(self._segments)

    def has(self, request_id: RequestId) -> bool:
        """Whether ``request_id`` holds a buffer."""
        return request_id in self._index

    def address_of(self, request_id: RequestId) -> int:
        """Start address (``base_addr`` + offset) of ``request_id``'s buffer."""
        return self.base_addr + self._segment(request_id).offset

    def size_of(self, request_id: RequestId) -> int:
        """Size of ``request_id``'s buffer (after alignment)."""
        return self._segment(request_id).size_bytes

    def largest_allocatable_bytes(self) -> int:
        """Largest buffer :meth:`allocate` would accept now."""
        if not self._segments:
            return self.capacity_bytes
        tail, head = self._segments[0].offset, self._segments[-1].end
        if self._wrapped():
            return tail - head
        return max(self.capacity_bytes - head, tail)

    def can_allocate(self, size_bytes: int) -> bool:
        """Whether a buffer of ``size_bytes`` fits now (the request can be admitted)."""
        return self._place(self.aligned(size_bytes)) is not None

    # -- allocation ------------------------------------------------------------------
    def allocate(self, request_id: RequestId, size_bytes: int) -> int:
        """Reserve a contiguous buffer for ``request_id``; returns its start address.

        Raises :class:`OutOfMemoryError` when the ring cannot place it (the request
        cannot be admitted now: wait for older requests to finish) and ``ValueError``
        if the request already holds a buffer or ``size_bytes <= 0``.
        """
        if size_bytes <= 0:
            raise ValueError(f"HBM KV: buffer size must be > 0, got {size_bytes}")
        if request_id in self._index:
            raise ValueError(f"HBM KV: request {request_id!r} already holds a buffer")
        size = self.aligned(size_bytes)
        offset = self._place(size)
        if offset is None:
            available = self.largest_allocatable_bytes()
            raise OutOfMemoryError(
                f"HBM KV ring: request {request_id!r} needs a {size} B buffer, the largest "
                f"placeable is {available} B ({self.used_bytes} B live, "
                f"{self.fragmented_bytes} B fragmented, {self.capacity_bytes} B total)",
                size, available)
        self._index[request_id] = self._seq0 + len(self._segments)
        self._segments.append(RingSegment(request_id, offset, size))
        self._freed.discard(request_id)
        return self.base_addr + offset

    def free(self, request_id: RequestId) -> None:
        """Release ``request_id``'s buffer (any order); the tail advances over freed
        buffers at the front.  Raises :class:`UnknownRequestError` on a double free."""
        segment = self._segment(request_id)
        position = self._index.pop(request_id) - self._seq0
        self._segments[position] = RingSegment(segment.request_id, segment.offset,
                                               segment.size_bytes, live=False)
        self._freed.add(request_id)
        while self._segments and not self._segments[0].live:
            self._segments.popleft()
            self._seq0 += 1
        # Freeing the newest buffer lets the head step back over it (no hole left).
        while self._segments and not self._segments[-1].live:
            self._segments.pop()

    def _wrapped(self) -> bool:
        # The newest buffer starts before the oldest one: the live span crosses the end.
        return len(self._segments) > 1 and self._segments[-1].offset < self._segments[0].offset

    def _place(self, size: int) -> int | None:
        if size > self.capacity_bytes:
            return None
        if not self._segments:
            return 0  # empty ring: restart at the bottom (no fragmentation carried over)
        tail, head = self._segments[0].offset, self._segments[-1].end
        if self._wrapped():
            return head if size <= tail - head else None
        if size <= self.capacity_bytes - head:
            return head
        return 0 if size <= tail else None

    def _segment(self, request_id: RequestId) -> RingSegment:
        if request_id not in self._index:
            if request_id in self._freed:
                raise UnknownRequestError(f"HBM KV: request {request_id!r} was already freed "
                                          "(double free or use after free)")
            raise UnknownRequestError(f"HBM KV: unknown request {request_id!r}")
        return self._segments[self._index[request_id] - self._seq0]


@dataclass(frozen=True, slots=True)
class KvAccess:
    """KV bytes one step of one request moves on one core, by memory level.

    Reads cover the cached context (positions ``0 .. L-1``); writes cover the new
    tokens' keys and values.  The new tokens' own K/V are produced on chip, so attention
    over them needs no read.
    """

    read_sram_bytes: int = 0
    read_hbm_bytes: int = 0
    write_sram_bytes: int = 0
    write_hbm_bytes: int = 0

    @property
    def read_bytes(self) -> int:
        return self.read_sram_bytes + self.read_hbm_bytes

    @property
    def write_bytes(self) -> int:
        return self.write_sram_bytes + self.write_hbm_bytes

    @property
    def hbm_bytes(self) -> int:
        """Bytes the lowering must move with DMA (HBM reads + HBM writes)."""
        return self.read_hbm_bytes + self.write_hbm_bytes

    def __add__(self, other: "KvAccess") -> "KvAccess":
        return KvAccess(self.read_sram_bytes + other.read_sram_bytes,
                        self.read_hbm_bytes + other.read_hbm_bytes,
                        self.write_sram_bytes + other.write_sram_bytes,
                        self.write_hbm_bytes + other.write_hbm_bytes)


def split_kv_access(context_tokens: int, new_tokens: int, sram_tokens: int,
                    kv_bytes_per_token: int) -> KvAccess:
    """KV traffic of a request at context length ``context_tokens`` adding ``new_tokens``.

    The first ``sram_tokens`` token positions of the request live in SRAM blocks and
    every later position in its HBM buffer ("SRAM blocks first, spill after").  Reads
    are positions ``[0, context_tokens)``, writes ``[context_tokens, context_tokens +
    new_tokens)``; ``kv_bytes_per_token`` is this core's share of one token's K and V.
    """
    for name, value in (("context_tokens", context_tokens), ("new_tokens", new_tokens),
                        ("sram_tokens", sram_tokens), ("kv_bytes_per_token", kv_bytes_per_token)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    read_sram = min(context_tokens, sram_tokens)
    write_sram = max(0, min(context_tokens + new_tokens, sram_tokens) - context_tokens)
    return KvAccess(read_sram * kv_bytes_per_token,
                    (context_tokens - read_sram) * kv_bytes_per_token,
                    write_sram * kv_bytes_per_token,
                    (new_tokens - write_sram) * kv_bytes_per_token)
