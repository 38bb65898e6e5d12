"""Operand traffic of the compute units with their scratchpad: counted by both executors
from the array's fold model, carried through memoisation, and charged to ``sram``."""

import math

import pytest

import npusim
from npusim.api import build_device
from npusim.config.loader import resolve_presets, validate
from npusim.executor.analytic import run_analytic
from npusim.executor.base import SRAM_OPERAND_READ, SRAM_OPERAND_WRITTEN, prepare
from npusim.executor.tlm import run_tlm
from npusim.hw.devices.npu import NpuConfig
from npusim.hw.energy import EnergyConfig
from npusim.mapping.taskgraph import Op, TaskGraph
from npusim.metrics.energy import energy_metrics, sram_pj_per_bit

from tests.metrics.test_energy import LLM_ARGS, QUICKSTART, SERVING_ARGS

PJ = 1e-12
REL = 1e-12
# One GEMM [200, 300] @ [300, 500] in FP16 on large_core_64's 128x128 weight-stationary
# array: K=300 on the rows (3 row folds), N=500 on the columns (4 column folds), M=200
# input rows streamed through every fold.
GEMM = dict(m=200, k=300, n=500)
IFMAP = 4 * 200 * 300      # each input row once per column fold
WEIGHTS = 300 * 500        # each weight once
OUTPUTS = 3 * 200 * 500    # written once per row (K) fold
PSUMS = 2 * 200 * 500      # read back by the 2 row folds that accumulate
READ_BYTES = 2 * (IFMAP + WEIGHTS + PSUMS)
WRITTEN_BYTES = 2 * OUTPUTS


def device():
    return build_device(validate(NpuConfig, resolve_presets(
        {"preset": "npu/large_core_64"}, "test"), "test"))


def one_gemm(mode):
    """``(unit stats, device, makespan)`` of the GEMM alone on core 5 of a fresh chip."""
    chip = device()
    graph = TaskGraph()
    graph.compute("core5.sa", Op("gemm", dtype_bytes=2, **GEMM))
    run = (run_tlm if mode == "tlm" else run_analytic)(prepare(graph, chip), chip)
    return run.unit_stats, chip, run.makespan_ps


def operand_counters(stats):
    return {unit: (values.get(SRAM_OPERAND_READ, 0), values.get(SRAM_OPERAND_WRITTEN, 0))
            for unit, values in stats.items()
            if SRAM_OPERAND_READ in values or SRAM_OPERAND_WRITTEN in values}


def without_operands(stats):
    """The counters as they were before operand traffic was counted."""
    return {unit: {k: v for k, v in values.items()
                   if k not in (SRAM_OPERAND_READ, SRAM_OPERAND_WRITTEN)}
            for unit, values in stats.items()}


def simulate(args, mode, *extra):
    pairs = list(zip(args[1::2], args[2::2]))
    overrides = [value for flag, value in pairs if not value.startswith("run.mode")]
    return npusim.simulate(args[0], mode=mode, overrides=overrides + list(extra))


@pytest.mark.component
@pytest.mark.parametrize("mode", ["analytic", "tlm"])
def test_one_gemm_counts_the_hand_computed_fold_traffic(mode):
    stats, _, _ = one_gemm(mode)
    assert operand_counters(stats) == {"core5.sa": (READ_BYTES, WRITTEN_BYTES)}
    assert stats["core5.sa"][SRAM_OPERAND_READ] == 2 * (240_000 + 150_000 + 200_000)
    # Transfers are still the memory parts' own counters: none here.
    assert "core5.sram" not in stats


@pytest.mark.component
def test_analytic_and_tlm_count_the_same_operand_traffic():
    analytic, _, a_time = one_gemm("analytic")
    tlm, _, t_time = one_gemm("tlm")
    assert analytic == tlm and a_time == t_time
    for args in ([str(QUICKSTART)], LLM_ARGS, SERVING_ARGS):
        counted = {mode: operand_counters(simulate(args, mode).unit_stats)
                   for mode in ("analytic", "tlm")}
        assert counted["analytic"] == counted["tlm"], args[0]
        assert any(unit.endswith(".sa") for unit in counted["analytic"])
        assert any(unit.endswith(".vec") for unit in counted["analytic"])


@pytest.mark.component
def test_operand_counters_survive_memoisation_and_relabelling():
    """LLM runs reuse one stage's run on other cores (memo hits relabel core names): the
    counters land on the cores that ran, exactly as without memoisation."""
    memo = simulate(LLM_ARGS, "analytic")
    plain = simulate(LLM_ARGS, "analytic", "run.memoize=false")
    assert memo.metrics["memo"]["hits"] > 0 and plain.metrics["memo"]["hits"] == 0
    counted = operand_counters(memo.unit_stats)
    assert len({unit.split(".")[0] for unit in counted}) > 4  # stages on many cores
    assert counted == operand_counters(plain.unit_stats)
    # A placement shifted by 2 cores moves the counters with it.
    base = operand_counters(npusim.simulate(QUICKSTART, mode="analytic").unit_stats)
    shifted = operand_counters(npusim.simulate(
        QUICKSTART, mode="analytic", overrides=["workload.cores=[2,3,11,10]"]).unit_stats)
    assert set(base) == {f"core{i}.{unit}" for i in (0, 1, 8, 9) for unit in ("sa", "vec")}
    rename = {"core0": "core2", "core1": "core3", "core9": "core11", "core8": "core10"}
    assert shifted == {rename[u.split(".")[0]] + "." + u.split(".")[1]: v
                       for u, v in base.items()}


