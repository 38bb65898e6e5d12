"""Hierarchical memory management of a multi-core NPU (NpuSim §4.2, Fig. 5).

Per core, SRAM is shared by four kinds of objects, filled in this priority order:

1. **buffers** – inputs/activations and the temporaries of computation and
   communication.  Reserved first: the dataflow between cores goes SRAM to SRAM, so a
   core cannot run without them (NpuSim: "we reserve dedicated SRAM buffers for
   activations and input data");
2. **KV cache** – fixed-size blocks (:class:`~npusim.mapping.kv_blocks.SramBlockAllocator`)
   up to the number of tokens the caller asks to keep on chip (``kv_sram_tokens``,
   typically micro-batch x maximum context);
3. **weights** – whole tensors, greedily, as long as they fit ("if residual SRAM capacity
   remains ... more model weights can be stored in SRAM").

Weights that do not fit are streamed from the core's HBM each time they are used.  KV
that no longer fits in SRAM spills to a per-request HBM buffer sized for the request's
maximum length, taken from a ring (:class:`~npusim.mapping.kv_blocks.HbmRingBuffer`)
that occupies the HBM left after the streamed weights.

Entry points:

* :func:`plan_core_memory` / :func:`plan_chip_memory` – static split of SRAM and HBM
  (:class:`CoreMemoryPlan`);
* :class:`~npusim.mapping.core_kv_cache.CoreKvCache` – run-time KV bookkeeping of one
  core on top of a plan (re-exported here);
* :func:`split_kv_access` – for a request at context length L: which KV bytes are read
  from / written to SRAM and which from / to HBM (the lowering turns the HBM parts into
  DMA transfers);
* :func:`check_model_fits` / :func:`check_model_fits_chip` – early "does not fit" error
  stating the shortfall.

``docs/memory.md`` describes the policy, its assumptions and known gaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, Sequence

from npusim.core.errors import MappingError
from npusim.core.units import format_count
from npusim.mapping.core_kv_cache import CoreKvCache, KvPlacement
from npusim.mapping.kv_blocks import (HbmRingBuffer, KvAccess, OutOfMemoryError,
                                      SramBlockAllocator, UnknownRequestError, split_kv_access)

if TYPE_CHECKING:  # typing only: keeps this module free of hardware imports at run time
    from npusim.hw.devices.npu import NpuConfig
    from npusim.hw.memory.dram import DramConfig
    from npusim.workload.model_config import ModelConfig

__all__ = ["DEFAULT_BLOCK_TOKENS", "WeightOrder", "KvAccess", "KvPlacement", "CoreMemoryPlan",
           "CoreKvCache", "split_kv_access", "plan_core_memory", "plan_chip_memory",
           "hbm_capacity_bytes", "check_model_fits", "check_model_fits_chip", "format_size",
           "OutOfMemoryError", "UnknownRequestError", "SramBlockAllocator", "HbmRingBuffer"]

#: Tokens per SRAM KV block.  Assumption: 16, the vLLM default block size; NpuSim does not
#: give its block size.  Smaller blocks waste less SRAM in the last block of a request.
DEFAULT_BLOCK_TOKENS = 16

#: Order in which weight tensors compete for the SRAM left after buffers and KV.
WeightOrder = Literal["lowering", "largest_first"]

GIB = 1 << 30
MIB = 1 << 20


def format_size(size_bytes: int | float) -> str:
    """``size_bytes`` in GiB with one decimal (MiB below 1 GiB), e.g. ``61.8 GiB``."""
    if abs(size_bytes) >= GIB:
        return f"{size_bytes / GIB:.1f} GiB"
    return f"{size_bytes / MIB:.1f} MiB"


def _gib(size_bytes: int) -> str:
    # Chip capacities always in GiB, so "0.0 GiB HBM" reads as "no HBM" next to "4.0 GiB SRAM".
    return f"{size_bytes / GIB:.1f} GiB"


def hbm_capacity_bytes(hbm: "DramConfig | None") -> int:
    """Capacity of one core's HBM from its DRAM config (0 for an SRAM-only chip).

    ``channels x ranks x bank_groups x banks_per_group x rows x row_bytes``
    (:attr:`DramConfig.capacity_bytes`).
    """
    return 0 if hbm is None else int(hbm.capacity_bytes)


# ----------------------------------------------------------------------------- planning
@dataclass(frozen=True, slots=True)
class CoreMemoryPlan:
    """Static split of one core's SRAM and HBM (result of :func:`plan_core_memory`).

    SRAM holds ``buffer_bytes``, ``kv_sram_blocks`` KV blocks and the ``sram_weights``;
    HBM holds the ``hbm_weights`` (streamed on use) and, above them, the KV ring of
    ``hbm_kv_capacity_bytes``.  Weight lists are ``(name, bytes)`` in lowering order.
    """

    core: int | None
    sram_capacity_bytes: int
    hbm_capacity_bytes: int
    buffer_bytes: int
    kv_bytes_per_token: int
    kv_block_tokens: int
    kv_sram_blocks: int
    sram_weights: tuple[tuple[str, int], ...]
    hbm_weights: tuple[tuple[str, int], ...]
    weight_order: str = "lowering"

    @property
    def kv_block_bytes(self) -> int:
        """Bytes of one SRAM KV block on this core."""
        return self.kv_block_tokens * self.kv_bytes_per_token

    @property
    def kv_sram_bytes(self) -> int:
        """SRAM reserved for KV blocks."""
        return self.kv_sram_blocks * self.kv_block_bytes

    @property
    def kv_sram_tokens(self) -> int:
        """KV tokens (all requests together) the SRAM blocks hold."""
        return self.kv_sram_blocks * self.kv_block_tokens

    @property
    def sram_weight_bytes(self) -> int:
        return sum(size for _, size in self.sram_weights)

    @property
    def hbm_weight_bytes(self) -> int:
        """Weights streamed from HBM on every use."""
        return sum(size for _, size in self.hbm_weights)

    @property
    def sram_used_bytes(self) -> int:
        return self.buffer_bytes + self.kv_sram_bytes + self.sram_weight_bytes

    @property
    def sram_free_bytes(self) -> int:
        """SRAM left unused (too small for the next KV block or weight tensor)."""
        return self.sram_capacity_bytes - self.sram_used_bytes

    @property
    def hbm_kv_capacity_bytes(self) -> int:
        """HBM available to the KV ring (capacity minus streamed weights)."""
        return self.hbm_capacity_bytes - self.hbm_weight_bytes

    def weight_location(self, name: str) -> Literal["sram", "hbm"]:
        """Where weight tensor ``name`` lives (``KeyError`` if this core has no such tensor)."""
        if any(n == name for n, _ in self.sram_weights):
            return "sram"
        if any(n == name for n, _ in self.hbm_weights):
            return "hbm"
        raise KeyError(f"core {self.core}: no weight tensor named {name!r}")

    def hbm_kv_requests(self, max_tokens: int) -> int:
        """Requests of ``max_tokens`` whose whole HBM KV buffers fit in the ring at once."""
        need = max_tokens * self.kv_bytes_per_token
        return self.hbm_kv_capacity_bytes // need if need > 0 else 0

    def describe(self) -> str:
        """One-line summary for logs and reports."""
        return (f"core {self.core}: SRAM {format_size(self.sram_capacity_bytes)} = buffers "
                f"{format_size(self.buffer_bytes)} + KV {self.kv_sram_blocks} blocks "
                f"({format_size(self.kv_sram_bytes)}) + weights {len(self.sram_weights)} "
                f"tensors ({format_size(self.sram_weight_bytes)}) + free "
                f"{format_size(self.sram_free_bytes)}; HBM {format_size(self.hbm_capacity_bytes)}"
                f" = streamed weights {len(self.hbm_weights)} tensors "
                f"({format_size(self.hbm_weight_bytes)}) + KV ring "
                f"{format_size(self.hbm_kv_capacity_bytes)}")


def _weight_priority(weights: Sequence[tuple[str, int]], order: str) -> list[int]:
    """Indices of ``weights`` in the order they compete for SRAM."""
    if order == "lowering":
        return list(range(len(weights)))
    if order == "largest_first":
        # Stable: ties keep lowering order, so the plan is deterministic.
        return sorted(range(len(weights)), key=lambda i: -weights[i][1])
    raise ValueError(f"weight_order must be 'lowering' or 'largest_first', got {order!r}")


def plan_core_memory(*, sram_capacity_bytes: int, hbm_capacity_bytes: int, buffer_bytes: int,
                     weights: Iterable[tuple[str, int]], kv_bytes_per_token: int,
                     kv_sram_tokens: int, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                     weight_order: WeightOrder = "lowering", min_kv_tokens: int = 0,
                     core: int | None = None, hbm_reserved_bytes: int = 0,
                     hbm_reserved_for: str = "") -> CoreMemoryPlan:
    """Split one core's SRAM (buffers > KV blocks > weights) and HBM.

    ``weights``: this core's share of every weight tensor, ``(name, bytes)`` in the
    order the lowering uses them.  ``kv_bytes_per_token``: this core's share of one
    token's K and V.  ``kv_sram_tokens``: KV tokens to keep in SRAM if they fit (rounded
    up to whole blocks); what does not fit spills to HBM at run time.
    ``hbm_reserved_bytes`` of the core's HBM are taken already (``hbm_reserved_for``
    says by what, for the messages), e.g. the embedding table on the first stage.

    Weights are placed whole, first-fit, in ``weight_order``:

    * ``"lowering"`` (default): the order of use.  In decode every weight byte is read
      once per step whatever tensor it belongs to, so every resident byte saves the same
      HBM traffic; what differs is *when* a stream can be hidden.  The first tensors of
      a step have no earlier compute to prefetch behind, so keeping them resident
      removes the exposed start-up load, while later tensors can be double-buffered
      behind the compute of earlier ones.  First-fit continues past a tensor that does
      not fit, so smaller later tensors still use the leftover space.
    * ``"largest_first"``: largest tensors first, which tends to leave less SRAM unused
      (and fewer, larger streams).

    Raises :class:`MappingError`, stating the shortfall, if the buffers exceed the SRAM,
    the streamed weights exceed the HBM, or fewer than ``min_kv_tokens`` KV tokens fit in
    SRAM blocks plus the HBM ring.
    """
    where = f"core {core}" if core is not None else "core"
    hbm_total_bytes = hbm_capacity_bytes
    hbm_capacity_bytes = max(0, hbm_total_bytes - hbm_reserved_bytes)
    for name, value in (("sram_capacity_bytes", sram_capacity_bytes),
                        ("hbm_capacity_bytes", hbm_capacity_bytes), ("buffer_bytes", buffer_bytes),
                        ("kv_bytes_per_token", kv_bytes_per_token),
                        ("kv_sram_tokens", kv_sram_tokens), ("min_kv_tokens", min_kv_tokens)):
        if value < 0:
            raise ValueError(f"{where}: {name} must be >= 0, got {value}")
    if block_tokens <= 0:
        raise ValueError(f"{where}: block_tokens must be > 0, got {block_tokens}")
    weights = [(str(name), int(size)) for name, size in weights]
    names = [name for name, _ in weights]
    if len(set(names)) != len(names):
        duplicates = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{where}: weight tensor names must be unique, repeated: {duplicates}")
    if any(size < 0 for _, size in weights):
        raise ValueError(f"{where}: weight sizes must be >= 0")

    # 1. buffers
    if buffer_bytes > sram_capacity_bytes:
        raise MappingError(
            f"{where}: activation/temporary buffers need {format_size(buffer_bytes)} but the "
            f"core has {format_size(sram_capacity_bytes)} of SRAM: short by "
            f"{format_size(buffer_bytes - sram_capacity_bytes)}; use smaller micro-batches or "
            "tiles, more SRAM per core (hw.core.sram.capacity_bytes), or spread the stage "
            "over more cores")
    left = sram_capacity_bytes - buffer_bytes

    # 2. KV blocks, up to the requested number of tokens
    block_bytes = block_tokens * kv_bytes_per_token
    if block_bytes == 0:
        kv_blocks = 0
    else:
        wanted = -(-kv_sram_tokens // block_tokens)
        kv_blocks = min(wanted, left // block_bytes)
    left -= kv_blocks * block_bytes

    # 3. weights, whole tensors, first-fit in the chosen order
    resident = [False] * len(weights)
    for index in _weight_priority(weights, weight_order):
        size = weights[index][1]
        if size <= left:
            resident[index] = True
            left -= size
    sram_weights = tuple(w for w, r in zip(weights, resident) if r)
    hbm_weights = tuple(w for w, r in zip(weights, resident) if not r)

    plan = CoreMemoryPlan(core, sram_capacity_bytes, hbm_capacity_bytes, buffer_bytes,
                          kv_bytes_per_token, block_tokens, kv_blocks, sram_weights,
                          hbm_weights, weight_order)
    reserved_for = hbm_reserved_for or "other data"
    if hbm_reserved_bytes > hbm_total_bytes:
        raise MappingError(
            f"{where}: {reserved_for} takes {format_size(hbm_reserved_bytes)} of HBM, but the "
            f"core has {format_size(hbm_total_bytes)}: short by "
            f"{format_size(hbm_reserved_bytes - hbm_total_bytes)}; add HBM (hw.hbm) or use a "
            "larger TP (it is split over the TP group)")
    if plan.hbm_weight_bytes > hbm_capacity_bytes:
        if hbm_total_bytes == 0:
            hbm = "no HBM (hw.hbm is not set)"
        else:
            hbm = f"{format_size(hbm_capacity_bytes)} of HBM for them"
            if hbm_reserved_bytes:
                hbm += (f" ({format_size(hbm_total_bytes)} less "
                        f"{format_size(hbm_reserved_bytes)} for {reserved_for})")
        raise MappingError(
            f"{where}: its weights take {format_size(sum(size for _, size in weights))} "
            f"({format_count(len(weights), 'tensor')}); after buffers and KV "
            f"{format_size(left + plan.sram_weight_bytes)} of SRAM is left, holding "
            f"{format_size(plan.sram_weight_bytes)} of them (whole tensors), so "
            f"{format_size(plan.hbm_weight_bytes)} "
            f"({format_count(len(hbm_weights), 'tensor')}) must stream from HBM, but the core "
            f"has {hbm}: short by "
            f"{format_size(plan.hbm_weight_bytes - hbm_capacity_bytes)}; add HBM (hw.hbm) or "
            "spread the weights over more cores")
    kv_tokens = plan.kv_sram_tokens + (plan.hbm_kv_capacity_bytes // kv_bytes_per_token
                                       if kv_bytes_per_token else 0)
    if kv_bytes_per_token and kv_tokens < min_kv_tokens:
        short = (min_kv_tokens - kv_tokens) * kv_bytes_per_token
        raise MappingError(
            f"{where}: KV for {min_kv_tokens} tokens needs "
            f"{format_size(min_kv_tokens * kv_bytes_per_token)} but only {kv_tokens} tokens "
            f"fit ({plan.kv_sram_blocks} SRAM blocks + "
            f"{format_size(plan.hbm_kv_capacity_bytes)} of HBM): short by {format_size(short)}")
    return plan


def _per_core(value: int | Mapping[int, int], core: int, name: str) -> int:
    if isinstance(value, Mapping):
        if core not in value:
            raise ValueError(f"{name} has no entry for core {core}")
        return int(value[core])
    return int(value)


def plan_chip_memory(npu: "NpuConfig", cores: Sequence[int],
                     weights_per_core: Mapping[int, Sequence[tuple[str, int]]], *,
                     buffer_bytes: int | Mapping[int, int], kv_bytes_per_token: int | Mapping[int, int],
                     kv_sram_tokens: int | Mapping[int, int],
                     block_tokens: int = DEFAULT_BLOCK_TOKENS,
                     weight_order: WeightOrder = "lowering",
                     min_kv_tokens: int = 0) -> dict[int, CoreMemoryPlan]:
    """:func:`plan_core_memory` for every core of a pipeline stage (or of the chip).

    SRAM and HBM capacities come from ``npu`` (every core is alike); ``buffer_bytes``,
    ``kv_bytes_per_token`` and ``kv_sram_tokens`` are one value for all cores or a
    mapping ``core -> value``.  A core missing from ``weights_per_core`` holds no weights.
    Returns ``{core: plan}`` in the order of ``cores``.
    """
    if len(set(cores)) != len(cores):
        raise ValueError(f"cores must be distinct, got {list(cores)}")
    for core in cores:
        if not 0 <= core < npu.num_cores:
            raise MappingError(f"core {core} does not exist (this chip has cores "
                               f"0..{npu.num_cores - 1})")
    sram = int(npu.core.sram.capacity_bytes)
    hbm = hbm_capacity_bytes(npu.hbm)
    return {core: plan_core_memory(
        sram_capacity_bytes=sram, hbm_capacity_bytes=hbm,
        buffer_bytes=_per_core(buffer_bytes, core, "buffer_bytes"),
        weights=weights_per_core.get(core, ()),
        kv_bytes_per_token=_per_core(kv_bytes_per_token, core, "kv_bytes_per_token"),
        kv_sram_tokens=_per_core(kv_sram_tokens, core, "kv_sram_tokens"),
        block_tokens=block_tokens, weight_order=weight_order, min_kv_tokens=min_kv_tokens,
        core=core) for core in cores}


# ----------------------------------------------------------------------------- fit check
def check_model_fits(weight_bytes: int, min_kv_bytes: int, total_sram_bytes: int,
                     total_hbm_bytes: int, *, model_name: str = "the model",
                     kv_tokens: int | None = None, kv_requests: int = 1,
                     reserved_sram_bytes: int = 0, holder: str = "the chip has") -> int:
    """Raise :class:`MappingError` unless weights + KV fit in the chip's SRAM + HBM.

    A necessary condition only (whole-chip capacity; the per-core split can still fail,
    see :func:`plan_core_memory`).  ``min_kv_bytes`` is the KV of the smallest useful
    load (one request at its maximum length, ``kv_tokens`` tokens, named in the message);
    ``kv_requests`` how many such requests it holds at once (a fixed batch);
    ``reserved_sram_bytes`` is SRAM kept for buffers; ``holder`` names what the totals
    belong to in the message, with its verb ("the chip has", or the cores a replica runs
    on).  Returns the headroom in bytes.
    """
    if reserved_sram_bytes > total_sram_bytes:  # the buffers alone do not fit: say that
        raise MappingError(
            f"{model_name}: activation/temporary buffers need {format_size(reserved_sram_bytes)} "
            f"of SRAM but {holder} {_gib(total_sram_bytes)}; use a smaller batch or fewer "
            "tokens per iteration, or more SRAM per core (hw.core.sram.capacity_bytes)")
    need = weight_bytes + min_kv_bytes
    have = total_sram_bytes - reserved_sram_bytes + total_hbm_bytes
    if need <= have:
        return have - need
    kv_what = ("KV" if kv_tokens is None else
               f"KV for one request at {kv_tokens} tokens" if kv_requests == 1 else
               f"KV for {kv_requests} requests at {kv_tokens} tokens each")
    reserved = (f" ({format_size(reserved_sram_bytes)} of it reserved for buffers)"
                if reserved_sram_bytes else "")
    hint = ("add HBM (hw.hbm) or use a chip with more cores" if total_hbm_bytes == 0 else
            "use a chip with more cores or more HBM per core (hw.hbm.rows, hw.hbm.channels), "
            "or narrower weights (workload.dtype_bytes)")
    # When the weights alone overflow, the KV term (one token, for a serving pool) only
    # distracts from what must change.
    needs = (f"{format_size(weight_bytes)} of weights before any KV" if weight_bytes > have else
             f"{format_size(weight_bytes)} of weights + {format_size(min_kv_bytes)} of {kv_what}")
    raise MappingError(
        f"{model_name} needs {needs}, but {holder} "
        f"{_gib(total_sram_bytes)} SRAM{reserved} + {_gib(total_hbm_bytes)} HBM: "
        f"short by {format_size((weight_bytes if weight_bytes > have else need) - have)}; {hint}")


def check_model_fits_chip(model: "ModelConfig", npu: "NpuConfig", *, context_tokens: int,
                          dtype_bytes: float = 2, buffer_bytes_per_core: int = 0) -> int:
    """:func:`check_model_fits` for ``model`` on every core of ``npu``, one request of
    ``context_tokens`` tokens, weights and KV at ``dtype_bytes`` per element."""
    cores = npu.num_cores
    return check_model_fits(
        model.weight_bytes(dtype_bytes), model.kv_bytes_per_token(dtype_bytes) * context_tokens,
        cores * int(npu.core.sram.capacity_bytes), cores * hbm_capacity_bytes(npu.hbm),
        model_name=model.name, kv_tokens=context_tokens,
        reserved_sram_bytes=cores * buffer_bytes_per_core)
