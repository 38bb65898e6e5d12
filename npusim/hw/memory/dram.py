"""DRAM (HBM, LPDDR, DDR4, GDDR): one or more interleaved channels behind one memory part.

A :class:`DramChannel` models ``channels`` independent channels (an HBM stack's
pseudo-channels, the channels of an LPDDR package, ...) sharing one address space
through the configurable address mapping (:mod:`dram_mapping`).  Each channel has
ranks (or pseudo-channels sharing one data bus), bank groups and banks with open-row
state, the JEDEC timing set (tRCD, tRP, tRAS, tRC, CL, tBL, tCCD_S/L, tRRD_S/L, tFAW,
tREFI/tRFC, plus write timings), and its own FR-FCFS controller over a bounded queue
(:mod:`dram_controller`).

A transaction is a burst group (a tile-sized DMA request, or a single 64 B line): it is
split by address into per-channel, per-(bank, row) segments and each channel schedules
its share in closed form, so the cost is O(banks and rows touched), never O(bursts),
and the controller wakes only when it can next decide something.

Both fidelities:

* ``access_time_ps`` (analytic): first-access latency + bursts x per-burst bus time
  (from the mapping: tCCD_S- or tCCD_L-paced) / refresh efficiency; for random chunks
  the activation rate (tRRD, tFAW, tRC over the banks) also bounds the time;
* ``transact`` (tlm): the four-phase handshake through the channel queues with bank,
  bus and refresh contention.

Bandwidth: ``peak_bandwidth_bps = channels * burst_bytes / (tbl_cycles * tck_ps)``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Generator, Literal

from pydantic import Field, model_validator

from npusim.core.registry import PartConfig, register
from npusim.core.units import PS_PER_S, Bytes, TimePs
from npusim.hw.base import SEQUENTIAL, AccessPattern, MemoryTarget, MemoryTransaction
from npusim.hw.memory.dram_controller import (ChannelController, ChannelRequest, DelayedEvent,
                                              DramCommand)
from npusim.hw.memory.dram_mapping import (AddressMapping, BatchRun, DramCoord, Segment,
                                          is_power_of_two, runs)
from npusim.hw.memory.dram_timing import ColumnPlan, DramTiming, column_plan

__all__ = ["DramConfig", "DramChannel", "DramHandle", "DramCommand", "DramCoord"]

#: Per DRAM config: (request templates, column plans, controller decisions, analytic
#: sequential stream times, controller key transitions); see DramChannel.__init__.
_SHARED: dict[Any, tuple[dict, dict, dict, dict, dict]] = {}
#: Unique id of each request template's per-channel share (key of the decision memo).
_SHAPE_IDS = itertools.count()


def _cycles(description: str, default: int | None = None) -> Any:
    """A timing field counted in clock cycles (tCK) of the channel."""
    if default is None:
        return Field(ge=0, description=description + " In cycles of tck_ps.")
    return Field(default, ge=0, description=description + " In cycles of tck_ps.")


#: Most channels one memory part may have: 64 HBM3 stacks of 16 pseudo-channels (a
#: whole-wafer system); a larger value is taken for a typo, not simulated silently.
MAX_CHANNELS = 1024


class DramConfig(PartConfig):
    """A DRAM part: organisation, timing (cycles of ``tck_ps``), refresh, controller."""

    kind: Literal["dram"] = "dram"
    standard: str = Field("", description="Part name, e.g. 'DDR4-3200AA x8'. Timing "
                                          "ignores it; the energy model picks the DRAM's "
                                          "pJ/bit by its start (HBM2, LPDDR5, DDR4 ...: "
                                          "run.energy.dram_pj_per_bit).")
    # -- organisation ----------------------------------------------------------------
    channels: int = Field(1, ge=1, le=MAX_CHANNELS,
                          description="Independent channels (each with its own data bus, "
                                      "queue and controller); power of two, at most 1024. HBM "
                                      "pseudo-channels count as channels.")
    ranks: int = Field(1, ge=1, description="Ranks sharing one channel's data bus; power of two.")
    bank_groups: int = Field(1, ge=1, description="Bank groups per rank; power of two.")
    banks_per_group: int = Field(ge=1, description="Banks in each bank group; power of two.")
    rows: int = Field(ge=1, description="Rows per bank; power of two.")
    row_bytes: Bytes = Field(description="Row (page) size across the channel's data bus, in bytes; "
                             "a multiple of the burst size.")
    bus_width_bits: int = Field(ge=8, description="Data-bus width of one channel, in bits.")
    burst_length: int = Field(ge=1, description="Beats per burst (BL); one burst moves "
                              "bus_width_bits * burst_length / 8 bytes.")
    # -- timing ----------------------------------------------------------------------
    tck_ps: TimePs = Field(gt=0, description="Command clock period tCK, in picoseconds "
                           "(accepts '0.625ns').")
    tbl_cycles: int = Field(ge=1, description="Data-bus occupancy of one burst (tBL), in cycles "
                            "of tck_ps; sets the peak bandwidth.")
    cl_cycles: int = _cycles("Read latency CL (RL): column read command to first data.")
    cwl_cycles: int = _cycles("Write latency CWL (WL): column write command to first data.")
    trcd_cycles: int = _cycles("tRCD: ACT to column command in the same bank.")
    trp_cycles: int = _cycles("tRP: PRE to ACT in the same bank.")
    tras_cycles: int = _cycles("tRAS: ACT to PRE in the same bank.")
    trc_cycles: int = _cycles("tRC: ACT to ACT in the same bank (>= tRAS + tRP).")
    tccd_s_cycles: int = _cycles("tCCD_S: column to column, different bank groups.")
    tccd_l_cycles: int = _cycles("tCCD_L: column to column, same bank group.")
    trrd_s_cycles: int = _cycles("tRRD_S: ACT to ACT, different bank groups of a rank.")
    trrd_l_cycles: int = _cycles("tRRD_L: ACT to ACT, same bank group.")
    tfaw_cycles: int = _cycles("tFAW: window in which a rank may issue at most four ACTs.")
    trtp_cycles: int = _cycles("tRTP: read column command to PRE.")
    twr_cycles: int = _cycles("tWR: end of write data to PRE (write recovery).")
    twtr_cycles: int = _cycles("tWTR: end of write data to a read column command (same rank).")
    trtw_cycles: int = _cycles("Bus turnaround from read data to write data.")
    trtrs_cycles: int = _cycles("tRTRS: data-bus gap when consecutive bursts come from "
                                "different ranks.")
    trefi_ps: TimePs = Field(description="tREFI: average interval between all-bank refreshes of a "
                             "rank, in picoseconds (accepts '7.8us'); 0 disables refresh.")
    trfc_ps: TimePs = Field(description="tRFC: all-bank refresh duration, in picoseconds "
                            "(accepts '350ns').")
    # -- controller ------------------------------------------------------------------
    queue_depth: int = Field(32, ge=1, description="Request-queue entries per channel, one burst "
                             "each (a burst group takes one per burst, at most all of them); a "
                             "request that does not fit is held at BEGIN_REQ (backpressure).")
    address_mapping: str = Field("ro-ba-ra-co-ch-bg", description="Address bit fields MSB first: "
                                 "ch, ra, bg, ba, ro, co (column in bursts), e.g. "
                                 "'ro-ba-ra-co-ch-bg', 'rochrababgco' or 'RoBaRaCoCh'; 'co:2' "
                                 "splits a field. See npusim.hw.memory.dram_mapping.")
    starvation_limit: int = Field(64, ge=1, description="FR-FCFS: after being overtaken this many "
                                  "times the oldest request is served next (assumption: 64).")

    @model_validator(mode="after")
    def _check(self) -> "DramConfig":
        problems = []
        for name in ("channels", "ranks", "bank_groups", "banks_per_group", "rows",
                     "bus_width_bits", "burst_length"):
            if not is_power_of_two(getattr(self, name)):
                problems.append(f"{name} = {getattr(self, name)} must be a power of two "
                                "(the address mapping assigns whole bits)")
        if (self.bus_width_bits * self.burst_length) % 8:
            problems.append("bus_width_bits * burst_length must be a whole number of bytes")
        elif self.row_bytes % self.burst_bytes or not is_power_of_two(self.row_bytes // self.burst_bytes):
            problems.append(f"row_bytes = {self.row_bytes} must be a power-of-two multiple of "
                            f"the burst size ({self.burst_bytes} B)")
        problems += self._timing_problems()
        if problems:
            raise ValueError("; ".join(problems))
        # Parsing the mapping checks it against this organisation (clear ValueError).
        AddressMapping(self.address_mapping, self.mapping_sizes(), self.burst_bytes)
        return self

    def _timing_problems(self) -> list[str]:
        problems = []
        if self.trc_cycles < self.tras_cycles + self.trp_cycles:
            problems.append(f"trc_cycles ({self.trc_cycles}) < tras_cycles + trp_cycles "
                            f"({self.tras_cycles} + {self.trp_cycles}): a bank cannot re-open a "
                            "row before it was open for tRAS and precharged for tRP")
        if self.tras_cycles < self.trcd_cycles:
            problems.append(f"tras_cycles ({self.tras_cycles}) < trcd_cycles ({self.trcd_cycles})")
        if self.tccd_l_cycles < self.tccd_s_cycles:
            problems.append(f"tccd_l_cycles ({self.tccd_l_cycles}) < tccd_s_cycles ({self.tccd_s_cycles})")
        if self.trrd_l_cycles < self.trrd_s_cycles:
            problems.append(f"trrd_l_cycles ({self.trrd_l_cycles}) < trrd_s_cycles ({self.trrd_s_cycles})")
        if self.trefi_ps and self.trfc_ps >= self.trefi_ps:
            problems.append(f"trfc_ps ({self.trfc_ps}) must be < trefi_ps ({self.trefi_ps}): "
                            "the rank would never leave refresh")
        return problems

    # -- derived quantities ----------------------------------------------------------
    @property
    def burst_bytes(self) -> int:
        """Bytes moved by one burst on one channel."""
        return self.bus_width_bits * self.burst_length // 8

    @property
    def columns(self) -> int:
        """Bursts per row."""
        return self.row_bytes // self.burst_bytes

    @property
    def channel_peak_bandwidth_bps(self) -> int:
        """Peak data-bus bandwidth of one channel, bytes/s."""
        return self.burst_bytes * PS_PER_S // (self.tbl_cycles * self.tck_ps)

    @property
    def peak_bandwidth_bps(self) -> int:
        """Peak bandwidth of all channels together, bytes/s."""
        return self.channels * self.channel_peak_bandwidth_bps

    @property
    def capacity_bytes(self) -> int:
        return self.channels * self.ranks * self.bank_groups * self.banks_per_group * self.rows * self.row_bytes

    def mapping_sizes(self) -> dict[str, int]:
        return {"channels": self.channels, "ranks": self.ranks, "bank_groups": self.bank_groups,
                "banks_per_group": self.banks_per_group, "rows": self.rows, "columns": self.columns}


@dataclass(slots=True)
class DramHandle:
    """A transaction in flight (tlm): events for END_REQ and END_RESP.

    ``accepted`` succeeds at END_REQ; ``done`` at END_RESP with the transaction as value.
    """

    txn: MemoryTransaction
    done: DelayedEvent
    waiting_accept: int
    waiting_commit: int
    _accepted: Any = None
    _first_data: int = -1
    _end_data: int = -1

    @property
    def is_accepted(self) -> bool:
        return self.waiting_accept == 0

    @property
    def accepted(self) -> Any:
        """Event that succeeds at END_REQ (already succeeded if accepted at once)."""
        if self._accepted is None:
            self._accepted = self.done.env.event()
            if self.is_accepted:
                self._accepted.succeed(self.txn)
        return self._accepted


@register("memory", DramConfig)
class DramChannel(MemoryTarget):
    """DRAM channels with banks, row buffers, JEDEC timing, refresh and FR-FCFS queues.

    ``DramChannel(name, config)``; ``bind(env)`` before :meth:`transact`/:meth:`submit`
    (tlm); :meth:`access_time_ps` needs no environment (analytic).

    Statistics (``self.stats``): bytes_read/bytes_written/transactions per completed
    transaction; busy_ps is data-bus busy time averaged over channels; extra counters
    row_hits (bursts served from an open row), row_misses (ACTs to a closed bank),
    row_conflicts (ACTs that first had to close another row), activates, precharges,
    refreshes.
    """

    def __init__(self, name: str, config: DramConfig):
        super().__init__(name, config)
        self.timing = DramTiming.from_config(config)
        self.mapping = AddressMapping(config.address_mapping, config.mapping_sizes(), config.burst_bytes)
        self.burst_bytes = config.burst_bytes
        self.channels = config.channels
        #: Peak bandwidth of all channels together, bytes/s.
        self.peak_bandwidth_bps = config.peak_bandwidth_bps
        self.command_log: list[DramCommand] | None = None
        self._controllers: list[ChannelController] = []
        self._seq = 0
        self._bus_busy_ps = 0
        # Request templates, column plans and scheduling decisions depend only on the
        # config, so every channel part built from an equal config shares them (an NPU
        # has one per core, all alike).
        shared = _SHARED.get(config)
        if shared is None:
            if len(_SHARED) > 16:  # many configs in one process (sweeps, tests): start over
                _SHARED.clear()
            shared = _SHARED[config] = ({}, {}, {}, {}, {})
        self._layouts: dict[tuple, list[tuple]] = shared[0]
        self._plans: dict[tuple, ColumnPlan] = shared[1]
        self._decisions: dict[tuple, Any] = shared[2]
        # (size, chunk) -> closed-form sequential stream time (analytic mode): decoding a
        # whole block's bursts costs milliseconds and every LLM stage asks again.
        self._sequential: dict[tuple[int, int], float] = shared[3]
        self._transitions: dict[tuple, Any] = shared[4]

    # -- tlm -------------------------------------------------------------------------
    def bind(self, env: Any) -> None:
        """Attach to ``env`` with fresh bank state.  The channel controllers are built at
        the first submission: a chip binds every part for each segment it times, most
        segments touch a few cores' memory, and an untouched controller is all initial
        state (refresh catches up lazily), so building it later changes no timing."""
        super().bind(env)
        self._controllers = []

    def _build_controllers(self) -> list[ChannelController]:
        cfg = self.config
        self._controllers = [
            ChannelController(ch, self.timing, cfg.ranks, cfg.bank_groups, cfg.banks_per_group,
                              cfg.queue_depth, cfg.starvation_limit, self.stats)
            for ch in range(cfg.channels)]
        for controller in self._controllers:
            controller.command_log = self.command_log
            controller.decisions = self._decisions
            controller.transitions = self._transitions
            controller.bind(self.env)
        return self._controllers

    def reset_stats(self) -> None:
        super().reset_stats()
        self._bus_busy_ps = 0
        for controller in self._controllers:
            controller.stats = self.stats

    def enable_command_log(self) -> list[DramCommand]:
        """Record every command issued from now on (call after :meth:`bind`); returns the list."""
        self.command_log = []
        for controller in self._controllers:
            controller.command_log = self.command_log
        return self.command_log

    def submit(self, txn: MemoryTransaction) -> DramHandle:
        """BEGIN_REQ now: offer ``txn`` to its channels without waiting (tlm).

        Returns a :class:`DramHandle`; ``handle.accepted`` fires at END_REQ (delayed while
        a channel queue is full) and ``handle.done`` at END_RESP.  Lets an initiator keep
        many requests in flight, limited only by backpressure.
        """
        env = self.env
        if env is None:
            raise RuntimeError(f"{self.name}: bind(env) before submitting transactions")
        txn.begin_req_ps = env.now
        layout, row_base = self._layout(txn.addr, max(1, txn.size_bytes))
        handle = DramHandle(txn, DelayedEvent(env), len(layout), len(layout))
        on_accept = lambda now, h=handle: self._on_accept(h, now)  # noqa: E731
        on_commit = lambda first, end, h=handle: self._on_commit(h, first, end)  # noqa: E731
        controllers = self._controllers or self._build_controllers()
        for channel, channel_runs, run_plans, bursts, shape in layout:
            self._seq += 1
            controllers[channel].offer(ChannelRequest(
                channel_runs, run_plans, bursts, txn.is_write, self._seq, on_accept, on_commit,
                row_base=row_base, shape=shape))
        return handle

    def _layout(self, addr: int, size: int) -> tuple[list[tuple], int]:
        """Per channel ``(channel, runs, plans, bursts, shape)`` of a request, and the row
        its runs' rows are relative to.

        The bursts of a request share every address bit above the highest bit in which
        its first and last burst differ.  Those common bits decode to fixed offsets of
        every field, added to what the low bits decode to (the mapping ORs disjoint
        bits), so a request is a *template* (the low bits: where it starts inside an
        aligned block, and its size) shifted by them.  A sequential stream repeats a few
        templates at ever new rows, so the runs, column plans and a ``shape`` token (the
        controllers memoise their scheduling decisions by it, see
        :meth:`ChannelController._commit`) are built once per template and reused with a
        ``row_base`` that the controllers add to the template's rows.
        """
        shift = self.mapping.offset_bits
        first = addr >> shift
        last = (addr + size - 1) >> shift
        bits = (first ^ last).bit_length()
        high = first >> bits << bits
        hv = self.mapping._decode_burst(high)
        key = (first - high, last - high, hv[0], hv[1], hv[2], hv[3])
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = self._build_layout(
                (first - high) << shift, (last - first + 1) << shift, hv)
        return layout, hv[4]

    def _build_layout(self, addr: int, size: int, hv: list[int]) -> list[tuple]:
        """The template of :meth:`_layout`: the runs of the low address bits shifted by
        the high bits' channel, rank, bank group and bank (rows stay relative)."""
        d_ch, d_rank, d_bg, d_bank = hv[0], hv[1], hv[2], hv[3]
        layout = []
        for channel, channel_runs in runs(self.mapping, addr, size).items():
            moved, run_plans, bursts = [], [], 0
            for run in channel_runs:
                segs = tuple(Segment(s.channel + d_ch, s.rank + d_rank, s.bank_group + d_bg,
                                     s.bank + d_bank, s.row, s.bursts, s.first)
                             for s in run.segments)
                moved.append(BatchRun(channel + d_ch, segs, run.deltas, run.period))
                plan_key = tuple((s.rank, s.bank_group, s.bursts) for s in segs)
                plan = self._plans.get(plan_key)
                if plan is None:
                    plan = self._plans[plan_key] = column_plan(segs, self.timing)
                run_plans.append(plan)
                bursts += len(run.deltas) * sum(s.bursts for s in segs)
            layout.append((channel + d_ch, tuple(moved), tuple(run_plans), bursts,
                           next(_SHAPE_IDS)))
        return layout

    def transact(self, txn: MemoryTransaction) -> Generator[Any, Any, MemoryTransaction]:
        """SimPy process body: BEGIN_REQ -> END_REQ (waits while the queue is full) ->
        BEGIN_RESP -> END_RESP; returns ``txn`` with the four timestamps filled."""
        handle = self.submit(txn)
        if not handle.is_accepted:
            yield handle.accepted
        yield handle.done
        return txn

    def _split(self, addr: int, size: int) -> dict[int, list[Segment]]:
        by_channel: dict[int, list[Segment]] = {}
        for seg in self.mapping.segments(addr, size):
            by_channel.setdefault(seg.channel, []).append(seg)
        return by_channel

    def _on_accept(self, handle: DramHandle, now: int) -> None:
        handle.waiting_accept -= 1
        if handle.waiting_accept == 0:
            handle.txn.end_req_ps = now
            if handle._accepted is not None:
                handle._accepted.succeed(handle.txn)

    def _on_commit(self, handle: DramHandle, first_data: int, end_data: int) -> None:
        handle._first_data = first_data if handle._first_data < 0 else min(handle._first_data, first_data)
        handle._end_data = max(handle._end_data, end_data)
        handle.waiting_commit -= 1
        self._bus_busy_ps += end_data - first_data
        self.stats.busy_ps = self._bus_busy_ps // self.channels
        if handle.waiting_commit:
            return
        txn = handle.txn
        # A write is acknowledged once its data is on the bus; a read streams data back
        # from its first to its last burst (BEGIN_RESP never precedes END_REQ: a channel
        # may start its share before another channel has accepted its own).
        txn.begin_resp_ps = max(txn.end_req_ps, handle._end_data if txn.is_write else handle._first_data)
        txn.end_resp_ps = handle._end_data
        self.stats.transactions += 1
        if txn.is_write:
            self.stats.bytes_written += txn.size_bytes
        else:
            self.stats.bytes_read += txn.size_bytes
        handle.done.succeed_in(handle._end_data - self.env.now, txn)

    # -- analytic --------------------------------------------------------------------
    def access_time_ps(self, size_bytes: int, is_write: bool = False,
                       pattern: AccessPattern = SEQUENTIAL) -> int:
        """Closed-form, uncontended time to move ``size_bytes`` with ``pattern``.

        Sequential: tRCD + CL + (bytes / block) x column phase of one block, divided by
        the refresh efficiency, where a block is large enough to cover every channel.
        Random: tRP + tRCD + CL + chunks x max(column phase, ACTs x activation interval),
        averaged over channels, divided by the refresh efficiency.
        """
        if size_bytes <= 0:
            return 0
        t = self.timing
        latency = t.cwl if is_write else t.cl
        if pattern.kind == "sequential":
            stream = self._sequential_ps(size_bytes, pattern.chunk_bytes)
            first = t.trcd + latency
        else:
            chunk = max(1, min(pattern.chunk_bytes, size_bytes))
            stream = -(-size_bytes // chunk) * self._random_chunk_ps(chunk)
            first = t.trp + t.trcd + latency
        return first + round(stream / t.refresh_efficiency(is_write))

    def _channel_spans(self, addr: int, size: int) -> dict[int, tuple[int, int, int]]:
        """Per channel: (column-phase span, segments, bursts) of one request."""
        return {ch: (column_plan(segs, self.timing).span, len(segs), sum(s.bursts for s in segs))
                for ch, segs in self._split(addr, size).items()}

    def _sequential_ps(self, size: int, chunk: int) -> float:
        cached = self._sequential.get((size, chunk))
        if cached is None:
            cached = self._sequential[(size, chunk)] = self._sequential_uncached(size, chunk)
        return cached

    def _sequential_uncached(self, size: int, chunk: int) -> float:
        period = self.mapping.channel_interleave_bytes * self.channels if self.channels > 1 else 0
        block = 1 << (max(chunk, period, self.burst_bytes) - 1).bit_length()
        if size <= block:
            return max(span for span, _, _ in self._channel_spans(0, size).values())
        per_block = max(span for span, _, _ in self._channel_spans(0, block).values())
        return per_block * size / block

    def _random_chunk_ps(self, chunk: int) -> float:
        """Average channel time per random chunk.

        Each channel's share is bound by its column phase or by its activations (tRRD,
        tFAW per rank; tRC over all banks).  When one chunk fills a channel's queue the
        controller cannot reorder around a bank conflict, so a conflict with the banks
        the previous chunk used (probability: their share of all banks) costs the
        drain-precharge-activate bubble tRTP + tRP + tRCD.
        """
        t, cfg = self.timing, self.config
        banks = cfg.ranks * cfg.bank_groups * cfg.banks_per_group
        act_interval = max(max(t.trrd_s, t.tfaw / 4) / cfg.ranks, t.trc / banks)
        total = 0.0
        for span, acts, bursts in self._channel_spans(0, chunk).values():
            busy = max(span, acts * act_interval)
            if bursts >= cfg.queue_depth:
                busy += min(1.0, acts / banks) * (t.trtp + t.trp + t.trcd)
            total += busy
        return total / self.channels

    # -- helpers for users and tests -------------------------------------------------
    def decode(self, addr: int) -> DramCoord:
        """Channel, rank, bank group, bank, row and column of byte ``addr``."""
        return self.mapping.decode(addr)

    def encode(self, channel: int = 0, rank: int = 0, bank_group: int = 0, bank: int = 0,
               row: int = 0, column: int = 0) -> int:
        """Byte address of a burst (``column`` counts bursts)."""
        return self.mapping.encode(channel, rank, bank_group, bank, row, column)

    def column_plan(self, addr: int, size_bytes: int) -> dict[int, ColumnPlan]:
        """The closed-form column phase each channel would use for a request."""
        return {ch: column_plan(segs, self.timing) for ch, segs in self._split(addr, size_bytes).items()}
