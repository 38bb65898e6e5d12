"""On-chip network: 2D mesh / ring / linear NoC of input-queued virtual-channel routers.

What is modelled (NpuSim §3.1; details, validation and gaps in ``docs/noc.md``):

* A transfer is cut into **packets** of at most ``max_packet_bytes`` payload, each
  ``header_flits + ceil(payload / flit_bytes)`` flits long.  A link carries one flit per
  cycle, so its bandwidth is ``flit_bytes * freq_hz``.
* A packet's path (deterministic, see :mod:`noc_topology`) is its source's injection
  port, the router-to-router links, and the destination's ejection port.  Every router
  input has ``virtual_channels`` VC buffers of ``buffer_flits`` flits; the head spends
  ``router_latency_cycles`` in each router (route, VC and switch allocation, switch
  traversal) and ``link_latency_cycles`` on each link, and the body follows one flit per
  cycle, so an idle network gives the closed form of :meth:`MeshNoc.zero_load_cycles`.
* Contention is that of an input-queued router (:mod:`noc_router`): FIFO order inside a
  VC (head-of-line blocking), VC allocation, credit-based flow control with
  ``credit_delay_cycles`` credit return, and a separable input-first switch allocator
  with round-robin arbiters.  None of these is tuned: the BookSim saturation throughput
  and loaded latency (C-NOC-02/03) are predictions of these mechanisms.
* A packet longer than a VC buffer is **wormhole**-routed: while its head is blocked it
  keeps the upstream VCs it spans locked (NpuSim's channel locking); other VCs of the
  same links stay usable.
* **Deadlock freedom**: a blocked packet only waits for resources later in its path
  (output VCs, downstream buffer space).  With XY routing on a mesh (and on a line)
  these dependencies are acyclic.  On a ring each direction is a cycle; the buffer in
  front of each direction's *dateline* link holds whole packets (the dateline VC's
  role), so nothing waiting for the dateline holds a ring link and the cycle is broken.

Cost: the model is transaction level.  A granted packet occupies its channel for
``flits`` cycles as one train, and a router runs an allocation round only when a waiting
packet could make progress, so a packet costs about one SimPy event per router it
crosses, whatever its length and the network size.  A transfer's packets go as
**packet trains** of up to ``TRAIN_PACKETS`` packets, granted as one wherever no other
packet waits for the same output and split where one does: identical timing on an idle
path, a quarter of the events for bulk DMA (``docs/noc.md``, "Packet trains").
"""

from __future__ import annotations

import re
from typing import Any, Callable, Generator

from npusim.core.errors import MappingError
from npusim.core.registry import register
from npusim.core.units import cycles_to_ps
from npusim.hw.base import Interconnect
from npusim.hw.interconnect.noc_config import NocConfig
from npusim.hw.interconnect.noc_delivery import _Delivery
from npusim.hw.interconnect.noc_router import INF, TRAIN_PACKETS, Channel, Packet, Router
from npusim.hw.interconnect.noc_topology import NocTopology

