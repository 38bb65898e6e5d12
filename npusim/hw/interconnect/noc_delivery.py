"""Completion of one NoC transfer (:meth:`MeshNoc.start_transfer`): its packets count
down as they are delivered, and its event succeeds at the last delivery.

Split from ``noc.py`` so the network's configuration and API read on their own.
"""

from __future__ import annotations

from typing import Any

from simpy.events import NORMAL


class _Delivery:
    """The packets of one :meth:`MeshNoc.start_transfer` still on their way: succeeds
    ``event`` at the last delivery once every packet's delivery time is known."""

    __slots__ = ("left", "last", "start", "event", "stats", "size", "uncontended", "busy")

    def __init__(self, packets: int, start: int, event: Any, stats: Any, size: int,
                 uncontended: int, busy: int):
        self.left = packets
        self.last = start
        self.start = start
        self.event = event
        self.stats = stats
        self.size = size
        self.uncontended = uncontended
        self.busy = busy

    def __call__(self, done_ps: int) -> None:
        self.arrive(done_ps, 1)

    def arrive(self, done_ps: int, count: int) -> None:
        """``count`` packets delivered, the last of them at ``done_ps``."""
        self.left -= count
        if done_ps > self.last:
            self.last = done_ps
        if self.left == 0:
            # Succeed at the last delivery, not now: one event instead of a wake-up
            # now plus a timeout (what Event.succeed() sets, scheduled later).
            event = self.event
            env = event.env
            event._ok = True
            event._value = None
            env.schedule(event, NORMAL, self.last - env._now)
            # Counted as the analytic level counts a network stage
            # (Device.account_transfer): busy time is the link time averaged over the
            # links (MeshNoc.busy_share_ps); the time beyond the uncontended time, up to
            # the last delivery, is reported apart as wait_ps.
            stats = self.stats
            stats.transactions += 1
            stats.bytes_read += self.size
            stats.busy_ps += self.busy
            stats.add("wait_ps", self.last - self.start - self.uncontended)
