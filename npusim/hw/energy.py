"""Energy and power parameters of the hardware parts (dynamic energy per event, static power).

Every default is at a 7 nm logic node and each is either cited or labelled
"assumption:"; ``docs/energy.md`` explains how they were derived and what the model leaves
out.  The roll-up that turns a run's counters into joules is
:func:`npusim.metrics.energy.energy_metrics`.  Override any value under ``run.energy`` in
a scenario (``--set run.energy.mac_fp16_pj=0.6``).

Node scaling.  The logic figures start from Horowitz's 45 nm numbers (M. Horowitz,
"Computing's energy problem (and what we can do about it)", ISSCC 2014, paper 1.1,
Fig. 1.1.9 "rough energy costs ... in 45nm 0.9V": FP16 multiply 1.1 pJ, add 0.4 pJ; INT8
multiply 0.2 pJ, add 0.03 pJ; 64-bit read of a 32 KB SRAM 20 pJ) and are multiplied by
:data:`LOGIC_SCALE_45_TO_7NM`; SRAM arrays use :data:`SRAM_SCALE_45_TO_7NM`.  Both
factors are read off Table 2 of Jouppi et al., "Ten Lessons From Three Generations Shaped
Google's TPUv4i", ISCA 2021, which lists Horowitz's operations again at ~7 nm (see the
comments of the two factors).

Sources are cited with the table or section that holds the number; where none was found,
the comment says "assumption:" and why.  Numbers quoted from secondary sources are marked
as such.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from npusim.core.registry import NumbersNotBooleans

#: Energy per arithmetic operation at 7 nm relative to 45 nm: 1/3.  Source: Jouppi et al.,
#: "Ten Lessons From Three Generations Shaped Google's TPUv4i: Industrial Product", ISCA
#: 2021, Table 2 (45 nm column = Horowitz; "circa 7 nm" column new): FP16 multiply 0.34 pJ
#: + add 0.16 pJ = 0.50 pJ, INT8 multiply 0.07 pJ + add 0.007 pJ = 0.077 pJ, i.e. both
#: multiply+add sums are 3.0x below Horowitz's 1.5 and 0.23 pJ.  The single operations
#: range from 2.5x (FP16 add) to 4.3x (INT8 add); 1/3 reproduces the table's 7 nm MAC sums
#: to within 1%.  (Table values read from a reproduction of the table, not the PDF itself.)
LOGIC_SCALE_45_TO_7NM = 1 / 3

#: Same for an SRAM array read: 1/2.  Assumption anchored on the same Table 2 (64-bit read):
#: 32 KB SRAM 20 pJ at 45 nm -> 8.5 pJ at 7 nm (1/2.35); the ratio depends on array size
#: there (8 KB 10 -> 7.5 pJ, 1/1.3; 1 MB 100 -> 14 pJ, 1/7.1).  1/2 rounds the 32 KB ratio
#: to the conservative side: 0.156 pJ/bit against the table's 0.133 (+18%).  Assumption:
#: a scratchpad is built from small macros, so the 32 KB row is the representative one.
SRAM_SCALE_45_TO_7NM = 1 / 2

# Horowitz ISSCC 2014, Fig. 1.1.9, 45 nm 0.9 V (pJ).  FP16 and INT8 multiply + add = one MAC.
_FP16_MAC_45NM_PJ = 1.1 + 0.4
_INT8_MAC_45NM_PJ = 0.2 + 0.03
_SRAM_32KB_45NM_PJ_PER_BIT = 20.0 / 64  # 64-bit read of a 32 KB array

#: On-chip wire energy, 0.04 pJ/bit/mm = 40 fJ/bit/mm.  Source: W. J. Dally, C. T. Gray,
#: J. Poulton, B. Khailany, J. Wilson, L. Dennison, "Hardware-Enabled Artificial
#: Intelligence", Symposium on VLSI Circuits 2018, p. 2: wire energy ~CV² with C about
#: 200 fF/mm "independent of scaling"; "in present day chips, energy efficiency for on-chip
#: wires is between 20-40 fJ/bit-mm" (a 16 nm setting; quoted via secondary notes, not
#: checked against the PDF).  40 is the top of that range.  Assumption: it holds at 7 nm
#: (C/mm does not scale, supply voltage barely does).  Older figures are higher: Keckler et
#: al., "GPUs and the Future of Parallel Computing", IEEE Micro 31(5), 2011, Table 1: 310 pJ
#: for 256 bits over 10 mm at 40 nm, 0.9 V (~121 fJ/bit/mm).
WIRE_PJ_PER_BIT_PER_MM = 0.04

#: The array part of an SRAM read (pJ/bit): Horowitz's 45 nm 32 KB array (20 pJ per 64-bit
#: read, Fig. 1.1.9) x SRAM_SCALE_45_TO_7NM = 0.156 (TPUv4i Table 2 at 7 nm: 8.5/64 = 0.133).
SRAM_ARRAY_READ_PJ_PER_BIT = _SRAM_32KB_45NM_PJ_PER_BIT * SRAM_SCALE_45_TO_7NM
#: Assumption: writes cost 1.4x reads.  No published table found: the ratio is that of a
#: CACTI 7 run for a wide (512-bit) 28 nm SRAM array (write 0.0486 vs read 0.0347 pJ/bit;
#: run configuration not recorded, not re-run for this comment).  CACTI 7: Balasubramonian
#: et al., "CACTI 7: New Tools for Interconnect Exploration in Innovative Off-Chip
#: Memories", ACM TACO 14(2), 2017; code at github.com/HewlettPackard/cacti.
SRAM_WRITE_TO_READ = 1.4


def sram_read_pj_per_bit(capacity_bytes: int, mm2_per_mib: float) -> float:
    """pJ per bit read from a scratchpad of ``capacity_bytes``: the array read
    (:data:`SRAM_ARRAY_READ_PJ_PER_BIT`) plus the wire to and from it at
    :data:`WIRE_PJ_PER_BIT_PER_MM`.  Assumption: an access travels on average half the side
    of the core's SRAM macro (a square of ``capacity x mm2_per_mib``, npusim/hw/area.py):
    2.7 mm for 64 MiB (28.8 mm²), 1.3 mm for 16 MiB."""
    side_mm = math.sqrt(capacity_bytes / 2**20 * mm2_per_mib)
    return SRAM_ARRAY_READ_PJ_PER_BIT + WIRE_PJ_PER_BIT_PER_MM * side_mm / 2

#: DRAM access energy (pJ per bit read or written, I/O included) by standard family.  The
#: family is matched at the start of a DRAM config's ``standard`` string, longest first.
DEFAULT_DRAM_PJ_PER_BIT: dict[str, float] = {
    # HBM2 3.6.  Source range: O'Connor et al., "Fine-Grained DRAM: Energy-Efficient DRAM
    # for Extreme Bandwidth Systems", MICRO 2017, Secs. 1-2: "the energy to access a bit in
    # HBM2 is approximately 3.97 pJ/bit" (on-die data movement 2.24 + interposer I/O 0.3 +
    # an average 1.21 pJ/bit of row activation; 3.92 incl. ECC).  Jouppi et al. (TPUv4i,
    # ISCA 2021, Table 2): HBM2 250-450 pJ per 64-bit access = 3.9-7.0 pJ/bit.  Assumption:
    # 3.6 (the project's reference value) is ~9% below O'Connor's total, between his
    # figure without activation (~2.7) and with it; npusim charges activations separately
    # (dram_activate_pj_per_row_kib).
    "HBM2": 3.6,
    # Assumption: HBM2E and HBM3 keep HBM2's energy per bit (same TSV/interposer I/O and
    # core organisation).  No vendor pJ/bit for HBM3 was found; Micron's 2020 ultra-bandwidth
    # memory comparison (GDDR6 / GDDR6X / HBM2E) lists HBM2E at 6.0 pJ/bit "average device
    # power" (secondary copy), so 3.6 may be low for HBM2E.
    "HBM2E": 3.6,
    "HBM3": 3.6,
    # Assumption: LPDDR4 13.5, the project's internal reference value (13-14 pJ/bit from an
    # unpublished LPDDR4 simulation); no public source giving it was found.  It lies between
    # HBM2 (~4, above) and DDR3/4 (20.3 pJ/bit: 1300 pJ per 64-bit access, TPUv4i Table 2).
    "LPDDR4": 13.5,
    # Assumption: LPDDR5/5X ~25% below LPDDR4.  I/O energy ~ VDDQ²: JEDEC VDDQ is 0.5 V for
    # LPDDR5/5X, 0.6 V for LPDDR4X ((0.5/0.6)² = 0.69) and 1.1 V for LPDDR4, so the I/O
    # saving against LPDDR4 proper could be larger; the core part is taken as unchanged.
    "LPDDR5": 10.0,
    "LPDDR5X": 10.0,
    # DDR4 DIMMs 20.3 pJ/bit.  Source: Jouppi et al. (TPUv4i, ISCA 2021, Table 2): DDR3/4
    # 1300 pJ per 64-bit access = 20.3 pJ/bit, the low end of Horowitz's DRAM 1.3-2.6 nJ per
    # 64-bit access (ISSCC 2014, Fig. 1.1.9; 20-40 pJ/bit).
    "DDR4": 20.3,
    # Assumption: GDDR7 7 pJ/bit.  GDDR6 is 350-480 pJ per 64-bit access (5.5-7.5 pJ/bit,
    # TPUv4i Table 2); Micron's 2020 comparison lists GDDR6 7.5 and GDDR6X 7.25 pJ/bit
    # (secondary copy); Micron's GDDR7 announcement (4 June 2024) claims ">50%
    # power-efficiency improvement compared to GDDR6", i.e. nearer 5 pJ/bit, so 7 is
    # conservative.
    "GDDR7": 7.0,
}


class EnergyConfig(NumbersNotBooleans):
    """Dynamic energy per event and static power per part (defaults: 7 nm).

    Every default is cited (paper + table/section, or datasheet) or labelled an assumption;
    the module comments carry the sources; see also ``docs/energy.md``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # metrics.json must stay valid JSON

    process: str = Field("7nm", description="Process node the logic and SRAM figures "
                                            "describe: a label recorded in the energy "
                                            "basis, it rescales nothing (set the figures "
                                            "themselves for another node).")

    # -- compute ------------------------------------------------------------------------
    mac_fp16_pj: float = Field(
        _FP16_MAC_45NM_PJ * LOGIC_SCALE_45_TO_7NM, ge=0,
        description="pJ per FP16 multiply-accumulate in a systolic array (2 flops). Horowitz "
                    "ISSCC 2014 45 nm FP16 multiply 1.1 pJ + add 0.4 pJ, x 1/3 for 7 nm "
                    "(see LOGIC_SCALE_45_TO_7NM) = 0.5 pJ. Used for arrays with "
                    "dtype_bytes >= 2. Jouppi et al., TPUv4i, ISCA 2021, Table 2 give 0.34 + "
                    "0.16 = 0.50 pJ at 7 nm directly.")
    mac_int8_pj: float = Field(
        _INT8_MAC_45NM_PJ * LOGIC_SCALE_45_TO_7NM, ge=0,
        description="pJ per INT8 multiply-accumulate (arrays with dtype_bytes = 1). Horowitz "
                    "ISSCC 2014 45 nm INT8 multiply 0.2 pJ + add 0.03 pJ, x 1/3 for 7 nm = "
                    "0.077 pJ; Jouppi et al., TPUv4i, ISCA 2021, Table 2: 0.07 + 0.007 = "
                    "0.077 pJ at 7 nm.")
    vector_op_pj: float = Field(
        0.5, ge=0,
        description="pJ per vector-unit flop. Assumption: half an FP16 multiply+add at 7 nm "
                    "(0.25 pJ of TPUv4i Table 2's 0.50) plus ~0.25 pJ to read and write "
                    "operands in the vector register file (not from a source: register-file "
                    "access taken as costing about as much as the arithmetic).")

    # -- on-chip memory -----------------------------------------------------------------
    sram_read_pj_per_bit: float | None = Field(
        None, ge=0,
        description="pJ per bit read from a core's SRAM scratchpad. Default (None): "
                    "Horowitz ISSCC 2014 45 nm 32 KB array 20 pJ / 64 bit x 1/2 for 7 nm "
                    "(assumption near TPUv4i Table 2's 20 -> 8.5 pJ) + wire at 0.04 "
                    "pJ/bit/mm (Dally et al., VLSI 2018: 20-40 fJ/bit-mm) over half the "
                    "side of the core's SRAM macro (assumption; its area from "
                    "npusim/hw/area.py): 0.26 pJ/bit for 64 MiB per core, 0.21 for 16 MiB.")
    sram_write_pj_per_bit: float | None = Field(
        None, ge=0,
        description="pJ per bit written to an SRAM scratchpad. Default (None): 1.4x the "
                    "read (assumption: the write/read ratio of one CACTI 7 run for a wide "
                    "28 nm array, not a published figure); 0.37 pJ/bit for 64 MiB per core.")

    # -- DRAM ---------------------------------------------------------------------------
    dram_pj_per_bit: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: dict(DEFAULT_DRAM_PJ_PER_BIT),
        description="pJ per bit read or written, I/O included, by DRAM standard family "
                    "(matched at the start of the DRAM config's 'standard' string, longest "
                    "key first): HBM2/HBM2E/HBM3 3.6 (assumption, ~9% below O'Connor et al., "
                    "MICRO 2017, Secs. 1-2: HBM2 3.97 pJ/bit), DDR4 20.3 (Jouppi et al., ISCA "
                    "2021, Table 2), LPDDR4 13.5, LPDDR5/5X 10, GDDR7 7 (assumptions; "
                    "sources and ranges in the comments of DEFAULT_DRAM_PJ_PER_BIT in npusim/hw/energy.py). Keys given here are "
                    "merged over these defaults; a new key must match a DRAM of the device.")
    dram_default_pj_per_bit: float = Field(
        3.6, ge=0,
        description="pJ per bit for a DRAM whose standard matches no key of dram_pj_per_bit. "
                    "Assumption: the HBM2 figure (the NPU presets use HBM).")
    dram_activate_pj_per_row_kib: float = Field(
        525.0, ge=0,
        description="pJ per row activation (ACT + PRE) per KiB of row opened. Method of "
                    "Micron TN-40-07 'Calculating Memory Power for DDR4 SDRAM', E = VDD (IDD0 "
                    "tRC - IDD3N tRAS - IDD2N (tRC - tRAS)), with the currents of DRAMsim3 "
                    "configs/DDR4_8Gb_x8_3200.ini (github.com/umd-memsys/DRAMsim3; VDD 1.2 V; "
                    "IDD0 57, IDD3N 52, IDD2N 37 mA; tRAS 52, tRP 22 cycles) at tCK 0.625 ns: "
                    "tRC 46.25 ns, tRAS 32.5 ns = 525 pJ per 1 KiB device row (1024 columns "
                    "x 8 bits; the VPP/IPP term is left out). Assumption: the same per KiB "
                    "for every standard. Activations are counted by the tlm DRAM model; the "
                    "analytic level estimates one per row_bytes streamed.")

    # -- network and links --------------------------------------------------------------
    wire_pj_per_bit_per_mm: float = Field(
        WIRE_PJ_PER_BIT_PER_MM, ge=0,
        description="pJ per bit per mm of on-chip wire: 40 fJ/bit/mm, the top of the "
                    "20-40 fJ/bit-mm Dally et al. give for on-chip wires (Hardware-Enabled "
                    "Artificial Intelligence, Symp. VLSI Circuits 2018, p. 2); assumption: "
                    "it holds at 7 nm. Keckler et al., IEEE Micro 2011, Table 1 imply ~121 "
                    "fJ/bit/mm at 40 nm, 0.9 V.")
    noc_router_pj_per_bit: float = Field(
        0.1, ge=0,
        description="pJ per bit through one NoC router (buffer write + read, crossbar, "
                    "allocation). Assumption: 0.1 pJ/bit at 7 nm, not calibrated. For scale: "
                    "FlooNoC (Fischer et al., IEEE TVLSI 2025, arXiv:2409.17606) reports "
                    "0.15 pJ/B/hop (~0.02 pJ/bit, router and link) in 12 nm at 0.8 V with "
                    "wide links, so 0.1 is likely conservative.")
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
                    "for a PCIe 5.0-class 32 GT/s SerDes (no public per-bit figure for it "
                    "was found). For UCIe set 0.5 (standard package) or 0.25 (advanced "
                    "package), the UCIe 1.0 power-efficiency targets (UCIe 1.0 "
                    "specification; D. Das Sharma et al., 'Universal Chiplet Interconnect "
                    "Express (UCIe): An Open Industry Standard for Innovations With "
                    "Chiplets at Package Level', IEEE Trans. CPMT, 2022).")

    # -- static power ---------------------------------------------------------------------
    sa_static_w_per_mac: float = Field(
        2.5e-5, ge=0,
        description="Static (leakage) W per systolic-array MAC cell. Assumption: 10% of the "
                    "cell's full-activity dynamic power at 500 MHz (0.5 pJ x 500 MHz = "
                    "0.25 mW), i.e. 0.41 W for a 128x128 array. Not taken from a "
                    "publication.")
    vec_static_w_per_alu: float = Field(
        2.5e-5, ge=0,
        description="Static W per vector ALU. Assumption: 10% of its full-activity dynamic "
                    "power at 500 MHz (0.5 pJ x 500 MHz). Not taken from a publication.")
    sram_static_w_per_mib: float = Field(
        0.01, ge=0,
        description="Static W per MiB of SRAM. Assumption: 10 mW/MiB (~1.2 nW/bit), "
                    "high-density low-leakage 7 nm cells without power gating. Not taken "
                    "from a publication.")
    dram_static_w_per_channel: float = Field(
        0.1, ge=0,
        description="Background W per DRAM channel (standby, refresh, idle PHY). Assumption: "
                    "0.1 W per HBM pseudo-channel (~1.6 W per 16-pseudo-channel stack); "
                    "applied per channel to every standard. Not taken from a publication.")
    router_static_w: float = Field(
        0.01, ge=0, description="Static W per NoC router. Assumption: 10 mW (5-port router "
                                "with VC buffers at 7 nm). Not taken from a publication.")
    link_static_w: float = Field(
        0.5, ge=0, description="Static W per point-to-point link (SerDes idle in L0). "
                               "Assumption: 0.5 W for a x16 PCIe-class link. Not taken "
                               "from a publication.")
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
