"""DRAM timing in picoseconds, and the closed-form column phase of a burst group.

Everything here is derived once from a :class:`~npusim.hw.memory.dram.DramConfig` at
construction; the controller and the analytic model share these numbers so that both
fidelities see the same device.

A burst group (one transaction, or one channel's share of it) is a set of
:class:`~npusim.hw.memory.dram_mapping.Segment` s.  Its column commands are issued as
a real FR-FCFS controller would issue the single-burst requests it is made of: the
segments' bursts interleave on the data bus in address order, so

* the bus needs ``N * t_burst`` (``t_burst = max(tBL, tCCD_S)``) plus ``tRTRS`` for
  every change of rank,
* and each bank group needs ``tCCD_L`` between its own column commands,

and the phase lasts the larger of the two.  Segment ``k`` (in address order) issues its
first column ``k * t_burst`` after the phase starts and its last one near the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from npusim.hw.memory.dram_mapping import Segment

if TYPE_CHECKING:
    from npusim.hw.memory.dram import DramConfig


@dataclass(frozen=True, slots=True)
class DramTiming:
    """Timing parameters of one channel, in integer picoseconds."""

    tck: int
    cl: int
    cwl: int
    trcd: int
    trp: int
    tras: int
    trc: int
    tbl: int
    tccd_s: int
    tccd_l: int
    trrd_s: int
    trrd_l: int
    tfaw: int
    trtp: int
    twr: int
    twtr: int
    trtw: int
    trtrs: int
    trefi: int
    trfc: int

    @classmethod
    def from_config(cls, cfg: "DramConfig") -> "DramTiming":
        ck = cfg.tck_ps
        return cls(
            tck=ck, cl=cfg.cl_cycles * ck, cwl=cfg.cwl_cycles * ck, trcd=cfg.trcd_cycles * ck,
            trp=cfg.trp_cycles * ck, tras=cfg.tras_cycles * ck, trc=cfg.trc_cycles * ck,
            tbl=cfg.tbl_cycles * ck, tccd_s=cfg.tccd_s_cycles * ck, tccd_l=cfg.tccd_l_cycles * ck,
            trrd_s=cfg.trrd_s_cycles * ck, trrd_l=cfg.trrd_l_cycles * ck,
            tfaw=cfg.tfaw_cycles * ck, trtp=cfg.trtp_cycles * ck, twr=cfg.twr_cycles * ck,
            twtr=cfg.twtr_cycles * ck, trtw=cfg.trtw_cycles * ck, trtrs=cfg.trtrs_cycles * ck,
            trefi=cfg.trefi_ps, trfc=cfg.trfc_ps)

    @property
    def t_burst(self) -> int:
        """Data-bus time per burst when bursts alternate bank groups."""
        return max(self.tbl, self.tccd_s)

    @property
    def commit_lead(self) -> int:
        """How far ahead of the data bus the controller commits the next request.

        tRP + tFAW + tRCD: closing a row and opening up to four banks (as a burst group
        spread over the bank groups does; tFAW bounds how fast four ACTs can go) is the
        longest preparation a request needs, so committing that early hides its row
        misses behind the data of earlier requests.
        """
        return self.trp + max(self.tfaw, 3 * self.trrd_s) + self.trcd

    def write_recovery(self) -> int:
        """Last write column command to precharge of that bank (CWL + tBL + tWR)."""
        return self.cwl + self.tbl + self.twr

    def refresh_gap(self, is_write: bool = False) -> int:
        """Data-bus time lost to one all-bank refresh inside a stream.

        The rank drains (last column to precharge: tRTP, or write recovery), precharges
        (tRP), refreshes (tRFC) and re-opens a row (tRCD) before data flows again.
        """
        drain = self.write_recovery() if is_write else self.trtp
        return max(0, drain - self.t_burst) + self.trp + self.trfc + self.trcd

    def refresh_efficiency(self, is_write: bool = False) -> float:
        """Fraction of time a rank can move data between refreshes (1.0 without refresh)."""
        if not self.trefi:
            return 1.0
        return max(0.05, 1.0 - self.refresh_gap(is_write) / self.trefi)


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """Closed-form column phase of one channel's share of a burst group."""

    span: int  # first column command to the end of the phase (= data-bus occupancy)
    first_offsets: tuple[int, ...]  # per segment: first column command after phase start
    last_offsets: tuple[int, ...]  # per segment: last column command after phase start
    ranks: tuple[int, ...]  # ranks touched, in bus order


def column_plan(segments: Sequence[Segment], timing: DramTiming) -> ColumnPlan:
    """Interleaved column schedule of ``segments`` (see the module docstring)."""
    step = timing.t_burst
    if len(segments) == 1 and segments[0].bursts == 1:  # a single burst: nothing to interleave
        return ColumnPlan(step, (0,), (0,), (segments[0].rank,))
    per_group: dict[tuple[int, int], int] = {}
    ranks: list[int] = []
    for seg in segments:
        key = (seg.rank, seg.bank_group)
        per_group[key] = per_group.get(key, 0) + seg.bursts
        if seg.rank not in ranks:
            ranks.append(seg.rank)
    total = sum(seg.bursts for seg in segments)
    bus = total * step + (len(ranks) - 1) * timing.trtrs
    group = max((n - 1) * max(timing.tccd_l, step) + step for n in per_group.values())
    span = max(bus, group)
    count = len(segments)
    firsts = tuple(k * step for k in range(count))
    lasts = tuple(firsts[k] if seg.bursts == 1 else max(firsts[k], span - (count - k) * step)
                  for k, seg in enumerate(segments))
    return ColumnPlan(span, firsts, lasts, tuple(ranks))
