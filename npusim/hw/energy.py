"""Energy and power parameters of the hardware parts (dynamic energy per event, static power).

Every default is at a 7 nm logic node and each is either cited or labelled
"assumption:"; ``docs/energy.md`` explains how they were derived and what the model leaves
out.  The roll-up that turns a run's counters into joules is
:func:`npusim.metrics.energy.energy_metrics`.  Override any value under ``run.energy`` in
a scenario (``--set run.energy.mac_fp16_pj=0.6``).

Node scaling.  The logic figures start from Horowitz's 45 nm numbers (ISSCC 2014,
"Computing's energy problem": FP16 multiply 1.1 pJ, add 0.4 pJ; INT8 multiply 0.2 pJ,
add 0.03 pJ; 64-bit read of a 32 KB SRAM 20 pJ) and are multiplied by
:data:`LOGIC_SCALE_45_TO_7NM`.  SRAM arrays shrink less than logic, so they use
:data:`SRAM_SCALE_45_TO_7NM`.  Both factors are assumptions (see their comments).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from npusim.core.registry import NumbersNotBooleans

#: Energy per operation at 7 nm relative to 45 nm for arithmetic.  Assumption: 1/3.
#: Jouppi et al. ("Ten lessons from three generations shaped Google's TPUv4i", ISCA 2021,
#: Table 2) put FP16/INT8 add and multiply 2.5-4x lower at 7 nm than Horowitz's 45 nm
#: values; 3x is the middle of that range (our reading of the table, not re-derived here).
LOGIC_SCALE_45_TO_7NM = 1 / 3

#: Same for SRAM array access.  Assumption: 1/2 (bit-cell and bit-line energy scale less
#: than logic because SRAM supply voltage has scaled less, cf. the same TPUv4i table where
#: SRAM reads improve less than arithmetic).
SRAM_SCALE_45_TO_7NM = 1 / 2

# Horowitz ISSCC 2014, 45 nm (pJ).  FP16 and INT8 multiply + add = one MAC.
_FP16_MAC_45NM_PJ = 1.1 + 0.4
_INT8_MAC_45NM_PJ = 0.2 + 0.03
_SRAM_32KB_45NM_PJ_PER_BIT = 20.0 / 64  # 64-bit read of a 32 KB array

#: On-chip wire energy (components.md "Links and energy": ~40 fJ/bit/mm).
WIRE_PJ_PER_BIT_PER_MM = 0.04

#: The array part of an SRAM read (pJ/bit): Horowitz's 45 nm 32 KB array, scaled to 7 nm.
SRAM_ARRAY_READ_PJ_PER_BIT = _SRAM_32KB_45NM_PJ_PER_BIT * SRAM_SCALE_45_TO_7NM
#: Assumption: writes cost 1.4x reads, the write/read ratio CACTI 7 reports for a wide
#: (512-bit) 28 nm SRAM array (0.0486 vs 0.0347 pJ/bit).
SRAM_WRITE_TO_READ = 1.4


def sram_read_pj_per_bit(capacity_bytes: int, mm2_per_mib: float) -> float:
    """pJ per bit read from a scratchpad of ``capacity_bytes``: the array read plus the
    wire to and from it.  Assumption: an access travels on average half the side of the
    core's SRAM macro (a square of ``capacity x mm2_per_mib``, npusim/hw/area.py): 2.7 mm
    for 64 MiB (28.8 mm²), 1.3 mm for 16 MiB."""
    side_mm = math.sqrt(capacity_bytes / 2**20 * mm2_per_mib)
    return SRAM_ARRAY_READ_PJ_PER_BIT + WIRE_PJ_PER_BIT_PER_MM * side_mm / 2

#: DRAM access energy (pJ per bit read or written, I/O included) by standard family.  The
#: family is matched at the start of a DRAM config's ``standard`` string, longest first.
DEFAULT_DRAM_PJ_PER_BIT: dict[str, float] = {
    # components.md: HBM2 ~3.6 pJ/bit (O'Connor et al., "Fine-grained DRAM", MICRO 2017,
    # give ~3.9 pJ/bit for HBM2 including activation and on-die data movement).
    "HBM2": 3.6,
    # Assumption: HBM2E and HBM3 keep HBM2's energy per bit (same TSV/interposer I/O and
    # core organisation; the higher pin rates are not known to change it much).
    "HBM2E": 3.6,
    "HBM3": 3.6,
    # components.md: LPDDR4 ~13-14 pJ/bit (DramDSE LPDDR4 simulation).
    "LPDDR4": 13.5,
    # Assumption: LPDDR5/5X ~25% below LPDDR4 (I/O energy ~ VDDQ², 0.5 V vs 0.6 V).
    "LPDDR5": 10.0,
    "LPDDR5X": 10.0,
    # Assumption: DDR4 DIMMs ~15 pJ/bit, between LPDDR4 (components.md) and Horowitz's
    # 20-40 pJ/bit for DDR3 (1.3-2.6 nJ per 64-bit access, ISSCC 2014).
    "DDR4": 15.0,
    # Assumption: ~7 pJ/bit, the order Micron quoted for GDDR6X (7.25 pJ/bit, 2020);
    # GDDR7 taken as no worse.  Unverified.
    "GDDR7": 7.0,
}


class EnergyConfig(NumbersNotBooleans):
    """Dynamic energy per event and static power per part (defaults: 7 nm).

    Every default is cited or labelled an assumption; see ``docs/energy.md``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # metrics.json must stay valid JSON

    process: str = Field("7nm", description="Process node the logic and SRAM figures describe.")

    # -- compute ------------------------------------------------------------------------
    mac_fp16_pj: float = Field(
        _FP16_MAC_45NM_PJ * LOGIC_SCALE_45_TO_7NM, ge=0,
        description="pJ per FP16 multiply-accumulate in a systolic array (2 flops). Horowitz "
                    "ISSCC 2014 45 nm FP16 multiply 1.1 pJ + add 0.4 pJ, x 1/3 for 7 nm "
                    "(assumption, see LOGIC_SCALE_45_TO_7NM) = 0.5 pJ. Used for arrays with "
                    "dtype_bytes >= 2.")
    mac_int8_pj: float = Field(
        _INT8_MAC_45NM_PJ * LOGIC_SCALE_45_TO_7NM, ge=0,
        description="pJ per INT8 multiply-accumulate (arrays with dtype_bytes = 1). Horowitz "
                    "45 nm INT8 multiply 0.2 pJ + add 0.03 pJ, x 1/3 for 7 nm (assumption).")
    vector_op_pj: float = Field(
        0.5, ge=0,
        description="pJ per vector-unit flop. Assumption: half an FP16 FMA at 7 nm (0.25 pJ) "
                    "plus ~0.25 pJ to read and write operands in the vector register file "
                    "(Horowitz: operand delivery costs as much as the arithmetic).")

    # -- on-chip memory -----------------------------------------------------------------
    sram_read_pj_per_bit: float | None = Field(
        None, ge=0,
        description="pJ per bit read from a core's SRAM scratchpad. Default (None): "
                    "Horowitz 45 nm 32 KB array 20 pJ / 64 bit x 1/2 for 7 nm (assumption) "
                    "+ wire at 0.04 pJ/bit/mm (components.md) over half the side of the "
                    "core's SRAM macro (assumption; its area from npusim/hw/area.py): "
                    "0.26 pJ/bit for 64 MiB per core, 0.21 for 16 MiB.")
    sram_write_pj_per_bit: float | None = Field(
        None, ge=0,
        description="pJ per bit written to an SRAM scratchpad. Default (None): 1.4x the "
                    "read (assumption: the write/read ratio of a wide 28 nm CACTI 7 array); "
                    "0.37 pJ/bit for 64 MiB per core.")

    # -- DRAM ---------------------------------------------------------------------------
    dram_pj_per_bit: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: dict(DEFAULT_DRAM_PJ_PER_BIT),
        description="pJ per bit read or written, I/O included, by DRAM standard family "
                    "(matched at the start of the DRAM config's 'standard' string, longest "
                    "key first): HBM2/HBM2E/HBM3 3.6 (components.md; HBM2E/3 assumption), "
                    "LPDDR4 13.5 (components.md), LPDDR5/5X 10, DDR4 15, GDDR7 7 "
                    "(assumptions, see docs/energy.md). Keys given here are merged over "
                    "these defaults; a new key must match a DRAM of the device.")
    dram_default_pj_per_bit: float = Field(
        3.6, ge=0,
        description="pJ per bit for a DRAM whose standard matches no key of dram_pj_per_bit. "
                    "Assumption: the HBM2 figure (the NPU presets use HBM).")
    dram_activate_pj_per_row_kib: float = Field(
        525.0, ge=0,
        description="pJ per row activation (ACT + PRE) per KiB of row opened. Micron "
                    "TN-40-07 method, E = VDD (IDD0 tRC - IDD3N tRAS - IDD2N (tRC - tRAS)), "
                    "with DRAMsim3 configs/DDR4_8Gb_x8_3200.ini currents (VDD 1.2 V; IDD0 "
                    "57, IDD3N 52, IDD2N 37 mA) and DDR4-3200 tRC 46.25 ns, tRAS 32.5 ns = "
                    "525 pJ per 1 KiB device row; assumption: the same per KiB for every "
                    "standard. Activations are counted by the tlm DRAM model; the analytic "
                    "level estimates one per row_bytes streamed.")

    # -- network and links --------------------------------------------------------------
    wire_pj_per_bit_per_mm: float = Field(
        WIRE_PJ_PER_BIT_PER_MM, ge=0,
        description="pJ per bit per mm of on-chip wire (components.md: ~40 fJ/bit/mm).")
    noc_router_pj_per_bit: float = Field(
        0.1, ge=0,
        description="pJ per bit through one NoC router (buffer write + read, crossbar, "
                    "allocation). Assumption: 0.1 pJ/bit at 7 nm.")
    noc_link_length_mm: float | None = Field(
        None, gt=0,
        description="Length of one router-to-router link in mm. Default (None): the core "
                    "pitch, sqrt(chip area / cores) from npusim/hw/area.py (assumption: "
                    "square tiles, routers at tile centres); 1 mm for devices without an "
                    "area model.")
    noc_pj_per_bit_per_hop: float | None = Field(
        None, ge=0,
        description="pJ per bit per router-to-router hop (router + link). Default (None): "
                    "noc_router_pj_per_bit + wire_pj_per_bit_per_mm x link length.")
    link_pj_per_bit: float = Field(
        5.0, ge=0,
        description="pJ per bit over a point-to-point link (PCIe/UCIe). Assumption: 5 pJ/bit "
                    "for a PCIe 5.0-class 32 GT/s SerDes. For UCIe set 0.5 (standard "
                    "package) or 0.25 (advanced package), the UCIe 1.0 energy targets.")

    # -- static power ---------------------------------------------------------------------
    sa_static_w_per_mac: float = Field(
        2.5e-5, ge=0,
        description="Static (leakage) W per systolic-array MAC cell. Assumption: 10% of the "
                    "cell's full-activity dynamic power at 500 MHz (0.5 pJ x 500 MHz = "
                    "0.25 mW), i.e. 0.41 W for a 128x128 array.")
    vec_static_w_per_alu: float = Field(
        2.5e-5, ge=0,
        description="Static W per vector ALU. Assumption: 10% of its full-activity dynamic "
                    "power at 500 MHz (0.5 pJ x 500 MHz).")
    sram_static_w_per_mib: float = Field(
        0.01, ge=0,
        description="Static W per MiB of SRAM. Assumption: 10 mW/MiB (~1.2 nW/bit), "
                    "high-density low-leakage 7 nm cells without power gating.")
    dram_static_w_per_channel: float = Field(
        0.1, ge=0,
        description="Background W per DRAM channel (standby, refresh, idle PHY). Assumption: "
                    "0.1 W per HBM pseudo-channel (~1.6 W per 16-pseudo-channel stack); "
                    "applied per channel to every standard.")
    router_static_w: float = Field(
        0.01, ge=0, description="Static W per NoC router. Assumption: 10 mW (5-port router "
                                "with VC buffers at 7 nm).")
    link_static_w: float = Field(
        0.5, ge=0, description="Static W per point-to-point link (SerDes idle in L0). "
                               "Assumption: 0.5 W for a x16 PCIe-class link.")
    static_scope: Literal["device", "active"] = Field(
        "device",
        description="Which parts leak: 'device' charges static power to every part of the "
                    "chip for the whole run (no power gating); 'active' only to parts that "
                    "did some work (ideal power gating of idle parts).")

    @field_validator("dram_pj_per_bit", mode="after")
    @classmethod
    def _over_default_families(cls, value: dict[str, float]) -> dict[str, float]:
        # Setting one family (--set run.energy.dram_pj_per_bit.HBM2E=4.0) must not drop
        # the others: an LPDDR4 device would fall back to dram_default_pj_per_bit.
        return {**DEFAULT_DRAM_PJ_PER_BIT, **value}

    def added_dram_families(self) -> list[str]:
        """The keys of ``dram_pj_per_bit`` that are not default families (sorted)."""
        return sorted(set(self.dram_pj_per_bit) - set(DEFAULT_DRAM_PJ_PER_BIT))

    def dram_pj_per_bit_for(self, standard: str) -> tuple[float, str | None]:
        """``(pJ/bit, matched family or None)`` for a DRAM ``standard`` string such as
        ``"HBM2E 3.2 Gb/s, 64-bit pseudo-channel"``; the family must be followed by a
        non-alphanumeric character or the end, so ``HBM2`` does not match ``HBM2E``."""
        text = standard.strip().upper()
        for family in sorted(self.dram_pj_per_bit, key=len, reverse=True):
            if re.match(re.escape(family.upper()) + r"(?![A-Z0-9])", text):
                return self.dram_pj_per_bit[family], family
        return self.dram_default_pj_per_bit, None
