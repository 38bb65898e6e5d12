"""A scratchpad port shared by a core's compute units and its DMA (``hw.core.sram.shared_port``):
without it (the default) a GEMM and a transfer into the same SRAM overlap; with it they
queue for one port of ``bytes_per_cycle``, in both fidelities."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from npusim.api import build_device
from npusim.cli import main
from npusim.config.loader import scenario_from_dict
from npusim.executor.analytic import run_analytic
from npusim.executor.base import prepare
from npusim.executor.tlm import run_tlm
from npusim.mapping.taskgraph import Op, TaskGraph

pytestmark = pytest.mark.component

# 512 x 1024 x 1024 FP16 on a 128 x 128 weight-stationary array: 98.3 us of folds, and
# 25 MiB of operands (8 row folds: partial sums read back), 102.4 us at 512 B/cycle.
GEMM = dict(m=512, k=1024, n=1024, dtype_bytes=2)
DMA_BYTES = 4 << 20  # HBM -> SRAM, about 45.7 us (HBM-bound), 16.4 us of the SRAM port


def npu(shared: bool):
    scenario = scenario_from_dict({
        "name": "t", "hw": {"preset": "npu/large_core_64", "core": {"sram": {"shared_port": shared}}},
        "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def graph(device, gemm: bool = True, dma: bool = True) -> TaskGraph:
    built = TaskGraph()
    if gemm:
        built.compute("core5.sa", Op("gemm", **GEMM))
    if dma:
        built.transfer("core5.hbm", "core5.sram", DMA_BYTES, chunk_bytes=64 << 10)
    return prepare(built, device)


def makespans(device, **parts) -> tuple[int, int]:
    return (run_analytic(graph(device, **parts), device).makespan_ps,
            run_tlm(graph(device, **parts), device).makespan_ps)


def test_the_default_gives_compute_its_own_port_so_gemm_and_dma_overlap():
    device = npu(False)
    assert device.operand_port("core5.sa") is None
    gemm = device.parts["core5.sa"].op_time_ps(Op("gemm", **GEMM))
    for fidelity in range(2):
        alone = makespans(device, gemm=False)[fidelity]
        assert alone < gemm
        assert makespans(device)[fidelity] == gemm  # the transfer hides under the GEMM


def test_a_shared_port_makes_the_gemm_and_the_dma_queue_for_it():
    device = npu(True)
    name, sram = device.operand_port("core5.sa")
    assert name == "core5.sram" and device.operand_port("core5.vec")[0] == "core5.sram"
    read, written = device.parts["core5.sa"].operand_bytes(Op("gemm", **GEMM))
    operands = sram.port_time_ps(read + written)
    dma_port = sram.port_time_ps(DMA_BYTES)
    gemm = device.parts["core5.sa"].op_time_ps(Op("gemm", **GEMM))
    assert operands > gemm  # this GEMM needs more than 512 B a cycle: the port bounds it
    assert makespans(device, dma=False) == (operands, operands)
    analytic, tlm = makespans(device)
    # one port carries both streams: at least the sum of their port times
    assert analytic >= operands + dma_port and tlm >= operands + dma_port
    # the array asks for its operands in pieces, so the DMA interleaves with them in tlm
    # rather than waiting for the whole GEMM (which would take operands + 45.7 us)
    assert tlm < operands + makespans(device, gemm=False)[1] * 0.5
    assert abs(tlm - analytic) / analytic < 0.05, (tlm, analytic)
    # tlm: the GEMM's pieces are booked one after another, not ahead, so the load is
    # done long before the GEMM (booked ahead, it waited for nearly all the operands)
    run = run_tlm(graph(device), device)
    assert run.ends[1] < 0.75 * operands, run.ends
    # the analytic level books the whole operand stream at once (the load waits for it),
    # and says how long the GEMM held the array, stall included, as tlm's start-to-end
    alone = run_analytic(graph(device, dma=False), device)
    assert alone.extra["busy_by_name"]["gemm"] == alone.ends[0] - alone.starts[0] == operands
    # and a shared port is never faster than separate ones
    assert min(analytic, tlm) > max(makespans(npu(False)))


def test_vector_ops_share_the_port_too():
    device = npu(True)
    op = Op("elementwise", elements=4 << 20, inputs=2, flops_per_element=1, dtype_bytes=2)
    vector = device.parts["core5.vec"]
    built = TaskGraph()
    built.compute("core5.vec", op)
    built.transfer("core5.hbm", "core5.sram", DMA_BYTES, chunk_bytes=64 << 10)
    alone = vector.op_time_ps(op)
    for run in (run_analytic, run_tlm):
        assert run(prepare(built, device), device).makespan_ps > alone + 0.9 * (
            device.parts["core5.sram"].port_time_ps(DMA_BYTES))


def test_a_heterogeneous_core_keeps_its_own_sram_setting():
    device = npu(True)
    from npusim.hw.memory.sram import Sram

    assert device.operand_port("core7.sa")[0] == "core7.sram"  # (cached, then dropped)
    own = device.parts["core7.sram"].config.model_copy(update={"shared_port": False})
    device.replace_part("core7.sram", Sram("core7.sram", own))
    assert device.operand_port("core7.sa") is None
    assert device.operand_port("core6.sa")[0] == "core6.sram"


def test_ops_queued_on_a_busy_unit_do_not_book_the_port_ahead_of_a_transfer():
    # Three GEMMs ready at once on core 5's array, and a load into core 5's SRAM after the
    # first: the later GEMMs ask for the port only when the array takes them, so the
    # load shares the port with the second rather than waiting behind the second and third.
    device = npu(True)
    built = TaskGraph()
    first = built.compute("core5.sa", Op("gemm", **GEMM))
    load = built.transfer("core5.hbm", "core5.sram", DMA_BYTES, chunk_bytes=64 << 10,
                          deps=[first])
    for _ in range(2):
        built.compute("core5.sa", Op("gemm", **GEMM))
    read, written = device.parts["core5.sa"].operand_bytes(Op("gemm", **GEMM))
    sram = device.parts["core5.sram"]
    operands = sram.port_time_ps(read + written)
    alone = makespans(device, gemm=False)
    for fidelity, run in enumerate((run_analytic, run_tlm)):
        result = run(prepare(built, device), device)
        took = result.ends[load] - result.ends[first]
        # booked ahead, the port would hold the load back by two GEMMs' operands
        assert took < operands + alone[fidelity], (run.__name__, took)
        # the port carried everything: three GEMMs' operands and the load's bytes
        assert result.makespan_ps >= 3 * operands + sram.port_time_ps(DMA_BYTES)


def queued_on_one_array(device, later_ps: int = 30_000_000) -> tuple[TaskGraph, int, int, int]:
    """A long GEMM on core 5's array, then X ready at ``later_ps`` and Y at 10 us (Y has
    the higher task id: later in program order) waiting for the array."""
    built = TaskGraph()
    first = built.compute("core5.sa", Op("gemm", **GEMM))
    later = built.host(later_ps, resource="none")
    sooner = built.host(10_000_000, resource="none")
    x = built.compute("core5.sa", Op("gemm", m=128, k=256, n=256, dtype_bytes=2), deps=[later])
    y = built.compute("core5.sa", Op("gemm", m=128, k=256, n=512, dtype_bytes=2), deps=[sooner])
    return prepare(built, device), first, x, y


@pytest.mark.parametrize("shared", [False, True])
def test_a_free_unit_takes_the_oldest_op_waiting_for_it(shared):
    # Both wait for the long GEMM: when it ends, X (earlier in program order) runs first
    # although Y was ready 20 us before it, at both levels, as a core issues its
    # instruction stream (a later operator does not overtake the one before it).
    device = npu(shared)
    for run in (run_analytic, run_tlm):
        built, first, x, y = queued_on_one_array(device)
        result = run(built, device)
        assert result.ends[first] > 30_000_000, "the test needs X waiting too"
        assert result.starts[x] == result.ends[first] < result.starts[y], (run.__name__, shared)


@pytest.mark.parametrize("shared", [False, True])
def test_a_free_unit_does_not_wait_for_an_older_op_that_is_not_ready(shared):
    # X is ready only after the long GEMM has ended: Y, waiting, takes the array then
    # (oldest first among the ops waiting, not an in-order stall).
    device = npu(shared)
    for run in (run_analytic, run_tlm):
        built, first, x, y = queued_on_one_array(device, later_ps=10**12)
        result = run(built, device)
        assert result.starts[y] == result.ends[first] < result.starts[x], (run.__name__, shared)


def test_a_private_port_held_for_nothing_times_like_no_port(monkeypatch):
    # The analytic level's waiting line for shared-port ops must not change the order
    # or the times by itself: a port nothing else uses, held 1 ps, gives the same
    # schedule as separate ports on a graph with loads, GEMMs and vector ops queued.
    plain = npu(False)
    private = npu(False)
    monkeypatch.setattr(private, "_find_operand_port",
                        lambda unit: (unit + ".private", private.parts["core5.sram"]))
    monkeypatch.setattr(type(private.parts["core5.sram"]), "port_time_ps",
                        lambda self, size: 1 if size > 0 else 0)

    def mixed(device) -> TaskGraph:
        built = TaskGraph()
        loads = [built.transfer(f"core{c}.hbm", f"core{c}.sram", DMA_BYTES, chunk_bytes=64 << 10)
                 for c in (5, 6)]
        ops = [built.compute("core5.sa", Op("gemm", **GEMM))]
        for index in range(6):
            unit = "core5.sa" if index % 2 else "core5.vec"
            op = (Op("gemm", m=128, k=512, n=256, dtype_bytes=2) if index % 2 else
                  Op("elementwise", elements=1 << 18, inputs=2, dtype_bytes=2))
            ops.append(built.compute(unit, op, deps=[loads[index % 2]] if index < 2 else
                                     [ops[index - 1]]))
        built.transfer("core5.sram", "core6.sram", 1 << 20, deps=[ops[2]])
        return prepare(built, device)

    for build in (mixed, lambda device: queued_on_one_array(device)[0]):
        expected = run_analytic(build(plain), plain)
        got = run_analytic(build(private), private)
        assert (got.starts, got.ends) == (expected.starts, expected.ends)


def test_a_host_task_holding_a_unit_waits_in_its_line_too():
    # a taskgraph workload's host task may hold a compute unit (resource: core5.sa): it
    # queues with the ops waiting there in the order they became ready, as in tlm
    device = npu(True)
    built = TaskGraph()
    built.compute("core5.sa", Op("gemm", **GEMM))
    sooner = built.host(10_000_000, resource="none")
    later = built.host(20_000_000, resource="none")
    op = built.compute("core5.sa", Op("gemm", m=128, k=256, n=256, dtype_bytes=2), deps=[sooner])
    hold = built.host(5_000_000, deps=[later], resource="core5.sa")
    for run in (run_analytic, run_tlm):
        result = run(prepare(built, device), device)
        assert result.starts[op] < result.starts[hold], run.__name__
        assert result.starts[hold] >= result.ends[op]


def test_the_port_time_rounds_up_to_whole_cycles():
    sram = npu(True).parts["core5.sram"]  # 512 B a cycle at 500 MHz: 2 ns a cycle
    assert [sram.port_time_ps(size) for size in (0, 1, 512, 513, 1 << 20)] == [
        0, 2000, 2000, 4000, 2048 * 2000]


def test_operand_pieces_cover_the_busy_time_spread_over_the_compute_time():
    import simpy

    from npusim.executor.tlm import OPERAND_PIECE_PS, OPERAND_PIECES_MAX, _stream_operands

    class Port:  # a free port that records what is asked of it and when
        def __init__(self, env):
            self.env, self.asked = env, []

        def occupy_port(self, busy, now):
            self.asked.append((now, busy))
            return now + busy

    for busy, duration in ((3 * OPERAND_PIECE_PS + 7, 40 * OPERAND_PIECE_PS),
                           (100 * OPERAND_PIECE_PS + 1, 90 * OPERAND_PIECE_PS),
                           (OPERAND_PIECE_PS // 2, 5 * OPERAND_PIECE_PS)):
        env = simpy.Environment()
        port = Port(env)
        done = env.process(_stream_operands(env, port, busy, 0, duration))
        env.run()
        pieces = min(OPERAND_PIECES_MAX, max(1, busy // OPERAND_PIECE_PS))
        assert len(port.asked) == pieces
        assert sum(share for _, share in port.asked) == busy  # nothing dropped
        # asked for evenly over the compute time, or once the piece before is done
        ends = [0]
        for index, (at, share) in enumerate(port.asked):
            assert at == max(duration * index // pieces, ends[-1])
            ends.append(at + share)
        assert done.value == ends[-1]


def test_stalls_and_the_operands_port_time_are_counted_apart_from_busy_time():
    # The GEMM needs more port time than compute time, so the array is held past its
    # compute time: that stall is the array's operand_stall_ps, its busy_ps stays the
    # compute time, and the scratchpad counts the operands' port time beside the
    # transfer's busy time, in both fidelities; without a shared port neither appears.
    shared = npu(True)
    gemm = shared.parts["core5.sa"].op_time_ps(Op("gemm", **GEMM))
    read, written = shared.parts["core5.sa"].operand_bytes(Op("gemm", **GEMM))
    operands = shared.parts["core5.sram"].port_time_ps(read + written)
    for run in (run_analytic, run_tlm):
        segment = run(graph(shared), shared)
        array, sram = segment.unit_stats["core5.sa"], segment.unit_stats["core5.sram"]
        assert array["busy_ps"] == gemm
        held = segment.ends[0] - segment.starts[0]
        assert array["operand_stall_ps"] == held - gemm > 0, run
        assert sram["operand_port_ps"] == operands, run
        assert sram["bytes_written"] == DMA_BYTES  # the transfer's bytes, not the operands'
        # a scratchpad that only served operands is still reported, in both levels alike
        alone = run(graph(shared, dma=False), shared).unit_stats
        assert alone["core5.sram"]["operand_port_ps"] == operands
        assert list(alone) == ["core5.sa", "core5.sram"]
    private = npu(False)
    for run in (run_analytic, run_tlm):
        stats = run(graph(private), private).unit_stats
        assert "operand_stall_ps" not in stats["core5.sa"]
        assert "operand_port_ps" not in stats["core5.sram"]
    # the two levels report the same counters in the same order
    assert (list(run_analytic(graph(shared), shared).unit_stats["core5.sa"])
            == list(run_tlm(graph(shared), shared).unit_stats["core5.sa"]))


def test_a_run_reports_its_operand_stalls_only_on_a_shared_port(tmp_path, capsys):
    scenario = "workloads/scenarios/qwen3_4b_npu64.yaml"
    args = ["run", scenario, "--mode", "analytic", "--prompt-len", "256", "--output-len", "2"]
    with pytest.raises(SystemExit):
        main([*args, "--out", str(tmp_path / "own")])
    assert "operand stalls" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--out", str(tmp_path / "shared"), "--set", "hw.core.sram.shared_port=true"])
    assert "operand stalls (shared SRAM port)" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "shared/metrics.json").read_text())
    units = pd.read_csv(tmp_path / "shared/units.csv").set_index("unit")
    assert metrics["operand_stall_ps"] == units["operand_stall_ps"].sum() > 0
    compute = units[units["ops"] > 0]
    held = compute["busy_ps"].sum() + compute["operand_stall_ps"].sum()
    assert metrics["operand_stall_share"] == pytest.approx(metrics["operand_stall_ps"] / held)
    assert units.loc[units.index.str.endswith(".sram"), "operand_port_ps"].sum() > 0
    assert "operand_stall_ps" not in json.loads((tmp_path / "own/metrics.json").read_text())
