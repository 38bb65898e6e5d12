"""Vector unit: SIMD lanes of ALUs for element-wise, softmax and reduction ops.

NpuSim Table 3 sizes the vector unit as "64 ALUs/lane, 32-128 lanes" (large cores) at the
500 MHz core clock.  An op is a number of ALU operations spread evenly over every ALU:

    cycles = max(ceil(elements * ops_per_element / (lanes * alus_per_lane)),
                 ceil(operand bytes / operand bytes per cycle))
             + pipeline_latency_cycles            (0 if there is no work)

The second term is the scratchpad feeding the lanes: an op's operands stream from the
core's SRAM and its results stream back (:meth:`VectorUnit.operand_bytes`), through a
port of ``operand_bandwidth_bps`` (reads and writes together, as the SRAM part counts
them).  On ``large_core_64`` the 8,192 ALUs could take 16 KiB of FP16 operands a cycle
against the scratchpad's 512 B, so element-wise ops are feed-bound; NpuSim times every
primitive's SRAM reads of its inputs and writes of its output the same way and takes the
larger of that and the ALU time (``NpuBase::writeOutputData`` in the authors' code).

ALU operations per element by op kind:

* ``elementwise`` – the op's own ``flops_per_element`` (the strategy knows whether it is
  a residual add (1), RMSNorm (~4) or SiLU-gate (~5));
* ``softmax`` – ``max(op.flops_per_element, softmax_ops_per_element)``; the default 5 is
  one each of running max, subtract, exp, sum and divide per element (assumption: the
  lanes have a special-function unit, so exp costs one issue slot as on the Ascend
  vector unit; set it higher to emulate exp in software);
* ``reduce`` – ``max(op.flops_per_element, reduce_ops_per_element)``; default 1 (one add
  or max per element; the log-depth tree across lanes is part of the pipeline latency).

An op may therefore declare a higher cost than the intrinsic one (a masked, scaled
softmax) but never a lower one.  Data movement is not timed here: operands are
assumed resident in the core's SRAM (DMA tasks move them there), and read from it at
the operand bandwidth above.

**Operand traffic** (:meth:`VectorUnit.operand_bytes`, the energy counters and the feed
bound above):
an op streams its ``elements`` once through the lanes, reading each element of each of
its ``op.inputs`` tensors from the scratchpad and writing one result per element back
(``inputs x elements x dtype_bytes`` read, ``elements x dtype_bytes`` written: a residual
add reads two); a ``reduce`` writes no per-element result (its few outputs are not
counted).  Assumption: the intermediate passes of a softmax or a norm (max, sum, mean)
stay in the vector register file, and a norm's weight vector is not counted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from npusim.core.errors import MappingError
from npusim.core.registry import PartConfig, register
from npusim.core.units import BandwidthBps, FreqHz, cycles_to_ps
from npusim.hw.base import ComputeUnit

_KINDS = ("elementwise", "softmax", "reduce")


class VectorConfig(PartConfig):
    """A SIMD vector unit: ``lanes x alus_per_lane`` ALUs."""

    kind: Literal["vector"] = "vector"
    lanes: int = Field(
        64, gt=0, description="SIMD lanes (NpuSim Table 3: 32-128 on large cores, 32-64 on "
                              "small cores; default 64 is an assumption inside that range).")
    alus_per_lane: int = Field(
        64, gt=0, description="ALUs per lane, each one operation per cycle "
                              "(NpuSim Table 3: 64 ALUs/lane).")
    freq_hz: FreqHz = Field(
        500_000_000, description="Vector unit clock (NpuSim Table 3: 500 MHz core frequency).")
    pipeline_latency_cycles: int = Field(
        8, ge=0, description="Fixed cycles per op to fill and drain the ALU pipeline "
                             "(assumption: 8, a typical FP16 vector pipeline depth).")
    softmax_ops_per_element: int = Field(
        5, ge=1, description="ALU operations per softmax element: max, subtract, exp, sum, "
                             "divide (assumption: exp on a one-slot special-function unit).")
    reduce_ops_per_element: int = Field(
        1, ge=1, description="ALU operations per reduced element (one add or max) of a "
                             "reduce op (the MoE router's top-k, a micro workload's "
                             "reduce). Norms and all-reduce adds are element-wise ops and "
                             "do not use it.")
    operand_bandwidth_bps: BandwidthBps | None = Field(
        None, gt=0, description="Bytes per second the scratchpad feeds the lanes, reads "
                                "and writes together (an op takes at least its operand "
                                "bytes over this). Default (None): unbounded on a "
                                "stand-alone unit; an NPU core sets its SRAM's bandwidth "
                                "(sram.bytes_per_cycle x sram.freq_hz), as NpuSim times "
                                "each primitive's SRAM reads and writes.")


@register("compute", VectorConfig)
class VectorUnit(ComputeUnit):
    """Vector unit: max(ceil(ALU ops / (lanes * ALUs per lane)), operand-feed cycles)
    + pipeline latency (module docstring)."""

    def __init__(self, name: str, config: VectorConfig):
        super().__init__(name, config)
        self.alus = config.lanes * config.alus_per_lane
        self._times: dict = {}  # op -> ps: pure, and serving runs ask for the same shapes often

    def ops_per_element(self, op) -> int:
        """ALU operations per element of ``op`` (see the module docstring)."""
        if op.kind == "softmax":
            return max(op.flops_per_element, self.config.softmax_ops_per_element)
        if op.kind == "reduce":
            return max(op.flops_per_element, self.config.reduce_ops_per_element)
        return op.flops_per_element

    def cycles(self, op) -> int:
        """Vector-unit cycles for ``op`` on an idle unit."""
        if not self.supports(op):
            raise MappingError(f"{self.name}: a vector unit runs {', '.join(_KINDS)} ops, "
                               f"got {op.kind!r} ({op.name or 'unnamed'}); place GEMMs on a "
                               "systolic array or roofline unit")
        if op.elements < 0 or op.flops_per_element < 0:
            raise MappingError(f"{self.name}: op {op.name or op.kind!r} has negative "
                               f"elements ({op.elements}) or flops_per_element "
                               f"({op.flops_per_element})")
        work = op.elements * self.ops_per_element(op)
        if work == 0:  # nothing to compute: the op is not issued at all
            return 0
        cycles = -(-work // self.alus)
        bandwidth = self.config.operand_bandwidth_bps
        if bandwidth is not None:
            read, written = self.operand_bytes(op)
            feed = -(-(read + written) * self.config.freq_hz // bandwidth)
            if feed > cycles:
                cycles = feed
        return cycles + self.config.pipeline_latency_cycles

    def operand_bytes(self, op) -> tuple[int, int]:
        """``(bytes read, bytes written)`` between the scratchpad and the lanes for ``op``
        (module docstring): the energy counters, and the feed bound of :meth:`cycles`
        when ``operand_bandwidth_bps`` is set."""
        if op.elements <= 0 or self.ops_per_element(op) <= 0:
            return 0, 0  # not issued (see cycles)
        moved = op.elements * op.dtype_bytes
        return op.inputs * moved, (0 if op.kind == "reduce" else moved)

    def op_time_ps(self, op) -> int:
        """Picoseconds for ``op`` on an idle unit (pure: no statistics touched)."""
        key = op.signature()
        cached = self._times.get(key)
        if cached is None:
            cached = self._times[key] = cycles_to_ps(self.cycles(op), self.config.freq_hz)
        return cached

    def supports(self, op) -> bool:
        return op.kind in _KINDS

    @property
    def peak_ops_per_s(self) -> int:
        """ALU operations per second (lanes * ALUs per lane * f)."""
        return self.alus * self.config.freq_hz
