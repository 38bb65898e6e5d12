"""Segment memoisation: exact reuse, reuse across translated placements, and its limits."""

import pytest

from npusim.api import build_device
from npusim.config.loader import scenario_from_dict
from npusim.executor.base import prepare
from npusim.executor.memo import SegmentMemo
from npusim.executor.tlm import run_tlm
from npusim.mapping.taskgraph import Op, TaskGraph

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def device():
    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64"},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def pair(device, src: int, dst: int) -> TaskGraph:
    graph = TaskGraph()
    load = graph.transfer(f"core{src}.hbm", f"core{src}.sram", 1 << 20)
    gemm = graph.compute(f"core{src}.sa", Op("gemm", m=256, k=1024, n=512), [load])
    graph.transfer(f"core{src}.sram", f"core{dst}.sram", 256 * 512 * 2, [gemm])
    return prepare(graph, device)


def test_translated_placement_is_a_hit_with_its_own_unit_names(device):
    memo = SegmentMemo(canonical=device.canonical_cores)
    execute = lambda g: run_tlm(g, device, 0)  # noqa: E731
    first, hit_first = memo.run(pair(device, 0, 1), execute)
    moved = pair(device, 18, 19)               # same shape two rows down, two columns right
    reused, hit_moved = memo.run(moved, execute)
    assert (hit_first, hit_moved) == (False, True)
    fresh = run_tlm(moved, device, 0)
    assert reused.makespan_ps == fresh.makespan_ps
    assert reused.graph is moved
    assert set(reused.unit_stats) == set(fresh.unit_stats)
    assert reused.unit_stats["core18.sa"] == fresh.unit_stats["core18.sa"]
    assert reused.unit_stats["noc.link(18, 19)"] == fresh.unit_stats["noc.link(18, 19)"]
    assert "core0.sa" not in reused.unit_stats


def test_rotated_placement_is_not_confused_with_the_original(device):
    memo = SegmentMemo(canonical=device.canonical_cores)
    execute = lambda g: run_tlm(g, device, 0)  # noqa: E731
    memo.run(pair(device, 0, 1), execute)       # east
    _, hit = memo.run(pair(device, 0, 8), execute)  # south: a different link, not a shift
    assert not hit and memo.misses == 2


def test_without_a_symmetry_only_identical_graphs_hit(device):
    memo = SegmentMemo()
    execute = lambda g: run_tlm(g, device, 0)  # noqa: E731
    memo.run(pair(device, 0, 1), execute)
    _, hit = memo.run(pair(device, 2, 3), execute)
    _, again = memo.run(pair(device, 0, 1), execute)
    assert (hit, again) == (False, True)


def handoff_then_gemm(device, senders: tuple[int, ...], cores: tuple[int, ...]) -> TaskGraph:
    """A stage's shape: activations arrive from ``senders``, then each core multiplies."""
    graph = TaskGraph()
    for src, dst in zip(senders, cores):
        arrived = graph.transfer(f"core{src}.sram", f"core{dst}.sram", 64 << 10)
        graph.compute(f"core{dst}.sa", Op("gemm", m=64, k=512, n=512), [arrived])
    return prepare(graph, device)


def test_a_stage_fed_from_another_direction_at_the_same_distance_shares_one_timing(device):
    from npusim.executor.analytic import run_analytic
    from npusim.strategies.npu.stage_builder import hand_off
    from npusim.strategies.npu.placement import Group

    memo = SegmentMemo(canonical=device.canonical_cores)
    group = Group((9, 10))
    runs = {}
    for senders in ((1, 2), (17, 18), (8, 9)):    # from above, below and the left: 1 hop each
        lead, hops = hand_off(device, Group(senders), group)
        cores = senders + group.cores
        graph = handoff_then_gemm(device, senders, group.cores)
        runs[senders] = memo.lazy_run(("stage", hops), cores,
                                      lambda g=graph: run_analytic(g, device), lead)
        assert lead == 2 and hops == (1, 1)
    assert [hit for _, hit in runs.values()] == [False, True, True]
    # The reused counters are renamed onto the cores of each placement, senders included.
    below, _ = runs[(17, 18)]
    fresh = run_analytic(handoff_then_gemm(device, (17, 18), group.cores), device)
    assert set(below.unit_stats) == set(fresh.unit_stats)
    assert below.unit_stats["core17.sram"] == fresh.unit_stats["core17.sram"]
    assert below.makespan_ps == fresh.makespan_ps
    # A sender two hops away is a different key: a different hand-off.
    assert hand_off(device, Group((25, 26)), group)[1] == (2, 2)
