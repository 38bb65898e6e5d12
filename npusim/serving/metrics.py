"""Per-request table and serving summaries: latency percentiles, throughput, goodput,
utilisation per core group and throughput per mm²."""

from __future__ import annotations

from typing import Any

import numpy as np

from npusim.core.units import MS_PER_PS, PS_PER_S
from npusim.hw.area import device_area_mm2
from npusim.serving.state import NEVER_SERVABLE_KINDS, RequestState

PERCENTILES = (50, 90, 95, 99)


def _summary(values: list[float], prefix: str) -> dict[str, float | None]:
    # No finished request has no latency: None (null in metrics.json), not a 0 that a
    # sweep or a Pareto plot would take for the best configuration.
    if not values:
        return {f"{prefix}_{p}": None for p in ("mean", *[f"p{q}" for q in PERCENTILES])}
    array = np.asarray(values, dtype=float)
    out = {f"{prefix}_mean": float(array.mean())}
    for q in PERCENTILES:
        out[f"{prefix}_p{q}"] = float(np.percentile(array, q))
    return out



def _tpot_ms(state: RequestState) -> float:
    """A finished request's time per output token after the first: its mean gap between
    tokens (vLLM's TPOT; 0 for a single token)."""
    times = state.token_times_ps
    return (times[-1] - times[0]) / (len(times) - 1) * MS_PER_PS if len(times) > 1 else 0.0


def _slo_flags(done: list[RequestState], slo) -> tuple[list[bool], list[bool]]:
    """Per finished request: TTFT within ``slo.ttft_ms``, and its mean TBT (TPOT, 0 for a
    single token) within ``slo.tbt_ms``."""
    ttft_ok = [(s.first_token_ps - s.request.arrival_ps) * MS_PER_PS <= slo.ttft_ms
               for s in done]
    tbt_ok = [_tpot_ms(s) <= slo.tbt_ms for s in done]
    return ttft_ok, tbt_ok


def _class_summary(states: list[RequestState], slo) -> dict[str, float]:
    """Requests, finished, mean and p90 TTFT, mean TBT and SLO attainment of one class."""
    done = [s for s in states if s.finished]
    ttft = [(s.first_token_ps - s.request.arrival_ps) * MS_PER_PS for s in done]
    gaps = [float(g) * MS_PER_PS for s in done for g in np.diff(s.token_times_ps)]
    good = sum(1 for first, between in zip(*_slo_flags(done, slo)) if first and between)
    return {"requests": len(states), "finished": len(done),
            "ttft_ms_mean": float(np.mean(ttft)) if ttft else None,
            "ttft_ms_p90": float(np.percentile(ttft, 90)) if ttft else None,
            "tbt_ms_mean": float(np.mean(gaps)) if gaps else None,  # over gaps, as overall
            "slo_attainment": good / len(states)}


def request_rows(states: list[RequestState]) -> list[dict[str, Any]]:
    """One row per request, in trace order (times in ps; empty when not reached)."""
    rows = []
    for s in states:
        r = s.request
        gaps = np.diff(s.token_times_ps) if len(s.token_times_ps) > 1 else []
        rows.append({
            "request_id": r.request_id, "arrival_ps": r.arrival_ps,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "status": "finished" if s.finished else "rejected", "reason": s.rejected,
            "rejected_kind": s.rejected_kind,  # REFUSAL_KINDS key ("" when finished)
            "first_token_ps": s.first_token_ps, "finish_ps": s.finish_ps,
            "ttft_ps": None if s.first_token_ps is None else s.first_token_ps - r.arrival_ps,
            "e2e_ps": None if s.finish_ps is None else s.finish_ps - r.arrival_ps,
            "mean_tbt_ps": float(np.mean(gaps)) if len(gaps) else None,
            "max_tbt_ps": int(np.max(gaps)) if len(gaps) else None,  # its longest stall
            "queue_ps": (None if s.first_scheduled_ps is None
                         else s.first_scheduled_ps - r.arrival_ps),
            "generated": s.generated, "preempted": s.preempted, "swapped_out": s.swapped_out,
            "preemption_recomputed_tokens": s.preemption_recomputed,
            "prefix_cached_tokens": s.prefix_cached_tokens,
            "token_times_ps": " ".join(map(str, s.token_times_ps)),
            "priority": r.priority,
            "replica": s.replica if s.finished else None,  # where its last token came from
        })
    return rows


