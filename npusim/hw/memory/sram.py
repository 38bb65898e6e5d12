"""SRAM scratchpad: banked, word-interleaved, fixed access latency.

Geometry: ``banks`` banks share a total port width of ``bytes_per_cycle`` bytes per cycle
(the sum over banks; each bank moves ``bytes_per_cycle / banks`` bytes a cycle).  Addresses
are interleaved over the banks in ``interleave_bytes`` units: unit ``u = addr //
interleave_bytes`` lives in bank ``u % banks``.  Capacity (``capacity_bytes``) is not
checked here: the memory manager that places tensors enforces it.

**Closed form** (``access_time_ps``, the analytic level)::

    time = access_latency_cycles + max over banks ceil(bytes_in_bank * banks / bytes_per_cycle)

for the bytes laid out from address 0.  A transfer covering whole interleave stripes runs
at the full ``bytes_per_cycle``; a small access only uses the banks it touches (one
64-byte word on one bank takes ``64 / (bytes_per_cycle / banks)`` cycles).  ``random``
patterns are timed like sequential ones: an SRAM has no row buffer, and with several DMA
chunks in flight the bank load evens out (assumption).  Reads and writes cost the same.

**Transaction level** (``transact``): each bank keeps the time it becomes free.  A
transaction reserves every bank it touches from ``max(now, bank free)`` for its share of
the bytes, so requests that overlap in time and banks queue behind each other (two
concurrent full-width requests take about twice as long) while requests on disjoint
banks proceed in parallel.  The access latency is pipelined (paid per request, not
holding the banks).  One SimPy timeout per transaction; the four phases are:

* BEGIN_REQ – arrival; END_REQ – the first touched bank starts serving it (no request
  queue limit is modelled, so there is no other back-pressure);
* BEGIN_RESP – END_REQ + access latency; END_RESP – the last touched bank finishes,
  + access latency.

Uncontended, a sequence of transactions matches the closed form (same bank shares).

**Shared port** (``shared_port``, off by default): the core's systolic array and vector
unit take their operands through this port too.  The executors hold it for an op's
operand bytes at the full width (:meth:`Sram.port_time_ps`) from when the op's unit takes
it: the analytic level as one more first-come-first-served booking, the tlm level in
pieces over the op's compute time (:meth:`Sram.occupy_port`), so transfers interleave
with them.
"""

from __future__ import annotations

from typing import Any, Generator, Literal

from pydantic import Field

from npusim.core.registry import PartConfig, register
from npusim.core.units import Bytes, FreqHz, cycles_to_ps
from npusim.hw.base import SEQUENTIAL, AccessPattern, MemoryTarget, MemoryTransaction


class SramConfig(PartConfig):
    """A banked on-chip SRAM scratchpad."""

    kind: Literal["sram"] = "sram"
    capacity_bytes: Bytes = Field(
        gt=0, description="Scratchpad size, e.g. '32MiB' (NpuSim Table 3: 8-128 MB per "
                          "large core, 8-48 MB per small core). Enforced by the memory manager.")
    banks: int = Field(
        32, gt=0, description="Independent banks (assumption: 32; NpuSim does not give it).")
    bytes_per_cycle: int = Field(
        512, gt=0, description="Total bytes per cycle over all banks (each bank moves "
                               "bytes_per_cycle / banks). NpuSim scales SRAM bandwidth with "
                               "the systolic array; assumption: 512 B/cycle feeds a 128x128 "
                               "FP16 array (128 inputs + 128 outputs x 2 B per cycle).")
    interleave_bytes: int = Field(
        64, gt=0, description="Address interleaving unit across banks (assumption: 64 B).")
    freq_hz: FreqHz = Field(
        500_000_000, description="SRAM clock (NpuSim Table 3: 500 MHz core frequency).")
    access_latency_cycles: int = Field(
        2, ge=0, description="Cycles from request to first data, pipelined (assumption: 2, "
                             "a typical single-ported SRAM macro plus bank mux).")
    shared_port: bool = Field(
        False, description="True: the core's systolic array and vector unit move their "
                           "operands through the same bytes_per_cycle as the DMA, so compute "
                           "and transfers on one core queue for it and an op takes at least "
                           "its operand bytes / bytes_per_cycle. False (default; assumption, "
                           "NpuSim does not say): the compute units have ports of their own "
                           "(a scratchpad banked between compute and DMA), and only "
                           "transfers use this one.")


