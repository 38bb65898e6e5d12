"""One DRAM channel's controller for the tlm fidelity: bounded queue, FR-FCFS, bank state.

How it schedules (DRAMSys/DRAMsim3-like behaviour at request granularity):

* Requests wait in a queue of ``queue_depth`` entries of one burst each, as in a
  controller whose queue holds cache-line requests: a burst group takes one entry per
  burst, and a group larger than the whole queue takes all of it.  A request that does
  not fit waits at BEGIN_REQ (backpressure, first come first accepted) until entries
  free; entries free when the request is committed to the command schedule.
* The controller commits one request at a time.  It wakes only when the data bus is
  booked less than ``tRP + tFAW + tRCD`` ahead (the latest moment the row switches of a
  burst group can still be hidden, see ``DramTiming.commit_lead``), or when a request
  arrives at an idle channel: never per cycle.
* Committing means computing, from the bank, bank-group, rank and bus state, the
  earliest legal time of every command the request needs (PRE, ACT, then the column
  commands of its bursts as one closed-form phase, see :mod:`dram_timing`) and booking
  them.  Commands may lie in the future; the state keeps "earliest next" times.
* FR-FCFS: the request whose first data can start earliest wins, the oldest on ties.
  A row hit is naturally ready first, so hits overtake older misses; a request that has
  been overtaken ``starvation_limit`` times is served next regardless.
* Open-page policy: a row stays open until a request needs another row of that bank or
  a refresh closes it.
* All-bank refresh per rank every tREFI (ranks staggered, channels in step), applied when a
  decision passes its due time: the rank drains, precharges and is blocked for tRFC.

Simplifications: one command per cycle on the command bus is not enforced; ACTs of a
rank are issued in commit order; the data bus is used in commit order (no back-filling).
"""

from __future__ import annotations

from collections import deque
from heapq import heappush
from typing import Any

import simpy
from simpy.events import NORMAL

from npusim.hw.base import UnitStats
from npusim.hw.memory.dram_commit_memo import CommitMemo
from npusim.hw.memory.dram_mapping import Segment
from npusim.hw.memory.dram_refresh import RefreshMixin
from npusim.hw.memory.dram_state import (_INF, _NEVER, BankState, ChannelRequest, DelayedEvent,
                                         DramCommand, _RankState)
from npusim.hw.memory.dram_timing import DramTiming

__all__ = ["ChannelController", "ChannelRequest", "DelayedEvent", "DramCommand", "BankState"]

_new_event = object.__new__


class _Wake:
    """A controller wake-up (what the event loops read of a triggered Event)."""

    __slots__ = ("callbacks",)
    _ok = True
    _value = None


