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
        # The controllers are built at the first submission (not at bind) and take the
        # channel's memo then: switch it off on the channel.
        dram._decisions = None
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
    # The run really had the memo off (or on): a reference run with the memo on would
    # make every comparison below vacuous.
    assert dram._controllers
    assert all((c.decisions is None) == (not memo) for c in dram._controllers)
    banks = [(b.open_row, b.act_ok, b.pre_ok, b.col_ok)
             for c in dram._controllers for b in c.banks]
    return ([(t.begin_req_ps, t.end_req_ps, t.begin_resp_ps, t.end_resp_ps) for t in txns],
            dram.stats.as_dict(), banks, env.now)


@pytest.mark.parametrize("preset", ["hbm2e", "ddr4_3200", "lpddr5"])
def test_memo_changes_nothing(preset: str) -> None:
    reference = _run(preset, memo=False, log=False)
    assert _run(preset, memo=True, log=False) == reference
    assert _run(preset, memo=True, log=True) == reference


def _flat(key: tuple) -> tuple:
    out: list = []
    for value in key:
        out.extend(value) if isinstance(value, tuple) else out.append(value)
    return tuple(out)


def _state(controller) -> tuple:
    return ([(b.open_row, b.act_ok, b.pre_ok, b.col_ok) for b in controller.banks],
            list(controller.bg_last_act), list(controller.bg_col_ok),
            [(s.last_act, tuple(s.faw), s.col_ok, s.wtr_ok) for s in controller.ranks],
            controller.bus_free, controller.bus_rank, controller.bus_write, controller.horizon,
            dict(controller.stats.extra))


@pytest.mark.parametrize("preset", ["hbm2e", "ddr4_3200", "lpddr5"])
def test_compiled_key_and_replay_match_the_reference(preset: str, monkeypatch) -> None:
    """The generated state-key builder gives ``_state_key`` flattened, and a compiled
    record changes the controller exactly as ``_replay`` of that record does."""
    import copy

    from npusim.hw.memory import dram_commit_memo
    from npusim.hw.memory.dram_controller import ChannelController

    checked = {"keys": 0, "replays": 0}
    original = ChannelController._commit

    def commit(self, req, now):
        if self.decisions is not None and req.shape is not None and self.command_log is None:
            build = dram_commit_memo.key_builder(len(self.banks), len(self.bg_last_act), len(self.ranks))
            key = build(self, req, now)
            assert key == _flat(self._state_key(req, now))
            checked["keys"] += 1
            entry = self.decisions.get(key)
            record = None if entry is None else entry.record
            if isinstance(record, tuple):
                twin = copy.copy(self)
                twin.banks = copy.deepcopy(self.banks)
                twin.ranks = copy.deepcopy(self.ranks)
                twin.bg_last_act, twin.bg_col_ok = list(self.bg_last_act), list(self.bg_col_ok)
                twin.stats = copy.deepcopy(self.stats)
                expected = twin._replay(record, req.row_base, now)
                twin2 = copy.copy(twin)
                twin2.banks = copy.deepcopy(self.banks)
                twin2.ranks = copy.deepcopy(self.ranks)
                twin2.bg_last_act, twin2.bg_col_ok = list(self.bg_last_act), list(self.bg_col_ok)
                twin2.stats = copy.deepcopy(self.stats)
                twin2.bus_free, twin2.bus_rank = self.bus_free, self.bus_rank
                twin2.bus_write, twin2.horizon = self.bus_write, self.horizon
                got = dram_commit_memo.compile_replay(record)(twin2, now, req.row_base)
                assert got == expected and _state(twin2) == _state(twin)
                checked["replays"] += 1
            result = original(self, req, now)
            # The transition memo picked the entry of the key this state really has.
            assert self._prev[0].key == key
            return result
        return original(self, req, now)

    monkeypatch.setattr(ChannelController, "_commit", commit)
    monkeypatch.setattr(dram_commit_memo, "COMPILE_AFTER", 3)  # compiled replays run too
    _run(preset, memo=True, log=False)
    assert checked["keys"] > 50 and checked["replays"] > 10
    monkeypatch.undo()
    reference = _run(preset, memo=False, log=False)
    monkeypatch.setattr(dram_commit_memo, "COMPILE_AFTER", 1)
    assert _run(preset, memo=True, log=False) == reference


def test_transitions_are_used_and_change_nothing(monkeypatch) -> None:
    """Most commits of a stream find their key through the transition memo (no key
    built), and the results equal those of the memo without transitions."""
    from npusim.hw.memory import dram_commit_memo

    builds = {"count": 0}
    real = dram_commit_memo.key_builder

    def counting(*shape):
        build = real(*shape)

        def counted(self, req, now):
            builds["count"] += 1
            return build(self, req, now)
        return counted

    reference = _run("hbm2e", memo=False, log=False)
    monkeypatch.setattr(dram_commit_memo, "key_builder", counting)
    from npusim.hw.memory.dram import _SHARED
    _SHARED.clear()  # fresh memo: its keys are built through the counting builder
    first = _run("hbm2e", memo=True, log=False)
    built_first = builds["count"]
    again = _run("hbm2e", memo=True, log=False)  # the same traffic: transitions known
    assert first == reference and again == reference
    assert builds["count"] - built_first < built_first / 4


@pytest.mark.parametrize("preset", ["hbm2e", "ddr4_3200"])
def test_controllers_built_at_the_first_submission_time_as_built_at_bind(preset: str) -> None:
    """The channel controllers are built lazily, at the first submission: a first request
    long after bind (refreshes due meanwhile) times exactly as with controllers built at
    bind, and counts into the stats of a reset made before it."""

    def run(eager: bool) -> tuple:
        dram = DramChannel("dram", DramConfig.model_validate(load_preset(f"memory/{preset}")))
        env = simpy.Environment()
        dram.bind(env)
        if eager:
            dram._build_controllers()
        else:
            assert not dram._controllers  # nothing built before a request
        log = dram.enable_command_log()  # after bind, before the first submission
        dram.reset_stats()
        txns = [MemoryTransaction(i * 5000, 5000, i % 2 == 1) for i in range(8)]

        def late():
            yield env.timeout(50_000_000)  # 50 us: several tREFI
            for txn in txns:
                yield env.process(dram.transact(txn))

        env.process(late())
        env.run()
        return ([(t.begin_req_ps, t.end_req_ps, t.begin_resp_ps, t.end_resp_ps) for t in txns],
                dram.stats.as_dict(), list(log))

    lazy = run(False)
    assert lazy[2] and lazy[1]["bytes_read"] + lazy[1]["bytes_written"] == 40_000
    assert lazy == run(True)