@pytest.mark.component
@pytest.mark.parametrize("mode", ["analytic", "tlm"])
def test_operand_traffic_is_charged_to_sram_and_stated_in_the_basis(mode):
    stats, chip, makespan = one_gemm(mode)
    config = EnergyConfig(static_scope="active")
    after = energy_metrics(stats, chip, makespan, config)
    before = energy_metrics(without_operands(stats), chip, makespan, config)
    read_pj, write_pj = sram_pj_per_bit(config, 64 << 20)
    operand_j = 8 * (READ_BYTES * read_pj + WRITTEN_BYTES * write_pj) * PJ
    assert before["energy_by_level_j"].get("sram", 0.0) == 0.0  # no DMA: nothing before
    assert after["energy_by_level_j"]["sram"] == pytest.approx(operand_j, rel=REL)
    assert after["energy_by_unit_j"]["core5.sa.sram_operands"] == pytest.approx(
        operand_j, rel=REL)
    assert after["energy_by_level_j"]["sa"] == before["energy_by_level_j"]["sa"]
    # The scratchpad its array read from is in use: it leaks under 'active' too.
    assert "core5.sram" in after["energy_by_unit_j"]
    assert "core5.sram" not in before["energy_by_unit_j"]
    basis = after["basis"]["sram_operands"]
    assert basis["bytes_read"] == READ_BYTES and basis["bytes_written"] == WRITTEN_BYTES
    assert basis["systolic_dataflows"] == ["ws"]
    assert "once per column fold" in basis["counted"]["systolic"]
    assert "partial sums back" in basis["counted"]["systolic"]
    assert "basis" not in before or "sram_operands" not in before["basis"]
    assert math.fsum(after["energy_by_unit_j"].values()) == pytest.approx(
        after["energy_j"], rel=REL)
    assert math.fsum(after["energy_by_level_j"].values()) == pytest.approx(
        after["energy_j"], rel=REL)


@pytest.mark.component
@pytest.mark.parametrize("mode", ["analytic", "tlm"])
def test_the_sram_share_rises_by_the_operand_traffic_on_a_whole_run(mode):
    result = npusim.simulate(QUICKSTART, mode=mode)
    energy = result.metrics["energy"]
    # The quickstart runs on large_core_64, as device() builds it.
    before = energy_metrics(without_operands(result.unit_stats), device(),
                            result.metrics["latency_ps"])
    moved = operand_counters(result.unit_stats)
    read_pj, write_pj = sram_pj_per_bit(EnergyConfig(), 64 << 20)
    operand_j = math.fsum(8 * (r * read_pj + w * write_pj) * PJ for r, w in moved.values())
    sram_before = before["energy_by_level_j"]["sram"]
    assert energy["energy_by_level_j"]["sram"] == pytest.approx(sram_before + operand_j,
                                                                rel=1e-9)
    share = lambda e: e["energy_by_level_j"]["sram"] / e["dynamic_energy_j"]  # noqa: E731
    assert share(energy) > share(before)
    # Everything else is unchanged: latency, the other levels, bytes moved by transfers.
    for level in ("sa", "vec", "hbm", "noc", "static"):
        assert energy["energy_by_level_j"][level] == before["energy_by_level_j"][level]
    assert energy["basis"]["sram_operands"]["bytes_read"] == sum(r for r, _ in moved.values())


@pytest.mark.unit
def test_operand_power_is_spread_over_at_least_the_scratchpads_bandwidth_time():
    """The vector unit's timing feeds its ALUs faster than the SRAM can (16 KiB against
    512 B per cycle): the peak-power estimate spreads its operand energy over at least
    bytes / SRAM peak bandwidth instead of its busy time."""
    chip = device()
    moved = 1 << 20
    stats = {"core0.vec": {"flops": 1000, "busy_ps": 1000, SRAM_OPERAND_READ: moved,
                           SRAM_OPERAND_WRITTEN: moved}}
    config = EnergyConfig(static_scope="active")
    out = energy_metrics(stats, chip, 10 ** 12, config)  # 1 s: the averages stay low
    read_pj, write_pj = sram_pj_per_bit(config, 64 << 20)
    operand_j = 8 * moved * (read_pj + write_pj) * PJ
    sram_bps = 512 * 500_000_000
    floor_s = 2 * moved / sram_bps
    vec_w = 1000 * config.vector_op_pj * PJ / 1e-9
    assert out["energy_by_unit_j"]["core0.vec.sram_operands"] == pytest.approx(operand_j, rel=REL)
    assert out["peak_power_w"] == pytest.approx(
        out["static_power_w"] + vec_w + operand_j / floor_s, rel=1e-9)
