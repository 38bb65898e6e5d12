"""State records of the tlm DRAM controller: commands, bank and rank state, queued
requests, and the delayed event a transaction completes on.

Split from ``dram_controller.py`` (which re-exports these names) so the controller's
scheduling reads on its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import simpy
from simpy.events import NORMAL

from npusim.hw.memory.dram_mapping import BatchRun
from npusim.hw.memory.dram_timing import ColumnPlan

_NEVER = -(1 << 62)  # "long ago": no constraint from a command that never happened
_INF = 1 << 62


class DramCommand(NamedTuple):
    """One DRAM command, as recorded in :attr:`DramChannel.command_log` (for tests/debug)."""

    time_ps: int
    command: str  # ACT, PRE, RD, WR (one entry per segment: its first column), REF
    channel: int
    rank: int
    bank_group: int
    bank: int
    row: int
    bursts: int = 0


class DelayedEvent(simpy.Event):
    """An event that succeeds at a known future time without a helper process."""

    def succeed_in(self, delay: int, value: Any = None) -> None:
        # Same fields simpy.Timeout sets; lets one pre-made event be fired later.
        self._ok = True
        self._value = value
        self.env.schedule(self, NORMAL, delay)


@dataclass(slots=True)
class BankState:
    """Open row and earliest legal command times of one bank."""

    open_row: int = -1
    act_ok: int = 0  # next ACT (tRC after ACT, tRP after PRE, end of refresh)
    pre_ok: int = 0  # next PRE (tRAS after ACT, tRTP / write recovery after columns)
    col_ok: int = 0  # next column command (tRCD after ACT)


@dataclass(slots=True)
class ChannelRequest:
    """One channel's share of a transaction, as it waits in that channel's queue."""

    runs: tuple[BatchRun, ...]
    plans: tuple[ColumnPlan, ...]  # column phase of one batch of each run
    bursts: int
    is_write: bool
    seq: int
    on_accept: Callable[[int], None]
    on_commit: Callable[[int, int], None]
    entries: int = 1
    bypassed: int = 0
    fast: tuple[int, int, int, int] | None = None  # single segment: (bank, row, rank, group)
    row_base: int = 0  # added to every row of ``runs`` (requests share templates, see DramChannel)
    shape: Any = None  # hashable id of (runs, plans) up to ``row_base``; None: not memoised


@dataclass(slots=True)
class _RankState:
    last_act: int = _NEVER
    faw: deque = field(default_factory=lambda: deque(maxlen=4))
    col_ok: int = 0  # tCCD_S after the rank's last column command
    wtr_ok: int = 0  # reads wait tWTR after the rank's last write data
    refresh_due: int = _INF
