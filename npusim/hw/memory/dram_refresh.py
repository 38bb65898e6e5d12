"""All-bank refresh of a DRAM channel's ranks (a mixin of :class:`ChannelController`).

Split from ``dram_controller.py`` so the controller's scheduling reads on its own: every
tREFI a rank drains, precharges and is blocked for tRFC; an idle rank catching up books
its missed refreshes at once.
"""

from __future__ import annotations

from npusim.hw.memory.dram_state import _NEVER, DramCommand, _RankState


class RefreshMixin:
    """Refresh bookkeeping; the host class provides ``t``, ``ranks``, ``rank_banks``,
    ``stats``, ``command_log``, ``index`` and ``_refreshed``."""

    def _refresh_until(self, now: int) -> None:
        t = self.t
        for rank, state in enumerate(self.ranks):
            if state.refresh_due > now:
                continue
            while state.refresh_due <= now:
                done = self._refresh(rank, state)
                due = state.refresh_due
                if due <= now and due + t.trp >= done and self.command_log is None:
                    # An idle rank catching up: every bank is closed and free before the
                    # next refresh's precharge time, so each remaining refresh begins at
                    # its due time + tRP (tREFI > tRFC keeps it so): book them at once.
                    count = (now - due) // t.trefi + 1
                    last = due + (count - 1) * t.trefi
                    done = last + t.trp + t.trfc
                    for bank in self.rank_banks[rank]:
                        bank.act_ok = done
                    state.refresh_due = last + t.trefi
                    self.stats.add("refreshes", count)
            # Every bank of the rank is now closed with its next ACT at the end of the
            # last refresh: all a later commit's key can tell of the refreshes.
            self._refreshed += ((rank, self.rank_banks[rank][0].act_ok),)

    def _refresh(self, rank: int, state: _RankState) -> int:
        """All-bank refresh of ``rank``: drain, precharge all, block for tRFC."""
        t = self.t
        banks = self.rank_banks[rank]
        precharge = state.refresh_due
        acts = _NEVER
        for bank in banks:  # every open bank precharges; ACT bounds hold the refresh off
            if bank.open_row >= 0:
                if bank.pre_ok > precharge:
                    precharge = bank.pre_ok
                bank.open_row = -1
            if bank.act_ok > acts:
                acts = bank.act_ok
        begin = precharge + t.trp
        if acts > begin:
            begin = acts
        done = begin + t.trfc
        for bank in banks:
            bank.act_ok = done
        state.refresh_due += t.trefi
        self.stats.add("refreshes")
        if self.command_log is not None:
            self.command_log.append(DramCommand(begin, "REF", self.index, rank, -1, -1, -1))
        return done
