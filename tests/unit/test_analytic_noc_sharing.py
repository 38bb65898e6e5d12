"""The analytic executor shares a NoC's ports and links between the transfers crossing
them (processor sharing), as the tlm level's routers interleave their packets: a core's
concurrent sends share its injection port, concurrent arrivals its ejection port, and a
transfer that arrives later on a link slows the one already there."""

from __future__ import annotations

import pytest

from npusim.api import build_device
from npusim.config.loader import load_scenario, scenario_from_dict
from npusim.core import registry
from npusim.executor.analytic import run_analytic
from npusim.executor.sharing import share as _share
from npusim.executor.base import prepare
from npusim.executor.tlm import run_tlm
from npusim.mapping.taskgraph import TaskGraph

SCENARIO = "workloads/scenarios/qwen3_4b_npu64.yaml"

BLOCK = 1 << 20   # a rotating weight block: ~65.5 us over one 16 GB/s link
SEND = 256 << 10  # an activation send: ~16.4 us alone


@pytest.fixture(scope="module")
def device():
    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64"},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def _both(graph: TaskGraph, device) -> tuple[list[int], list[int]]:
    analytic = run_analytic(prepare(graph, device), device)
    tlm = run_tlm(prepare(graph, device), device)
    return analytic.ends, tlm.ends


def _agree(analytic: list[int], tlm: list[int], tolerance: float = 0.03) -> None:
    for index, (a, t) in enumerate(zip(analytic, tlm)):
        assert abs(a / t - 1) < tolerance, (index, a, t)


@pytest.mark.unit
@pytest.mark.parametrize("size", [128, 1024, 8192])
def test_small_sends_into_one_core_share_their_flits_not_their_path_latency(device, size):
    # Six cores send to core 9 at once.  Sharing each transfer's whole closed-form time
    # (head latency included) made the 128-byte fan-in 2.4x tlm's makespan (208 against
    # 88 ns): the latency is paid once per transfer, only the flits share the port.
    graph = TaskGraph()
    for source in (0, 3, 24, 27, 10, 17):
        graph.transfer(f"core{source}.sram", "core9.sram", size)
    analytic, tlm = _both(graph, device)
    assert abs(max(analytic) / max(tlm) - 1) < 0.05, (max(analytic), max(tlm))


@pytest.mark.unit
def test_a_cores_concurrent_sends_share_its_injection_port(device):
    # core0 sends down to core8 and right to core1 at once: disjoint links, one
    # injection port.  Each alone at the port's full rate, the send ended at 16.4 us
    # and the block at 65.5 us; sharing the port, 32.8 and 82 us (tlm).
    graph = TaskGraph()
    graph.transfer("core0.sram", "core8.sram", BLOCK)
    graph.transfer("core0.sram", "core1.sram", SEND)
    analytic, tlm = _both(graph, device)
    _agree(analytic, tlm)
    assert analytic[1] > 1.9 * run_analytic(prepare(_alone(), device), device).makespan_ps


def _alone() -> TaskGraph:
    graph = TaskGraph()
    graph.transfer("core0.sram", "core1.sram", SEND)
    return graph


@pytest.mark.unit
def test_concurrent_arrivals_share_the_ejection_port(device):
    # core1 and core8 both send to core9 over disjoint links into one ejection port.
    graph = TaskGraph()
    graph.transfer("core1.sram", "core9.sram", BLOCK)
    graph.transfer("core8.sram", "core9.sram", SEND)
    analytic, tlm = _both(graph, device)
    _agree(analytic, tlm)


@pytest.mark.unit
def test_a_later_transfer_slows_the_one_already_on_the_link_and_its_successor_waits(device):
    # The block starts first; the send, 10 us later over the same link, shares it, so
    # the block ends later than it would alone (first come, first served kept it at
    # 65.5 us), and the task waiting for the block starts then.
    graph = TaskGraph()
    block = graph.transfer("core0.sram", "core1.sram", BLOCK)
    gate = graph.host(10_000_000, [], "gate", resource="none")
    graph.transfer("core0.sram", "core1.sram", SEND, [gate])
    graph.host(1_000_000, [block], "after the block", resource="none")
    analytic, tlm = _both(graph, device)
    _agree(analytic, tlm)
    assert analytic[0] > analytic[2]  # the block ends last, as packets interleaved
    assert analytic[3] == analytic[0] + 1_000_000


@pytest.mark.unit
def test_processor_sharing_serves_each_of_n_transfers_at_one_nth():
    delays: list = []
    state = (100, 1)  # transfer 1 alone: 100 of work from 0
    # Transfer 2 (20 of work) at 50: both at half rate, it ends at 90, transfer 1 at 120.
    end, state = _share(state, 50, 20, 2, delays)
    assert end == 90 and delays == [(1, 120)]
    delays.clear()
    # Transfer 3 (10) at 60: three at a third; transfer 2 has 15 left, transfer 1 45.
    end, after = _share(state, 60, 10, 3, delays)
    assert end == 90
    assert sorted(delays) == [(1, 130), (2, 100)]
    assert after[0] == 130  # work-conserving: 130 of work done by 130
    assert state[3] == [(20, 2, 90), (50, 1, 120)]  # states are not changed in place


@pytest.mark.unit
def test_mnk_prefill_stage_on_a_mesh_agrees_with_tlm_without_head_of_line_blocking():
    # A 1024-token prefill stage with the 2-D MNK partition on a mesh placement: each
    # core rotates weight blocks to the next row while it reduces with its row
    # neighbour, and the q, k and v rotations cross the same link at once.  With four
    # virtual channels (no head-of-line blocking in tlm's single-VC FIFOs) tlm and the
    # shared ports and links agree: 14.81 ms both (links alone, first come first
    # served: 13.93 ms, -6%).  With one VC, tlm's 16.72 ms is the gap docs/npu.md gives.
    scenario = load_scenario(SCENARIO, ["workload.placement=mesh2d", "workload.partition=mnk",
                                        "hw.noc.virtual_channels=4"])
    device = build_device(scenario.hw)
    program = registry.lookup("workload", "llm").impl(device, config=scenario.workload)
    graph = program.segments[4].build()  # prefill stage 4: two decoder layers
    analytic = run_analytic(prepare(graph, device), device).makespan_ps
    tlm = run_tlm(prepare(graph, device), device).makespan_ps
    assert abs(analytic / tlm - 1) < 0.01
