"""The event-driven DMA worker (devices/dma.py) schedules exactly what the process
version did (``for stage: yield from part.transact(...)``): same task times, counters
and SimPy event counts, with its SRAM/NoC fast paths and through the generic path."""

from __future__ import annotations

from typing import Any, Generator

import pytest

from npusim.api import build_device
from npusim.config.loader import scenario_from_dict
from npusim.executor.base import prepare
from npusim.executor.tlm import run_tlm
from npusim.hw.base import MemoryTransaction
from npusim.hw.devices import base as device_base
from npusim.hw.devices import dma
from npusim.mapping.taskgraph import Op, TaskGraph

pytestmark = pytest.mark.component


@pytest.fixture(scope="module")
def device():
    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64"},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def _graph(device) -> TaskGraph:
    """Overlapping DMAs: HBM loads, SRAM-to-SRAM hand-offs that share NoC links and
    SRAM banks, a partial last chunk, a random-pattern load."""
    graph = TaskGraph()
    loads = [graph.transfer(f"core{c}.hbm", f"core{c}.sram", (1 << 20) + 4096 * c)
             for c in (0, 1, 9)]
    gemm = graph.compute("core0.sa", Op("gemm", m=128, k=512, n=512), loads[:1])
    graph.transfer("core0.sram", "core3.sram", 300_000, [gemm])
    graph.transfer("core1.sram", "core3.sram", 200_000, [loads[1]])
    graph.transfer("core9.sram", "core2.sram", 150_000, [loads[2]])
    graph.transfer("core2.sram", "core2.hbm", 70_000)
    graph.transfer("core4.hbm", "core4.sram", 64 << 10, pattern="random", chunk_bytes=4096)
    return prepare(graph, device)


def _process_transfer(self, env: Any, task: Any, seed: int = 0, on_chunk: Any = None
                      ) -> Generator:
    """The previous ``Device.transfer_process``: one SimPy process per in-flight chunk."""
    if task.size_bytes <= 0:
        return
    plan = self.plan_transfer(task, seed)
    chunks = device_base._chunk_offsets(task.size_bytes, plan)
    cursor = iter(chunks)

    def worker() -> Generator:
        for _offset, size, addr in cursor:
            for stage in plan.stages:
                if stage.action == "net":
                    yield from stage.part.transfer(stage.src_node, stage.dst_node, size)
                else:
                    txn = MemoryTransaction(addr, size, stage.action == "write", task.name)
                    yield from stage.part.transact(txn)
            if on_chunk is not None:
                on_chunk(size)

    workers = [env.process(worker()) for _ in range(min(plan.max_outstanding, len(chunks)))]
    yield env.all_of(workers)


def _generic_steps(stages: tuple) -> tuple:
    """Every stage through the generic (generator-driving) path of DmaWorker."""
    return tuple((dma._GENERIC, s.part, s.src_node, s.dst_node, s.action == "write")
                 for s in stages)


def _summary(run) -> tuple:
    return run.starts, run.ends, run.unit_stats, run.events, run.transactions


def test_worker_matches_the_process_version(device, monkeypatch):
    fast = _summary(run_tlm(_graph(device), device, 0))
    with monkeypatch.context() as patch:
        patch.setattr(device_base.Device, "transfer_process", _process_transfer)
        reference = _summary(run_tlm(_graph(device), device, 0))
    with monkeypatch.context() as patch:
        patch.setattr(device_base, "stage_steps", _generic_steps)
        generic = _summary(run_tlm(_graph(device), device, 0))
    assert fast == reference
    assert generic == reference


def test_on_chunk_sees_every_chunk(device):
    import simpy

    graph = _graph(device)
    task = graph.tasks[0]
    env = simpy.Environment()
    device.reset_stats()
    device.bind(env)
    seen: list[int] = []
    env.process(device.transfer_process(env, task, 0, seen.append))
    env.run()
    assert sum(seen) == task.size_bytes
    assert len(seen) == -(-task.size_bytes // device.plan_transfer(task).chunk_bytes)


# Tolerances: SRAM-to-SRAM over the NoC, 2%; a short transfer's fill, 4% (a partial
# last chunk); an HBM load, 9% at one chunk in flight (each tlm chunk finds its DRAM rows
# closed, which the sequential closed form charges once per transfer; 0.6% otherwise).
@pytest.mark.parametrize("outstanding", [1, 2, 8])
@pytest.mark.parametrize("src, dst, size, rel", [
    ("core0.sram", "core5.sram", (1 << 20) + 100, 0.02),
    ("core3.hbm", "core3.sram", 3 << 20, 0.09),
    ("core0.sram", "core1.sram", 20_000, 0.04)])
def test_the_closed_form_follows_the_dma_window(src, dst, size, rel, outstanding):
    # hw.core.dma.max_outstanding had no effect in analytic mode: the closed form assumed
    # every stage overlapped, while with fewer chunks in flight than stages a worker's
    # chunk passes the stages in turn (at 1: the HBM load was 40% short of tlm).
    import simpy

    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64",
                                                       "core": {"dma": {"max_outstanding": outstanding}}},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    device = build_device(scenario.hw)
    graph = TaskGraph()
    graph.transfer(src, dst, size)
    task = prepare(graph, device).tasks[0]
    env = simpy.Environment()
    device.reset_stats()
    device.bind(env)
    env.process(device.transfer_process(env, task, 0))
    env.run()
    assert device.transfer_time_ps(task) == pytest.approx(env.now, rel=rel)