def bank_bytes(addr: int, size: int, banks: int, interleave: int) -> list[int]:
    """Bytes of ``[addr, addr + size)`` that fall in each bank (word-interleaved)."""
    out = [0] * banks
    if size <= 0:
        return out
    end = addr + size
    first_unit = addr // interleave
    # Head: a partial first unit.
    head_end = min(end, (first_unit + 1) * interleave)
    if addr % interleave:
        out[first_unit % banks] += head_end - addr
        addr, first_unit = head_end, first_unit + 1
    whole = (end - addr) // interleave
    if whole:
        rounds, extra = divmod(whole, banks)
        if rounds:
            for bank in range(banks):
                out[bank] += rounds * interleave
        for i in range(extra):
            out[(first_unit + i) % banks] += interleave
    tail = (end - addr) - whole * interleave
    if tail > 0:
        out[(first_unit + whole) % banks] += tail
    return out


@register("memory", SramConfig)
class Sram(MemoryTarget):
    """Banked SRAM scratchpad: latency + bank-limited bandwidth; banks contend in tlm."""

    on_chip = True

    def __init__(self, name: str, config: SramConfig):
        super().__init__(name, config)
        self.capacity_bytes = config.capacity_bytes
        self._bank_free_ps: list[int] = [0] * config.banks
        # While every bank frees at the same time (only whole-round chunks so far, the
        # usual DMA traffic), that time; the list above is then stale.  None: use the list.
        self._all_free_ps: int | None = 0
        self._shares: dict[tuple[int, int], tuple[int, list[tuple[int, int]]]] = {}
        self._latency_ps = cycles_to_ps(config.access_latency_cycles, config.freq_hz)
        self._round_bytes = config.banks * config.interleave_bytes

    # -- closed form -------------------------------------------------------------
    def _bank_cycles(self, nbytes: int) -> int:
        # bank rate = bytes_per_cycle / banks, kept exact in integers.
        return -(-nbytes * self.config.banks // self.config.bytes_per_cycle)

    def data_cycles(self, size_bytes: int, addr: int = 0) -> int:
        """Cycles the busiest touched bank needs to move its share of the bytes."""
        shares = bank_bytes(addr, size_bytes, self.config.banks, self.config.interleave_bytes)
        return self._bank_cycles(max(shares))

    def access_time_ps(self, size_bytes: int, is_write: bool = False,
                       pattern: AccessPattern = SEQUENTIAL) -> int:
        """Uncontended time to read or write ``size_bytes`` (see the module docstring)."""
        if size_bytes <= 0:
            return 0
        cycles = self.config.access_latency_cycles + self.data_cycles(size_bytes)
        return cycles_to_ps(cycles, self.config.freq_hz)

    def _bank_busy(self, offset: int, size: int) -> tuple[int, list[tuple[int, int]]]:
        """``(busy, [])`` if every bank is busy for ``busy`` ps moving ``size`` bytes from
        ``offset``, else ``(0, [(bank, busy ps)] of the touched banks in bank order)``."""
        cfg = self.config
        shares = bank_bytes(offset, size, cfg.banks, cfg.interleave_bytes)
        touched = [(bank, cycles_to_ps(self._bank_cycles(nbytes), cfg.freq_hz))
                   for bank, nbytes in enumerate(shares) if nbytes]
        if len(touched) == cfg.banks and len({busy for _, busy in touched}) == 1:
            return touched[0][1], []
        return 0, touched

    @property
    def peak_bandwidth_bps(self) -> int:
        return self.config.bytes_per_cycle * self.config.freq_hz

    # -- transaction level -------------------------------------------------------
    def bind(self, env: Any) -> None:
        super().bind(env)
        self._bank_free_ps = [0] * self.config.banks
        self._all_free_ps = 0

    def transact(self, txn: MemoryTransaction) -> Generator[Any, Any, MemoryTransaction]:
        """SimPy process body: reserve the touched banks, wait until END_RESP, return ``txn``."""
        env = self.env
        if env is None:
            raise RuntimeError(f"{self.name}: transact() called before bind(env)")
        now = env.now
        txn.begin_req_ps = now
        latency = self._latency_ps
        if txn.size_bytes <= 0:
            txn.end_req_ps = txn.begin_resp_ps = now
            txn.end_resp_ps = now + latency
        else:
            first_start, last_end = self._book(txn.addr, txn.size_bytes, txn.is_write, now)
            txn.end_req_ps = first_start
            txn.begin_resp_ps = first_start + latency
            txn.end_resp_ps = last_end + latency
        yield env.timeout(txn.end_resp_ps - now)
        return txn

    def reserve(self, addr: int, size: int, is_write: bool, now: int) -> int:
        """:meth:`transact` without the transaction object and the generator: book the
        banks for ``size`` (> 0) bytes at ``addr`` arriving at ``now`` (the current
        time) and return END_RESP.  The DMA workers' fast path (one call per chunk)."""
        return self._book(addr, size, is_write, now)[1] + self._latency_ps

    def occupy_port(self, busy_ps: int, now: int) -> int:
        """Hold every bank for ``busy_ps`` (> 0) from ``now`` or when each is free, for a
        compute unit's operands on a shared port (``shared_port``); return when the last
        bank is done.  Counts nothing: the unit counts its operand bytes."""
        return self._book_every_bank(busy_ps, now)[1]

    def port_time_ps(self, size_bytes: int) -> int:
        """Time ``size_bytes`` of operand traffic holds the whole port (every bank at its
        share, no access latency: operands stream)."""
        if size_bytes <= 0:
            return 0
        return cycles_to_ps(-(-size_bytes // self.config.bytes_per_cycle), self.config.freq_hz)

    def _book_every_bank(self, busy: int, now: int) -> tuple[int, int]:
        """Reserve each bank for ``busy`` ps from ``max(now, its free time)``; returns
        (first bank's start, last bank's end)."""
        all_free = self._all_free_ps
        if all_free is not None:
            # All banks are free at the same time: the per-bank reservation, done once.
            first_start = all_free if all_free > now else now
            last_end = self._all_free_ps = first_start + busy
            return first_start, last_end
        free = self._bank_free_ps
        starts = [start if start > now else now for start in free]
        first_start = min(starts)
        last_end = max(starts) + busy
        free[:] = [start + busy for start in starts]
        if first_start + busy == last_end:  # all banks in step again
            self._all_free_ps = last_end
        return first_start, last_end

    def _book(self, addr: int, size: int, is_write: bool, now: int) -> tuple[int, int]:
        """Reserve the touched banks (``size`` > 0) and count the transaction; returns
        (first bank's start, last bank's end) in ps."""
        # Bank shares depend only on the offset within one interleave round and the
        # size; transfers are chunked uniformly, so a handful of keys cover a run.
        key = (addr % self._round_bytes, size)
        shares = self._shares.get(key)
        if shares is None:
            shares = self._shares[key] = self._bank_busy(key[0], size)
        uniform, touched = shares
        if uniform:
            # Every bank gets the same share (whole interleave rounds, the common DMA chunk).
            service = uniform
            first_start, last_end = self._book_every_bank(uniform, now)
        else:
            free = self._bank_free_ps
            all_free = self._all_free_ps
            if all_free is not None:
                free[:] = [all_free] * len(free)
                self._all_free_ps = None
            first_start, last_end, service = None, now, 0
            for bank, busy in touched:
                start = free[bank]
                if start < now:
                    start = now
                free[bank] = start + busy
                if first_start is None or start < first_start:
                    first_start = start
                if start + busy > last_end:
                    last_end = start + busy
                if busy > service:
                    service = busy
        stats = self.stats
        stats.busy_ps += service
        stats.transactions += 1
        if is_write:
            stats.bytes_written += size
        else:
            stats.bytes_read += size
        return first_start, last_end
