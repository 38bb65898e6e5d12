"""Point-to-point link: PCIe 5.0 x16 reference bandwidth, presets, concurrency."""

import pytest
import simpy
from pydantic import ValidationError

from npusim.core import registry
from npusim.hw.interconnect.link import Link, LinkConfig
from npusim.validation.bench_registry import get_bench
from npusim.validation.benches.link import build_link

pytestmark = pytest.mark.component


def link(**fields) -> Link:
    base = {"latency_ps": "100ns", "raw_bandwidth_bps": "10GB/s"}
    return Link("l", LinkConfig(**{**base, **fields}))


def makespans(lk: Link, transfers) -> list[int]:
    """Start every (src, dst, size) at t=0; return each one's finish time."""
    env = simpy.Environment()
    lk.bind(env)
    ends = []

    def run(src, dst, size):
        yield from lk.transfer(src, dst, size)
        ends.append((src, dst, size, env.now))

    procs = [env.process(run(*t)) for t in transfers]
    env.run(env.all_of(procs))
    order = {t: i for i, t in enumerate(transfers)}
    return [end for *_, end in sorted(ends, key=lambda e: order[tuple(e[:3])])]


def test_pcie5_x16_reference_bandwidth():
    out = get_bench("link_transfer")(preset="links/pcie5_x16", size_bytes="256MiB")
    assert out["bandwidth_gbps"] == pytest.approx(63.0, rel=0.10)
    assert out["bandwidth_gbps"] == pytest.approx(63.0, rel=0.005)  # 64 GB/s x 128/130
    tlm = get_bench("link_transfer")(preset="links/pcie5_x16", size_bytes="256MiB", mode="tlm")
    assert tlm["bandwidth_gbps"] == pytest.approx(out["bandwidth_gbps"], rel=1e-6)


@pytest.mark.parametrize("preset, gbps", [("links/pcie4_x16", 31.5), ("links/d2d_ucie", 236.0)])
def test_other_presets(preset, gbps):
    out = get_bench("link_transfer")(preset=preset, size_bytes="256MiB")
    assert out["bandwidth_gbps"] == pytest.approx(gbps, rel=0.01)


def test_closed_form():
    lk = link(encoding_efficiency=0.8, protocol_efficiency=0.5)
    # 1 MB at 10 GB/s * 0.4 = 4 GB/s -> 250 us, + 100 ns latency.
    assert lk.transfer_time_ps("a", "b", 1_000_000) == 250_000_000 + 100_000
    assert lk.transfer_time_ps("a", "b", 0) == 0


def test_packet_overhead_penalises_small_transfers():
    lk = link(max_payload_bytes=256, packet_overhead_bytes=24)
    assert lk.wire_bytes(4) == 28 and lk.wire_bytes(512) == 560
    small = lk.serialization_ps(4) / 4
    large = lk.serialization_ps(1 << 20) / (1 << 20)
    assert small > 5 * large
    assert large == pytest.approx((256 + 24) / 256 * 1e12 / 10e9, rel=1e-3)


def test_tlm_matches_closed_form_uncontended():
    lk = link()
    assert makespans(lk, [("a", "b", 1 << 20)]) == [lk.transfer_time_ps("a", "b", 1 << 20)]
    assert lk.stats.bytes_read == 1 << 20 and lk.stats.transactions == 1


def test_same_direction_transfers_serialise():
    lk = link()
    size = 1 << 20
    ser, lat = lk.serialization_ps(size), lk.config.latency_ps
    first, second = makespans(lk, [("a", "b", size), ("a", "b", size + 1)])
    assert first == ser + lat
    assert second == pytest.approx(2 * ser + lat, rel=1e-6)


def test_full_duplex_directions_are_independent_half_duplex_share():
    size = 1 << 20
    duplex = link()
    assert makespans(duplex, [("a", "b", size), ("b", "a", size)]) == \
        [duplex.transfer_time_ps("a", "b", size)] * 2
    stats = duplex.link_stats()
    assert stats["0"]["bytes_read"] == size and stats["1"]["bytes_read"] == size
    half = link(full_duplex=False)
    ends = makespans(half, [("a", "b", size), ("b", "a", size)])
    assert max(ends) == 2 * half.serialization_ps(size) + half.config.latency_ps


def test_direction_does_not_depend_on_call_order():
    lk = link()
    assert lk.direction("gpu", "host") == 0 and lk.direction("host", "gpu") == 1
    makespans(lk, [("host", "gpu", 100)])
    assert lk.direction("gpu", "host") == 0  # unchanged by which direction was used first


def test_build_link_overrides_preset():
    lk = build_link("links/pcie5_x16", packet_overhead_bytes=24)
    assert lk.config.encoding_efficiency == pytest.approx(128 / 130, rel=1e-5)
    out = get_bench("link_transfer")(preset="links/pcie5_x16", packet_overhead_bytes=24)
    assert 55 < out["bandwidth_gbps"] < 60  # TLP overhead: ~0.91 of 63 GB/s


def test_registered():
    assert registry._ENTRIES["interconnect"]["link"].impl is Link


@pytest.mark.parametrize("fields, needle", [
    ({"latency_ps": "-5ns"}, "non-negative"),
    ({"raw_bandwidth_bps": 0}, "raw_bandwidth_bps"),
    ({"raw_bandwidth_bps": "12 parsecs"}, "bandwidth"),
    ({"encoding_efficiency": 1.2}, "encoding_efficiency"),
    ({"protocol_efficiency": 0}, "protocol_efficiency"),
    ({"max_payload_bytes": 0}, "max_payload_bytes"),
    ({"packet_overhead_bytes": -1}, "packet_overhead_bytes"),
])
def test_invalid_config(fields, needle):
    base = {"latency_ps": "100ns", "raw_bandwidth_bps": "10GB/s"}
    with pytest.raises(ValidationError, match=needle):
        LinkConfig(**{**base, **fields})
