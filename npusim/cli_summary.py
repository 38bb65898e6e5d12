"""The summary table ``npusim run`` prints: the headline metrics of one run, serving
runs' latencies, rates and replicas, then energy, utilisation and bytes moved."""

from __future__ import annotations

from npusim.core.console import console
from npusim.core.json_keys import natural_key


def share_text(share: float) -> str:
    """A share as a percentage that shows a small one (0.4%, not 0%)."""
    percent = 100 * share
    if 0 < percent < 0.01:
        return "<0.01%"
    return f"{percent:.0f}%" if percent >= 10 or percent == 0 else f"{percent:.2g}%"


def summary_table(result) -> None:
    from rich.table import Table

    from npusim.core.units import format_bytes, format_time_ps

    metrics = result.metrics
    # the chip by its own name: a --hw file (or --set hw.preset) replaces the one the
    # scenario's name and description speak of
    chip = (result.config.get("hw") or {}).get("name")
    table = Table(title=f"{metrics['scenario']}{f' on {chip}' if chip else ''} "
                        f"({metrics['mode']})", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    serving = "requests_total" in metrics
    # A serving run's latency_ps is the simulated span (first arrival to last token).
    table.add_row("simulated time (makespan)" if serving else "latency",
                  format_time_ps(metrics["latency_ps"]))
    for key, label in (("ttft_ps", "TTFT"), ("tbt_ps", "TBT (mean)"),
                       ("e2e_latency_ps", "end-to-end")):
        if key in metrics:
            table.add_row(label, format_time_ps(metrics[key]))
    if "requests_total" in metrics:  # a serving run
        table.add_row("requests finished / rejected / total",
                      f"{metrics['requests_finished']} / {metrics['requests_rejected']} / "
                      f"{metrics['requests_total']}")
        for name, label in (("ttft", "TTFT"), ("tbt", "TBT (every gap)"),
                            ("tpot", "TPOT (mean gap per request)"), ("e2e", "E2E"),
                            ("queue", "queueing")):
            table.add_row(f"{label} p50 / p90 / p99",
                          milliseconds([metrics[f"{name}_ms_p{q}"] for q in (50, 90, 99)]))
        table.add_row("throughput", f"{metrics['throughput_tokens_per_s']:,.1f} tokens/s")
        # Rates follow the offered load until the chip saturates: beside it, the reader
        # sees whether a throughput (or its per-mm² figure) is the chip's or the trace's.
        offered = metrics["offered_requests_per_s"]
        # (two time bases: offered counts the gaps between arrivals, served the whole
        # serving window, so a short trace can show served above offered)
        table.add_row("requests offered / served",
                      (f"{offered:.2f} req/s between arrivals" if offered else "all at once")
                      + f" / {metrics['throughput_requests_per_s']:.2f} req/s over the run")
        table.add_row("goodput (SLO met)", f"{metrics['goodput_requests_per_s']:.2f} req/s "
                                           f"({100 * metrics['slo_attainment']:.0f}%)")
        # slo.tbt_ms bounds each request's TPOT (its mean gap), not every gap
        table.add_row(f"SLO met: TTFT <= {metrics['slo_ttft_ms']:g} ms / "
                      f"TPOT <= {metrics['slo_tbt_ms']:g} ms alone",
                      f"{100 * metrics['slo_attainment_ttft']:.0f}% / "
                      f"{100 * metrics['slo_attainment_tbt']:.0f}%")
        table.add_row("tokens/s per mm² (at this load)",
                      f"{metrics['throughput_tokens_per_s_per_mm2']:.4f}")
        if metrics.get("preemptions"):
            table.add_row("preemptions / swap-outs",
                          f"{metrics['preemptions']:,} / {metrics['swap_outs']:,}")
        if metrics.get("prefix_cache_hit_tokens"):
            table.add_row("prefix cache hits / evictions",
                          f"{100 * metrics['prefix_cache_hit_rate']:.1f}% of prompt tokens / "
                          f"{metrics['prefix_cache_evicted_blocks']:,} blocks")
        for replica, its in metrics["iterations_by_replica"].items():
            table.add_row(f"{replica}: batch mean / KV peak / most in flight",
                          f"{its['batch_requests_mean']:.1f} req / "
                          f"{share_text(its['kv_utilisation_peak'])} / "
                          f"{its['micro_batches_in_flight_max']} micro-batches")
        flops_share = metrics.get("flops_utilisation_by_replica", {})
        hbm_share = metrics.get("hbm_bandwidth_utilisation_by_replica", {})
        by_stage = metrics.get("sa_utilisation_by_stage", {})
        for replica, share in metrics.get("sa_utilisation_by_replica", {}).items():
            table.add_row(f"{replica}: arrays busy / MFU / HBM MBU",
                          f"{100 * share:.1f}% / {100 * flops_share.get(replica, 0.0):.1f}% / "
                          f"{100 * hbm_share.get(replica, 0.0):.1f}%")
            stages = by_stage.get(replica, [])
            if len(stages) > 1:
                table.add_row(f"{replica}: stage arrays busy, least / most",
                              _least_most(stages))
        if metrics.get("cores_idle"):
            table.add_row("cores no pool uses (cores_idle)",
                          f"{metrics['cores_idle']} of {metrics['chip_cores']}")
        for replica in metrics.get("replicas", []):
            memory = replica.get("memory_by_stage", [])
            if memory:
                table.add_row(f"{replica['name']}: weights held in SRAM, least / most",
                              _least_most([stage["weights_in_sram_share"] for stage in memory]))
                _working_set_row(table, memory, f"{replica['name']}: ")
    if metrics.get("memory_by_stage"):
        shares = [stage["weights_in_sram_share"] for stage in metrics["memory_by_stage"]]
        table.add_row("weights held in SRAM, least / most stage", _least_most(shares))
        _working_set_row(table, metrics["memory_by_stage"], "")
    if metrics.get("tokens_per_s"):
        table.add_row("output tokens/s", f"{metrics['tokens_per_s']:,.1f}")
    if metrics.get("throughput_flops_per_s"):
        table.add_row("compute throughput",
                      f"{metrics['throughput_flops_per_s'] / 1e12:.3f} TFLOP/s")
    if metrics.get("peak_flops_per_s"):
        # Against the whole chip, then against the arrays that did work (mapping studies
        # use a few cores of many).
        table.add_row("FLOPs of peak (MFU): chip / used units",
                      f"{100 * metrics['flops_utilisation']:.1f}% / "
                      f"{100 * metrics['flops_utilisation_of_used_units']:.1f}%")
    energy = metrics.get("energy") or {}
    if energy.get("energy_j"):
        table.add_row("energy: total (dynamic / static)",
                      f"{joules(energy['energy_j'])} ({joules(energy['dynamic_energy_j'])} / "
                      f"{joules(energy['static_energy_j'])})")
        table.add_row("power: average / peak",
                      f"{energy['average_power_w']:,.1f} / {energy['peak_power_w']:,.1f} W")
        if energy.get("energy_per_token_j"):
            table.add_row("energy per output token", joules(energy["energy_per_token_j"]))
    area = metrics.get("area_mm2") or {}
    if area.get("total"):
        table.add_row("chip area (area model)", square_millimetres(area["total"]))
    if metrics.get("operand_stall_ps"):
        table.add_row("operand stalls (shared SRAM port)",
                      f"{format_time_ps(metrics['operand_stall_ps'])} "
                      f"({100 * metrics['operand_stall_share']:.1f}% of compute units' time)")
    for level, share in metrics.get("bandwidth_utilisation_by_level", {}).items():
        if share:
            table.add_row(f"bandwidth of peak @ {level}", f"{100 * share:.1f}%")
    for level, size in metrics["bytes_by_level"].items():
        if size:
            table.add_row(f"bytes moved @ {level}", format_bytes(size))
    # The five busiest units; equal shares in natural order (core2 before core10).
    busiest = sorted(metrics["unit_utilisation"].items(),
                     key=lambda kv: (-kv[1], natural_key(kv[0])))[:5]
    for unit, share in busiest:
        if share > 0:
            table.add_row(f"utilisation {unit}", f"{100 * share:.1f}%")
    if metrics["events"] or metrics["transactions"]:  # none in analytic mode: no SimPy run
        table.add_row("events / transactions",
                      f"{metrics['events']:,} / {metrics['transactions']:,}")
    memo = metrics["memo"]
    table.add_row("memo hits / misses", f"{memo['hits']} / {memo['misses']}")
    table.add_row("wall time", f"{result.host['wall_time_s']:.3f} s")
    console().print(table)


def _working_set_row(table, memory: list[dict], prefix: str) -> None:
    """A row when a stage's largest GEMM working set needs more SRAM buffers than its
    plan reserved (``workload.sram_buffers: activations`` assumes the excess fits)."""
    from npusim.core.units import format_bytes

    over = [(stage["sram_buffer_working_set_bytes"], stage["sram_buffer_bytes"])
            for stage in memory
            if stage.get("sram_buffer_working_set_bytes", 0) > stage["sram_buffer_bytes"]]
    if over:
        exact, reserved = max(over)
        table.add_row(f"{prefix}SRAM buffers / working set",
                      f"{format_bytes(reserved)} / {format_bytes(exact)}")


def _least_most(shares: list[float]) -> str:
    """``least% (stage i) / most% (stage j)`` of per-stage shares, or ``x% on every
    stage`` when they agree to a tenth of a percent (one stage: that stage's share)."""
    low = min(range(len(shares)), key=shares.__getitem__)
    high = max(range(len(shares)), key=shares.__getitem__)
    if f"{shares[low]:.3f}" == f"{shares[high]:.3f}":
        return f"{100 * shares[low]:.1f}% on every stage"
    return (f"{100 * shares[low]:.1f}% (stage {low}) / "
            f"{100 * shares[high]:.1f}% (stage {high})")


def joules(value: float) -> str:
    """Energy to three significant digits in MJ, kJ, J, mJ or uJ (the unit in which it
    is at least 1 once rounded: 0.9995 J is 1 J, not 1e+03 mJ)."""
    for scale, unit in ((1e6, "MJ"), (1e3, "kJ"), (1.0, "J"), (1e-3, "mJ")):
        if float(f"{abs(value) / scale:.3g}") >= 1:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-6:.3g} uJ"


def square_millimetres(value: float) -> str:
    """An area in whole mm², or to three digits below 10 mm² (a one-core test chip
    would otherwise be 0 mm²)."""
    return f"{value:,.0f} mm²" if value >= 10 else f"{value:.3g} mm²"


def milliseconds(values: list[float]) -> str:
    """``a / b / c ms``, or seconds when the largest is 10 s or more; ``n/a`` when there
    is none (no request finished, or none produced a second token)."""
    if any(v is None for v in values):
        return "n/a"
    if max(values) >= 10_000:
        return " / ".join(f"{v / 1e3:.2f}" for v in values) + " s"
    return " / ".join(f"{v:.1f}" for v in values) + " ms"
