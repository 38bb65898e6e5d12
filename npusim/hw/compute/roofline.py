"""Roofline engine for CPU- and GPU-like units (CPU clusters, GPU SMs, ANE-like blocks).

An op takes the longer of its compute time and its memory time, plus a fixed launch cost:

    time = max(flops / (peak * eff(flops)), bytes / (bandwidth * bandwidth_efficiency))
           + launch_ps

* ``peak`` is ``peak_flops_per_s``, or the entry of ``peak_flops_per_s_by_dtype_bytes``
  for the op's operand width (e.g. ``{2: FP16 peak, 1: INT8 peak}``);
* ``bytes`` is the op's input plus output bytes, each moved once (assumption: perfect
  on-chip reuse; tiling overheads belong in ``bandwidth_efficiency``);
* ``eff(flops)`` is the achieved fraction of peak.  Small kernels cannot fill the machine
  (too few tiles / warps / threads), so efficiency grows with the op's size.  Two forms:

  - **saturating** (default): ``eff = efficiency_max * x / (x + efficiency_half_flops)``
    with ``x`` the op's FLOPs: half of ``efficiency_max`` at ``efficiency_half_flops``,
    approaching ``efficiency_max`` for large ops; ``efficiency_half_flops = 0`` gives a
    flat ``efficiency_max`` (an ideal roofline);
  - **table**: ``efficiency_table`` = ``[[flops, eff], ...]`` measured points, linearly
    interpolated in ``log10(flops)`` (kernel sizes span many decades) and held constant
    beyond the first and last points.
"""

from __future__ import annotations

import bisect
import math
from typing import Literal

from pydantic import Field, model_validator

from npusim.core.errors import MappingError
from npusim.core.registry import PartConfig, register
from npusim.core.units import PS_PER_S, BandwidthBps, TimePs
from npusim.hw.base import ComputeUnit

_ALL_KINDS = ("gemm", "elementwise", "softmax", "reduce")


class RooflineConfig(PartConfig):
    """A compute engine timed by a roofline with a size-dependent efficiency curve."""

    kind: Literal["roofline"] = "roofline"
    peak_flops_per_s: float = Field(
        gt=0, description="Peak FLOP/s at the default precision (e.g. 1.0e13 for 10 TFLOP/s).")
    peak_flops_per_s_by_dtype_bytes: dict[int, float] = Field(
        default_factory=dict,
        description="Optional per-precision peaks keyed by operand bytes, e.g. {2: 2.0e13, "
                    "1: 4.0e13}; ops of other widths use peak_flops_per_s.")
    memory_bandwidth_bps: BandwidthBps = Field(
        gt=0, description="Bandwidth the unit sees to its operands' memory, e.g. '100GB/s'.")
    bandwidth_efficiency: float = Field(
        1.0, gt=0, le=1, description="Achievable fraction of memory_bandwidth_bps "
                                     "(assumption: 1.0; set from a STREAM-like measurement).")
    efficiency_max: float = Field(
        1.0, gt=0, le=1, description="Saturating curve: achieved fraction of peak for very "
                                     "large ops (assumption: 1.0, an ideal roofline).")
    efficiency_half_flops: float = Field(
        0.0, ge=0, description="Saturating curve: op FLOPs at which efficiency reaches half "
                               "of efficiency_max (0 = no size dependence).")
    efficiency_table: list[tuple[float, float]] = Field(
        default_factory=list,
        description="Alternative to the saturating curve: [[flops, efficiency], ...] points "
                    "with increasing flops, interpolated in log10(flops), clamped at the ends.")
    launch_ps: TimePs = Field(
        0, description="Fixed per-op launch overhead, e.g. '5us' for a GPU kernel launch "
                       "(assumption: 0 unless the preset measures it).")
    supported_kinds: list[Literal["gemm", "elementwise", "softmax", "reduce"]] = Field(
        default_factory=lambda: list(_ALL_KINDS),
        description="Op kinds this unit executes (default: all).")

    @model_validator(mode="after")
    def _check(self) -> "RooflineConfig":
        for width, peak in self.peak_flops_per_s_by_dtype_bytes.items():
            if width < 1 or not peak > 0:
                raise ValueError(f"peak_flops_per_s_by_dtype_bytes[{width}] = {peak}: expected "
                                 "a positive operand width in bytes and a positive peak FLOP/s")
        table = self.efficiency_table
        if table:
            if {"efficiency_max", "efficiency_half_flops"} & self.model_fields_set:
                raise ValueError("give either efficiency_table or efficiency_max/"
                                 "efficiency_half_flops, not both")
            for index, (flops, eff) in enumerate(table):
                if not flops > 0:
                    raise ValueError(f"efficiency_table[{index}]: flops must be > 0, got {flops}")
                if not 0 < eff <= 1:
                    raise ValueError(f"efficiency_table[{index}]: efficiency must be in (0, 1], "
                                     f"got {eff}")
            flops_points = [flops for flops, _ in table]
            if any(b <= a for a, b in zip(flops_points, flops_points[1:])):
                raise ValueError(f"efficiency_table flops must be strictly increasing, got "
                                 f"{flops_points}")
        return self


