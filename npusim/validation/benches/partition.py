"""Partition bench: one GEMM lowered by a tensor-partition strategy on one TP group.

Lets reference cases compare the ``mn`` / ``k`` / ``mnk`` partitions and the core
placements (NpuSim §5.4, Fig. 9 and Fig. 10) on a device preset, in either executor.
"""

from __future__ import annotations

from typing import Any

from npusim.core import registry
from npusim.mapping.taskgraph import TaskGraph, TransferTask
from npusim.strategies.npu.partition import GemmSpec, get_partition
from npusim.validation.bench_registry import bench


def _device(preset: str, hw: dict[str, Any] | None):
    from npusim.api import build_device
    from npusim.config.loader import scenario_from_dict

    # The workload is a placeholder: only the resolved hardware config is used.
    scenario = scenario_from_dict({
        "name": "partition_gemm", "hw": {"preset": preset, **(hw or {})},
        "workload": {"kind": "taskgraph", "tasks": [{"type": "host", "duration_ps": 0}]}})
    return build_device(scenario.hw)


@bench("partition_gemm")
def partition_gemm(m: int, k: int, n: int, strategy: str = "mn", placement: str = "ring",
                   tp: int = 4, mode: str = "analytic", dtype_bytes: int = 2, batch: int = 1,
                   weights_in: str = "sram", weight_tile_bytes: int = 1 << 20,
                   preset: str = "npu/large_core_64", options: dict[str, Any] | None = None,
                   hw: dict[str, Any] | None = None, seed: int = 0) -> dict[str, float]:
    """``[m,k] @ [k,n]`` (x ``batch``) partitioned by ``strategy`` (``mn``, ``k``, ``mnk``;
    ``options`` are extra fields of its config, e.g. ``{rotate: input}``) over the first
    TP group of ``tp`` cores that ``placement`` lays out on the ``preset`` device (``hw``
    fields are merged onto the preset), timed by the ``mode`` executor (``tlm`` or
    ``analytic``).  The input is ready at time zero.

    Returns ``latency_ps``, ``flops``, ``comm_bytes_per_core`` (from the strategy's cost
    formula), ``noc_bytes_max_core`` (counted on the lowered graph), ``max_hops``,
    ``weight_bytes_per_core``, ``output_bytes_per_core`` and ``tasks``.
    """
    from npusim.executor.analytic import run_analytic
    from npusim.executor.base import prepare
    from npusim.executor.tlm import run_tlm

    executors = {"tlm": run_tlm, "analytic": run_analytic}
    if mode not in executors:
        raise ValueError(f"mode must be 'tlm' or 'analytic', got {mode!r}")
    device = _device(preset, hw)
    width, height = device.config.noc.width, device.config.noc.height
    group = registry.lookup("placement", placement).impl(width, height, tp, 1)[0]
    partition = get_partition({"kind": strategy, **(options or {})})
    gemm = GemmSpec(f"{strategy}_gemm", m, k, n, dtype_bytes=dtype_bytes, batch=batch,
                    weights_in=weights_in, weight_tile_bytes=weight_tile_bytes)  # type: ignore[arg-type]
    graph = TaskGraph(name="partition_gemm")
    partition.lower(graph, gemm, group, {}, width)
    expanded = prepare(graph, device)
    run = executors[mode](expanded, device, seed)
    sent: dict[str, int] = {}
    for task in expanded.tasks:
        if isinstance(task, TransferTask) and device.endpoint(task.src)[0] != device.endpoint(task.dst)[0]:
            sent[task.src] = sent.get(task.src, 0) + task.size_bytes
    cost = partition.cost(gemm, group, width)
    return {"latency_ps": float(run.makespan_ps), "flops": float(gemm.flops),
            "comm_bytes_per_core": float(cost.comm_bytes),
            "noc_bytes_max_core": float(max(sent.values(), default=0)),
            "max_hops": float(cost.max_hops), "weight_bytes_per_core": float(cost.weight_bytes),
            "output_bytes_per_core": float(cost.output_bytes), "tasks": float(len(expanded))}
