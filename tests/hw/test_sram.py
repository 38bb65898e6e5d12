"""SRAM scratchpad: closed form, bank interleaving, tlm agreement and contention."""

import pytest
import simpy
from pydantic import ValidationError

from npusim.core import registry
from npusim.hw.base import AccessPattern, MemoryTransaction
from npusim.hw.memory.sram import Sram, SramConfig, bank_bytes

pytestmark = pytest.mark.component


def sram(**fields) -> Sram:
    base = {"capacity_bytes": "32MiB", "banks": 32, "bytes_per_cycle": 512,
            "interleave_bytes": 64, "freq_hz": "500MHz", "access_latency_cycles": 2}
    return Sram("sram", SramConfig(**{**base, **fields}))


def run_txns(mem: Sram, txns, outstanding: int = 1, start_gap_ps: int = 0) -> int:
    """Issue ``txns`` with at most ``outstanding`` in flight; return the makespan."""
    env = simpy.Environment()
    mem.bind(env)
    queue = iter(txns)

    def worker():
        for txn in queue:
            yield from mem.transact(txn)

    procs = [env.process(worker()) for _ in range(outstanding)]
    env.run(env.all_of(procs))
    return env.now


def test_closed_form_full_width_stream():
    mem = sram()
    size = 2 << 20
    # 2 MiB at 512 B/cycle = 4096 cycles + 2 latency, 2 ns per cycle at 500 MHz.
    assert mem.access_time_ps(size) == (4096 + 2) * 2000
    assert mem.access_time_ps(size, is_write=True) == mem.access_time_ps(size)
    assert mem.access_time_ps(size, pattern=AccessPattern("random", 4096)) == mem.access_time_ps(size)
    assert mem.access_time_ps(0) == 0
    assert mem.capacity_bytes == 32 << 20
    assert mem.peak_bandwidth_bps == 512 * 500_000_000


def test_small_access_uses_only_its_banks():
    mem = sram()
    # 64 B land in one bank moving 16 B/cycle: 4 cycles, not 1.
    assert mem.data_cycles(64) == 4
    # One full stripe (32 banks x 64 B) runs at full width.
    assert mem.data_cycles(2048) == 4
    assert mem.data_cycles(2048 + 64) == 8  # one bank gets a second word


def test_bank_bytes_partitions_unaligned_ranges():
    for addr, size in [(0, 1), (10, 100), (63, 2), (1000, 5000), (64 * 31, 64 * 40 + 7)]:
        shares = bank_bytes(addr, size, 8, 64)
        assert sum(shares) == size
        expected = [0] * 8
        for byte in range(addr, addr + size):
            expected[(byte // 64) % 8] += 1
        assert shares == expected


def test_tlm_single_transaction_matches_closed_form():
    mem = sram()
    txn = MemoryTransaction(addr=0, size_bytes=1 << 20)
    assert run_txns(mem, [txn]) == mem.access_time_ps(1 << 20)
    assert txn.begin_req_ps <= txn.end_req_ps <= txn.begin_resp_ps <= txn.end_resp_ps
    assert txn.latency_ps == mem.access_time_ps(1 << 20)
    assert mem.stats.bytes_read == 1 << 20 and mem.stats.transactions == 1


def test_tlm_chunked_stream_within_3_percent_of_closed_form():
    mem = sram()
    size, chunk = 2 << 20, 16 << 10
    txns = [MemoryTransaction(addr=o, size_bytes=chunk, is_write=True) for o in range(0, size, chunk)]
    makespan = run_txns(mem, txns, outstanding=4)
    analytic = mem.access_time_ps(size, is_write=True)
    assert abs(makespan - analytic) / analytic < 0.03
    assert mem.stats.bytes_written == size and mem.stats.transactions == len(txns)


def test_concurrent_requests_share_bandwidth():
    mem = sram()
    size = 1 << 20
    alone = run_txns(mem, [MemoryTransaction(0, size)])
    together = run_txns(mem, [MemoryTransaction(0, size), MemoryTransaction(size, size)],
                        outstanding=2)
    assert together == pytest.approx(2 * alone, rel=0.01)


def test_disjoint_banks_proceed_in_parallel():
    mem = sram()
    alone = run_txns(mem, [MemoryTransaction(0, 64)])
    # Same bank: serialised; different banks: in parallel.
    same = run_txns(mem, [MemoryTransaction(0, 64), MemoryTransaction(2048, 64)], outstanding=2)
    apart = run_txns(mem, [MemoryTransaction(0, 64), MemoryTransaction(64, 64)], outstanding=2)
    assert apart == alone and same == alone + 4 * 2000  # waits for bank 0's 4 cycles


def test_transact_requires_bind():
    mem = sram()
    with pytest.raises(RuntimeError, match="bind"):
        next(mem.transact(MemoryTransaction(0, 64)))


def test_registered():
    assert registry._ENTRIES["memory"]["sram"].impl is Sram


@pytest.mark.parametrize("fields, needle", [
    ({"capacity_bytes": 0}, "capacity_bytes"),
    ({"capacity_bytes": "-4MiB"}, "non-negative"),
    ({"capacity_bytes": "12XB"}, "12XB"),
    ({"banks": 0}, "banks"),
    ({"bytes_per_cycle": 0}, "bytes_per_cycle"),
    ({"access_latency_cycles": -1}, "access_latency_cycles"),
    ({"bank": 4}, "bank"),
])
def test_invalid_config(fields, needle):
    base = {"capacity_bytes": "32MiB"}
    with pytest.raises(ValidationError, match=needle):
        SramConfig(**{**base, **fields})