@register("compute", RooflineConfig)
class RooflineUnit(ComputeUnit):
    """Roofline engine: max(compute, memory) time with an efficiency curve, plus launch."""

    def __init__(self, name: str, config: RooflineConfig):
        super().__init__(name, config)
        table = config.efficiency_table
        self._log_x = [math.log10(flops) for flops, _ in table]
        self._eff = [eff for _, eff in table]

    def efficiency(self, flops: float) -> float:
        """Achieved fraction of peak for an op of ``flops`` FLOPs (see the module docstring)."""
        cfg = self.config
        if self._eff:
            if flops <= 0:
                return self._eff[0]
            x = math.log10(flops)
            i = bisect.bisect_right(self._log_x, x)
            if i == 0:
                return self._eff[0]
            if i == len(self._log_x):
                return self._eff[-1]
            x0, x1 = self._log_x[i - 1], self._log_x[i]
            e0, e1 = self._eff[i - 1], self._eff[i]
            return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
        if cfg.efficiency_half_flops == 0:
            return cfg.efficiency_max
        if flops <= 0:
            return 0.0
        return cfg.efficiency_max * flops / (flops + cfg.efficiency_half_flops)

    @property
    def peak_flops_per_s(self) -> float:
        """The default peak (``config.peak_flops_per_s``: operands without their own
        entry in ``peak_flops_per_s_by_dtype_bytes``)."""
        return self.config.peak_flops_per_s

    def peak_for(self, dtype_bytes: int) -> float:
        """Peak FLOP/s for operands of ``dtype_bytes`` bytes."""
        return self.config.peak_flops_per_s_by_dtype_bytes.get(dtype_bytes,
                                                                self.config.peak_flops_per_s)

    def compute_time_ps(self, op) -> int:
        flops = op.flops
        if flops <= 0:
            return 0
        rate = self.peak_for(op.dtype_bytes) * self.efficiency(flops)
        return math.ceil(flops * PS_PER_S / rate)

    def memory_time_ps(self, op) -> int:
        size = op.input_bytes + op.output_bytes
        if size <= 0:
            return 0
        rate = self.config.memory_bandwidth_bps * self.config.bandwidth_efficiency
        return math.ceil(size * PS_PER_S / rate)

    def op_time_ps(self, op) -> int:
        """Picoseconds for ``op`` on an idle unit (pure: no statistics touched)."""
        if not self.supports(op):
            raise MappingError(f"{self.name}: this roofline unit runs "
                               f"{', '.join(self.config.supported_kinds)} ops, got {op.kind!r}")
        return max(self.compute_time_ps(op), self.memory_time_ps(op)) + self.config.launch_ps

    def bound(self, op) -> Literal["compute", "memory"]:
        """Which roof limits ``op``."""
        return "compute" if self.compute_time_ps(op) >= self.memory_time_ps(op) else "memory"

    def supports(self, op) -> bool:
        return op.kind in self.config.supported_kinds
