"""Multi-core NPU: a 2D mesh of cores, each with a systolic array, a vector unit, an SRAM
scratchpad, a DMA engine and its own HBM channels (NpuSim §2.1, Fig. 1, Table 3).

Unit names: ``core{i}.sa`` (systolic array), ``core{i}.vec`` (vector unit),
``core{i}.sram``, ``core{i}.hbm``; the network is ``noc``.  Core ``i`` sits at
``x = i % width``, ``y = i // width`` on the mesh.  A transfer endpoint is a memory
level (``core3.hbm``, ``core3.sram``; ``core3`` alone means its SRAM).

Optionally (``host:``) the chip has a host behind a link (PCIe) attached to the router
of one core, the *host port*: parts ``host.link`` and ``host.dram``, endpoint
``core{port}.host`` (named after the port core, so that a transfer to the host is
never mistaken for a shifted copy of itself).  The serving engine swaps preempted
requests' KV there.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from npusim.core.errors import MappingError
from npusim.core.registry import NumbersNotBooleans, PartConfig, register
from npusim.core.units import Bytes
from npusim.hw.base import AccessPattern
from npusim.hw.compute.systolic import SystolicArray, SystolicConfig
from npusim.hw.compute.vector import VectorConfig, VectorUnit
from npusim.hw.devices.base import Device, Stage, TransferPlan, _mix
from npusim.hw.interconnect.link import Link, LinkConfig
from npusim.hw.interconnect.noc import MeshNoc, NocConfig
from npusim.hw.memory.dram import DramChannel, DramConfig
from npusim.hw.memory.sram import Sram, SramConfig
from npusim.mapping.taskgraph import TransferTask


class DmaConfig(NumbersNotBooleans):
    """Per-core DMA engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    burst_group_bytes: Bytes = Field(
        16384, gt=0, description="Bytes per memory transaction (a tile-sized burst group). "
                                 "Assumption: 16 KiB, a typical DMA descriptor size; larger "
                                 "groups mean fewer simulated events.  At least one HBM "
                                 "burst (the DRAM moves whole bursts).")
    max_outstanding: int = Field(
        8, ge=1, description="Burst groups the DMA keeps in flight at once (assumption: 8). "
                             "Below a transfer's stage count (read, NoC, write) it bounds "
                             "the transfer: each group passes the stages in turn.")


class NpuCoreConfig(NumbersNotBooleans):
    """One NPU core: compute engines, scratchpad and DMA."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    systolic: SystolicConfig = Field(description="The core's systolic array (cube unit).")
    vector: VectorConfig = Field(description="The core's vector unit.")
    sram: SramConfig = Field(description="The core's SRAM scratchpad.")
    dma: DmaConfig = Field(default_factory=DmaConfig, description="The core's DMA engine.")


class HostConfig(NumbersNotBooleans):
    """The host behind the chip: its memory and the link to it (KV swap target)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    link: LinkConfig = Field(description="Chip-to-host link, e.g. {preset: links/pcie4_x16}. "
                                         "Its PHY is not in the chip's area model.")
    memory: DramConfig = Field(description="Host memory, e.g. {preset: memory/ddr4_3200, "
                                           "channels: 4} (the preset is one 25.6 GB/s channel).")
    port_core: int = Field(0, ge=0, description="Core whose router the host link attaches "
                                                "to (assumption: core 0, a mesh corner).")


class NpuConfig(PartConfig):
    """A multi-core NPU with a 2D-mesh NoC and per-core HBM."""

    kind: Literal["npu"] = "npu"
    name: str = Field("npu", description="Device name used in reports.")
    core: NpuCoreConfig = Field(description="Configuration shared by every core.")
    hbm: DramConfig | None = Field(
        None, description="Each core's local HBM (channels attached to that core); "
                          "omit for an SRAM-only chip.")
    noc: NocConfig = Field(description="The on-chip network; width x height = number of cores.")
    host: HostConfig | None = Field(
        None, description="Optional host memory behind a link (for KV swap); omit for a "
                          "chip whose KV never leaves it.")

    @model_validator(mode="after")
    def _check(self) -> "NpuConfig":
        if self.core.dma.burst_group_bytes > self.core.sram.capacity_bytes:
            raise ValueError(
                f"core.dma.burst_group_bytes ({self.core.dma.burst_group_bytes} B) exceeds "
                f"core.sram.capacity_bytes ({self.core.sram.capacity_bytes} B); "
                "a DMA burst group must fit in the scratchpad")
        if self.hbm is not None and self.core.dma.burst_group_bytes < self.hbm.burst_bytes:
            # (1 B groups were accepted: a tlm run then simulated every byte as a
            # transaction and seemed to hang)
            raise ValueError(
                f"core.dma.burst_group_bytes ({self.core.dma.burst_group_bytes} B) is smaller "
                f"than one HBM burst ({self.hbm.burst_bytes} B: hbm.bus_width_bits x "
                f"hbm.burst_length / 8); expected at least {self.hbm.burst_bytes} B, as the "
                "DRAM moves whole bursts")
        if self.host is not None and self.host.port_core >= self.num_cores:
            raise ValueError(f"host.port_core = {self.host.port_core} is not a core of this "
                             f"{self.num_cores}-core chip (expected 0..{self.num_cores - 1})")
        return self

    @property
    def num_cores(self) -> int:
        return self.noc.width * self.noc.height


_ENDPOINT = re.compile(r"core(\d+)(?:\.(hbm|sram|host))?")
#: Canonical core numbers of variant cores start here, beyond any chip's core count.
_VARIANT_OFFSET = 1 << 24


