"""Heterogeneous cores (a replaced part) and the memo's translation symmetry."""

import pytest

from npusim.api import build_device
from npusim.config.loader import resolve_presets, validate
from npusim.executor.session import Session
from npusim.hw.devices.npu import NpuConfig
from npusim.hw.memory.dram import DramChannel
from npusim.mapping.taskgraph import TaskGraph

pytestmark = pytest.mark.unit


def _device():
    device = build_device(validate(NpuConfig, resolve_presets(
        {"preset": "npu/large_core_64"}, "test"), "test"))
    hbm = device.config.hbm.model_copy(update={"channels": 8})  # 2x the preset's HBM
    device.replace_part("core5.hbm", DramChannel("core5.hbm", hbm))
    return device


def _load(core: int) -> TaskGraph:
    graph = TaskGraph(name=f"load{core}")
    graph.transfer(f"core{core}.hbm", f"core{core}.sram", 8 << 20)
    return graph


@pytest.mark.parametrize("mode", ["analytic", "tlm"])
def test_a_load_on_a_variant_core_is_not_reused_from_a_preset_core(mode):
    session = Session(_device(), mode, trace=False)
    plain, _ = session.time(_load(3))
    faster, reused = session.time(_load(5))
    assert not reused and session.memo.misses == 2
    # 8 MiB at 102.4 against 204.8 GB/s of HBM: the variant core takes about half as long
    assert faster.makespan_ps < 0.6 * plain.makespan_ps
    again, reused = session.time(_load(4))  # a preset core: the first load's entry
    assert reused and again.makespan_ps == plain.makespan_ps


def test_variant_cores_keep_their_own_symmetry():
    device = _device()
    device.replace_part("core6.hbm", DramChannel("core6.hbm", device.parts["core5.hbm"].config))
    # cores 5 and 6 are the same variant: a shape on them is one entry wherever it sits
    def placed(cores):
        return sorted(device.canonical_cores(cores).values())

    assert placed({5}) == placed({6}) != placed({4})
    assert placed({4, 5}) != placed({5, 6}) and placed({5, 6}) != placed({2, 3})