class ChannelController(CommitMemo, RefreshMixin):
    """Scheduler and state of one channel (see the module docstring)."""

    def __init__(self, index: int, timing: DramTiming, ranks: int, bank_groups: int,
                 banks_per_group: int, queue_depth: int, starvation_limit: int,
                 stats: UnitStats):
        self.index = index
        self.t = timing
        self.bank_groups = bank_groups
        self.banks_per_group = banks_per_group
        self.queue_depth = queue_depth
        self.starvation_limit = starvation_limit
        self.stats = stats
        self.banks = [BankState() for _ in range(ranks * bank_groups * banks_per_group)]
        per_rank = bank_groups * banks_per_group
        #: The banks of each rank (refresh works rank by rank).
        self.rank_banks = [self.banks[r * per_rank:(r + 1) * per_rank] for r in range(ranks)]
        self.ranks = [_RankState() for _ in range(ranks)]
        self.bg_last_act = [_NEVER] * (ranks * bank_groups)
        self.bg_col_ok = [0] * (ranks * bank_groups)
        if timing.trefi:
            for rank, state in enumerate(self.ranks):
                # Ranks of a channel refresh staggered (one rank can serve while another
                # refreshes); channels run identical timers, as DRAMsim3's per-channel
                # controllers do, so a request striped over all channels meets one stall
                # per tREFI rather than one per channel.
                state.refresh_due = timing.trefi * (rank + 1) // ranks
        self.bus_free = 0  # end of the last booked data transfer
        self.bus_rank = -1
        self.bus_write = False
        self.horizon = 0  # end of the last booked column phase
        self.queue: list[ChannelRequest] = []
        self.occupied = 0  # queue entries (bursts) in use
        self.blocked: deque[ChannelRequest] = deque()
        self.command_log: list[DramCommand] | None = None
        self.env: simpy.Environment | None = None
        self._idle = True  # no request queued: the next admitted one wakes the loop
        self._on_wake = self._wake  # bound once: one wake event per controller decision round
        self._lead = timing.commit_lead
        #: Memo of commit decisions (see :meth:`_commit`), shared by every controller of
        #: an equal config; None disables it.
        self.decisions: dict[tuple, Any] | None = None
        #: Memo of key-to-key transitions (see :meth:`_commit`), shared like ``decisions``.
        self.transitions: dict[tuple, Any] = {}
        self._prev: tuple | None = None  # (memo entry, time, row base) of the last commit
        self._refreshed: tuple = ()  # (rank, end of its last refresh) since the last commit
        # A time more than this before ``now`` constrains nothing a commit computes: every
        # constraint adds at most one timing parameter to a past command's time and is
        # compared with a time at or after ``now``.
        self._past = 2 * sum(getattr(timing, name) for name in timing.__slots__
                             if name != "trefi") + 1

    def flat_bank(self, seg: Segment) -> int:
        return (seg.rank * self.bank_groups + seg.bank_group) * self.banks_per_group + seg.bank

    # -- queue and process -------------------------------------------------------------
    def bind(self, env: simpy.Environment) -> None:
        self.env = env
        self._idle = True

    def offer(self, req: ChannelRequest) -> None:
        """BEGIN_REQ: enqueue ``req`` now, or hold it until entries free (backpressure)."""
        req.entries = min(req.bursts, self.queue_depth)
        if len(req.runs) == 1 and len(req.runs[0].segments) == 1 and len(req.runs[0].deltas) == 1:
            seg = req.runs[0].segments[0]
            req.fast = (self.flat_bank(seg), seg.row + req.row_base, seg.rank, seg.rank * self.bank_groups + seg.bank_group)
        if not self.blocked and self.occupied + req.entries <= self.queue_depth:
            self._admit(req, self.env.now)
            if self._idle:
                self._idle = False
                self._wake_in(0)
        else:
            self.blocked.append(req)

    def _admit(self, req: ChannelRequest, now: int) -> None:
        self.queue.append(req)
        self.occupied += req.entries
        req.on_accept(now)

    def _wake_in(self, delay: int) -> None:
        """Run :meth:`_wake` ``delay`` ps from now: what ``env.timeout(delay)`` (or an
        idle event's ``succeed()``, for 0) schedules, as a small slotted event pushed on
        the queue directly (same priority, same place in the queue)."""
        env = self.env
        wake = _new_event(_Wake)
        wake.callbacks = [self._on_wake]
        heappush(env._queue, (env._now + delay, NORMAL, next(env._eid), wake))  # type: ignore[union-attr]

    def _wake(self, _event: Any) -> None:
        """The controller's loop, driven by callbacks rather than a SimPy process (the
        same events in the same order as the process it replaces): decide while the
        bus is booked less than ``commit_lead`` ahead, else wake again when it is; idle
        once the queue is empty, until :meth:`offer` admits a request."""
        now = self.env._now  # type: ignore[union-attr]
        lead = self._lead
        queue = self.queue
        while queue:
            wait = self.horizon - lead - now
            if wait > 0:
                self._wake_in(wait)
                return
            self._decide(now)
        self._idle = True

    def _decide(self, now: int) -> None:
        for state in self.ranks:
            if state.refresh_due <= now:
                self._refresh_until(now)
                break
        queue = self.queue
        if len(queue) == 1:  # nothing to choose from (what _select returns)
            req = queue.pop()
        else:
            req = self._select(now)
            queue.remove(req)
        self.occupied -= req.entries
        first_data, end = self._commit(req, now)
        req.on_commit(first_data, end)
        while self.blocked and self.occupied + self.blocked[0].entries <= self.queue_depth:
            self._admit(self.blocked.popleft(), now)

    def _select(self, now: int) -> ChannelRequest:
        """FR-FCFS: earliest possible data first, oldest on ties, starvation-capped.

        Single-segment requests (the common 64 B case) are evaluated inline with the
        rank- and bus-level bounds computed once per decision; the scan stops early once
        a request reaches the lowest bound, since nothing later can beat it.
        """
        queue = self.queue
        oldest = queue[0]
        if len(queue) == 1 or oldest.bypassed >= self.starvation_limit:
            return oldest
        t = self.t
        trp, trcd, trrd_l = t.trp, t.trcd, t.trrd_l
        floors = [self._column_floor(rank, write, now)
                  for rank in range(len(self.ranks)) for write in (False, True)]
        act_floors = [self._rank_act_floor(rank) for rank in range(len(self.ranks))]
        lowest = min(floors)
        banks, bg_last_act, bg_col_ok = self.banks, self.bg_last_act, self.bg_col_ok
        best, best_start = oldest, _INF
        for req in queue:
            fast = req.fast
            if fast is None:
                start = self._plan(req, now)
            else:
                flat, row, rank, group = fast
                bank = banks[flat]
                if bank.open_row == row:
                    ready = bank.col_ok
                else:
                    if bank.open_row < 0:
                        act = now
                    else:
                        act = (bank.pre_ok if bank.pre_ok > now else now) + trp
                    act = max(act, bank.act_ok, act_floors[rank], bg_last_act[group] + trrd_l)
                    ready = act + trcd
                if bg_col_ok[group] > ready:
                    ready = bg_col_ok[group]
                floor = floors[2 * rank + req.is_write]
                start = ready if ready > floor else floor
            if start < best_start:
                best, best_start = req, start
                if start <= lowest:
                    break
        if best is not oldest:
            oldest.bypassed += 1
        return best

    # -- timing ----------------------------------------------------------------------
    def _column_floor(self, rank: int, is_write: bool, now: int) -> int:
        """Earliest first column command of a request starting in ``rank``, from the
        data bus (in-order use, rank switch, read/write turnaround) and tCCD_S/tWTR."""
        t = self.t
        state = self.ranks[rank]
        gap = t.trtrs if self.bus_rank >= 0 and rank != self.bus_rank else 0
        if is_write:
            if not self.bus_write and self.bus_rank >= 0:
                gap = max(gap, t.trtw)
            return max(now, self.bus_free + gap - t.cwl, state.col_ok)
        return max(now, state.wtr_ok, self.bus_free + gap - t.cl, state.col_ok)

    def _rank_act_floor(self, rank: int) -> int:
        """Earliest ACT in ``rank`` from tRRD_S and tFAW (committed ACTs only)."""
        state = self.ranks[rank]
        earliest = state.last_act + self.t.trrd_s
        if len(state.faw) == 4:
            earliest = max(earliest, state.faw[0] + self.t.tfaw)
        return earliest

    def _act_ok(self, rank: int, bg: int, pending: list[tuple[int, int, int]]) -> int:
        """Earliest ACT in (rank, bg) given tRRD_S/L and tFAW, counting ACTs planned
        earlier in the same batch (``pending``: (rank, bg, time))."""
        t = self.t
        state = self.ranks[rank]
        earliest = max(state.last_act + t.trrd_s, self.bg_last_act[rank * self.bank_groups + bg] + t.trrd_l)
        window = list(state.faw)
        for p_rank, p_bg, p_time in pending:
            if p_rank == rank:
                earliest = max(earliest, p_time + (t.trrd_l if p_bg == bg else t.trrd_s))
                window.append(p_time)
        if len(window) >= 4:
            earliest = max(earliest, window[-4] + t.tfaw)
        return earliest

    def _plan(self, req: ChannelRequest, now: int) -> int:
        """Earliest column-phase start of ``req``'s first batch, without changing any
        state (FR-FCFS ranks requests by when their data can start)."""
        t = self.t
        run, plan = req.runs[0], req.plans[0]
        segs = run.segments
        start = self._column_floor(segs[0].rank, req.is_write, now)
        pending: list[tuple[int, int, int]] = []
        for k, seg in enumerate(segs):
            bank = self.banks[self.flat_bank(seg)]
            if bank.open_row == seg.row + req.row_base:
                ready = bank.col_ok
            else:
                act = max(now, bank.pre_ok) + t.trp if bank.open_row >= 0 else now
                act = max(act, bank.act_ok, self._act_ok(seg.rank, seg.bank_group, pending))
                pending.append((seg.rank, seg.bank_group, act))
                ready = act + t.trcd
            ready = max(ready, self.bg_col_ok[seg.rank * self.bank_groups + seg.bank_group])
            start = max(start, ready - plan.first_offsets[k])
        return start

    def _commit_batches(self, req: ChannelRequest, now: int) -> tuple[int, int]:
        """Book ``req``'s commands batch by batch; return (first data, last data time).

        Each batch (the segments that interleave on the bus, see
        :class:`~npusim.hw.memory.dram_mapping.BatchRun`) activates its rows as early as
        bank (tRP after the row's last column + tRTP/write recovery, tRC), bank-group
        (tRRD_L) and rank (tRRD_S, tFAW, in order) state allows, then issues its
        closed-form column phase once every row is ready and the previous batch has left
        the bus.  Periodic runs (a sequential stream walking the banks, then the next
        rows) are extrapolated once one bank-reuse period repeats the previous one
        exactly (see :meth:`_skip`).
        """
        t = self.t
        is_write = req.is_write
        trp, trcd, trc, tras = t.trp, t.trcd, t.trc, t.tras
        trrd_s, trrd_l, tfaw = t.trrd_s, t.trrd_l, t.tfaw
        recovery = t.write_recovery() if is_write else t.trtp
        col_gap = max(t.tccd_l, t.t_burst)
        banks, bg_last_act, bg_col_ok, ranks = self.banks, self.bg_last_act, self.bg_col_ok, self.ranks
        n_groups, n_banks = self.bank_groups, self.banks_per_group
        log = self.command_log
        row_base = req.row_base
        first_rank = req.runs[0].segments[0].rank
        floor = self._column_floor(first_rank, is_write, now)
        bus_rank = first_rank
        first_start = -1
        counts = [0, 0, 0, 0]  # activates, precharges (= conflicts), misses, hit bursts
        touched_ranks: set[int] = set()
        for run, plan in zip(req.runs, req.plans):
            template = [(seg, (seg.rank * n_groups + seg.bank_group) * n_banks + seg.bank,
                         seg.rank * n_groups + seg.bank_group) for seg in run.segments]
            firsts, lasts, span = plan.first_offsets, plan.last_offsets, plan.span
            period = run.period if log is None else 0
            history: list[tuple] = []
            deltas = run.deltas
            count = len(deltas)
            b = 0
            while b < count:
                d_rank, d_bg, d_bank, d_row = deltas[b]
                d_group = d_rank * n_groups + d_bg
                d_flat = d_group * n_banks + d_bank
                for rank in plan.ranks:
                    touched_ranks.add(rank + d_rank)
                if template[0][0].rank + d_rank != bus_rank:
                    floor += t.trtrs
                start = floor
                booked = []
                sig = []
                for k, (seg, flat, group) in enumerate(template):
                    flat += d_flat
                    group += d_group
                    row = seg.row + d_row + row_base
                    bank = banks[flat]
                    if bank.open_row == row:
                        ready = bank.col_ok
                        activated = 0
                    else:
                        state = ranks[seg.rank + d_rank]
                        if bank.open_row >= 0:
                            pre = bank.pre_ok if bank.pre_ok > now else now
                            act = pre + trp
                            counts[1] += 1
                            if log is not None:
                                log.append(DramCommand(pre, "PRE", self.index, seg.rank + d_rank,
                                                       seg.bank_group + d_bg, seg.bank + d_bank, bank.open_row))
                        else:
                            pre = -1
                            act = now
                            counts[2] += 1
                        act = max(act, bank.act_ok, state.last_act + trrd_s, bg_last_act[group] + trrd_l)
                        faw = state.faw
                        if len(faw) == 4 and faw[0] + tfaw > act:
                            act = faw[0] + tfaw
                        bank.open_row = row
                        bank.col_ok = ready = act + trcd
                        bank.act_ok = act + trc
                        bank.pre_ok = act + tras
                        state.last_act = act
                        faw.append(act)
                        bg_last_act[group] = act
                        counts[0] += 1
                        activated = 1
                        sig.append(act)
                        sig.append(pre)
                        if log is not None:
                            log.append(DramCommand(act, "ACT", self.index, seg.rank + d_rank,
                                                   seg.bank_group + d_bg, seg.bank + d_bank, row))
                    if bg_col_ok[group] > ready:
                        ready = bg_col_ok[group]
                    ready -= firsts[k]
                    if ready > start:
                        start = ready
                    booked.append((bank, group, flat, seg.bursts - activated))
                for k, (bank, group, _, hits) in enumerate(booked):
                    last = start + lasts[k]
                    if last + recovery > bank.pre_ok:
                        bank.pre_ok = last + recovery
                    if last + col_gap > bg_col_ok[group]:
                        bg_col_ok[group] = last + col_gap
                    counts[3] += hits
                if log is not None:
                    for k, (seg, _, _) in enumerate(template):
                        log.append(DramCommand(start + firsts[k], "WR" if is_write else "RD", self.index,
                                               seg.rank + d_rank, seg.bank_group + d_bg, seg.bank + d_bank,
                                               seg.row + d_row + row_base, seg.bursts))
                if first_start < 0:
                    first_start = start
                bus_rank = run.segments[-1].rank + d_rank
                b += 1
                if period:
                    history.append((start - floor, [v - start for v in sig], start, tuple(counts),
                                    booked, plan.ranks, d_rank))
                floor = start + span
                if period and b % period == 0 and b >= 2 * period and count - b >= 2 * period:
                    skipped = self._skip(history, period, (count - b) // period - 1)
                    if skipped:
                        shift, batches, add = skipped
                        floor += shift
                        b += batches
                        counts = [c + a for c, a in zip(counts, add)]
                        history.clear()
        stats = self.stats
        stats.add("activates", counts[0])
        if counts[1]:
            stats.add("precharges", counts[1])
            stats.add("row_conflicts", counts[1])
        if counts[2]:
            stats.add("row_misses", counts[2])
        if counts[3]:
            stats.add("row_hits", counts[3])
        latency = t.cwl if is_write else t.cl
        first_data = first_start + latency
        end = floor + latency
        for rank in touched_ranks:
            self.ranks[rank].col_ok = floor - t.t_burst + t.tccd_s
            if is_write:
                self.ranks[rank].wtr_ok = end + t.twtr
        self.bus_free, self.bus_rank, self.bus_write = end, bus_rank, is_write
        self.horizon = floor
        return first_data, end

    def _skip(self, history: list[tuple], period: int, periods: int) -> tuple[int, int, list[int]] | None:
        """Extrapolate ``periods`` bank-reuse periods of a periodic run in closed form.

        ``history`` holds one entry per batch planned so far: (wait for the bus, ACT/PRE
        offsets from the batch start, start, running counts, booked (bank, group, flat,
        hits), ranks of the run's plan, rank delta).
        If the last period repeats the one before it exactly (same waits, same command
        offsets), every later period does too: a batch depends only on the batch before
        it (bus, tRRD, tCCD_L), on the batch one period back (the same banks: tRP after
        their last column, tRC) and on the last four ACTs (tFAW), which lie within one
        period when it has at least four ACTs.  The skipped periods then shift all state
        they touch by ``periods`` x the period time.  Returns (time shift, batches
        skipped, counter increments), or None if not yet periodic.
        """
        last, before = history[-period:], history[-2 * period:-period]
        if any(a[:2] != b[:2] for a, b in zip(last, before)):
            return None
        if last[-1][3][0] - before[-1][3][0] < 4:
            return None
        shift = periods * (last[-1][2] - before[-1][2])
        add = [periods * (x - y) for x, y in zip(last[-1][3], before[-1][3])]
        for entry in last:
            for bank, _, _, _ in entry[4]:
                bank.act_ok += shift
                bank.pre_ok += shift
                bank.col_ok += shift
        for group in {x[1] for entry in last for x in entry[4]}:
            self.bg_last_act[group] += shift
            self.bg_col_ok[group] += shift
        for rank in {r + entry[6] for entry in last for r in entry[5]}:
            state = self.ranks[rank]
            state.last_act += shift
            moved = [x + shift for x in state.faw]
            state.faw.clear()
            state.faw.extend(moved)
        return shift, periods * period, add

    def _log(self, time: int, command: str, seg: Segment, row: int) -> None:
        if self.command_log is not None:
            self.command_log.append(DramCommand(time, command, self.index, seg.rank,
                                                seg.bank_group, seg.bank, row))
