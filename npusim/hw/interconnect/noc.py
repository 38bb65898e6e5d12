"""On-chip network: 2D mesh / ring / linear NoC with packet-level link reservation.

What is modelled (NpuSim §3.1, DESIGN.md "NoC packets hold a link once the handshake
succeeds and then move one flit per cycle"):

* A transfer is cut into **packets** of at most ``max_packet_bytes`` payload, each
  ``header_flits + ceil(payload / flit_bytes)`` flits long.  A link carries one flit per
  cycle, so its bandwidth is ``flit_bytes * freq_hz``.
* A packet's path (deterministic, see :mod:`noc_topology`) is its source's injection
  port, the router-to-router links, and the destination's ejection port.  The head
  **handshakes hop by hop in event order**: at each router it spends
  ``router_latency_cycles`` (route computation and arbitration), then asks for the next
  link; links are granted first come, first served.  Once granted, the head crosses the
  link in ``link_latency_cycles`` and the body follows **one flit per cycle**.
* A link stays **held** until the packet's tail has crossed it.  If the head is blocked
  further on, the tail can only advance as far as the buffers in between allow
  (``buffer_flits`` per router, wormhole flow control), so a long packet keeps its
  upstream links locked while it waits: NpuSim's channel locking.  A packet that fits in
  one buffer (``flits <= buffer_flits``) frees each link ``flits`` cycles after it got
  it, whatever happens downstream (virtual cut-through).
* **Deadlock freedom**: a blocked packet only waits for a link that comes later in its
  path.  With XY routing on a mesh (and on a line) those "waits-for" edges form an
  acyclic graph, so no cycle of waiting packets can exist.  On a ring each direction is
  a cycle; the router before each direction's *dateline* link buffers a whole packet
  (the role of the dateline virtual channel), so a packet waiting for the dateline holds
  nothing upstream and the cycle is broken.

Events: one SimPy event per hop per packet (the head's arrival at the next arbitration
point), plus one when a packet had to queue behind a locked link.  Link arbitration
itself costs no event: a link remembers when it becomes free, and a packet arriving
while it is busy is granted at that time directly (first come, first served in event
order, as output-queued routers with deep buffers would do).

Not modelled (see the validation notes): virtual channels as separate resources,
switch-allocator inefficiency and head-of-line blocking inside router input buffers,
credit round trips, finite buffer capacity for packets that fit in one buffer.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Callable, Generator, Literal

from pydantic import Field, model_validator

from npusim.core.errors import MappingError
from npusim.core.registry import PartConfig, register
from npusim.core.units import BandwidthBps, Bytes, FreqHz, cycles_to_ps
from npusim.hw.base import Interconnect
from npusim.hw.interconnect.noc_topology import NocTopology

#: Largest relative difference accepted between ``link_bandwidth_bps`` and
#: ``flit_bytes * freq_hz`` (the simulated bandwidth is always the latter).
BANDWIDTH_MATCH_TOLERANCE = 0.01

#: A buffer that holds any packet (the dateline buffer of a ring).
_UNBOUNDED = 1 << 62


class NocConfig(PartConfig):
    """On-chip network: topology, clock, flit size, router and link timing.

    Defaults: 8x8 mesh at 500 MHz with 32-byte flits (16 GB/s per link and direction,
    the low end of NpuSim Table 3's "16-480 GB/s x4"); 3-cycle routers and 1-cycle links
    were set from BookSim2's 8x8-mesh zero-load latency of 27.1 cycles (components.md).
    """

    kind: Literal["noc"] = "noc"
    topology: Literal["mesh", "ring", "linear"] = Field(
        "mesh", description="Router graph: 'mesh' (2D, XY routing), 'ring' (wrap-around, "
                            "shortest direction) or 'linear' (a line). Ring and linear "
                            "connect nodes 0..N-1 in index order.")
    width: int = Field(8, ge=1, description="Nodes per row (mesh X size); node i sits at "
                                            "x = i % width, y = i // width.")
    height: int = Field(8, ge=1, description="Number of rows (mesh Y size).")
    freq_hz: FreqHz = Field(500_000_000, description="Router clock, e.g. '500MHz' (NpuSim "
                                                     "Table 3 core frequency).")
    flit_bytes: Bytes | None = Field(
        None, gt=0, description="Bytes per flit; a link moves one flit per cycle. Derived "
                                "from link_bandwidth_bps / freq_hz when omitted; 32 B if "
                                "both are omitted.")
    link_bandwidth_bps: BandwidthBps | None = Field(
        None, gt=0, description="Bandwidth of one link in one direction, e.g. '16GB/s' "
                                "(NpuSim Table 3 'x4' = one such link per mesh direction). "
                                "Derived as flit_bytes * freq_hz when omitted; must agree "
                                "with it within 1% when both are given.")
    router_latency_cycles: int = Field(
        3, ge=0, description="Router pipeline cycles a packet head spends in each router it "
                             "passes (route, allocation, switch traversal), source and "
                             "destination routers included. Calibrated: 3 (BookSim2 "
                             "zero-load 27.1 cycles on 8x8).")
    link_latency_cycles: int = Field(
        1, ge=0, description="Cycles for a flit to cross one link, injection and ejection "
                             "channels included. Calibrated: 1.")
    buffer_flits: int = Field(
        8, ge=1, description="Input-buffer depth (flits) a packet can fill in each router "
                             "(one virtual channel; BookSim reference: 8). A longer packet "
                             "keeps upstream links locked while its head is blocked.")
    max_packet_bytes: Bytes = Field(
        4096, gt=0, description="Largest payload of one packet; a transfer is cut into "
                                "packets of this size (assumption: 4 KiB, NpuSim gives none).")
    header_flits: int = Field(
        0, ge=0, description="Extra flits per packet carrying no payload (0: the head flit "
                             "carries data, as in BookSim).")

    @model_validator(mode="after")
    def _derive_link(self) -> "NocConfig":
        flit, bandwidth = self.flit_bytes, self.link_bandwidth_bps
        if flit is None and bandwidth is None:
            flit = 32
        elif flit is None:
            assert bandwidth is not None
            flit = round(bandwidth / self.freq_hz)
            if flit < 1:
                raise ValueError(
                    f"link_bandwidth_bps ({bandwidth} B/s) is below one byte per cycle at "
                    f"freq_hz {self.freq_hz} Hz; raise the bandwidth or lower the clock")
        if bandwidth is None:
            bandwidth = flit * self.freq_hz
        implied = flit * self.freq_hz
        if abs(implied - bandwidth) > BANDWIDTH_MATCH_TOLERANCE * bandwidth:
            raise ValueError(
                f"link_bandwidth_bps ({bandwidth} B/s) does not match flit_bytes x freq_hz "
                f"({flit} B x {self.freq_hz} Hz = {implied} B/s); a link moves one flit per "
                "cycle, so give only one of them or make them agree")
        if self.topology == "ring" and self.width * self.height < 3:
            raise ValueError(f"a ring needs at least 3 nodes, got width x height = "
                             f"{self.width * self.height}")
        # Frozen model: fill the derived fields in place so the resolved config shows them.
        object.__setattr__(self, "flit_bytes", flit)
        object.__setattr__(self, "link_bandwidth_bps", bandwidth)
        return self

    @property
    def num_nodes(self) -> int:
        return self.width * self.height


class _Link:
    """Run state of one directed link or NI port.

    ``free_at`` is when the next packet may be granted (ps), or -1 while the holder's
    release time is not known yet (it is blocked downstream); then arrivals queue in
    ``waiters`` (FIFO).
    """

    __slots__ = ("key", "free_at", "waiters", "busy_ps", "flits", "bytes", "packets")

    def __init__(self, key: Any):
        self.key = key
        self.free_at = 0
        self.waiters: deque[_Packet] = deque()
        self.busy_ps = 0
        self.flits = 0
        self.bytes = 0
        self.packets = 0


class _Packet:
    """One packet walking its path (a small state machine driven by SimPy callbacks)."""

    __slots__ = ("noc", "links", "caps", "last", "flits", "payload", "hops", "j", "grant",
                 "held", "pending", "created_ps", "on_done")

    def __init__(self, noc: "MeshNoc", links: tuple[_Link, ...], caps: tuple[int, ...],
                 hops: int, payload: int, flits: int, on_done: Callable[[int], None] | None):
        self.noc = noc
        self.links = links
        self.caps = caps
        self.last = len(links) - 1
        self.flits = flits
        self.payload = payload
        self.hops = hops
        self.j = 0
        self.grant = 0
        self.held = False  # link j is held with a release time not known yet
        # Links still held whose release depends on later grants:
        # [link, grant_ps, release candidate_ps, buffer flits between it and the head].
        self.pending: list[list[Any]] = []
        self.created_ps = noc.env.now  # type: ignore[union-attr]
        self.on_done = on_done

    def arbitrate(self, _event: Any = None) -> None:
        """The head asks for link ``j`` now; granted at once or queued behind a lock."""
        link = self.links[self.j]
        if link.free_at >= 0 and not link.waiters:
            now = self.noc.env.now  # type: ignore[union-attr]
            self.noc._take(link, self, link.free_at if link.free_at > now else now)
            self.advance()
        else:
            link.waiters.append(self)

    def advance(self, _event: Any = None) -> None:
        """Link ``j`` was granted at ``self.grant``: settle upstream links, move on."""
        noc, j, grant = self.noc, self.j, self.grant
        flits, period = self.flits, noc.period_ps
        if self.pending:
            keep = []
            for entry in self.pending:
                # The tail crosses the held link only once the head has moved far enough
                # for the flits in between to fit into the intermediate buffers.
                term = grant + (flits - entry[3]) * period
                if term > entry[2]:
                    entry[2] = term
                entry[3] += self.caps[j]
                if entry[3] >= flits or j == self.last:
                    noc._release(entry[0], entry[1], entry[2])
                else:
                    keep.append(entry)
            self.pending = keep
        if self.held:  # link j stays locked until the head gets further
            self.pending.append([self.links[j], grant, grant + flits * period, self.caps[j]])
        env = noc.env
        assert env is not None
        if j == self.last:
            noc._delivered(self, grant + noc.eject_ps + (flits - 1) * period)
        else:
            self.j = j + 1
            env.timeout(grant + noc.hop_ps - env.now).callbacks.append(self.arbitrate)


@register("interconnect", NocConfig)
class MeshNoc(Interconnect):
    """2D-mesh / ring / linear NoC: XY routing, hop-by-hop link handshake, flit streaming.

    Endpoints are node ids: an ``int``, ``"coreN"`` / ``"N"`` strings, or an ``(x, y)``
    tuple; node ``i`` sits at ``x = i % width``, ``y = i // width``.
    """

    def __init__(self, name: str = "noc", config: NocConfig | None = None):
        super().__init__(name, config if config is not None else NocConfig())
        cfg: NocConfig = self.config
        self.topology = NocTopology(cfg.topology, cfg.width, cfg.height)
        self.num_nodes = self.topology.num_nodes
        self.flit_bytes: int = cfg.flit_bytes  # type: ignore[assignment]
        #: One router clock period; every NoC time is a whole number of these.
        self.period_ps = cycles_to_ps(1, cfg.freq_hz)
        #: Head time from one arbitration point to the next: cross a link, then a router.
        self.hop_ps = (cfg.link_latency_cycles + cfg.router_latency_cycles) * self.period_ps
        #: Head time from the ejection-port grant to the destination NI.
        self.eject_ps = cfg.link_latency_cycles * self.period_ps
        self._datelines = self.topology.dateline_links()
        self._links: list[_Link] = []
        self._inject: list[_Link] = []
        self._eject: list[_Link] = []
        self._paths: dict[tuple[int, int], tuple[tuple[_Link, ...], tuple[int, ...], int]] = {}
        self._reset_links()

    # -- endpoints and routing -----------------------------------------------------
    def node(self, endpoint: Any) -> int:
        """Node id of ``endpoint`` (``3``, ``"core3"``, ``"3"`` or ``(x, y)``)."""
        if type(endpoint) is int and 0 <= endpoint < self.num_nodes:  # the common case
            return endpoint
        if isinstance(endpoint, tuple) and len(endpoint) == 2:
            try:
                return self.topology.node_at(int(endpoint[0]), int(endpoint[1]))
            except ValueError as exc:
                raise MappingError(f"{self.name}: {exc}") from None
        if isinstance(endpoint, str):
            match = re.fullmatch(r"(?:core)?(\d+)", endpoint.strip())
            if not match:
                raise MappingError(f"{self.name}: endpoint {endpoint!r} is not a node; use "
                                   f"'coreN' or an int in 0..{self.num_nodes - 1}")
            endpoint = int(match[1])
        if isinstance(endpoint, bool) or not hasattr(endpoint, "__index__"):
            raise MappingError(f"{self.name}: endpoint {endpoint!r} is not a node id")
        node = int(endpoint)
        if not 0 <= node < self.num_nodes:
            raise MappingError(f"{self.name}: node {node} does not exist "
                               f"(this NoC has nodes 0..{self.num_nodes - 1})")
        return node

    @staticmethod
    def node_name(node: int) -> str:
        """Device name of a node (``core3``)."""
        return f"core{node}"

    def coords(self, endpoint: Any) -> tuple[int, int]:
        """Physical ``(x, y)`` of an endpoint."""
        return self.topology.coords(self.node(endpoint))

    def route(self, src: Any, dst: Any) -> list[tuple[int, int]]:
        """Router-to-router links ``(u, v)`` from ``src`` to ``dst``, in order."""
        return self.topology.route(self.node(src), self.node(dst))

    def hops(self, src: Any, dst: Any) -> int:
        """Router-to-router links between ``src`` and ``dst`` (0 for the same node)."""
        return self.topology.hops(self.node(src), self.node(dst))

    # -- packetisation and closed form ---------------------------------------------
    def packet_payloads(self, size_bytes: int) -> list[int]:
        """Payload bytes of each packet a ``size_bytes`` transfer is cut into."""
        size, cap = int(size_bytes), self.config.max_packet_bytes
        if size <= 0:
            return []
        full, rest = divmod(size, cap)
        return [cap] * full + ([rest] if rest else [])

    def packet_flits(self, payload_bytes: int) -> int:
        """Flits of a packet carrying ``payload_bytes`` (header flits included)."""
        return self.config.header_flits + max(1, -(-int(payload_bytes) // self.flit_bytes))

    def zero_load_cycles(self, src: Any, dst: Any, flits: int = 1) -> int:
        """Cycles from creation until the tail of a ``flits``-flit packet is delivered
        on an idle network: injection link, ``hops + 1`` routers, ``hops`` links,
        ejection link, then ``flits - 1`` cycles for the body to follow the head."""
        cfg, h = self.config, self.hops(src, dst)
        return ((h + 1) * cfg.router_latency_cycles + (h + 2) * cfg.link_latency_cycles
                + flits - 1)

    def transfer_time_ps(self, src: Any, dst: Any, size_bytes: int) -> int:
        """Closed-form uncontended time: the packets stream back to back along the path,
        so the time is one packet's path latency plus every flit once."""
        payloads = self.packet_payloads(size_bytes)
        if not payloads:
            return 0
        flits = sum(self.packet_flits(p) for p in payloads)
        return self.zero_load_cycles(src, dst, flits) * self.period_ps

    # -- tlm -------------------------------------------------------------------------
    def bind(self, env: Any) -> None:
        """Attach to ``env`` with idle links (per-link state lives on this instance)."""
        super().bind(env)
        self._reset_links()

    def reset_stats(self) -> None:
        super().reset_stats()
        for link in self._all_links():
            link.busy_ps = link.flits = link.bytes = link.packets = 0

    def transfer(self, src: Any, dst: Any, size_bytes: int) -> Generator[Any, Any, None]:
        """SimPy process body: move ``size_bytes`` from ``src`` to ``dst`` as packets
        with link contention; returns when the last flit has been delivered.

        Statistics: ``transactions`` (+1 per call), ``bytes_read``, ``busy_ps`` (the
        uncontended time) and ``extra``: ``wait_ps`` (time beyond the uncontended time:
        waiting for links and ports held by other packets, the same DMA's other chunks
        included), ``packets``, ``flits`` and ``packet_hops`` (router-to-router links
        crossed, summed over packets)."""
        payloads = self.packet_payloads(size_bytes)
        if not payloads:
            return
        env = self._env()
        s, d = self.node(src), self.node(dst)
        start = env.now
        remaining = [len(payloads), start]
        all_known = env.event()

        def on_done(done_ps: int) -> None:
            remaining[0] -= 1
            remaining[1] = max(remaining[1], done_ps)
            if remaining[0] == 0:
                all_known.succeed()

        for payload in payloads:
            self.inject(s, d, payload, on_done=on_done)
        yield all_known
        yield env.timeout(remaining[1] - env.now)
        # Counted as the analytic level counts a network stage (Device.account_transfer):
        # busy time is the uncontended time; the excess is reported apart as wait_ps.
        uncontended = self.transfer_time_ps(s, d, size_bytes)
        self.stats.transactions += 1
        self.stats.bytes_read += int(size_bytes)
        self.stats.busy_ps += uncontended
        self.stats.add("wait_ps", env.now - start - uncontended)

    def inject(self, src: Any, dst: Any, payload_bytes: int, flits: int | None = None,
               on_done: Callable[[int], None] | None = None) -> None:
        """Create one packet at ``src`` now (tlm).  ``on_done(delivered_ps)`` is called
        as soon as the delivery time is known (at or before it).  ``flits`` overrides
        the flit count derived from ``payload_bytes`` (synthetic traffic)."""
        s, d = self.node(src), self.node(dst)
        links, caps, hops = self._path_state(s, d)
        count = flits if flits is not None else self.packet_flits(payload_bytes)
        _Packet(self, links, caps, hops, int(payload_bytes), count, on_done).arbitrate()

    def link_stats(self) -> dict[tuple[int, int], dict[str, int]]:
        """Per router-to-router link that carried traffic: ``busy_ps`` (time held,
        including while locked behind a blocked head), ``bytes``, ``flits``, ``packets``."""
        return {link.key: _link_dict(link) for link in self._links if link.packets}

    def port_stats(self) -> dict[tuple[int, str], dict[str, int]]:
        """Same as :meth:`link_stats` for NI ports, keyed ``(node, "inject"|"eject")``."""
        return {link.key: _link_dict(link) for link in self._inject + self._eject
                if link.packets}

    # -- internals -------------------------------------------------------------------
    def _env(self) -> Any:
        if self.env is None:
            raise RuntimeError(f"{self.name}: call bind(env) before a tlm transfer")
        return self.env

    def _all_links(self) -> list[_Link]:
        return self._links + self._inject + self._eject

    def _reset_links(self) -> None:
        self._links = [_Link(key) for key in self.topology.links]
        self._inject = [_Link((n, "inject")) for n in range(self.num_nodes)]
        self._eject = [_Link((n, "eject")) for n in range(self.num_nodes)]
        self._paths = {}

    def _path_state(self, s: int, d: int) -> tuple[tuple[_Link, ...], tuple[int, ...], int]:
        """Links of the full path (injection port, links, ejection port) and the buffer
        depth after each of them."""
        key = (s, d)
        cached = self._paths.get(key)
        if cached is None:
            route = self.topology.route(s, d)
            index = self.topology.link_index
            links = (self._inject[s], *(self._links[index[l]] for l in route), self._eject[d])
            buffer = self.config.buffer_flits
            # Path link j + 1 is route[j] (the ejection port after the last route link).
            nxt = route + [None, None]
            caps = tuple(_UNBOUNDED if nxt[j] in self._datelines else buffer
                         for j in range(len(links)))
            cached = self._paths[key] = (links, caps, len(route))
        return cached

    def _take(self, link: _Link, packet: _Packet, grant: int) -> None:
        """Give ``link`` to ``packet`` from ``grant`` on; if its release is already known
        (the packet fits in the next buffer, or this is its last link) record it."""
        packet.grant = grant
        link.packets += 1
        link.flits += packet.flits
        link.bytes += packet.payload
        if packet.j == packet.last or packet.caps[packet.j] >= packet.flits:
            span = packet.flits * self.period_ps
            link.free_at = grant + span
            link.busy_ps += span
            packet.held = False
        else:
            link.free_at = -1
            packet.held = True

    def _release(self, link: _Link, grant: int, release: int) -> None:
        """The holder's tail crosses ``link`` at ``release``: hand it to the waiters."""
        link.busy_ps += release - grant
        link.free_at = release
        env = self.env
        assert env is not None
        while link.waiters and link.free_at >= 0:
            waiter = link.waiters.popleft()
            self._take(link, waiter, link.free_at)
            # Continue the waiter from the event loop, not recursively from here.
            env.timeout(0).callbacks.append(waiter.advance)

    def _delivered(self, packet: _Packet, done_ps: int) -> None:
        self.stats.add("packets")
        self.stats.add("flits", packet.flits)
        self.stats.add("packet_hops", packet.hops)
        if packet.on_done is not None:
            packet.on_done(done_ps)


def _link_dict(link: _Link) -> dict[str, int]:
    return {"busy_ps": link.busy_ps, "bytes": link.bytes, "flits": link.flits,
            "packets": link.packets}
