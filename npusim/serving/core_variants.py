"""Heterogeneous disaggregation (NpuSim §4.3.1, Fig. 12): the decode pool's cores rebuilt
with another systolic array, HBM bandwidth or SRAM port (``workload.pd.decode_core``)."""

from __future__ import annotations


def specialise_cores(device, cores: tuple[int, ...], variant) -> None:
    """Give ``cores`` a different systolic array / HBM / SRAM port (heterogeneous
    disaggregation).

    The device belongs to this one simulation, so its parts may be replaced before the
    run starts.  The SRAM keeps the preset's capacity (the memory plan is the same); its
    port scales with the array unless given (NpuSim §5.5 adjusts SRAM bandwidth to the
    array's compute), and the vector unit reads its operands through that port.
    """
    from npusim.hw.compute.systolic import SystolicArray
    from npusim.hw.compute.vector import VectorUnit
    from npusim.hw.memory.dram import DramChannel
    from npusim.hw.memory.sram import Sram

    base = device.config
    sram_port = variant.sram_bytes_per_cycle
    if sram_port is None and variant.systolic_size is not None:
        # the preset's bytes per array column and cycle, at the new side
        sram_port = max(1, base.core.sram.bytes_per_cycle * variant.systolic_size
                        // base.core.systolic.cols)
    for core in cores:
        if variant.systolic_size is not None:
            systolic = base.core.systolic.model_copy(update={"rows": variant.systolic_size,
                                                             "cols": variant.systolic_size})
            device.replace_part(f"core{core}.sa", SystolicArray(f"core{core}.sa", systolic))
        if variant.hbm_channels is not None and base.hbm is not None:
            hbm = base.hbm.model_copy(update={"channels": variant.hbm_channels})
            device.replace_part(f"core{core}.hbm", DramChannel(f"core{core}.hbm", hbm))
        if sram_port is not None and sram_port != base.core.sram.bytes_per_cycle:
            sram = base.core.sram.model_copy(update={"bytes_per_cycle": sram_port})
            device.replace_part(f"core{core}.sram", Sram(f"core{core}.sram", sram))
            vector = device.parts[f"core{core}.vec"].config
            if base.core.vector.operand_bandwidth_bps is None:  # it follows the SRAM
                vector = vector.model_copy(update={
                    "operand_bandwidth_bps": sram_port * sram.freq_hz})
                device.replace_part(f"core{core}.vec", VectorUnit(f"core{core}.vec", vector))
