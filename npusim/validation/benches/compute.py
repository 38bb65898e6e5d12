"""Compute benches: one op on an idle systolic array, vector unit or roofline engine."""

from __future__ import annotations

from npusim.hw.compute.roofline import RooflineConfig, RooflineUnit
from npusim.hw.compute.systolic import SystolicArray, SystolicConfig
from npusim.hw.compute.vector import VectorConfig, VectorUnit
from npusim.mapping.taskgraph import Op
from npusim.validation.bench_registry import bench


@bench("systolic_gemm")
def systolic_gemm(m: int, k: int, n: int, batch: int = 1, **config) -> dict[str, float]:
    """GEMM ``[m,k] @ [k,n]`` (x ``batch``) on a systolic array built from ``config``
    (any :class:`SystolicConfig` field: rows, cols, dataflow, double_buffer, ...)."""
    array = SystolicArray("sa", SystolicConfig(**config))
    parts = array.breakdown(m, k, n, batch)
    op = Op("gemm", m=m, k=k, n=n, batch=batch, dtype_bytes=array.config.dtype_bytes)
    return {"cycles": parts.total_cycles, "folds": parts.folds,
            "utilisation": parts.utilisation, "mapping_efficiency": parts.mapping_efficiency,
            "time_ps": array.op_time_ps(op)}


@bench("vector_op")
def vector_op(op_kind: str = "elementwise", elements: int = 1 << 20,
              flops_per_element: int = 1, **config) -> dict[str, float]:
    """One element-wise / softmax / reduce op on a vector unit built from ``config``."""
    unit = VectorUnit("vec", VectorConfig(**config))
    op = Op(op_kind, elements=elements, flops_per_element=flops_per_element)
    return {"cycles": unit.cycles(op), "time_ps": unit.op_time_ps(op)}


@bench("roofline_op")
def roofline_op(op_kind: str = "gemm", m: int = 1, k: int = 1, n: int = 1, batch: int = 1,
                elements: int = 0, dtype_bytes: int = 2, **config) -> dict[str, float]:
    """One op on a roofline engine built from ``config``; reports achieved FLOP/s."""
    unit = RooflineUnit("roof", RooflineConfig(**config))
    op = Op(op_kind, m=m, k=k, n=n, batch=batch, elements=elements, dtype_bytes=dtype_bytes)
    time_ps = unit.op_time_ps(op)
    return {"time_ps": time_ps, "efficiency": unit.efficiency(op.flops),
            "achieved_flops_per_s": op.flops * 1e12 / time_ps if time_ps else 0.0,
            "memory_bound": float(unit.bound(op) == "memory")}
