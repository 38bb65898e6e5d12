"""Every generated token of a serving run as a row: the inter-token latency (ITL)
distribution vLLM's and Vidur's benchmarks report, which a per-request mean TBT hides.

>>> from npusim import analysis                                     # doctest: +SKIP
>>> tokens = analysis.token_table(result)        # a serving Result or a run directory
>>> gaps = tokens[~tokens["first"]]              # the first token's gap is its TTFT
>>> gaps["gap_ps"].quantile([0.5, 0.9, 0.99])    # ITL percentiles over every gap
>>> analysis.plot_latency_cdf(gaps, "gap_ps")
"""

from __future__ import annotations

from typing import Any

from npusim.analysis.frames import AnalysisError, request_table, require_columns

__all__ = ["token_table"]


def token_table(source: Any) -> "pd.DataFrame":
    """One row per generated token of a serving Result or run directory (its per-request
    table's ``token_times_ps``), in request then token order.

    Columns: ``request_id``, ``token`` (0 for the first), ``time_ps`` (when it was
    produced), ``gap_ps`` (since the request's previous token; for the first token, since
    the request arrived: its TTFT) and ``first`` (True for the first token, so
    ``tokens[~tokens.first]`` are the inter-token gaps alone, whose percentiles are the
    ``tbt_ms_*`` summaries).  Rejected requests have no rows, even one rejected after
    some tokens (preempted, then too long to prefill again)."""
    import numpy as np
    import pandas as pd

    requests = request_table(source)
    if requests is None:
        raise AnalysisError("no per-request table (requests.csv) to read tokens from; expected "
                            "a serving run (npusim run SCENARIO --out DIR with a serving "
                            "workload) or its Result")
    require_columns(requests, ("request_id", "arrival_ps", "token_times_ps"),
                    "per-request table")
    if "status" in requests:  # one rejected after some tokens (preempted, then too long
        requests = requests[requests["status"] != "rejected"]  # to prefill again) too
    ids, tokens, times, gaps = [], [], [], []
    for request_id, arrival_ps, text in zip(requests["request_id"], requests["arrival_ps"],
                                            requests["token_times_ps"]):
        if isinstance(text, (float, np.floating)) and text == text and float(text).is_integer():
            text = str(int(text))  # one token each, and NaN (rejected) rows: read as float
        elif isinstance(text, (int, np.integer)) and not isinstance(text, bool):
            text = str(text)  # one token each: a CSV column of single numbers reads as int
        if not isinstance(text, str) or not text.strip():
            continue  # no token (rejected): a CSV reads the empty cell as NaN
        try:
            stamps = np.array([int(t) for t in text.split()], dtype=np.int64)
        except ValueError:
            raise AnalysisError(f"request {request_id!r}: token_times_ps: expected "
                                f"space-separated integers (picoseconds), got "
                                f"{text[:60]!r}") from None
        previous = np.concatenate(([int(arrival_ps)], stamps[:-1]))
        ids += [request_id] * len(stamps)
        tokens.append(np.arange(len(stamps)))
        times.append(stamps)
        gaps.append(stamps - previous)
    join = (lambda parts: np.concatenate(parts) if parts else np.array([], dtype=np.int64))
    frame = pd.DataFrame({"request_id": pd.Series(ids, dtype="object"),
                          "token": join(tokens).astype(np.int64),
                          "time_ps": join(times), "gap_ps": join(gaps)})
    frame["first"] = frame["token"] == 0
    return frame