def _rate_share(totals: dict[str, dict[str, int]], device, parts: list[str],
                counters: tuple[str, ...], peak_attr: str, window_ps: int) -> float:
    """Summed ``counters`` of ``parts`` per second of the window over their summed peak
    (``peak_attr``); 0 without a window or a peak."""
    peak = sum(getattr(device.parts[name], peak_attr) or 0 for name in parts)
    if not peak or not window_ps:
        return 0.0
    done = sum(totals.get(name, {}).get(counter, 0) for name in parts for counter in counters)
    return done / (peak * window_ps / PS_PER_S)


def window_start_ps(states: list[RequestState]) -> int:
    """Where the serving window starts: the first arrival of a request the replicas
    could serve.  One refused on arrival (NEVER_SERVABLE_KINDS: too long a prompt, KV
    that fits no replica) takes no time of theirs, so it does not start the window, as
    one refused on a late arrival does not end it; with every request refused, the
    first arrival."""
    served = [s.request.arrival_ps for s in states
              if s.rejected_kind not in NEVER_SERVABLE_KINDS]
    return min(served or [s.request.arrival_ps for s in states], default=0)


def summarise(states: list[RequestState], driver, session, makespan_ps: int
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(rows, metrics)`` for a finished serving run.

    Rates (tokens/s, requests/s, goodput) and utilisation are per second of the serving
    window, from the first arrival of a servable request (:func:`window_start_ps`) to
    ``makespan_ps`` (the end of the last work: an iteration, a KV transfer or a swap), so
    neither the idle time before a trace that starts late nor a request rejected on
    arrival, early or late, dilutes them.  SLO attainment is
    the share of *all* requests that finished within both thresholds: a rejected request
    misses the SLO."""
    rows = request_rows(states)
    done = [s for s in states if s.finished]
    ms = MS_PER_PS
    ttft = [(s.first_token_ps - s.request.arrival_ps) * ms for s in done]
    e2e = [(s.finish_ps - s.request.arrival_ps) * ms for s in done]
    tbt = [float(g) * ms for s in done for g in np.diff(s.token_times_ps)]
    start_ps = window_start_ps(states)
    window_ps = max(0, makespan_ps - start_ps)
    seconds = window_ps / PS_PER_S
    tokens = sum(s.generated for s in done)
    slo = driver.config.slo
    ttft_ok, tbt_ok = _slo_flags(done, slo)
    good = [s for s, first, between in zip(done, ttft_ok, tbt_ok) if first and between]
    metrics: dict[str, Any] = {}
    metrics.update(_summary(ttft, "ttft_ms"))
    # tbt_ms_*: every gap between consecutive tokens, pooled over requests (vLLM's ITL);
    # tpot_ms_*: each request's mean gap (vLLM's TPOT), what the SLO's tbt_ms checks.
    metrics.update(_summary(tbt, "tbt_ms"))
    metrics.update(_summary([_tpot_ms(s) for s in done if len(s.token_times_ps) > 1],
                            "tpot_ms"))
    metrics.update(_summary(e2e, "e2e_ms"))
    # End-to-end per output token (Vidur's normalised latency): long answers do not hide
    # a slow service, short ones do not flatter it.
    metrics.update(_summary([(s.finish_ps - s.request.arrival_ps) * ms / s.generated
                             for s in done], "e2e_ms_per_token"))
    # Queueing: arrival to the first iteration the request is in (its prefill starts).
    metrics.update(_summary([(s.first_scheduled_ps - s.request.arrival_ps) * ms for s in done],
                            "queue_ms"))
    # The load offered: arrivals per second between the first and the last arrival (0 when
    # the trace has no span: one request, or every request at once).
    arrivals = [s.request.arrival_ps for s in states]
    span_ps = max(arrivals, default=0) - min(arrivals, default=0)
    metrics["offered_requests_per_s"] = ((len(arrivals) - 1) / (span_ps / PS_PER_S)
                                         if span_ps else 0.0)
    metrics["throughput_tokens_per_s"] = tokens / seconds if seconds else 0.0  # output tokens
    # Prompt and output tokens of the finished requests (vLLM's total_token_throughput).
    metrics["throughput_total_tokens_per_s"] = (
        (tokens + sum(s.request.prompt_tokens for s in done)) / seconds if seconds else 0.0)
    metrics["throughput_requests_per_s"] = len(done) / seconds if seconds else 0.0
    metrics["goodput_requests_per_s"] = len(good) / seconds if seconds else 0.0
    metrics["slo_attainment"] = len(good) / len(states) if states else 0.0
    # Each threshold alone (shares of all requests): which side of the SLO is missed.
    metrics["slo_attainment_ttft"] = sum(ttft_ok) / len(states) if states else 0.0
    metrics["slo_attainment_tbt"] = sum(tbt_ok) / len(states) if states else 0.0
    # the thresholds applied (the defaults when the scenario gives none), so a row of a
    # sweep says which SLO its attainment is against
    metrics["slo_ttft_ms"] = float(slo.ttft_ms)
    metrics["slo_tbt_ms"] = float(slo.tbt_ms)
    priorities = sorted({s.request.priority for s in states})
    if len(priorities) > 1:  # a trace with priority classes: how each fared
        metrics["by_priority"] = {
            str(p): _class_summary([s for s in states if s.request.priority == p], slo)
            for p in priorities}
    metrics["preemptions"] = sum(s.preempted for s in states)
    metrics["swap_outs"] = sum(s.swapped_out for s in states)
    metrics["prefill_tokens_recomputed"] = sum(s.chunk_recomputed for s in states)
    # KV a recompute preemption dropped and prefilled again (the cost of preempting).
    metrics["preemption_recomputed_tokens"] = sum(s.preemption_recomputed for s in states)
    area = device_area_mm2(driver.device)
    metrics["area_mm2"] = area
    metrics["throughput_tokens_per_s_per_mm2"] = (metrics["throughput_tokens_per_s"] / area["total"]
                                                  if area["total"] else 0.0)
    # Each replica's systolic arrays and HBM over the window: busy share, FLOPs against
    # their peak (MFU) and bytes against the HBM peak (MBU); prefill pools are expected
    # compute-bound, decode pools bandwidth-bound.
    totals = session.totals  # computed once: a sum over every distinct segment
    busy_share, flops_share, hbm_share, stage_share = {}, {}, {}, {}

    def array_share(cores) -> float:
        arrays = [f"core{c}.sa" for c in cores]
        busy = sum(totals.get(name, {}).get("busy_ps", 0) for name in arrays)
        return busy / (len(arrays) * window_ps) if window_ps else 0.0

    for replica in driver.replicas:
        key = replica.name
        arrays = [f"core{c}.sa" for c in replica.cores]
        hbms = [f"core{c}.hbm" for c in replica.cores if f"core{c}.hbm" in driver.device.parts]
        busy_share[key] = array_share(replica.cores)
        # Per pipeline stage: the busiest stage paces the pipeline under load (balance
        # it with workload.pd.*layers_per_stage).
        stage_share[key] = [array_share(group.cores) for group in replica.groups]
        flops_share[key] = _rate_share(totals, driver.device, arrays, ("flops",),
                                       "peak_flops_per_s", window_ps)
        hbm_share[key] = _rate_share(totals, driver.device, hbms,
                                     ("bytes_read", "bytes_written"), "peak_bandwidth_bps",
                                     window_ps)
    metrics["sa_utilisation_by_replica"] = busy_share
    metrics["sa_utilisation_by_stage"] = stage_share
    metrics["flops_utilisation_by_replica"] = flops_share
    metrics["hbm_bandwidth_utilisation_by_replica"] = hbm_share
    return rows, metrics


def run_info(driver, pools) -> dict[str, Any]:
    """What a serving run was: model, PD mode, scheduler and, per replica, its role,
    stages, layers and memory per stage, cores (what one is made of, as built) and KV
    capacity; and the chip's cores no pool uses."""
    reps = driver.replicas
    info = {"model": driver.model.name, "pd_mode": driver.config.pd.mode,
            "scheduler": driver.config.scheduler.kind,
            "replicas": [{"name": r.name, "role": r.role, "stages": len(r.groups),
                          "layers_per_stage": [len(plan.layers) for plan in r.plans],
                          "memory_by_stage": [plan.summary() for plan in r.plans],
                          "cores": len(r.cores), "core_ids": list(r.cores),
                          "core": _core_summary(driver.device, r.cores[0]),
                          "kv_capacity_tokens": pools[r.index].capacity_tokens} for r in reps]}
    # Cores no pool uses (a fused pool deeper than the layers, a split that leaves a
    # remainder): said, since the chip's peak and area still count them.
    chip_cores = driver.device.num_cores
    info.update(chip_cores=chip_cores, cores_idle=chip_cores - sum(len(r.cores) for r in reps))
    return info


def _core_summary(device, core: int) -> dict[str, Any]:
    """What one core of a replica is made of, as built (heterogeneous decode cores
    differ from the preset's: the config keeps ``null`` for what was derived)."""
    parts = device.parts
    sa, sram = parts[f"core{core}.sa"].config, parts[f"core{core}.sram"].config
    hbm = parts.get(f"core{core}.hbm")
    return {"systolic": f"{sa.rows}x{sa.cols}", "sram_bytes_per_cycle": sram.bytes_per_cycle,
            "hbm_channels": hbm.config.channels if hbm is not None else 0}
