"""Design-space sweeps: specs, executors (processes, Dask) and a resumable results store.

>>> from npusim.sweep import load_spec, run_sweep, load_results, find_capacity  # doctest: +SKIP
>>> summary = run_sweep(load_spec("workloads/sweeps/quickstart_grid.yaml"), "out/grid")
>>> frame = load_results("out/grid")       # one row per point, parameters + metrics.*
>>> find_capacity("workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml")  # max req/s in SLO

Heavy modules load on first use, so importing :mod:`npusim.sweep` stays cheap.
"""

from __future__ import annotations

__all__ = ["SweepSpec", "Point", "load_spec", "spec_from_dict", "run_sweep", "SweepSummary",
           "load_results", "ResultStore", "config_hash", "find_capacity", "CapacityResult",
           "find_steady_capacity"]

_HOMES = {"SweepSpec": "spec", "Point": "spec", "load_spec": "spec", "spec_from_dict": "spec",
          "config_hash": "spec", "run_sweep": "runner", "SweepSummary": "runner",
          "load_results": "store", "ResultStore": "store", "find_capacity": "capacity",
          "CapacityResult": "capacity", "find_steady_capacity": "capacity_lengthen"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"npusim.sweep.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'npusim.sweep' has no attribute {name!r}")
