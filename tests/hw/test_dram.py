"""DRAM channel: components.md numbers, JEDEC timing constraints, FR-FCFS, backpressure,
address mapping, four-phase handshake, tlm vs analytic."""

from __future__ import annotations

import pytest
import simpy
from pydantic import ValidationError

from npusim.config.presets import load_preset
from npusim.hw.base import AccessPattern, MemoryTransaction
from npusim.hw.memory.dram import DramChannel, DramConfig
from npusim.hw.memory.dram_mapping import AddressMapping, parse_mapping_tokens
from npusim.validation.benches.dram import dram_stream, run_streams

pytestmark = pytest.mark.component

PRESETS = ["ddr4_3200", "hbm2", "hbm2e", "hbm3", "lpddr5", "lpddr5x", "gddr7"]


def make(preset: str = "ddr4_3200", **overrides) -> DramChannel:
    data = load_preset(f"memory/{preset}")
    data.update(overrides)
    return DramChannel("dram", DramConfig.model_validate(data))


def bound(dram: DramChannel) -> simpy.Environment:
    env = simpy.Environment()
    dram.bind(env)
    return env


def issue(env: simpy.Environment, dram: DramChannel, addrs, at: int = 0, size: int | None = None,
          is_write: bool = False) -> list[MemoryTransaction]:
    """Submit one transaction per address at time ``at`` (non-blocking) and return them."""
    txns = [MemoryTransaction(a, size or dram.burst_bytes, is_write) for a in addrs]

    def proc():
        if at > env.now:
            yield env.timeout(at - env.now)
        for txn in txns:
            dram.submit(txn)
        yield env.timeout(0)

    env.process(proc())
    return txns


def cycles(dram: DramChannel, name: str) -> int:
    return getattr(dram.config, f"{name}_cycles") * dram.config.tck_ps


# -- components.md reference numbers (fast sizes) -----------------------------------------

REFERENCES = [
    ("ddr4_3200", "sequential", 64, "512KiB", 24.2),
    ("ddr4_3200", "random", 64, "512KiB", 20.6),
    ("ddr4_3200", "random", 4096, "2MiB", 23.6),
    ("hbm2", "sequential", 64, "512KiB", 29.4),
    ("hbm2", "random", 4096, "2MiB", 29.1),
]


@pytest.mark.parametrize("preset,pattern,request_bytes,total,reference", REFERENCES)
def test_components_md_bandwidth_within_10_percent(preset, pattern, request_bytes, total, reference):
    result = dram_stream(preset=f"memory/{preset}", pattern=pattern, request_bytes=request_bytes,
                         total_bytes=total, queue_depth=32, mode="tlm")
    assert abs(result["bandwidth_gbps"] - reference) / reference < 0.10, result


def test_sequential_stream_hits_open_rows_and_random_64b_does_not():
    seq = dram_stream(preset="memory/ddr4_3200", pattern="sequential", total_bytes="128KiB")
    rnd = dram_stream(preset="memory/ddr4_3200", pattern="random", total_bytes="128KiB")
    assert seq["row_hit_rate"] > 0.95 and rnd["row_hit_rate"] < 0.05


# -- configuration ------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_validates_and_reports_its_peak(preset):
    dram = make(preset)
    cfg = dram.config
    assert dram.peak_bandwidth_bps == cfg.channels * cfg.burst_bytes * 10**12 // (cfg.tbl_cycles * cfg.tck_ps)
    assert 0 < dram.access_time_ps(1 << 20)


@pytest.mark.unit
def test_peak_bandwidth_matches_the_datasheets():
    assert make("ddr4_3200").peak_bandwidth_bps == 25_600_000_000
    assert make("hbm2").peak_bandwidth_bps == 32_000_000_000
    assert make("hbm2e", channels=16).peak_bandwidth_bps == 409_600_000_000
    assert make("hbm3", channels=32).peak_bandwidth_bps == 819_200_000_000


@pytest.mark.unit
def test_validation_messages_are_specific():
    data = load_preset("memory/hbm2")
    with pytest.raises(ValidationError, match=r"trc_cycles \(40\) < tras_cycles \+ trp_cycles"):
        DramConfig.model_validate({**data, "trc_cycles": 40})
    with pytest.raises(ValidationError, match="ranks = 3 must be a power of two"):
        DramConfig.model_validate({**data, "ranks": 3})
    with pytest.raises(ValidationError, match="less than or equal to 1024"):
        DramConfig.model_validate({**data, "channels": 2048})
    with pytest.raises(ValidationError, match="trfc_ps .* must be < trefi_ps"):
        DramConfig.model_validate({**data, "trfc_ps": "5us"})
    with pytest.raises(ValidationError, match="has no 'ra' field"):
        DramConfig.model_validate({**data, "ranks": 2, "address_mapping": "ro-ba-co-bg"})
    with pytest.raises(ValidationError, match="unknown field 'xx'"):
        DramConfig.model_validate({**data, "address_mapping": "ro-xx-co"})
    with pytest.raises(ValidationError, match="tck_ps"):
        DramConfig.model_validate({**data, "tck_ps": "fast"})
    assert DramConfig.model_validate({**data, "tck_ps": "1ns", "trefi_ps": "3.9us"}).trefi_ps == 3_900_000


