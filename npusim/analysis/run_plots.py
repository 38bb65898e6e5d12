"""Plots of one run (:mod:`npusim.analysis.plots` draws sweeps): per-unit utilisation
over time, a serving run's iterations per replica, and a capacity search's probes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from npusim.analysis.frames import AnalysisError, utilisation_timeline
from npusim.analysis.plots import _axes, _scale, _wrapped, new_figure

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_utilisation_timeline", "plot_serving_timeline", "plot_capacity"]


def plot_utilisation_timeline(source: Any, bins: int = 100, units: Sequence[str] | None = None,
                              ax: "Axes | None" = None, title: str | None = None,
                              group: str | None = None) -> "Figure":
    """Busy fraction of each unit over time (rows: units, columns: time bins) from a
    Result, its ops DataFrame or a run directory.  ``group="kind"`` draws one row per
    kind of unit (the mean of, say, every ``core*.sa``), as happens by default past
    :data:`~npusim.analysis.frames.AUTO_GROUP_UNITS` units; ``group="unit"`` keeps a
    row each (narrow them with ``units=`` globs)."""
    frame, edges = utilisation_timeline(source, bins, units, group)
    factor, xlabel = _scale("time_ps", [edges[-1]])
    ax = _axes(ax, figsize=(8.0, max(2.5, 0.22 * len(frame) + 1.2)))
    image = ax.imshow(frame.to_numpy(), aspect="auto", interpolation="nearest", cmap="magma",
                      vmin=0, vmax=1, extent=(edges[0] / factor, edges[-1] / factor,
                                              len(frame) - 0.5, -0.5))
    ax.set_yticks(range(len(frame)), [str(u) for u in frame.index], fontsize="x-small")
    ax.set_xlabel(xlabel)
    ax.figure.colorbar(image, ax=ax, label="busy fraction")
    cut = (" (per-task rows stop at run.trace_max_tasks: the run goes on after)"
           if _trace_cut(source) else "")
    count = frame.attrs.get("units", 0)
    what = (f"mean utilisation per kind of unit over time ({count} unit{'s' * (count != 1)} "
            "that ran tasks)"
            if frame.attrs.get("grouped") else "per-unit utilisation over time")
    ax.set_title(title or _wrapped(what + cut), fontsize="medium")
    return ax.figure


def _trace_cut(source: Any) -> bool:
    """Whether the run behind ``source`` (a Result or a run directory) stopped recording
    per-task rows at ``run.trace_max_tasks`` (its metrics say; False when unknown)."""
    import json

    metrics = getattr(source, "metrics", None)
    if metrics is None and isinstance(source, (str, os.PathLike)):
        path = Path(source) / "metrics.json"
        try:
            metrics = json.loads(path.read_text()) if path.is_file() else None
        except (OSError, ValueError):
            metrics = None
    return bool(isinstance(metrics, dict) and metrics.get("trace_truncated"))


def plot_serving_timeline(source: Any, title: str | None = None) -> "Figure":
    """Three panels over simulated time, one line per replica, from a serving Result or
    run directory (its iterations.csv): requests in flight (in every micro-batch of the
    replica's pipeline under way, from launch to end: 0 while the replica idles), and,
    at each launch, the share of the replica's KV reserved and the requests the scheduler
    left out (queued plus running but not in the batch).  A pool that cannot
    keep up shows its requests in flight pinned at its batch slots and a queue that keeps
    growing."""
    from npusim.analysis.frames import iteration_table

    frame = iteration_table(source)
    if frame is None:
        raise AnalysisError("no per-iteration table (iterations.csv) to plot; expected a "
                            "serving run (npusim run SCENARIO --out DIR with a serving workload)")
    frame = frame[frame["requests"] > 0]  # rows of none: batches preemption emptied
    if frame.empty:
        raise AnalysisError("the run launched no micro-batch, so there is nothing to plot "
                            "(the per-request table says why each request was rejected)")
    factor, xlabel = _scale("time_ps", [frame["start_ps"].max()])
    figure = new_figure((8.0, 6.5))
    axes = figure.subplots(3, 1, sharex=True)
    for (replica, role), rows in frame.groupby(["replica", "role"], sort=True):
        import numpy as np

        rows = rows.sort_values("start_ps", kind="stable")
        # each launch's state holds until the next; the last until the replica's last
        # micro-batch ends (a post step would stop at the last launch)
        time = np.append(rows["start_ps"].to_numpy(dtype=float),
                         float(rows["end_ps"].max())) / factor
        label = f"{role}{replica}"
        when, count = _in_flight(rows)
        axes[0].step(when / factor, count, where="post", label=label)
        for ax, values in ((axes[1], 100.0 * rows["kv_used_tokens"] / rows["kv_capacity_tokens"]),
                           (axes[2], rows["waiting"] + rows["running"])):
            values = values.to_numpy(dtype=float)
            ax.step(time, np.append(values, values[-1]), where="post", label=label)
    for ax, ylabel in zip(axes, ("requests in flight", "KV reserved (%)", "requests left out")):
        ax.set_ylabel(ylabel, fontsize="small")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="small", loc="upper right")
    axes[-1].set_xlabel(xlabel)
    axes[0].set_title(title or _wrapped("serving iterations per replica"), fontsize="medium")
    return figure


def _in_flight(rows) -> tuple["np.ndarray", "np.ndarray"]:
    """Requests in a replica's micro-batches under way, as a step function: the times at
    which a micro-batch is launched or ends, and the count from each of them on (a pool
    that idles between iterations drops to 0 instead of holding its last launch's count).
    A prompt whose chunks are pipelined (``pipeline_chunks``) counts once per micro-batch
    holding one of its chunks."""
    import numpy as np

    times = np.concatenate([rows["start_ps"].to_numpy(dtype=np.int64),
                            rows["end_ps"].to_numpy(dtype=np.int64)])
    changes = np.concatenate([rows["requests"].to_numpy(dtype=np.int64),
                              -rows["requests"].to_numpy(dtype=np.int64)])
    when, index = np.unique(times, return_inverse=True)  # a batch may end as one starts
    return when.astype(float), np.cumsum(np.bincount(index, weights=changes))


def plot_capacity(source: Any, title: str | None = None) -> "Figure":
    """A capacity search (:func:`npusim.sweep.capacity.find_capacity`, or the directory
    ``npusim capacity --out`` wrote): SLO attainment against the offered request rate,
    with the target and the capacity found, above the TTFT p90 and mean TBT of each
    probe."""
    from npusim.analysis.frames import capacity_probes

    from matplotlib.ticker import FuncFormatter

    frame, summary = capacity_probes(source)
    target, best = float(summary["target_attainment"]), summary["max_requests_per_s"]
    frame = frame.sort_values("offered_requests_per_s")
    figure = new_figure((7.0, 6.0))
    top, bottom = figure.subplots(2, 1, sharex=True)
    rate = frame["offered_requests_per_s"]
    top.plot(rate, 100.0 * frame["slo_attainment"], color="0.6", zorder=1)
    for meets, marker, label in ((True, "o", "meets the target"), (False, "x", "misses it")):
        rows = frame[frame["meets_target"] == meets]
        top.scatter(rows["offered_requests_per_s"], 100.0 * rows["slo_attainment"],
                    marker=marker, label=label, zorder=2)
    top.axhline(100.0 * target, color="k", linestyle=":", linewidth=1,
                label=f"target {100 * target:g}%")
    bottom.plot(rate, frame["ttft_ms_p90"], marker=".", label="TTFT p90")
    bottom.plot(rate, frame["tbt_ms_mean"], marker=".", label="TBT mean")
    if best is not None:
        for ax in (top, bottom):
            ax.axvline(best, color="tab:green", linestyle="--", linewidth=1)
        top.annotate(f"capacity {best:.4g} req/s ", (best, 100.0 * target), fontsize="small",
                     color="tab:green", va="bottom", ha="right")
    top.set_ylabel("requests within the SLO (%)", fontsize="small")
    bottom.set_ylabel("latency (ms)", fontsize="small")
    bottom.set_yscale("log")
    bottom.set_xlabel("offered load (requests/s)")
    for ax in (top, bottom):
        ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    for axis, limits in ((bottom.xaxis, bottom.get_xlim()), (bottom.yaxis, bottom.get_ylim())):
        # 20, 50, 100 rather than 2x10^1 ...; within about one decade every tick is
        # labelled (20, 30, 40, ... 70), else a latency axis from 22 to 75 ms shows only
        # 30 and 50, and one from 90 to 900 ms nothing above 500.
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        narrow = min(limits) > 0 and max(limits) / min(limits) < 20
        axis.set_minor_formatter(FuncFormatter(
            (lambda v, _: f"{v:g}") if narrow else _log_minor_label))
    slo = summary.get("slo") or {}
    within = (f" (SLO: TTFT <= {slo['ttft_ms']:g} ms, TPOT <= {slo['tbt_ms']:g} ms)"
              if isinstance(slo, dict) and {"ttft_ms", "tbt_ms"} <= slo.keys() else "")
    top.set_title(title or _wrapped(f"capacity search{within}"), fontsize="medium")
    return figure


def _log_minor_label(value: float, _position: Any = None) -> str:
    """Minor tick labels of a log axis: only 2x, 3x and 5x a power of ten, so a decade
    shows '20', '30', '50' but a span of several decades is not crowded."""
    import math

    if value <= 0:
        return ""
    leading = round(value / 10 ** math.floor(math.log10(value)))
    return f"{value:g}" if leading in (2, 3, 5) else ""
