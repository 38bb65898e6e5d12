"""Point-to-point link: PCIe, die-to-die (UCIe), a DIMM bus.

A link has two ends and, per direction, a raw signalling rate reduced by the line code
(``encoding_efficiency``: 128b/130b = 0.9846 for PCIe 3.0-5.0) and by the protocol
(``protocol_efficiency``: flit/TLP framing, flow control; 1.0 unless a preset documents a
value).  Optionally each ``max_payload_bytes`` packet carries ``packet_overhead_bytes`` of
header/CRC on the wire, so small transfers pay relatively more (a 4-byte write still
pays a whole header)::

    wire_bytes = size + ceil(size / max_payload_bytes) * packet_overhead_bytes
    effective_bandwidth = raw_bandwidth_bps * encoding_efficiency * protocol_efficiency
    transfer_time = latency_ps + wire_bytes / effective_bandwidth

**Directions.**  The two ends are named by the device; a transfer goes *forward*
(direction 0) when ``str(src) <= str(dst)`` and *backward* (direction 1) otherwise, so the
same pair of names always maps to the same direction regardless of call order.  A
full-duplex link has one channel per direction; a half-duplex link (``full_duplex:
false``) has one channel shared by both.

**Transaction level** (``transfer``): each channel is a SimPy ``Resource`` of capacity 1.
A transfer holds its channel for its serialisation time (``wire_bytes /
effective_bandwidth``), then releases it and waits the pipelined ``latency_ps``; so
concurrent transfers in one direction serialise first-come first-served (two at once
finish after ~2x the serialisation time), transfers in opposite directions of a
full-duplex link do not interact, and the latency of back-to-back transfers overlaps.
Devices that want packet-level interleaving of concurrent transfers split them into
chunks (burst groups) before calling ``transfer``.
"""

from __future__ import annotations

import math
from typing import Any, Generator, Literal

from pydantic import Field

from npusim.core.registry import PartConfig, register
from npusim.core.units import PS_PER_S, BandwidthBps, Bytes, TimePs
from npusim.hw.base import Interconnect, UnitStats


class LinkConfig(PartConfig):
    """A point-to-point link (PCIe, die-to-die, DIMM bus)."""

    kind: Literal["link"] = "link"
    latency_ps: TimePs = Field(
        description="One-way latency from the first byte sent to the first byte delivered "
                    "(PHY + controller + flight), e.g. '500ns'.")
    raw_bandwidth_bps: BandwidthBps = Field(
        gt=0, description="Raw signalling rate per direction before line coding, e.g. "
                          "'512Gb/s' for PCIe 5.0 x16 (32 GT/s x 16 lanes).")
    encoding_efficiency: float = Field(
        1.0, gt=0, le=1, description="Line-code efficiency: 128/130 = 0.9846 for PCIe 3.0-5.0, "
                                     "0.8 for 8b/10b (PCIe 1-2), 1.0 if none.")
    protocol_efficiency: float = Field(
        1.0, gt=0, le=1, description="Fraction left after protocol framing / flow control "
                                     "(TLP/DLLP, flit headers). 1.0 unless a preset documents "
                                     "a measured or derived value.")
    packet_overhead_bytes: int = Field(
        0, ge=0, description="Header/CRC bytes per packet of max_payload_bytes on the wire "
                             "(e.g. ~24 B per PCIe TLP); 0 to fold protocol cost into "
                             "protocol_efficiency only.")
    max_payload_bytes: Bytes = Field(
        256, gt=0, description="Largest payload per packet (PCIe Max_Payload_Size; 256 B is "
                               "typical of server root complexes).")
    full_duplex: bool = Field(
        True, description="Independent channels per direction (true for PCIe and UCIe); "
                          "false: both directions share one channel (a DIMM data bus).")


@register("interconnect", LinkConfig)
class Link(Interconnect):
    """Point-to-point link: latency + bytes / (raw * encoding * protocol efficiency)."""

    def __init__(self, name: str, config: LinkConfig):
        super().__init__(name, config)
        self.effective_bandwidth_bps = (config.raw_bandwidth_bps * config.encoding_efficiency
                                        * config.protocol_efficiency)
        self._channels: list[Any] = []
        self._direction_stats = [UnitStats(), UnitStats()]

    # -- closed form -------------------------------------------------------------
    def direction(self, src: Any, dst: Any) -> int:
        """0 (forward) if ``str(src) <= str(dst)`` else 1 (backward)."""
        return 0 if str(src) <= str(dst) else 1

    def wire_bytes(self, size_bytes: int) -> int:
        """Bytes on the wire for a ``size_bytes`` payload, packet headers included."""
        if size_bytes <= 0:
            return 0
        packets = -(-size_bytes // self.config.max_payload_bytes)
        return size_bytes + packets * self.config.packet_overhead_bytes

    def serialization_ps(self, size_bytes: int) -> int:
        """Time the channel is occupied by a ``size_bytes`` payload."""
        wire = self.wire_bytes(size_bytes)
        return math.ceil(wire * PS_PER_S / self.effective_bandwidth_bps) if wire else 0

    def transfer_time_ps(self, src: Any, dst: Any, size_bytes: int) -> int:
        """Uncontended time: latency + serialisation (0 for an empty transfer)."""
        if size_bytes <= 0:
            return 0
        return self.config.latency_ps + self.serialization_ps(size_bytes)

    # -- transaction level -------------------------------------------------------
    def bind(self, env: Any) -> None:
        import simpy

        super().bind(env)
        count = 2 if self.config.full_duplex else 1
        self._channels = [simpy.Resource(env, capacity=1) for _ in range(count)]

    def reset_stats(self) -> None:
        super().reset_stats()
        self._direction_stats = [UnitStats(), UnitStats()]

    def transfer(self, src: Any, dst: Any, size_bytes: int) -> Generator[Any, Any, None]:
        """SimPy process body: hold the direction's channel for the serialisation time,
        then wait the latency (see the module docstring)."""
        env = self.env
        if env is None:
            raise RuntimeError(f"{self.name}: transfer() called before bind(env)")
        if size_bytes <= 0:
            return
        direction = self.direction(src, dst)
        channel = self._channels[direction if self.config.full_duplex else 0]
        busy = self.serialization_ps(size_bytes)
        with channel.request() as slot:
            yield slot
            yield env.timeout(busy)
        for stats in (self.stats, self._direction_stats[direction]):
            stats.busy_ps += busy
            stats.bytes_read += size_bytes  # same convention as Device.account_transfer
            stats.transactions += 1
        yield env.timeout(self.config.latency_ps)

    def link_stats(self) -> dict[str, dict[str, int]]:
        """Per-direction counters (``0`` forward, ``1`` backward), for the collectors."""
        return {str(d): s.as_dict() for d, s in enumerate(self._direction_stats)}