# -- address mapping ----------------------------------------------------------------------

SIZES = {"channels": 2, "ranks": 2, "bank_groups": 4, "banks_per_group": 4, "rows": 1024, "columns": 128}


@pytest.mark.unit
def test_three_mapping_spellings_are_equivalent():
    a = AddressMapping("ro-ba-ra-co-ch-bg", SIZES, 64)
    b = AddressMapping("robaracochbg", SIZES, 64)
    c = AddressMapping("RoBaRaCoChBg", SIZES, 64)
    for addr in range(0, 1 << 22, 4160):
        assert a.decode(addr) == b.decode(addr) == c.decode(addr)
    assert parse_mapping_tokens("ro-co:3-ch-co-bg") == [("ro", None), ("co", 3), ("ch", None),
                                                        ("co", None), ("bg", None)]


@pytest.mark.unit
def test_mapping_bit_order_and_split_fields():
    m = AddressMapping("ro-ba-ra-co-ch-bg", SIZES, 64)
    assert [m.decode(64 * i).bank_group for i in range(5)] == [0, 1, 2, 3, 0]
    assert m.decode(256).channel == 1 and m.channel_interleave_bytes == 256
    split = AddressMapping("ro-ba-ra-co-ch-co:2-bg", SIZES, 64)
    assert split.channel_interleave_bytes == 1024  # 4 bank groups x 4 columns x 64 B
    assert split.decode(1024).channel == 1 and split.decode(256).column == 1
    assert m.capacity_bytes == 2 * 2 * 16 * 1024 * 128 * 64
    coord = m.decode(m.encode(1, 1, 3, 2, 77, 100))
    assert (coord.channel, coord.rank, coord.bank_group, coord.bank, coord.row, coord.column) == (1, 1, 3, 2, 77, 100)


@pytest.mark.unit
@pytest.mark.parametrize("spec,error", [
    ("ro-ba-co-bg", "no 'ch' field"),
    ("ro-ba-ra-co-co-ch-bg", "give all but one occurrence a width"),
    ("ro-ba-ra-co:9-ch-bg", "add up to 9 bits"),
    ("ro ba ra co ch bg zz", "unknown field 'zz'"),
    ("ro+ba", "cannot read address_mapping"),
])
def test_bad_mapping_strings_are_explained(spec, error):
    with pytest.raises(ValueError, match=error):
        AddressMapping(spec, SIZES, 64)


