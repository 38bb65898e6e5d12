"""Analysis helpers: sweep results as DataFrames and matplotlib plots (Agg canvas).

>>> from npusim import analysis                                     # doctest: +SKIP
>>> frame = analysis.load_sweep("out/sweeps/quickstart_grid", status="ok")
>>> requests = analysis.load_sweep_requests("out/sweeps/serving")  # store: {requests: true}
>>> fig = analysis.plot_heatmap(frame, "workload.m", "workload.tile_n", "metrics.latency_ps")
>>> analysis.save_figure(fig, "grid.png")

pandas and matplotlib load on first use, so ``import npusim.analysis`` is cheap.
"""

from __future__ import annotations

__all__ = ["load_sweep", "load_sweep_requests", "varying_params", "pareto_front", "utilisation_timeline",
           "latency_samples", "request_table", "iteration_table", "plot_serving_timeline",
           "capacity_probes", "plot_capacity", "token_table", "compare_runs", "config_diff",
           "compare_sweeps", "plot_metric", "plot_heatmap", "plot_pareto", "plot_latency_cdf",
           "plot_utilisation_timeline", "save_figure", "new_figure", "AnalysisError"]

_HOMES = {"load_sweep": "sweep_results", "load_sweep_requests": "sweep_requests",
          "varying_params": "sweep_requests",
          "pareto_front": "frames", "utilisation_timeline": "frames",
          "latency_samples": "frames", "request_table": "frames", "AnalysisError": "frames",
          "iteration_table": "frames", "plot_serving_timeline": "run_plots",
          "capacity_probes": "frames", "plot_capacity": "run_plots",
          "plot_metric": "plots", "plot_heatmap": "plots", "plot_pareto": "plots",
          "plot_latency_cdf": "plots", "plot_utilisation_timeline": "run_plots",
          "save_figure": "plots", "new_figure": "plots", "token_table": "tokens",
          "compare_runs": "compare", "config_diff": "compare",
          "compare_sweeps": "sweep_compare"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"npusim.analysis.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'npusim.analysis' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
