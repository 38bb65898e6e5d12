"""NPU presets load and match what their comments claim (NpuSim Table 3, Ascend 910B2)."""

from __future__ import annotations

import pytest

from npusim.config.loader import scenario_from_dict
from npusim.config.presets import hwconfig_root, list_presets

pytestmark = pytest.mark.unit

GB = 10**9
MB = 10**6

NPU_PRESETS = [name for name in list_presets() if name.startswith("npu/")]

# name: (cores, mesh width x height, clock Hz, peak FP16 FLOP/s per core as the comments print it)
CLAIMS = {
    "npu/large_core_64": (64, (8, 8), 500_000_000, "16.4 TFLOP/s"),
    "npu/small_core_256": (256, (16, 16), 500_000_000, "4.1 TFLOP/s"),
    "npu/ascend_910b": (24, (6, 4), 1_800_000_000, "14.7 TFLOP/s"),
}

# NpuSim Table 3 (Zhu et al., arXiv:2510.05632): (lo, hi) per parameter.
TABLE3 = {
    "npu/large_core_64": {"sa": (32, 128), "lanes": (32, 128), "sram_mb": (8, 128),
                          "noc_gbps": (16, 480), "hbm_gbps": (30, 480)},
    "npu/small_core_256": {"sa": (32, 64), "lanes": (32, 64), "sram_mb": (8, 48),
                           "noc_gbps": (8, 160), "hbm_gbps": (15, 60)},
}


def load(name: str):
    return scenario_from_dict({"name": "t", "hw": {"preset": name},
                               "workload": {"kind": "taskgraph",
                                            "tasks": [{"type": "host", "duration_ps": "1ns"}]}}).hw


def peak_flops_per_core(hw) -> int:
    sa = hw.core.systolic
    return sa.rows * sa.cols * 2 * sa.freq_hz


def _freq_texts(freq_hz: int) -> tuple[str, ...]:
    mhz = freq_hz / 1e6
    return (f"{mhz:g} MHz", f"{mhz:g}MHz", f"{mhz / 1e3:g} GHz", f"{mhz / 1e3:g}GHz")


@pytest.mark.parametrize("name", NPU_PRESETS)
def test_every_preset_loads_and_its_comments_state_its_size(name):
    """Any NPU preset (also ones added later): the header comments name the core count,
    the mesh shape, the clock and the per-core peak FP16 FLOP/s that the values give."""
    hw = load(name)
    text = (hwconfig_root() / f"{name}.yaml").read_text()
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    assert f"{hw.num_cores} " in comments and "cores" in comments
    assert f"{hw.noc.width}x{hw.noc.height}" in comments
    assert any(f in comments for f in _freq_texts(hw.core.systolic.freq_hz))
    assert f"{peak_flops_per_core(hw) / 1e12:.1f} TFLOP/s" in comments


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_preset_matches_its_claims(name):
    hw = load(name)
    cores, (width, height), freq, peak_text = CLAIMS[name]
    assert hw.kind == "npu" and hw.name == name.split("/")[1]
    assert hw.num_cores == cores
    assert (hw.noc.width, hw.noc.height) == (width, height)
    assert hw.core.systolic.freq_hz == hw.core.vector.freq_hz == hw.core.sram.freq_hz == freq
    text = (hwconfig_root() / f"{name}.yaml").read_text()
    assert f"{peak_flops_per_core(hw) / 1e12:.1f} TFLOP/s" == peak_text
    assert peak_text in text, f"{name}: the comments should state the per-core peak {peak_text}"
    assert hw.hbm is not None and hw.hbm.peak_bandwidth_bps > 0


@pytest.mark.parametrize("name", sorted(TABLE3))
def test_npusim_presets_are_inside_table3(name):
    hw, ranges = load(name), TABLE3[name]
    sa = hw.core.systolic
    assert ranges["sa"][0] <= sa.rows == sa.cols <= ranges["sa"][1]
    assert ranges["lanes"][0] <= hw.core.vector.lanes <= ranges["lanes"][1]
    assert hw.core.vector.alus_per_lane == 64
    assert ranges["sram_mb"][0] * MB <= hw.core.sram.capacity_bytes <= ranges["sram_mb"][1] * MB
    assert ranges["noc_gbps"][0] * GB <= hw.noc.link_bandwidth_bps <= ranges["noc_gbps"][1] * GB
    per_core_hbm = hw.hbm.peak_bandwidth_bps
    assert ranges["hbm_gbps"][0] * GB <= per_core_hbm <= ranges["hbm_gbps"][1] * GB


def test_small_and_large_core_chips_have_the_same_totals():
    large, small = load("npu/large_core_64"), load("npu/small_core_256")

    def totals(hw):
        n = hw.num_cores
        return (n * peak_flops_per_core(hw), n * hw.core.sram.capacity_bytes,
                n * hw.hbm.peak_bandwidth_bps, n * hw.hbm.capacity_bytes)

    assert totals(small) == totals(large)


def test_small_and_large_core_chips_have_the_same_bisection_bandwidth():
    large, small = load("npu/large_core_64"), load("npu/small_core_256")
    assert (small.noc.height * small.noc.link_bandwidth_bps
            == large.noc.height * large.noc.link_bandwidth_bps)


def test_ascend_910b2_totals():
    hw = load("npu/ascend_910b")
    cores = hw.num_cores
    assert cores * peak_flops_per_core(hw) == pytest.approx(354e12, rel=0.01)
    # CANN ddr_rate 32 B/cycle per AI core at 1.8 GHz = 57.6 GB/s per core.
    assert hw.hbm.peak_bandwidth_bps == pytest.approx(32 * 1.8e9, rel=0.005)
    assert 1.2e12 <= cores * hw.hbm.peak_bandwidth_bps <= 1.7e12
    # 192 MiB of L2 shared by 24 cores is the bulk of each core's modelled SRAM.
    assert hw.core.sram.capacity_bytes >= (192 << 20) // cores
    assert cores * hw.hbm.capacity_bytes == 48 << 30


@pytest.mark.unit
def test_a_dma_burst_group_below_one_hbm_burst_is_refused():
    # 1-byte groups were accepted, and a tlm run then simulated every byte as a
    # transaction (it seemed to hang)
    from npusim.core.errors import ConfigError

    def scenario(group: int):
        return scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64",
                                                       "core": {"dma": {"burst_group_bytes": group}}},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    with pytest.raises(ConfigError, match=r"core\.dma\.burst_group_bytes \(1 B\) is smaller "
                                          r"than one HBM burst \(32 B"):
        scenario(1)
    assert scenario(32).hw.core.dma.burst_group_bytes == 32  # one burst is enough