@pytest.mark.unit
def test_segments_match_a_burst_by_burst_walk():
    m = AddressMapping("ro-ba-ra-co:4-ch-co-bg", SIZES, 64)
    for addr, size in [(0, 4096), (192, 5000), (1 << 20, 64), (12345 * 64, 70000), (4032, 128)]:
        expected: dict[tuple, int] = {}
        for burst in range(addr // 64, (addr + size - 1) // 64 + 1):
            c = m.decode(burst * 64)
            key = (c.channel, c.rank, c.bank_group, c.bank, c.row)
            expected[key] = expected.get(key, 0) + 1
        got = {(s.channel, s.rank, s.bank_group, s.bank, s.row): s.bursts for s in m.segments(addr, size)}
        assert got == expected


@pytest.mark.unit
def test_burst_group_cost_scales_with_rows_not_bursts():
    dram = make("ddr4_3200")
    segments = dram.mapping.segments(0, 64 << 20)  # 1 Mi bursts
    assert len(segments) == (64 << 20) // dram.config.row_bytes  # one per (bank, row) touched
    assert len(dram.mapping.segments(0, 4096)) == 4  # bank-group bits lowest: 4 groups x 16 bursts


# -- timing constraints (refresh off unless tested) -------------------------------------

def quiet(preset: str = "ddr4_3200", **overrides) -> DramChannel:
    return make(preset, trefi_ps=0, ranks=1, **overrides)


def act_times(log) -> list[int]:
    return sorted(c.time_ps for c in log if c.command == "ACT")


def test_tfaw_limits_four_activates_per_window():
    dram = quiet()
    env = bound(dram)
    log = dram.enable_command_log()
    # Five banks, all in different bank groups where possible: only tRRD_S and tFAW apply.
    addrs = [dram.encode(bank_group=g % 4, bank=g // 4) for g in range(5)]
    issue(env, dram, addrs)
    env.run()
    acts = act_times(log)
    assert [b - a for a, b in zip(acts, acts[1:4])] == [cycles(dram, "trrd_s")] * 3
    assert acts[4] - acts[0] == cycles(dram, "tfaw")


def test_trrd_long_within_a_bank_group_short_across():
    for same_group, name in ((True, "trrd_l"), (False, "trrd_s")):
        dram = quiet()
        env = bound(dram)
        log = dram.enable_command_log()
        second = dram.encode(bank_group=0, bank=1) if same_group else dram.encode(bank_group=1)
        issue(env, dram, [dram.encode(), second])
        env.run()
        acts = act_times(log)
        assert acts[1] - acts[0] == cycles(dram, name)


def test_tccd_long_within_a_bank_group_short_across():
    dram = quiet()
    env = bound(dram)
    a, b, c = dram.encode(0, 0, 0, 0), dram.encode(0, 0, 1, 0), dram.encode(0, 0, 0, 1)
    issue(env, dram, [a, b, c])  # open three rows
    same = issue(env, dram, [a, c], at=1_000_000)  # row hits, same bank group
    cross = issue(env, dram, [a, b], at=2_000_000)  # row hits, different bank groups
    env.run()
    assert same[1].begin_resp_ps - same[0].begin_resp_ps == cycles(dram, "tccd_l")
    assert cross[1].begin_resp_ps - cross[0].begin_resp_ps == max(cycles(dram, "tccd_s"), cycles(dram, "tbl"))


def test_row_hit_miss_and_conflict_latencies():
    dram = quiet()
    env = bound(dram)
    row0, row1 = dram.encode(row=5), dram.encode(row=6)
    (closed,) = issue(env, dram, [row0])
    (hit,) = issue(env, dram, [row0], at=1_000_000)
    (conflict,) = issue(env, dram, [row1], at=2_000_000)
    env.run()
    burst = max(cycles(dram, "tbl"), cycles(dram, "tccd_s"))
    cl, trcd, trp = cycles(dram, "cl"), cycles(dram, "trcd"), cycles(dram, "trp")
    assert hit.latency_ps == cl + burst
    assert closed.latency_ps == trcd + cl + burst
    assert conflict.latency_ps == trp + trcd + cl + burst


def test_refresh_blocks_the_rank_for_trfc():
    dram = make("ddr4_3200", ranks=1)
    env = bound(dram)
    trefi, trfc = dram.config.trefi_ps, dram.config.trfc_ps
    (before,) = issue(env, dram, [dram.encode(row=1)], at=trefi // 2)
    (during,) = issue(env, dram, [dram.encode(row=2)], at=trefi)
    env.run()
    assert before.latency_ps == cycles(dram, "trp") + cycles(dram, "trcd") + cycles(dram, "cl") + cycles(dram, "tbl") \
        or before.latency_ps == cycles(dram, "trcd") + cycles(dram, "cl") + cycles(dram, "tbl")
    assert during.latency_ps >= trfc + cycles(dram, "trcd") + cycles(dram, "cl")
    assert dram.stats.extra["refreshes"] == 1


def test_write_then_read_pays_turnaround():
    dram = quiet()
    env = bound(dram)
    a, b = dram.encode(bank_group=0), dram.encode(bank_group=1)
    issue(env, dram, [a, b])  # open rows
    (write,) = issue(env, dram, [a], at=1_000_000, is_write=True)
    (read,) = issue(env, dram, [b], at=1_000_000)
    env.run()
    assert read.begin_resp_ps >= write.end_resp_ps + cycles(dram, "twtr")
    assert dram.stats.bytes_written == 64 and dram.stats.bytes_read == 3 * 64


# -- scheduling and handshake -------------------------------------------------------------

def test_fr_fcfs_serves_a_younger_row_hit_before_an_older_miss():
    dram = quiet()
    env = bound(dram)
    issue(env, dram, [dram.encode(row=1)])  # open row 1 of bank 0
    older_miss, younger_hit = issue(env, dram, [dram.encode(row=2), dram.encode(row=1, column=1)], at=1_000_000)
    env.run()
    assert younger_hit.end_resp_ps < older_miss.begin_resp_ps


def test_fcfs_order_kept_when_nothing_is_ready_sooner():
    dram = quiet()
    env = bound(dram)
    txns = issue(env, dram, [dram.encode(bank_group=i % 4, column=i // 4) for i in range(16)])
    env.run()
    starts = [t.begin_resp_ps for t in txns]
    assert starts == sorted(starts)


def test_full_queue_delays_end_req():
    # Entries free when a request is committed to the command schedule, which runs at
    # most tRP + tFAW + tRCD ahead of the data bus; beyond that, requests wait.
    dram = quiet(queue_depth=4)
    env = bound(dram)
    txns = issue(env, dram, [dram.encode(bank_group=i % 4, column=i // 4) for i in range(64)])
    env.run()
    assert all(t.end_req_ps == t.begin_req_ps for t in txns[:4])
    assert txns[-1].end_req_ps > txns[-1].begin_req_ps
    assert [t.end_req_ps for t in txns] == sorted(t.end_req_ps for t in txns)  # first come, first accepted


def test_burst_group_larger_than_the_queue_waits_for_an_empty_queue():
    dram = quiet(queue_depth=8)
    env = bound(dram)
    small = issue(env, dram, [dram.encode(bank_group=i % 4, column=i // 4) for i in range(40)])
    (big,) = issue(env, dram, [dram.encode(row=2)], size=4096)
    env.run()
    assert big.end_req_ps > big.begin_req_ps
    assert big.end_req_ps >= max(t.end_req_ps for t in small)
    assert big.begin_resp_ps > max(t.begin_resp_ps for t in small)


def test_transact_blocks_and_fills_four_phases_in_order():
    dram = make("hbm2e", channels=4, queue_depth=8)
    env = bound(dram)
    done = []

    def initiator(seed: int):
        for i in range(40):
            addr = ((seed * 7919 + i * 104729) % 4096) * 512
            txn = MemoryTransaction(addr, 64 << (i % 7), is_write=(i % 3 == 0))
            done.append((yield from dram.transact(txn)))

    for seed in range(4):
        env.process(initiator(seed))
    env.run()
    assert len(done) == 160
    for txn in done:
        assert 0 <= txn.begin_req_ps <= txn.end_req_ps <= txn.begin_resp_ps <= txn.end_resp_ps
    assert dram.stats.transactions == 160
    assert dram.stats.bytes_read + dram.stats.bytes_written == sum(t.size_bytes for t in done)


def test_same_inputs_give_identical_results():
    first = dram_stream(preset="memory/ddr4_3200", pattern="random", total_bytes="64KiB", seed=3)
    second = dram_stream(preset="memory/ddr4_3200", pattern="random", total_bytes="64KiB", seed=3)
    assert first == second


# -- tlm vs analytic --------------------------------------------------------------------

@pytest.mark.parametrize("preset,channels,request_bytes", [("ddr4_3200", 1, 4096), ("hbm2", 1, 4096),
                                                     ("hbm2e", 16, 16384), ("lpddr5", 4, 4096)])
def test_tlm_and_analytic_agree_within_3_percent_on_a_stream(preset, channels, request_bytes):
    common = dict(preset=f"memory/{preset}", channels=channels, pattern="sequential",
                  request_bytes=request_bytes, total_bytes="2MiB")
    tlm = dram_stream(mode="tlm", **common)["time_ps"]
    analytic = dram_stream(mode="analytic", **common)["time_ps"]
    assert abs(tlm - analytic) / analytic < 0.03


def test_analytic_random_is_slower_than_sequential_and_close_to_tlm():
    dram = make("hbm2")
    seq = dram.access_time_ps(2 << 20, pattern=AccessPattern("sequential", 4096))
    rnd = dram.access_time_ps(2 << 20, pattern=AccessPattern("random", 4096))
    assert rnd > seq
    tlm = dram_stream(preset="memory/hbm2", pattern="random", request_bytes=4096, total_bytes="2MiB")
    assert abs(tlm["time_ps"] - rnd) / rnd < 0.05


def test_two_initiators_on_one_channel_take_longer_than_analytic_for_one():
    dram = make("hbm2")
    size, request = 1 << 20, 4096
    alone = dram.access_time_ps(size, pattern=AccessPattern("sequential", request))
    streams = [[base + i * request for i in range(size // request)] for base in (0, 256 << 20)]
    txns = run_streams(dram, streams, request)
    contended = max(t.end_resp_ps for t in txns)
    assert contended > 1.8 * alone
    per_initiator = {name: max(t.end_resp_ps for t in txns if t.initiator == name) for name in ("init0", "init1")}
    assert min(per_initiator.values()) > 1.5 * alone


def test_starvation_limit_bounds_how_often_an_old_miss_is_overtaken():
    dram = quiet(starvation_limit=3)
    env = bound(dram)
    issue(env, dram, [dram.encode(row=1)])  # open row 1 of bank 0
    miss, *hits = issue(env, dram, [dram.encode(row=2)] + [dram.encode(row=1, column=c) for c in range(1, 11)],
                        at=1_000_000)
    env.run()
    overtook = sum(1 for hit in hits if hit.begin_resp_ps < miss.begin_resp_ps)
    assert overtook == 3


@pytest.mark.unit
def test_registered_as_memory_kind_dram():
    from npusim.core import registry

    entry = registry._ENTRIES["memory"]["dram"]
    assert entry.impl is DramChannel and entry.config is DramConfig
