"""What a capacity probe reads besides one run's metrics: several replays pooled into
one probe (``seeds``), and how many rows a trace file has left to lengthen with."""

from __future__ import annotations

from typing import Any

from npusim.core.errors import TraceError

__all__ = ["pooled", "file_rows"]


def pooled(results: list) -> dict[str, Any]:
    """The metrics a probe reads, over several replays' requests together: shares of
    all requests, TTFT p90 over every finished request, mean TBT over every gap
    (``tbt_ms_mean``'s definition), offered rate and goodput averaged."""
    import numpy as np
    import pandas as pd

    tables = pd.concat([r.requests for r in results], ignore_index=True)
    metrics = [r.metrics for r in results]
    total = sum(m["requests_total"] for m in metrics)
    by_kind: dict[str, int] = {}
    for m in metrics:
        for kind, count in m.get("requests_rejected_by_kind", {}).items():
            by_kind[kind] = by_kind.get(kind, 0) + count
    out = {"requests_total": total,
           "requests_rejected": sum(m["requests_rejected"] for m in metrics),
           "requests_rejected_by_kind": by_kind,
           "offered_requests_per_s": float(np.mean([m["offered_requests_per_s"] for m in metrics])),
           "goodput_requests_per_s": float(np.mean([m["goodput_requests_per_s"] for m in metrics])),
           # the settings notes of every replay, each once
           "notes": list(dict.fromkeys(n for m in metrics for n in m.get("notes", ())))}
    for key in ("slo_attainment", "slo_attainment_ttft", "slo_attainment_tbt"):
        out[key] = sum(m[key] * m["requests_total"] for m in metrics) / total
    done = tables[tables["status"] == "finished"]
    out["ttft_ms_p90"] = float(np.percentile(done["ttft_ps"], 90)) * 1e-9 if len(done) else None
    gaps = (done["generated"] - 1).clip(lower=0)
    out["tbt_ms_mean"] = (float((done["mean_tbt_ps"].fillna(0) * gaps).sum() / gaps.sum()) * 1e-9
                          if gaps.sum() else None)
    out["e2e_ms_mean"] = float(done["e2e_ps"].mean()) * 1e-9 if len(done) else None
    return out


def file_rows(trace: Any, at_most: int) -> int | None:
    """How many requests a trace file holds, counted up to ``at_most`` + 1 (so a bad
    row further on cannot fail the count: only whether more than ``at_most`` rows
    exist is asked); None for a generated trace."""
    if trace is None or trace.file is None:
        return None
    from npusim.config.presets import REPO_ROOT

    head = trace.model_copy(update={"limit": at_most + 1, "rate_scale": 1.0})
    try:
        return len(head.build(base_dir=REPO_ROOT))  # found as the engine finds it
    except TraceError:  # a bad row past those replayed: there is more (a replay says what)
        return at_most + 1
