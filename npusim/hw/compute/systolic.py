"""Systolic array (cube unit): shape-aware GEMM timing with padded tiles.

NpuSim (§3.1) times a GEMM on an ``N x N`` systolic array as

    T_comp = N_tiles * T_cycles + T_inject

where the operands are cut into array-sized tiles (the last one padded), ``T_cycles`` is
the systolic time of one tile and ``T_inject`` a one-off injection latency.  We refine
``N_tiles`` and ``T_cycles`` with SCALE-Sim v2's per-fold model
(components.md, "Systolic array (SCALE-Sim v2)"):

* the GEMM ``C[M,N] = A[M,K] @ W[K,N]`` is mapped onto the array as a spatial
  ``Sr x Sc`` matrix and a temporal dimension ``T`` that depends on the dataflow:

  ========  =====  =====  ====  ============================================
  dataflow  Sr     Sc     T     stationary operand
  ========  =====  =====  ====  ============================================
  ``ws``    K      N      M     weights (``W`` tile pre-loaded into the PEs)
  ``os``    M      N      K     outputs (partial sums accumulate in place)
  ``is``    K      M      N     inputs (``A`` tile pre-loaded into the PEs)
  ========  =====  =====  ====  ============================================

* ``folds = ceil(Sr / R) * ceil(Sc / C)``; every fold costs a full array's cycles even
  when the last row/column fold is only partly filled (padding counts);
* cycles per fold, not overlapped between folds (SCALE-Sim v2):

  - ``ws`` / ``is``: ``2R + C + T - 2`` = ``R`` cycles to shift the stationary tile
    into the array + ``R + C + T - 2`` to stream ``T`` rows through it (skew fill and
    drain included);
  - ``os``: ``R + C + T - 2`` (no stationary pre-load; both operands stream, skewed).

  For ``M = K = N = 1024`` on ``128 x 128`` this gives 64 folds x 1406 = 89,984 cycles
  (``ws``) and 64 x 1278 = 81,792 (``os``), the SCALE-Sim v2 numbers.

**Operand swap** (``operand_swap: true``, ``ws``/``is`` only): ``C^T = W^T @ A^T`` runs
the same GEMM with the roles of ``A`` and ``W`` exchanged, so on the same PEs ``ws``
becomes ``is`` and back; a compiler that may lay the operands out either way takes, per
GEMM, whichever needs fewer cycles (the configured one on a tie).  Decode GEMMs with a
few token rows (``M`` small) then keep the activations stationary and stream the
weights through: ``ceil(K / R)`` folds of ``T = N`` instead of ``ceil(K / R) * ceil(N /
C)`` folds of ``T = M``.  The breakdown and operand traffic report the dataflow chosen.

**Double buffering** (``double_buffer: true``, ``ws``/``is`` only): the PEs hold a
second stationary register, so the pre-load of fold ``i+1`` (``R`` cycles) runs while
fold ``i`` streams (``S = R + C + T - 2`` cycles).  Only the first load is exposed, plus
whatever part of a later load does not fit under the previous fold's streaming::

    cycles = R + folds * S + (folds - 1) * max(0, R - S)

``os`` has no stationary operand to pre-load, so the flag changes nothing there.

``batch`` independent GEMMs run back to back (``batch x`` the fold cycles); ``T_inject``
(``inject_cycles``) is paid once per op.  Operands wider than the array's native
``dtype_bytes`` take ``ceil(op.dtype_bytes / dtype_bytes)`` passes (assumption:
multi-pass emulation, as INT8 arrays do for FP16); narrower operands run at the native
rate (assumption: no sub-word packing).

**Operand traffic** (for energy, never for timing).  The same fold model gives the bytes
the array reads from and writes to its core's scratchpad, as SCALE-Sim v2 counts its
SRAM reads and writes per operand (``systolic_compute_{ws,os,is}.py``: ``ifmap_reads``,
``filter_reads``, ``ofmap_writes``): only real elements, padding never moves.

  ========  ==========================  ==========================  ==================
  dataflow  inputs ``A[M,K]`` read       weights ``W[K,N]`` read     outputs written
  ========  ==========================  ==========================  ==================
  ``ws``    once per column fold        once (the stationary tile)  once per row fold
  ``is``    once (the stationary tile)  once per column fold        once per row fold
  ``os``    once per column fold        once per row fold           once
  ========  ==========================  ==========================  ==================

i.e. for ``ws``/``is`` the stationary operand ``Sr x Sc`` is read once, the streamed one
``T x Sr`` once per column fold (``ceil(Sc / C)`` times) and the output ``T x Sc`` written
once per row fold (``ceil(Sr / R)``: a K fold for ``ws``/``is`` produces partial sums);
``os`` reads ``A`` (``Sr x T``) once per column fold and ``W`` (``T x Sc``) once per row
fold and writes each output once (it accumulates in place).  Beyond SCALE-Sim, which
counts writes only, every row fold after the first also *reads back* the partial sums it
adds to: ``(row_folds - 1) x T x Sc`` reads (``ws``/``is``; none for ``os``).  Bytes are
elements x the op's ``dtype_bytes`` (assumption: partial sums are kept at operand width;
FP32 accumulators would double the output terms), times ``batch``; multi-pass emulation
of wide operands reads a native-width slice per pass, the same bytes in total.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from npusim.core.errors import MappingError
from npusim.core.registry import PartConfig, register
from npusim.core.units import FreqHz, cycles_to_ps
from npusim.hw.base import ComputeUnit


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


#: The dataflow a swap of a GEMM's operands turns each stationary dataflow into.
_SWAPPED = {"ws": "is", "is": "ws"}


def _spatial(dataflow: str, m: int, k: int, n: int) -> tuple[int, int, int]:
    """``(Sr, Sc, T)`` of a GEMM ``[m,k] @ [k,n]`` under ``dataflow`` (module table)."""
    return {"ws": (k, n, m), "os": (m, n, k), "is": (k, m, n)}[dataflow]


#: Largest array side accepted: 16x TPU v1's 256x256 (Jouppi et al., ISCA 2017), far
#: past any built array; a larger value is taken for a typo, not simulated silently.
MAX_ARRAY_SIDE = 4096


class SystolicConfig(PartConfig):
    """A ``rows x cols`` systolic array of multiply-accumulate PEs."""

    kind: Literal["systolic"] = "systolic"
    rows: int = Field(
        128, gt=0, le=MAX_ARRAY_SIDE,
        description="PE rows R (NpuSim Table 3: 32-128 for large cores; at most 4096). For "
                    "ws/is the reduction dimension K is laid along the rows.")
    cols: int = Field(
        128, gt=0, le=MAX_ARRAY_SIDE,
        description="PE columns C (NpuSim Table 3: 32-128 for large cores; at most 4096).")
    freq_hz: FreqHz = Field(
        500_000_000, description="Array clock (NpuSim Table 3: 500 MHz core frequency).")
    dataflow: Literal["ws", "os", "is"] = Field(
        "ws", description="Stationary operand: 'ws' weight-, 'os' output-, 'is' "
                          "input-stationary (SCALE-Sim v2 conventions).")
    double_buffer: bool = Field(
        False, description="Stationary registers are double-buffered: the weight (input) "
                           "load of fold i+1 overlaps the streaming of fold i (ws/is only). "
                           "Off by default to match SCALE-Sim v2, which does not overlap folds.")
    pipelined_folds: bool = Field(
        False, description="Consecutive folds follow each other through the array without "
                           "waiting for the previous fold's skewed fill and drain (one "
                           "R + C - 2 skew per op instead of per fold); each fold then costs "
                           "max(T, R) cycles with double-buffered stationary registers (the "
                           "next tile loads while this one streams), else T + R. Off by "
                           "default: SCALE-Sim v2 does not overlap folds. Matters most for "
                           "decode GEMVs (T = 1), where the skew dominates.")
    operand_swap: bool = Field(
        False, description="The compiler may swap a GEMM's operands per op (compute "
                           "C^T = W^T @ A^T), so ws and is trade places on the same PEs: "
                           "each GEMM takes whichever of the two needs fewer cycles "
                           "(decode GEMMs with few token rows keep the activations "
                           "stationary and stream the weights). Only for ws/is; off by "
                           "default: the presets keep one dataflow, as SCALE-Sim does.")
    inject_cycles: int = Field(
        0, ge=0, description="NpuSim T_inject: one-off latency per op to inject the first "
                             "operands (e.g. from SRAM into the array edge). Default 0 so that "
                             "the SCALE-Sim v2 cycle counts are reproduced exactly.")
    dtype_bytes: int = Field(
        2, ge=1, le=8, description="Native operand width in bytes (2 = FP16/BF16; "
                                   "assumption: FP16 arrays, the paper does not state the "
                                   "precision). Wider operands take multiple passes.")


    @model_validator(mode="after")
    def _swap_needs_a_stationary_operand(self) -> "SystolicConfig":
        if self.operand_swap and self.dataflow == "os":
            raise ValueError("operand_swap: true exchanges the stationary and the streamed "
                             "operand; dataflow 'os' keeps neither stationary (expected "
                             "dataflow 'ws' or 'is', or operand_swap: false)")
        return self


@dataclass(frozen=True, slots=True)
class SystolicBreakdown:
    """Where the cycles of one GEMM go (all counts in array cycles)."""

    dataflow: str
    sr: int                 #: spatial rows of the mapped problem (before folding)
    sc: int                 #: spatial columns of the mapped problem
    t: int                  #: temporal dimension streamed per fold
    row_folds: int          #: ceil(Sr / R)
    col_folds: int          #: ceil(Sc / C)
    folds: int              #: row_folds * col_folds (per GEMM, per pass)
    passes: int             #: batch * dtype passes: the fold sequence is repeated this often
    load_cycles_per_fold: int    #: stationary pre-load (R for ws/is, 0 for os)
    stream_cycles_per_fold: int  #: R + C + T - 2
    exposed_load_cycles: int     #: pre-load cycles not hidden by double buffering
    inject_cycles: int
    total_cycles: int
    macs: int               #: useful multiply-accumulates (batch * M * K * N)
    utilisation: float      #: macs / (R * C * total_cycles)
    mapping_efficiency: float  #: Sr * Sc / (folds * R * C): PE fraction holding real data


@dataclass(frozen=True, slots=True)
class SystolicOperandTraffic:
    """Scratchpad bytes one GEMM op moves for its operands (module docstring, "Operand
    traffic"): SCALE-Sim's per-operand SRAM counts in bytes, plus partial-sum read-backs."""

    ifmap_read_bytes: int    #: inputs ``A[M,K]`` read into the array
    filter_read_bytes: int   #: weights ``W[K,N]`` read into the array
    ofmap_write_bytes: int   #: outputs (partial sums for every row fold) written back
    psum_read_bytes: int     #: partial sums read back to accumulate the next row fold

    @property
    def read_bytes(self) -> int:
        """All bytes read from the scratchpad (inputs, weights, partial sums)."""
        return self.ifmap_read_bytes + self.filter_read_bytes + self.psum_read_bytes

    @property
    def written_bytes(self) -> int:
        """All bytes written to the scratchpad (outputs and partial sums)."""
        return self.ofmap_write_bytes


@register("compute", SystolicConfig)
class SystolicArray(ComputeUnit):
    """Systolic array: NpuSim T = N_tiles*T_cycles + T_inject with SCALE-Sim v2 folds."""

    def __init__(self, name: str, config: SystolicConfig):
        super().__init__(name, config)
        self.rows = config.rows
        self.cols = config.cols
        self.freq_hz = config.freq_hz
        self._times: dict = {}  # op -> ps: pure, and long runs ask for the same shapes often
        self._operands: dict = {}  # op -> (bytes read, bytes written), likewise

    # -- closed form -------------------------------------------------------------
    def breakdown(self, m: int, k: int, n: int, batch: int = 1,
                  dtype_bytes: int | None = None) -> SystolicBreakdown:
        """Cycle breakdown of ``batch`` GEMMs ``[m,k] @ [k,n]`` (see the module docstring)."""
        for label, value in (("m", m), ("k", k), ("n", n), ("batch", batch)):
            if value < 0:
                raise MappingError(f"{self.name}: GEMM {label}={value} must be >= 0")
        first = self._breakdown(self.config.dataflow, m, k, n, batch, dtype_bytes)
        swapped = _SWAPPED.get(self.config.dataflow) if self.config.operand_swap else None
        if swapped is None or first.macs == 0:
            return first
        other = self._breakdown(swapped, m, k, n, batch, dtype_bytes)
        return other if other.total_cycles < first.total_cycles else first

    def _breakdown(self, dataflow: str, m: int, k: int, n: int, batch: int,
                   dtype_bytes: int | None) -> SystolicBreakdown:
        cfg = self.config
        R, C = self.rows, self.cols
        sr, sc, t = _spatial(dataflow, m, k, n)
        width = cfg.dtype_bytes if dtype_bytes is None else dtype_bytes
        passes = batch * _ceil_div(max(1, width), cfg.dtype_bytes)
        macs = batch * m * k * n
        if macs == 0:
            return SystolicBreakdown(dataflow, sr, sc, t, 0, 0, 0, passes, 0, 0, 0, 0,
                                     0, 0, 0.0, 0.0)
        row_folds, col_folds = _ceil_div(sr, R), _ceil_div(sc, C)
        folds = row_folds * col_folds
        load = 0 if dataflow == "os" else R
        stream = R + C + t - 2
        total_folds = folds * passes
        if cfg.pipelined_folds:
            # Folds back to back: each occupies the array for its T input rows (or its
            # weight load, whichever is longer when loads overlap), and the skew of
            # R + C - 2 cycles is paid once for the whole op.
            per_fold = max(t, load) if cfg.double_buffer else t + load
            skew = R + C - 2
            exposed = load if (load and cfg.double_buffer) else 0
            total = total_folds * per_fold + skew + exposed + cfg.inject_cycles
            stream = per_fold
        else:
            if load and cfg.double_buffer:
                # First pre-load exposed; later ones hide under the previous fold's stream.
                exposed = load + (total_folds - 1) * max(0, load - stream)
            else:
                exposed = total_folds * load
            total = total_folds * stream + exposed + cfg.inject_cycles
        return SystolicBreakdown(
            dataflow=dataflow, sr=sr, sc=sc, t=t, row_folds=row_folds,
            col_folds=col_folds, folds=folds, passes=passes, load_cycles_per_fold=load,
            stream_cycles_per_fold=stream, exposed_load_cycles=exposed,
            inject_cycles=cfg.inject_cycles, total_cycles=total, macs=macs,
            utilisation=macs / (R * C * total),
            mapping_efficiency=(sr * sc) / (folds * R * C))

    def operand_traffic(self, m: int, k: int, n: int, batch: int = 1,
                        dtype_bytes: int | None = None) -> SystolicOperandTraffic:
        """Scratchpad bytes of ``batch`` GEMMs ``[m,k] @ [k,n]`` with ``dtype_bytes``-wide
        operands (default: the native width), from the folds :meth:`breakdown` times."""
        cfg = self.config
        if min(m, k, n, batch) <= 0:  # no MACs: the op is not issued (see breakdown)
            return SystolicOperandTraffic(0, 0, 0, 0)
        dataflow = (self.breakdown(m, k, n, batch, dtype_bytes).dataflow if cfg.operand_swap
                    else cfg.dataflow)  # the dataflow the op is timed with
        sr, sc, t = _spatial(dataflow, m, k, n)
        row_folds, col_folds = _ceil_div(sr, self.rows), _ceil_div(sc, self.cols)
        if dataflow == "os":
            ifmap, weights = col_folds * sr * t, row_folds * t * sc
            outputs, psums = sr * sc, 0
        else:
            # ws: A streams (T x Sr), W is stationary; is: the other way round.
            stationary, streamed = sr * sc, col_folds * t * sr
            ifmap, weights = ((streamed, stationary) if dataflow == "ws"
                              else (stationary, streamed))
            outputs, psums = row_folds * t * sc, (row_folds - 1) * t * sc
        scale = batch * (cfg.dtype_bytes if dtype_bytes is None else dtype_bytes)
        return SystolicOperandTraffic(ifmap * scale, weights * scale, outputs * scale,
                                      psums * scale)

    def operand_bytes(self, op) -> tuple[int, int]:
        """``(bytes read, bytes written)`` between the scratchpad and the array for a
        ``gemm`` op (cached per op shape; counters for energy, not timing)."""
        key = op.signature()
        cached = self._operands.get(key)
        if cached is None:
            traffic = self.operand_traffic(op.m, op.k, op.n, op.batch, op.dtype_bytes)
            cached = self._operands[key] = (traffic.read_bytes, traffic.written_bytes)
        return cached

    def gemm_cycles(self, m: int, k: int, n: int, batch: int = 1) -> int:
        """Array cycles for ``batch`` GEMMs ``[m,k] @ [k,n]`` at the native width."""
        return self.breakdown(m, k, n, batch).total_cycles

    def op_time_ps(self, op) -> int:
        """Picoseconds for a ``gemm`` op on an idle array (pure: no statistics touched)."""
        key = op.signature()
        cached = self._times.get(key)
        if cached is not None:
            return cached
        if not self.supports(op):
            raise MappingError(f"{self.name}: a systolic array runs only 'gemm' ops, "
                               f"got {op.kind!r} ({op.name or 'unnamed'}); "
                               "place element-wise/softmax/reduce ops on a vector unit")
        cycles = self.breakdown(op.m, op.k, op.n, op.batch, op.dtype_bytes).total_cycles
        self._times[key] = cycles_to_ps(cycles, self.freq_hz)
        return self._times[key]

    def supports(self, op) -> bool:
        return op.kind == "gemm"

    @property
    def peak_flops_per_s(self) -> int:
        """2 * R * C * f (one MAC = two FLOPs)."""
        return 2 * self.rows * self.cols * self.freq_hz