@register("interconnect", NocConfig)
class MeshNoc(Interconnect):
    """2D-mesh / ring / linear NoC: XY routing, input-queued VC routers, flit trains.

    Endpoints are node ids: an ``int``, ``"coreN"`` / ``"N"`` strings, or an ``(x, y)``
    tuple; node ``i`` sits at ``x = i % width``, ``y = i // width``.
    """

    #: Move a transfer's packets as trains (see ``docs/noc.md``): same timing on an
    #: idle path, a few events instead of one per packet and hop.  False: packet by
    #: packet (the reference the trains are tested against).
    packet_trains = True
    #: Routers with one VC per channel run ``noc_single.allocate_single`` (the same
    #: decisions as ``Router.allocate``, fewer operations).  False: always the general
    #: round (the reference the fast path is tested against).
    single_vc_fast_path = True

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
        #: Credit return: a freed slot is usable upstream this long after its flit left.
        self.credit_ps = cfg.credit_delay_cycles * self.period_ps
        self._datelines = self.topology.dateline_links()
        self._links: list[Channel] = []
        self._inject: list[Channel] = []
        self._eject: list[Channel] = []
        self._sources: list[Channel] = []
        self._paths: dict[tuple[int, int], tuple[tuple[Channel, ...], int]] = {}
        self._transfers: dict[tuple[int, int, int], tuple[tuple[tuple[int, int], ...], int]] = {}
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
        size = int(size_bytes)
        if size <= 0:
            return 0
        # Counted per packet size, not per packet: a weight tile is thousands of packets.
        full, rest = divmod(size, self.config.max_packet_bytes)
        flits = full * self.packet_flits(self.config.max_packet_bytes) + (
            self.packet_flits(rest) if rest else 0)
        return self.zero_load_cycles(src, dst, flits) * self.period_ps

    def busy_share_ps(self, src: Any, dst: Any, size_bytes: int) -> int:
        """Busy time a transfer adds to the NoC's counters: the time its flits occupy
        router-to-router links (one cycle per flit per link crossed), averaged over the
        mesh's links, so busy / latency is the mean link utilisation (as a DRAM's busy
        time is averaged over its channels).  Transfers within a node cross no link."""
        size, links = int(size_bytes), len(self._links)
        if size <= 0 or not links:
            return 0
        full, rest = divmod(size, self.config.max_packet_bytes)
        flits = full * self.packet_flits(self.config.max_packet_bytes) + (
            self.packet_flits(rest) if rest else 0)
        link_time = flits * self.period_ps * self.hops(src, dst)
        return (2 * link_time + links) // (2 * links)  # rounded to the nearest ps

    # -- tlm -------------------------------------------------------------------------
    def bind(self, env: Any) -> None:
        """Attach to ``env`` with idle links (per-link state lives on this instance)."""
        super().bind(env)
        self._reset_links()

    def reset_stats(self) -> None:
        super().reset_stats()
        for link in self._all_links():
            link.held_ps = link.flits = link.bytes = link.packets = 0

    def transfer(self, src: Any, dst: Any, size_bytes: int) -> Generator[Any, Any, None]:
        """SimPy process body: move ``size_bytes`` from ``src`` to ``dst`` as packets
        with link contention; returns when the last flit has been delivered.

        Statistics: ``transactions`` (+1 per call), ``bytes_read``, ``busy_ps``
        (:meth:`busy_share_ps`) and ``extra``: ``wait_ps`` (time beyond the uncontended time:
        waiting for links and ports held by other packets, the same DMA's other chunks
        included), ``packets``, ``flits`` and ``packet_hops`` (router-to-router links
        crossed, summed over packets)."""
        done = self.start_transfer(src, dst, size_bytes)
        if done is not None:
            yield done

    def start_transfer(self, src: Any, dst: Any, size_bytes: int) -> Any:
        """:meth:`transfer` without the generator: send the packets now and return the
        event that succeeds when the last flit has been delivered (None: nothing to
        send).  The DMA workers' fast path, one call per chunk."""
        env = self._env()
        s, d = self.node(src), self.node(dst)
        key = (s, d, size_bytes)
        shape = self._transfers.get(key)
        if shape is None:  # packets (payload, flits), flits, uncontended and busy time
            payloads = self.packet_payloads(size_bytes)
            pairs = tuple((p, self.packet_flits(p)) for p in payloads)
            shape = self._transfers[key] = (
                pairs, sum(f for _, f in pairs),
                self.transfer_time_ps(s, d, size_bytes) if payloads else 0,
                self.busy_share_ps(s, d, size_bytes))
        packets, total_flits, uncontended, busy = shape
        if not packets:
            return None
        start = env._now
        all_known = env.event()
        on_done = _Delivery(len(packets), start, all_known, self.stats, int(size_bytes),
                            uncontended, busy)

        # inject() for the packets, with the path looked up once; several packets go
        # as one train (noc_router), which is split wherever another packet competes.
        path, hops = self._path_state(s, d)
        source = path[0]
        queue = source.waiting[0]
        was_empty = not queue
        if len(packets) == 1 or not self.packet_trains or TRAIN_PACKETS < 2:
            for payload, flits in packets:
                queue.append(Packet(path, hops, payload, flits, start, on_done))
            source.queued += len(packets)
        elif len(packets) <= TRAIN_PACKETS:
            queue.append(Packet(path, hops, int(size_bytes), total_flits, start, None,
                                [(flits, payload, on_done) for payload, flits in packets]))
            source.queued += 1
        else:
            for first in range(0, len(packets), TRAIN_PACKETS):
                group = packets[first:first + TRAIN_PACKETS]
                if len(group) == 1:
                    queue.append(Packet(path, hops, group[0][0], group[0][1], start, on_done))
                    continue
                queue.append(Packet(path, hops, sum(p for p, _ in group),
                                    sum(f for _, f in group), start, None,
                                    [(flits, payload, on_done) for payload, flits in group]))
            source.queued += -(-len(packets) // TRAIN_PACKETS)
        if was_empty:
            front_free = source.front_free[0]
            source.receiver.poke(start if start > front_free else front_free)  # type: ignore[union-attr]
        return all_known

    def inject(self, src: Any, dst: Any, payload_bytes: int, flits: int | None = None,
               on_done: Callable[[int], None] | None = None) -> None:
        """Create one packet at ``src`` now (tlm).  ``on_done(delivered_ps)`` is called
        as soon as the delivery time is known (at or before it).  ``flits`` overrides
        the flit count derived from ``payload_bytes`` (synthetic traffic)."""
        s, d = self.node(src), self.node(dst)
        path, hops = self._path_state(s, d)
        count = flits if flits is not None else self.packet_flits(payload_bytes)
        env = self._env()
        packet = Packet(path, hops, int(payload_bytes), count, env.now, on_done)
        queue = path[0].waiting[0]
        queue.append(packet)
        path[0].queued += 1
        if len(queue) == 1:
            path[0].receiver.poke(max(env.now, path[0].front_free[0]))  # type: ignore[union-attr]

    def link_stats(self) -> dict[tuple[int, int], dict[str, int]]:
        """Per router-to-router link that carried traffic: ``busy_ps`` (time carrying
        flits, one cycle per flit), ``held_ps`` (VC holding time summed over packets,
        including while locked behind a blocked head), ``bytes``, ``flits``, ``packets``."""
        return {link.key: _link_dict(link, self.period_ps) for link in self._links
                if link.packets}

    def port_stats(self) -> dict[tuple[int, str], dict[str, int]]:
        """Same as :meth:`link_stats` for NI ports, keyed ``(node, "inject"|"eject")``."""
        return {link.key: _link_dict(link, self.period_ps)
                for link in self._inject + self._eject if link.packets}

    # -- internals -------------------------------------------------------------------
    def _env(self) -> Any:
        if self.env is None:
            raise RuntimeError(f"{self.name}: call bind(env) before a tlm transfer")
        return self.env

    def _all_links(self) -> list[Channel]:
        return self._links + self._inject + self._eject

    def _reset_links(self) -> None:
        """Fresh channels, routers and network interfaces (idle network): built once,
        then reset in place at every bind (a 64-core mesh has about 550 of them, and a
        serving run binds the device for every timed segment)."""
        routers = getattr(self, "_routers", None)
        if routers is not None and self._built_for == self._datelines:
            for router in routers:
                router.reset()
            for channel in (*self._links, *self._sources, *self._inject, *self._eject):
                channel.reset()
            return
        cfg = self.config
        nvc, buffer = cfg.virtual_channels, cfg.buffer_flits
        n = self.num_nodes
        routers = [Router(self) for _ in range(n)]
        interfaces = [Router(self) for _ in range(n)]
        # The buffer a packet waits in before a ring's dateline link holds whole packets
        # (the dateline VC's role): nothing waiting for the dateline holds a ring link.
        whole = {((2 * a - b) % n, a) for a, b in self._datelines}
        self._links = []
        for key in self.topology.links:
            channel = Channel(key, nvc, INF if key in whole else buffer)
            channel.sender = routers[key[0]]
            routers[key[1]].add_input(channel)
            self._links.append(channel)
        self._inject, self._eject, self._sources = [], [], []
        for node in range(n):
            source = Channel((node, "source"), 1, INF)  # unbounded source queue
            interfaces[node].add_input(source)
            inject = Channel((node, "inject"), nvc, buffer)
            inject.sender = interfaces[node]
            routers[node].add_input(inject)
            eject = Channel((node, "eject"), 1, INF, sink=True)
            eject.sender = routers[node]
            self._sources.append(source)
            self._inject.append(inject)
            self._eject.append(eject)
        self._paths = {}  # channels by path: valid for as long as the channels are
        self._routers = routers + interfaces
        self._built_for = self._datelines  # what the channels' buffers were sized for

    def _path_state(self, s: int, d: int) -> tuple[tuple[Channel, ...], int]:
        """Channels of the full path (source queue, injection port, links, ejection
        port) and the hop count."""
        key = (s, d)
        cached = self._paths.get(key)
        if cached is None:
            route = self.topology.route(s, d)
            index = self.topology.link_index
            path = (self._sources[s], self._inject[s],
                    *(self._links[index[l]] for l in route), self._eject[d])
            cached = self._paths[key] = (path, len(route))
        return cached

    def release(self, packet: Packet, k: int, time_ps: int) -> None:
        """``packet``'s tail crosses path channel ``k`` at ``time_ps``: free its VC there,
        let the next packet of the buffer it left move up, and wake whoever waited for
        this time to be known (the VC's or the upstream buffer's credits)."""
        packet.release[k] = time_ps
        path, vcs = packet.path, packet.vcs
        channel = path[k]
        channel.held_ps += time_ps - packet.grant[k]
        now = self.env._now  # type: ignore[union-attr]
        later = time_ps if time_ps > now else now
        if not channel.sink:
            channel.owner_free[vcs[k]] = time_ps
            if channel.starved:
                channel.starved = False
                channel.sender.poke(later)  # type: ignore[union-attr]
        left = path[k - 1]  # the buffer the tail has now left
        vc = vcs[k - 1]
        left.front_free[vc] = time_ps
        if left.waiting[vc]:
            left.receiver.poke(later)  # type: ignore[union-attr]
        if left.starved:
            left.starved = False
            left.sender.poke(now)  # type: ignore[union-attr]

    def delivered(self, packet: Packet, done_ps: int) -> None:
        """The tail of ``packet`` reaches its destination at ``done_ps`` (known now)."""
        parts = packet.parts
        count = 1 if parts is None else len(parts)
        extra = self.stats.extra  # UnitStats.add, inlined (once per packet or train)
        extra["packets"] = extra.get("packets", 0) + count
        extra["flits"] = extra.get("flits", 0) + packet.flits
        extra["packet_hops"] = extra.get("packet_hops", 0) + packet.hops * count
        if parts is None:
            on_done = packet.on_done
            if on_done is not None:
                if type(on_done) is _Delivery:
                    on_done.arrive(done_ps, 1)
                else:
                    on_done(done_ps)
            return
        # A train streams its packets back to back through the ejection port: each
        # packet's tail arrives when the flits up to it have followed the head.  Packets
        # of one transfer that follow each other in the train are reported together
        # (their last arrival and their count: all the transfer keeps of them).
        period, left = self.period_ps, packet.flits
        group, count, last = None, 0, 0
        for flits, _payload, on_done in parts:
            left -= flits
            if on_done is None:
                continue
            if on_done is group:
                count += 1
                last = done_ps - left * period
                continue
            if group is not None:
                group.arrive(last, count)
                group = None
            if type(on_done) is _Delivery:
                group, count, last = on_done, 1, done_ps - left * period
            else:
                on_done(done_ps - left * period)
        if group is not None:
            group.arrive(last, count)


def _link_dict(link: Channel, period_ps: int) -> dict[str, int]:
    return {"busy_ps": link.flits * period_ps, "held_ps": link.held_ps,
            "bytes": link.bytes, "flits": link.flits, "packets": link.packets}
