"""The DRAM controller's commit memo, request templates and refresh catch-up change no
number: every transaction's four phases, every counter and the final bank state are the
same with the memo on (default) and off, and with the command log on (which bypasses the
memo and books every refresh one by one)."""

from __future__ import annotations

import pytest
import simpy

from npusim.config.presets import load_preset
from npusim.hw.base import MemoryTransaction
from npusim.hw.memory.dram import DramChannel, DramConfig

pytestmark = pytest.mark.component


def _mix(value: int) -> int:
    value = (value * 0x9E3779B97F4A7C15 + 12345) & 0xFFFFFFFFFFFFFFFF
    return value ^ (value >> 29)


def _run(preset: str, memo: bool, log: bool) -> tuple:
    dram = DramChannel("dram", DramConfig.model_validate(load_preset(f"memory/{preset}")))
    env = simpy.Environment()
    dram.bind(env)
    if not memo:
        for controller in dram._controllers:
            controller.decisions = None
    if log:
        dram.enable_command_log()
    txns: list[MemoryTransaction] = []

    def stream(base: int, chunk: int, count: int, is_write: bool, gap: int):
        # A DMA-like initiator: up to 4 outstanding requests, a stream of chunks.
        inflight = []
        for i in range(count):
            txn = MemoryTransaction(base + i * chunk, chunk, is_write)
            txns.append(txn)
            inflight.append(env.process(dram.transact(txn)))
            if len(inflight) >= 4:
                yield inflight.pop(0)
            if gap:
                yield env.timeout(gap)
        yield env.all_of(inflight)

    def scattered(count: int, size: int):
        for i in range(count):
            txn = MemoryTransaction((_mix(i) % (1 << 26)) // size * size, size, i % 3 == 0)
            txns.append(txn)
            yield env.process(dram.transact(txn))

    env.process(stream(0, 256 << 10, 24, False, 0))
    env.process(stream(1 << 24, 16 << 10, 40, True, 1_000_000))
    env.process(stream((1 << 25) + 4096, 5000, 30, False, 0))  # unaligned, odd size
    env.process(scattered(60, 4096))

    def late():  # after a long idle time: the refresh catch-up
        yield env.timeout(200_000_000)
        yield from stream(1 << 23, 64 << 10, 6, False, 0)
        yield env.timeout(37_000_000)
        yield from stream(3 << 23, 64 << 10, 6, True, 0)

    env.process(late())
    env.run()
    banks = [(b.open_row, b.act_ok, b.pre_ok, b.col_ok)
             for c in dram._controllers for b in c.banks]
    return ([(t.begin_req_ps, t.end_req_ps, t.begin_resp_ps, t.end_resp_ps) for t in txns],
            dram.stats.as_dict(), banks, env.now)


@pytest.mark.parametrize("preset", ["hbm2e", "ddr4_3200", "lpddr5"])
def test_memo_changes_nothing(preset: str) -> None:
    reference = _run(preset, memo=False, log=False)
    assert _run(preset, memo=True, log=False) == reference
    assert _run(preset, memo=True, log=True) == reference
