"""Chip area from per-unit densities (for throughput per mm², NpuSim §5.5).

NpuSim computes "the chip area per unit of computational power, HBM interface and SRAM"
at TSMC 7 nm without giving the numbers; these are ours, each a physical quantity with
its source or labelled an assumption.  Override them under ``hw.area`` in a scenario.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from npusim.core.registry import NumbersNotBooleans


class AreaConfig(NumbersNotBooleans):
    """Area densities at one process node (default: 7 nm)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    process: str = Field("7nm", description="Process node the densities describe.")
    mac_fp16_mm2: float = Field(
        0.0023, gt=0, description="mm² per FP16 MAC of a systolic array, wiring included. "
                                  "Assumption from A100 (7 nm, 826 mm², 108 SMs x 1024 FP16 "
                                  "FMA/cycle) with ~30% of the die in tensor cores.")
    vector_alu_mm2: float = Field(
        0.0006, gt=0, description="mm² per vector ALU (FP16/FP32 FMA lane). Assumption: a "
                                  "quarter of a tensor MAC's share for a wider, more general ALU.")
    sram_mm2_per_mib: float = Field(
        0.45, gt=0, description="mm² per MiB of SRAM incl. periphery. TSMC N7 high-density "
                                "bitcell 0.027 µm² (IEDM 2016) x 8.4 Mbit = 0.23 mm², x2 for "
                                "periphery (assumption).")
    hbm_phy_mm2_per_channel: float = Field(
        0.9, gt=0, description="mm² of HBM PHY + controller per 64-bit pseudo-channel. "
                               "Assumption: ~14 mm² per 1024-bit HBM2E stack interface / 16.")
    router_mm2: float = Field(
        0.1, gt=0, description="mm² per NoC router (assumption: 5-port, 128-bit, a few VC buffers).")


def npu_area_mm2(npu, area: AreaConfig | None = None) -> dict[str, float]:
    """Area of an NPU chip by component (mm²), with ``total``."""
    area = area or AreaConfig()
    core = npu.core
    cores = npu.num_cores
    out = {
        "systolic": cores * core.systolic.rows * core.systolic.cols * area.mac_fp16_mm2,
        "vector": cores * core.vector.lanes * core.vector.alus_per_lane * area.vector_alu_mm2,
        "sram": cores * core.sram.capacity_bytes / 2**20 * area.sram_mm2_per_mib,
        "hbm_interface": cores * (npu.hbm.channels if npu.hbm is not None else 0)
        * area.hbm_phy_mm2_per_channel,
        "noc": cores * area.router_mm2,
    }
    out["total"] = sum(out.values())
    return out


def device_area_mm2(device, area: AreaConfig | None = None) -> dict[str, float]:
    """Area of a built NPU device, core by core (so heterogeneous cores count right)."""
    area = area or AreaConfig()
    npu = device.config
    out = npu_area_mm2(npu, area)
    systolic = hbm = 0.0
    for core in range(npu.num_cores):
        sa = device.parts.get(f"core{core}.sa")
        systolic += (sa.rows * sa.cols if sa is not None else 0) * area.mac_fp16_mm2
        channel = device.parts.get(f"core{core}.hbm")
        hbm += (channel.config.channels if channel is not None else 0) * area.hbm_phy_mm2_per_channel
    out["systolic"], out["hbm_interface"] = systolic, hbm
    out["total"] = sum(v for k, v in out.items() if k != "total")
    return out