@register("device", NpuConfig)
class NpuDevice(Device):
    """Multi-core NPU device (cores x {systolic, vector, SRAM, DMA, router} + HBM)."""

    def __init__(self, name: str = "npu", config: NpuConfig | None = None):
        assert config is not None
        super().__init__(name, config)
        self.num_cores = config.num_cores
        #: Cores whose parts were replaced (see :meth:`replace_part`).
        self._variant_cores: set[int] = set()
        self.noc = self.add_part("noc", MeshNoc("noc", config.noc))
        vector = config.core.vector
        if vector.operand_bandwidth_bps is None:  # the lanes read and write the core's SRAM
            sram = config.core.sram
            vector = vector.model_copy(update={
                "operand_bandwidth_bps": sram.bytes_per_cycle * sram.freq_hz})
        for core in range(self.num_cores):
            self.add_part(f"core{core}.sa", SystolicArray(f"core{core}.sa", config.core.systolic))
            self.add_part(f"core{core}.vec", VectorUnit(f"core{core}.vec", vector))
            self.add_part(f"core{core}.sram", Sram(f"core{core}.sram", config.core.sram))
            if config.hbm is not None:
                self.add_part(f"core{core}.hbm", DramChannel(f"core{core}.hbm", config.hbm))
        #: Endpoint of host memory (``None`` without ``host:``).
        self.host_memory: str | None = None
        if config.host is not None:
            self.host_link = self.add_part("host.link", Link("host.link", config.host.link))
            self.add_part("host.dram", DramChannel("host.dram", config.host.memory))
            self.host_memory = f"core{config.host.port_core}.host"

    def endpoint(self, name: str) -> tuple[int, str]:
        """``(core index, level)`` for a transfer endpoint such as ``core3.hbm``."""
        match = _ENDPOINT.fullmatch(name)
        if not match:
            raise MappingError(f"transfer endpoint {name!r} is not a memory level; "
                               "expected 'coreN.hbm', 'coreN.sram' or 'coreN'")
        core, level = int(match[1]), match[2] or "sram"
        if not 0 <= core < self.num_cores:
            raise MappingError(f"endpoint {name!r}: core {core} does not exist "
                               f"(this device has cores 0..{self.num_cores - 1})")
        if level == "hbm" and self.config.hbm is None:
            raise MappingError(f"endpoint {name!r}: this device has no HBM")
        if level == "host" and name != self.host_memory:
            raise MappingError(f"endpoint {name!r}: " + (
                f"host memory is reached as {self.host_memory!r}" if self.host_memory
                else "this device has no host (hw.host)"))
        return core, level

    def replace_part(self, name: str, part):
        """Swap a core's part (heterogeneous cores); the core becomes a variant core."""
        replaced = super().replace_part(name, part)
        match = re.fullmatch(r"core(\d+)\..+", name)
        if match:
            self._variant_cores.add(int(match[1]))
        return replaced

    def canonical_cores(self, cores: set[int]) -> dict[int, int] | None:
        # Routing is translation-invariant (XY routing on a mesh; index order on a ring
        # or line), and each segment starts on an idle chip, so shifting a placement of
        # identical cores leaves its timing unchanged.  Shift to the origin.  Cores with
        # replaced parts (heterogeneous decode cores, all of one variant) are moved
        # _VARIANT_OFFSET further, so a placement on them never shares a memo entry with
        # the same shape on the preset's cores (a swap from a decode core's HBM is not
        # one from a prefill core's).
        if not cores:
            return None
        variant = self._variant_cores
        noc = self.config.noc
        if noc.topology == "mesh":
            width = noc.width
            dx = min(core % width for core in cores)
            dy = min(core // width for core in cores)
            shift = dy * width + dx
        else:
            if noc.topology == "ring" and len(cores) > 1:
                return None  # wrap-around sets have no unique origin; keep them distinct
            shift = min(cores)
        if variant:
            return {core: core - shift + (_VARIANT_OFFSET if core in variant else 0)
                    for core in cores}
        return {core: core - shift for core in cores}

    def _find_operand_port(self, unit: str):
        # A core's array and vector unit take their operands from that core's SRAM.
        core, _, _ = unit.partition(".")
        name = f"{core}.sram"
        sram = self.parts.get(name)
        if sram is not None and sram.config.shared_port:
            return name, sram
        return None

    def _memory(self, core: int, level: str):
        return self.parts["host.dram" if level == "host" else f"core{core}.{level}"]

    def reduce_unit(self, endpoint: str) -> str | None:
        core, _ = self.endpoint(endpoint)
        return f"core{core}.vec"

    def plan_transfer(self, task: TransferTask, seed: int = 0) -> TransferPlan:
        src_core, src_level = self.endpoint(task.src)
        dst_core, dst_level = self.endpoint(task.dst)
        stages = [Stage(self._memory(src_core, src_level), "read")]
        if src_level == "host":  # into the chip at the host port first
            stages.append(Stage(self.host_link, "net", "host", src_core))
        if src_core != dst_core:
            stages.append(Stage(self.noc, "net", src_core, dst_core))
        if dst_level == "host":
            stages.append(Stage(self.host_link, "net", dst_core, "host"))
        stages.append(Stage(self._memory(dst_core, dst_level), "write"))
        dma = self.config.core.dma
        chunk = task.chunk_bytes or dma.burst_group_bytes
        pattern = AccessPattern(task.pattern, chunk)
        # Deterministic base address per task: spreads tasks over rows without a global
        # allocator (the memory manager of the NPU strategies assigns real addresses).
        base = (_mix(task.id * 1_000_003 + seed) % (1 << 28)) // chunk * chunk
        return TransferPlan(tuple(stages), chunk, dma.max_outstanding, pattern, base)
