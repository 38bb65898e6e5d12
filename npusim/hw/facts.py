"""Headline facts of a built device, for ``npusim list`` and users sizing a chip: its
cores, peak FLOP/s, and each memory level's capacity and peak bandwidth, summed over the
parts that have them (the same peaks the run metrics' utilisations divide by)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterator

from npusim.hw.base import ComputeUnit, MemoryTarget


def level(name: str) -> str:
    """Memory/network level of a part name: ``core3.hbm`` -> ``hbm``, ``noc`` -> ``noc``."""
    return name.rsplit(".", 1)[-1] if "." in name else name


def rated_parts(device: Any) -> Iterator[tuple[str, Any, bool]]:
    """``(name, part, is_compute)`` for each compute unit rated in FLOP/s and each
    memory: the parts a device's peaks are summed over (whole-chip figures, and the run
    metrics' utilisations)."""
    for name, part in device.parts.items():
        if isinstance(part, ComputeUnit):
            if part.peak_flops_per_s:
                yield name, part, True
        elif isinstance(part, MemoryTarget):
            yield name, part, False


def device_facts(device: Any) -> dict[str, Any]:
    """``cores`` (distinct ``coreN`` prefixes of the part names), ``peak_flops_per_s``
    (every unit rated in FLOP/s), and per memory level (the part name's last component:
    ``sram``, ``hbm``) ``capacity_bytes`` and ``peak_bandwidth_bps``, summed."""
    cores = {name.split(".", 1)[0] for name in device.parts if name.startswith("core")}
    flops = 0.0
    capacity: dict[str, int] = defaultdict(int)
    bandwidth: dict[str, int] = defaultdict(int)
    for name, part, is_compute in rated_parts(device):
        if is_compute:
            flops += part.peak_flops_per_s
            continue
        size = getattr(part, "capacity_bytes", None)
        if size is None:  # a DRAM channel's size is its address mapping's
            size = getattr(getattr(part, "mapping", None), "capacity_bytes", None)
        capacity[level(name)] += int(size or 0)
        bandwidth[level(name)] += int(part.peak_bandwidth_bps or 0)
    return {"cores": len(cores), "peak_flops_per_s": flops,
            "capacity_bytes_by_level": dict(capacity),
            "peak_bandwidth_bps_by_level": dict(bandwidth)}
