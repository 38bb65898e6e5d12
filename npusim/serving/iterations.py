"""The per-iteration log of a serving run (``iterations.csv``) and its summaries.

One row per micro-batch a replica launches: what the scheduler put in it, how much KV
the replica had reserved once it was admitted, and how many requests were still
queued.  It is what a user plots to see *why* a pool saturates (batch sizes pinned at
``max_batch_size``, KV near capacity, a growing queue), which the per-request table
only shows as long latencies.  A row with no requests (start = end) is a batch the
scheduler formed and the preemptions that made room for it emptied, so every
preemption is in some row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npusim.serving.kv_cache import KvPool
from npusim.serving.state import Entry

#: Columns of ``iterations.csv``, in order (times in ps, KV in tokens).
COLUMNS = ("iteration", "replica", "role", "start_ps", "end_ps", "requests",
           "prefill_requests", "decode_requests", "prefill_tokens", "recomputed_tokens",
           "context_tokens", "kv_used_tokens", "kv_capacity_tokens", "waiting", "running",
           "preempted")


@dataclass
class IterationLog:
    """Rows appended by the engine as it launches micro-batches."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def record(self, *, replica, entries: list[Entry], start_ps: int, end_ps: int,
               kv: KvPool, waiting: int, running: int, preempted: int) -> None:
        """Log one launched micro-batch of ``replica`` (``end_ps``: its last token out;
        ``kv``: the replica's KV pool once the batch has taken its KV).

        ``waiting`` counts the requests queued for this replica that it left out
        (prompts not yet prefilled; on a decode replica, handed-over requests waiting
        for KV), ``running`` the running ones it left out."""
        prefill = [e for e in entries if not e.is_decode]
        self.rows.append({
            "iteration": len(self.rows), "replica": replica.index, "role": replica.role,
            "start_ps": start_ps, "end_ps": end_ps, "requests": len(entries),
            "prefill_requests": len(prefill), "decode_requests": len(entries) - len(prefill),
            "prefill_tokens": sum(e.new_tokens for e in prefill),
            "recomputed_tokens": sum(e.recomputed_tokens for e in entries),
            "context_tokens": sum(e.context_len for e in entries),
            "kv_used_tokens": kv.used_tokens, "kv_capacity_tokens": kv.capacity_tokens,
            "waiting": waiting, "running": running, "preempted": preempted,
        })

    def columns(self) -> dict[str, list[Any]]:
        """The table column by column (a run that launched nothing keeps its header)."""
        return {name: [row[name] for row in self.rows] for name in COLUMNS}

    def summary(self) -> dict[str, dict[str, float]]:
        """Per replica (``decode1``, ``fused0``, ...): iterations launched, mean requests
        and new tokens per iteration, the mean and peak share of KV reserved when an
        iteration launched (averaged over iterations, not over time), and the most
        micro-batches under way at once."""
        by_replica: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows:
            if not row["requests"]:  # a batch preemption emptied: nothing launched
                continue
            by_replica.setdefault(f"{row['role']}{row['replica']}", []).append(row)
        out = {}
        for key, rows in sorted(by_replica.items()):
            requests = np.array([r["requests"] for r in rows], dtype=float)
            tokens = np.array([r["prefill_tokens"] + r["decode_requests"] for r in rows], dtype=float)
            capacity = rows[0]["kv_capacity_tokens"]
            kv = np.array([r["kv_used_tokens"] for r in rows], dtype=float) / capacity
            # Micro-batches under way at each launch, this one included (those launched
            # so far less those ended by then).
            launched = under_way([r["start_ps"] for r in rows], [r["end_ps"] for r in rows])
            out[key] = {"iterations": len(rows), "batch_requests_mean": float(requests.mean()),
                        "batch_tokens_mean": float(tokens.mean()),
                        "kv_utilisation_mean": float(kv.mean()),
                        "kv_utilisation_peak": float(kv.max()),
                        "micro_batches_in_flight_max": int(launched.max())}
        return out


def under_way(starts, ends, weights=None) -> np.ndarray:
    """At each launch (``starts`` in launch order), the micro-batches under way, this one
    included: those launched so far less those ended by then (an end at the launch's
    time counts as ended, as the engine applies a finish before a launch).  With
    ``weights`` (e.g. requests per micro-batch), their sum instead of their count."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    weights = np.ones(len(starts)) if weights is None else np.asarray(weights)
    order = np.argsort(ends, kind="stable")
    ended = np.concatenate([[0], np.cumsum(weights[order])])
    return np.cumsum(weights) - ended[np.searchsorted(ends[order], starts, side="right")]

