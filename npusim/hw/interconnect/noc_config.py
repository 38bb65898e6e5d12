"""The NoC's configuration (:class:`NocConfig`): topology, clock, flit size, router and
link timing, with the derived link bandwidth; the network itself is
:class:`npusim.hw.interconnect.noc.MeshNoc`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, model_serializer, model_validator

from npusim.core.registry import PartConfig
from npusim.core.units import BandwidthBps, Bytes, FreqHz

#: Largest relative difference accepted between ``link_bandwidth_bps`` and
#: ``flit_bytes * freq_hz`` (the simulated bandwidth is always the latter).
BANDWIDTH_MATCH_TOLERANCE = 0.01



class NocConfig(PartConfig):
    """On-chip network: topology, clock, flit size, router and link timing.

    Defaults: 8x8 mesh at 500 MHz with 32-byte flits (16 GB/s per link and direction,
    the low end of NpuSim Table 3's "16-480 GB/s x4"); 3-cycle routers and 1-cycle links
    were set from BookSim2's 8x8-mesh zero-load latency of 27.1 cycles (components.md),
    the only calibrated values.  One 8-flit VC per input by default (a wormhole router);
    the BookSim reference router is ``virtual_channels=4, buffer_flits=8``.
    """

    kind: Literal["noc"] = "noc"
    topology: Literal["mesh", "ring", "linear"] = Field(
        "mesh", description="Router graph: 'mesh' (2D, XY routing), 'ring' (wrap-around, "
                            "shortest direction) or 'linear' (a line). Ring and linear "
                            "connect nodes 0..N-1 in index order.")
    # At most 256 x 256 (65,536 nodes): the router graph is built eagerly, and a
    # 1000 x 1000 mesh would take gigabytes before the run starts.
    width: int = Field(8, ge=1, le=256, description="Nodes per row (mesh X size, at most "
                                                    "256); node i sits at x = i % width, "
                                                    "y = i // width.")
    height: int = Field(8, ge=1, le=256, description="Number of rows (mesh Y size, at most 256).")
    freq_hz: FreqHz = Field(500_000_000, description="Router clock, e.g. '500MHz' (NpuSim "
                                                     "Table 3 core frequency).")
    flit_bytes: Bytes | None = Field(
        None, gt=0, description="Bytes per flit; a link moves one flit per cycle. Derived "
                                "from link_bandwidth_bps / freq_hz when omitted (and then "
                                "written as null in config.resolved.yaml); 32 B if both are "
                                "omitted.")
    link_bandwidth_bps: BandwidthBps | None = Field(
        None, gt=0, description="Bandwidth of one link in one direction, e.g. '16GB/s' "
                                "(NpuSim Table 3 'x4' = one such link per mesh direction). "
                                "Derived as flit_bytes * freq_hz when omitted (and then "
                                "written as null in config.resolved.yaml); must agree with "
                                "it within 1% when both are given.")
    router_latency_cycles: int = Field(
        3, ge=0, description="Router pipeline cycles a packet head spends in each router it "
                             "passes (route, allocation, switch traversal), source and "
                             "destination routers included. Calibrated: 3 (BookSim2 "
                             "zero-load 27.1 cycles on 8x8).")
    link_latency_cycles: int = Field(
        1, ge=0, description="Cycles for a flit to cross one link, injection and ejection "
                             "channels included. Calibrated: 1.")
    buffer_flits: int = Field(
        8, ge=1, description="Depth (flits) of each virtual-channel buffer at a router "
                             "input (BookSim reference: 8). Credit flow control: a packet "
                             "only enters a VC with room for it; a packet longer than one "
                             "buffer keeps its upstream VCs locked while its head is blocked.")
    virtual_channels: int = Field(
        1, ge=1, description="Virtual channels per router input port (and per link), each "
                             "with its own buffer_flits buffer. 1 (default) is a plain "
                             "wormhole router; BookSim reference: 4. More VCs relieve "
                             "head-of-line blocking and raise saturation throughput.")
    credit_delay_cycles: int = Field(
        1, ge=0, description="Cycles from a flit leaving a buffer until the sender may reuse "
                             "its slot (the credit's trip back over the link). Assumption: "
                             "1, one link traversal as in BookSim with 1-cycle channels.")
    max_packet_bytes: Bytes = Field(
        4096, gt=0, description="Largest payload of one packet; a transfer is cut into "
                                "packets of this size (assumption: 4 KiB, NpuSim gives none).")
    header_flits: int = Field(
        0, ge=0, description="Extra flits per packet carrying no payload (0: the head flit "
                             "carries data, as in BookSim).")

    # Which of flit_bytes / link_bandwidth_bps this config derived rather than was given:
    # they are written as null (config.resolved.yaml, a sweep's configs), so the written
    # config re-derives them and an override of the other or of freq_hz stays consistent.
    _derived_fields: tuple[str, ...] = PrivateAttr(())

    @model_serializer(mode="wrap")
    def _dump_given_link_fields(self, handler):
        data = handler(self)
        for name in self._derived_fields:
            data[name] = None
        return data

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
        if abs(implied - bandwidth) > BANDWIDTH_MATCH_TOLERANCE * bandwidth \
                and self.flit_bytes is None:
            # Only bandwidth and clock were given: the flit they imply is not whole bytes.
            raise ValueError(
                f"link_bandwidth_bps ({bandwidth} B/s) at freq_hz {self.freq_hz} Hz is "
                f"{bandwidth / self.freq_hz:.4g} bytes per cycle, and a link moves one whole "
                f"flit per cycle ({flit} B gives {implied} B/s); give link_bandwidth_bps a "
                f"whole number of bytes per cycle (e.g. {implied} B/s), or give flit_bytes "
                "with link_bandwidth_bps: null to derive the bandwidth from the clock")
        if abs(implied - bandwidth) > BANDWIDTH_MATCH_TOLERANCE * bandwidth:
            raise ValueError(
                f"link_bandwidth_bps ({bandwidth} B/s) does not match flit_bytes x freq_hz "
                f"({flit} B x {self.freq_hz} Hz = {implied} B/s); a link moves one flit per "
                "cycle, so give only one of them (null the other) or make them agree")
        if self.topology == "ring" and self.width * self.height < 3:
            raise ValueError(f"a ring needs at least 3 nodes, got width x height = "
                             f"{self.width * self.height}")
        # Frozen model: fill the derived fields in place, for the parts that read them.
        self._derived_fields = tuple(name for name in ("flit_bytes", "link_bandwidth_bps")
                                     if getattr(self, name) is None)
        object.__setattr__(self, "flit_bytes", flit)
        object.__setattr__(self, "link_bandwidth_bps", bandwidth)
        return self

    @property
    def num_nodes(self) -> int:
        return self.width * self.height
