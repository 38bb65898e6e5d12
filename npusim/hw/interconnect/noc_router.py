"""Run state of the NoC: channels with virtual channels and credits, input-queued
routers with a separable switch allocator, and packets moving as flit trains.

This module is the event-driven core behind :class:`~npusim.hw.interconnect.noc.MeshNoc`
(see ``docs/noc.md`` for the model and its validation).  Everything is a whole number
of picoseconds; nothing here loops over cycles or over idle routers:

* a :class:`Router` runs an **allocation round** only at times when one of its waiting
  packets could make progress (its head becomes ready, a link or crossbar input frees,
  a credit or an output VC comes back); every blocked request either knows the next
  time worth trying or is woken by whoever unblocks it;
* a packet's flits move as one **train**: once granted, a channel is busy for
  ``flits`` cycles, so a packet costs about one event per router it crosses whatever
  its length.

Router micro-architecture (input-queued, Dally & Towles ch. 16-19; BookSim's ``iq``):

* every input port has ``nvc`` virtual channels, each a FIFO buffer of ``cap`` flits;
  only the packet at the front of a VC may request an output (head-of-line blocking
  inside a VC, none across VCs);
* **VC allocation**: a head takes any free VC of its output channel (round robin), and
  keeps it while it waits for the switch; a VC is free again once the tail of its
  holder has been sent (BookSim's ``wait_for_tail_credit = 0``);
* **credit-based flow control**: a packet may start on a VC only if the downstream
  buffer will have room for ``min(flits, cap)`` of its flits as they arrive, counting
  slots that free up as earlier packets leave (a slot's credit reaches the sender
  ``credit_ps`` after its flit left);
* **switch allocation**: separable, input first, one iteration: each input port picks
  one of its eligible VCs (round robin), then each output picks one of the input ports
  that chose it (round robin).  An input port whose pick loses cannot send another VC
  that would have won a free output: the allocator's matching inefficiency;
* **wormhole locking** for packets longer than a buffer: the tail leaves a channel only
  when the flits ahead of it fit into the buffers the head has reached, so a blocked
  long packet keeps its upstream VCs (not the physical links) until it moves on.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from heapq import heappush

from simpy.events import NORMAL

from npusim.hw.interconnect.noc_channels import INF, TRAIN_PACKETS, Channel, Packet, next_request
from npusim.hw.interconnect.noc_single import allocate_single

if TYPE_CHECKING:
    from npusim.hw.interconnect.noc import MeshNoc

__all__ = ["INF", "TRAIN_PACKETS", "Channel", "Packet", "Router"]

_new_event = object.__new__


class _Wake:
    """A router's wake-up event: what the event loops read of a triggered
    :class:`simpy.events.Event` (``callbacks``, ``_ok``, ``_value``), without its dict."""

    __slots__ = ("callbacks", "_value")
    _ok = True

@lru_cache(maxsize=None)
def _port_orders(n: int) -> tuple[tuple[int, ...], ...]:
    """Port visiting order per round-robin start for ``n`` ports (immutable, so built
    once per ``n`` and shared: a 64-core mesh rebuilds its routers at every tlm run)."""
    return tuple(tuple((s + i) % n for i in range(n)) for s in range(n))


class Router:
    """An input-queued VC router (or a node's network interface, whose only input is
    the unbounded source queue).  State lives here; timing constants on the network."""

    __slots__ = ("net", "inputs", "in_rr", "xbar_free", "wakes", "port_rr", "orders",
                 "single", "_on_wake")

    def __init__(self, net: "MeshNoc"):
        self.net = net
        self.inputs: list[Channel] = []
        self.in_rr: list[int] = []
        self.xbar_free: list[int] = []  # crossbar input: one flit per cycle per port
        self.wakes: set[int] = set()
        self.port_rr = 0
        self.orders: tuple[tuple[int, ...], ...] = ()  # port visiting order per port_rr
        self.single = False
        self._on_wake = self._wake  # bound once: one wake event per allocation round
        self.reset()

    def reset(self) -> None:
        """Idle, as constructed, with its inputs kept (see :meth:`Channel.reset`)."""
        n = len(self.inputs)
        self.in_rr = [0] * n
        self.xbar_free = [0] * n
        self.wakes = set()
        self.port_rr = 0
        #: Every channel has one VC: allocation rounds take the shorter path of
        #: ``noc_single.allocate_single`` (same decisions as :meth:`allocate`).
        self.single = self.net.config.virtual_channels == 1 and self.net.single_vc_fast_path

    def add_input(self, channel: Channel) -> None:
        channel.receiver = self
        channel.port = len(self.inputs)
        self.inputs.append(channel)
        self.in_rr.append(0)
        self.xbar_free.append(0)
        self.orders = _port_orders(len(self.inputs))

    def poke(self, when: int) -> None:
        """Run an allocation round at ``when`` (ps, not in the past); deduplicated."""
        wakes = self.wakes
        if when in wakes:
            return
        wakes.add(when)
        env = self.net.env
        # What ``env.timeout(when - now, when)`` plus a callback schedules (same priority,
        # same place in the queue: ``env.schedule`` inlined), as a small slotted event:
        # routers wake millions of times in an LLM run.
        wake = _new_event(_Wake)
        wake.callbacks = [self._on_wake]
        wake._value = when
        heappush(env._queue, (when, NORMAL, next(env._eid), wake))

    def _wake(self, event: Any) -> None:
        when = event._value
        self.wakes.discard(when)
        if self.single:
            allocate_single(self, when)
        else:
            self.allocate(when)

    # -- one allocation round --------------------------------------------------------
    def allocate(self, t: int) -> None:
        period = self.net.period_ps
        nxt = INF
        inputs = self.inputs
        nports = len(inputs)
        # Input stage (with VC allocation on the way): one candidate per input port.
        chosen_all: list[tuple[int, int, Packet]] = []
        start_port = self.port_rr
        self.port_rr = (start_port + 1) % nports  # rotate who allocates VCs first
        xbar_free = self.xbar_free
        earliest = self._earliest
        for p in self.orders[start_port]:
            ch_in = inputs[p]
            if not ch_in.queued:
                continue
            nvc = ch_in.nvc
            # The default router has one VC, so one candidate at most: the general loop
            # below, unrolled for that case on purpose (allocate() is the hottest
            # function of a tlm run; keep the two in step).
            if nvc == 1:
                queue = ch_in.waiting[0]
                if not queue:
                    continue
                front_free = ch_in.front_free[0]
                if front_free < 0:
                    continue  # the previous packet's tail is stuck; its release wakes us
                packet = queue[0]
                ready = packet.ready if packet.ready > front_free else front_free
                if ready > t:
                    if ready < nxt:
                        nxt = ready
                    continue
                when = earliest(packet, t, xbar_free[p])
                if when > t:
                    if when < nxt:
                        nxt = when
                    continue
                chosen = (p, 0, packet)
            else:
                xfree = xbar_free[p]
                first = self.in_rr[p]
                chosen = None
                for k in range(nvc):
                    v = (first + k) % nvc
                    queue = ch_in.waiting[v]
                    if not queue:
                        continue
                    front_free = ch_in.front_free[v]
                    if front_free < 0:
                        continue  # the previous packet's tail is stuck; its release wakes us
                    packet = queue[0]
                    ready = packet.ready if packet.ready > front_free else front_free
                    if ready > t:
                        if ready < nxt:
                            nxt = ready
                        continue
                    when = earliest(packet, t, xfree)
                    if when > t:
                        if when < nxt:
                            nxt = when
                    elif chosen is None:
                        chosen = (p, v, packet)
                    elif t + period < nxt:
                        nxt = t + period  # eligible but not this port's pick: next cycle
                if chosen is None:
                    continue
            chosen_all.append(chosen)
        if not chosen_all:
            if nxt < INF:
                self.poke(nxt)
            return
        if len(chosen_all) == 1:  # the usual case: one request, for one output
            packet = chosen_all[0][2]
            groups: Any = ((packet.path[packet.j], chosen_all),)
        else:
            picks: dict[Channel, list[tuple[int, int, Packet]]] = {}
            for chosen in chosen_all:
                out = chosen[2].path[chosen[2].j]
                if out in picks:
                    picks[out].append(chosen)
                else:
                    picks[out] = [chosen]
            groups = picks.items()
        # Output stage: each output grants one of the ports that picked it.
        for out, requests in groups:
            if len(requests) > 1:
                base = out.sa_rr
                requests.sort(key=lambda r: (r[0] - base) % nports)
                if t + period < nxt:
                    nxt = t + period  # the losers retry next cycle
            p, v, packet = requests[0]
            ch_in = inputs[p]
            self.in_rr[p] = (v + 1) % ch_in.nvc
            out.sa_rr = (p + 1) % nports
            self._grant(packet, p, v, t)
            nxt = next_request(ch_in, v, t + period, nxt)
        if nxt < INF:
            self.poke(nxt)

    def _earliest(self, packet: Packet, t: int, xfree: int) -> int:
        """Earliest time ``packet`` could win the switch for its next channel (``t`` if
        now), allocating it a free output VC on the way; INF if that time is not known."""
        out = packet.path[packet.j]
        when = out.busy_until if out.busy_until > xfree else xfree
        if out.sink:
            return when if when > t else t
        vc = packet.vcs[packet.j]
        if vc < 0:  # VC allocation: any VC whose previous holder's tail has been sent
            nvc, base = out.nvc, out.va_rr
            soonest = INF
            for k in range(nvc):
                w = (base + k) % nvc
                free = out.owner_free[w]
                if 0 <= free <= t:
                    vc = w
                    break
                if 0 <= free < soonest:
                    soonest = free
            if vc < 0:
                if soonest == INF:
                    out.starved = True
                return soonest
            packet.vcs[packet.j] = vc
            out.owner_free[vc] = -1
            out.va_rr = (vc + 1) % nvc
        credit = self._credit_time(out, vc, packet, t)
        if credit > when:
            when = credit
        return when if when > t else t

    def _credit_time(self, out: Channel, vc: int, packet: Packet, t: int) -> int:
        """Earliest start such that ``packet``'s first ``min(flits, cap)`` flits never
        find the downstream VC buffer full (see the module docstring)."""
        cap = out.cap
        if cap >= INF:
            return t
        net = self.net
        period, credit_ps = net.period_ps, net.credit_ps
        buf = out.buf[vc]
        # Forget packets whose every slot is free again.
        while buf:
            other, k = buf[0]
            gone = other.release[k + 1]
            if gone is None or gone - period + credit_ps > t:
                break
            buf.popleft()
        need = packet.flits if packet.flits < cap else cap
        total = 0
        for other, _k in buf:
            total += other.flits if other.flits < cap else cap
        missing = need - (cap - total)  # slots that must free up during the train
        if missing <= 0:
            return t
        count = 0
        for other, k in buf:
            gone = other.release[k + 1]
            if gone is None:
                out.starved = True
                return INF
            held = other.flits if other.flits < cap else cap
            if count + held >= missing:
                # The held slots free one per cycle, the last one when its tail's credit
                # arrives; the train may start (need - 1) cycles before the slot it needs.
                last = gone - period + credit_ps
                slot = last - (held - (missing - count)) * period
                start = slot - (need - 1) * period
                return start if start > t else t
            count += held
        out.starved = True
        return INF

    # -- packet trains -----------------------------------------------------------------
    def _contended(self, port: int, vc_in: int, out: Channel) -> bool:
        """Whether a train granted ``out`` now could delay another packet here: one at
        the front of another VC that wants ``out`` too, or any packet in another VC of
        the same input port (which would share the crossbar input).  Packet by packet,
        that packet could win the output (or the input) between two packets of the
        train, so the train is split instead of holding it off."""
        for q, ch in enumerate(self.inputs):
            if not ch.queued:
                continue
            for w, queue in enumerate(ch.waiting):
                if not queue or (w == vc_in and q == port):
                    continue
                if q == port:
                    return True
                other = queue[0]
                if other.path[other.j] is out:
                    return True
        return False

    # -- grants and releases -----------------------------------------------------------
    def _grant(self, packet: Packet, port: int, vc_in: int, t: int, alone: bool = False) -> None:
        """Send ``packet`` (at the front of VC ``vc_in`` of input ``port``) on its next
        channel at ``t``.  ``alone``: the caller knows no other packet waits at this
        router (one VC per input, no other input queued), so a train is never split."""
        net = self.net
        period = net.period_ps
        ch_in = self.inputs[port]
        if packet.parts is None:
            ch_in.waiting[vc_in].popleft()
            ch_in.queued -= 1
            count = 1
        elif packet.j > 1 and not alone and self._contended(port, vc_in, packet.path[packet.j]):
            # (j == 1: a network interface, whose only input is the source queue)
            packet = _split(packet)  # the train's first packet goes; the rest stays queued
            count = 1
        else:
            ch_in.waiting[vc_in].popleft()
            ch_in.queued -= 1
            count = len(packet.parts)
        if packet.j == 1 and net.packet_trains:  # an interface injects: queued packets may join
            queue = ch_in.waiting[vc_in]
            if queue and queue[0].path is packet.path and packet.flits >= packet.path[1].cap:
                count = _couple(packet, queue)
                ch_in.queued = len(queue)
        j, flits = packet.j, packet.flits
        path = packet.path
        out = path[j]
        span = flits * period
        end = t + span
        out.busy_until = end
        self.xbar_free[port] = end
        out.packets += count
        out.flits += flits
        out.bytes += packet.payload
        packet.grant[j] = t
        ch_in.front_free[vc_in] = -1  # set when this packet's tail has left
        last = j == len(path) - 1
        cap = out.cap
        # Wormhole: upstream channels still held learn how far the head has got.
        if packet.pending:
            keep = []
            for entry in packet.pending:
                term = t + (flits - entry[2]) * period
                if term > entry[1]:
                    entry[1] = term
                entry[2] += cap
                if entry[2] >= flits or last:
                    net.release(packet, entry[0], entry[1])
                else:
                    keep.append(entry)
            packet.pending = keep
        if last or cap >= flits:
            net.release(packet, j, end)
        else:  # longer than the next buffer: the tail's release waits for the head
            packet.pending.append([j, end, cap])
        if last:
            net.delivered(packet, t + net.eject_ps + (flits - 1) * period)
            return
        vc = packet.vcs[j]
        queue = out.waiting[vc]
        out.buf[vc].append((packet, j))
        queue.append(packet)
        out.queued += 1
        packet.j = j + 1
        ready = packet.ready = t + net.hop_ps
        if len(queue) == 1:
            front_free = out.front_free[vc]
            if front_free >= 0:
                out.receiver.poke(ready if ready > front_free else front_free)  # type: ignore[union-attr]


def _split(train: Packet) -> Packet:
    """Cut ``train``'s first packet off as a packet of its own, which takes over the VC
    the train was just allocated on its next channel; the rest of the train stays at
    the front of its input VC (and keeps the upstream VCs and wormhole state) and
    follows once that packet's tail has left, exactly as the next packet of a stream
    would."""
    flits, payload, on_done = train.parts[0]  # type: ignore[index]
    head = Packet(train.path, train.hops, payload, flits, train.ready, on_done)
    j = head.j = train.j
    head.vcs = train.vcs[:]  # own VC on path[j]; path[j-1]'s is freed when it leaves
    train.vcs[j] = -1
    rest = train.parts[1:]  # type: ignore[index]
    if len(rest) > 1:
        train.parts = rest
    else:
        train.parts = None
        train.on_done = rest[0][2]
    train.flits -= flits
    train.payload -= payload
    return head


def _couple(packet: Packet, queue: deque[Packet]) -> int:
    """Append to ``packet`` (being injected now) every packet queued right behind it at
    its source for the same path: packet by packet they would follow it back to back
    through an idle network, and any contention on the way splits them off again.
    (Only for packets already as long as the injection buffer, whose credit check the
    longer train then passes in the same way.)  Returns the train's packet count."""
    parts = packet.parts
    path = packet.path
    while queue and queue[0].path is path:
        other = queue[0]
        count = 1 if parts is None else len(parts)
        if count + (1 if other.parts is None else len(other.parts)) > TRAIN_PACKETS:
            break
        queue.popleft()
        if parts is None:
            parts = packet.parts = [(packet.flits, packet.payload, packet.on_done)]
        if other.parts is None:
            parts.append((other.flits, other.payload, other.on_done))
        else:
            parts.extend(other.parts)
        packet.flits += other.flits
        packet.payload += other.payload
    return 1 if parts is None else len(parts)
