"""The NoC's run-time data: channels (a link or port with its VC buffers and credits)
and packets (or trains of packets) walking their paths.  The routers that move them are
in :mod:`noc_router`; the model is described there and in ``docs/noc.md``."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from npusim.hw.interconnect.noc_router import Router

#: "Never" / "unbounded" sentinel (ps or flits).
INF = 1 << 62

#: Most packets one train stands for.  A packet that reaches a router while a train
#: holds the output it wants waits for the whole train, where packet by packet it could
#: have won the output after the current packet: this bounds that error (see
#: ``docs/noc.md``), at the cost of a few more events per long stream.
TRAIN_PACKETS = 4


class Channel:
    """One directed channel: a router-to-router link, an injection or an ejection port,
    plus the VC buffers it feeds at its receiving router.

    ``owner_free[v]`` is when VC ``v`` may be allocated again (-1: held, time not known
    yet); ``buf[v]`` lists ``(packet, index)`` entries still occupying slots of the
    downstream buffer; ``waiting[v]`` the packets in that buffer not yet sent on;
    ``front_free[v]`` when the previous front packet's tail left the buffer (-1: not
    known yet).
    """

    __slots__ = ("key", "sender", "receiver", "port", "nvc", "cap", "sink", "busy_until",
                 "owner_free", "buf", "waiting", "front_free", "va_rr", "sa_rr",
                 "starved", "queued", "flits", "bytes", "packets", "held_ps")

    def __init__(self, key: Any, nvc: int, cap: int, sink: bool = False):
        self.key = key
        self.sender: Router | None = None
        self.receiver: Router | None = None
        self.port = 0  # input-port index at the receiver
        self.nvc = nvc
        self.cap = cap
        self.sink = sink  # ejection: the node takes a flit every cycle
        self.buf: list[deque[tuple[Packet, int]]] = [deque() for _ in range(nvc)]
        self.waiting: list[deque[Packet]] = [deque() for _ in range(nvc)]
        self.reset()

    def reset(self) -> None:
        """Idle and empty (its place in the network kept): a network reused by the next
        run is cheaper than one built again."""
        nvc = self.nvc
        self.busy_until = self.va_rr = self.sa_rr = 0
        self.owner_free = [0] * nvc
        self.front_free = [0] * nvc
        for queue in self.buf:
            queue.clear()
        for queue in self.waiting:
            queue.clear()
        # A request on this channel waits for something whose time is not known yet
        # (a VC holder or a buffered packet blocked downstream): wake the sender then.
        self.starved = False
        self.queued = 0  # packets in ``waiting`` over all VCs (skip idle ports fast)
        self.flits = self.bytes = self.packets = self.held_ps = 0


class Packet:
    """A packet walking its path ``(source queue, injection, links..., ejection)``."""

    __slots__ = ("path", "j", "vcs", "flits", "payload", "hops", "ready", "grant",
                 "release", "pending", "on_done", "parts")

    def __init__(self, path: tuple[Channel, ...], hops: int, payload: int, flits: int,
                 now: int, on_done: Callable[[int], None] | None,
                 parts: list[tuple[int, int, Any]] | None = None):
        n = len(path)
        self.path = path
        self.j = 1  # index of the channel requested next (path[0] is the source queue)
        self.vcs = [0] + [-1] * (n - 1)  # VC held on each channel (-1: none yet)
        self.flits = flits
        self.payload = payload
        self.hops = hops
        self.ready = now  # when the head may request path[j]
        self.grant = [0] * n
        self.release: list[int | None] = [None] * n  # tail has crossed channel k
        self.pending: list[list[int]] = []  # [k, release candidate, flits buffered ahead]
        self.on_done = on_done
        #: A packet train: ``(flits, payload, on_done)`` of each packet it stands for, in
        #: order (None: a single packet).  ``flits`` and ``payload`` are the sums.
        self.parts = parts


def next_request(ch_in: Channel, v: int, earliest: int, nxt: int) -> int:
    """``nxt`` lowered to when the packet now at the front of VC ``v`` of ``ch_in`` may
    request (not before ``earliest``, the next cycle), after its predecessor was granted;
    unchanged if the VC is empty or its previous tail is stuck (its release wakes us)."""
    queue = ch_in.waiting[v]
    if queue:
        front_free = ch_in.front_free[v]
        if front_free >= 0:
            ready = queue[0].ready
            if front_free > ready:
                ready = front_free
            if earliest > ready:
                ready = earliest
            if ready < nxt:
                nxt = ready
    return nxt
