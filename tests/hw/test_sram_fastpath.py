"""The SRAM's shortcuts for whole-round chunks (all banks in step) give the same phase
times as reserving every bank one by one, also when mixed with partial accesses."""

from __future__ import annotations

import pytest
import simpy

from npusim.core.units import cycles_to_ps
from npusim.hw.base import MemoryTransaction
from npusim.hw.memory.sram import Sram, SramConfig, bank_bytes

pytestmark = pytest.mark.component


def _reference(cfg: SramConfig, requests: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Per-bank reservation, written out (the model of the module docstring)."""
    free = [0] * cfg.banks
    latency = cycles_to_ps(cfg.access_latency_cycles, cfg.freq_hz)
    out = []
    for now, addr, size in requests:
        shares = bank_bytes(addr, size, cfg.banks, cfg.interleave_bytes)
        starts = []
        ends = []
        for bank, nbytes in enumerate(shares):
            if nbytes:
                busy = cycles_to_ps(-(-nbytes * cfg.banks // cfg.bytes_per_cycle), cfg.freq_hz)
                start = max(free[bank], now)
                free[bank] = start + busy
                starts.append(start)
                ends.append(start + busy)
        out.append((min(starts) + latency, max([now] + ends) + latency, min(starts)))
    return out


def test_whole_round_shortcut_matches_per_bank_reservation() -> None:
    cfg = SramConfig(capacity_bytes=1 << 20)
    sram = Sram("sram", cfg)
    env = simpy.Environment()
    sram.bind(env)
    round_bytes = cfg.banks * cfg.interleave_bytes
    requests = []
    for i in range(60):
        size = [round_bytes * 4, 16384, 100, round_bytes, 4096 + 64][i % 5 if i % 7 else 2]
        addr = (i * 4096 + (64 if i % 11 == 0 else 0)) % (1 << 20)
        requests.append((i * 3000, addr, size))
    got = []

    def proc(now: int, addr: int, size: int):
        yield env.timeout(now - env.now)
        txn = MemoryTransaction(addr, size)
        sram_proc = sram.transact(txn)
        got.append(txn)
        yield from sram_proc

    def driver():
        for now, addr, size in requests:
            if now > env.now:
                yield env.timeout(now - env.now)
            env.process(proc(now, addr, size))
            yield env.timeout(0)

    env.process(driver())
    env.run()
    assert [(t.begin_resp_ps, t.end_resp_ps, t.end_req_ps) for t in got] == _reference(cfg, requests)
