"""Settings a serving run was given that could not act on it: said, not silently ignored.

Each is a valid configuration (a sweep may well hold one fixed while it varies what
would make it matter), so it is a note in ``metrics.json`` (``notes``) that ``npusim
run`` prints, not an error: a user who sets ``scheduler.order: priority`` on a trace
whose requests all share one priority should learn that the run served them first come,
first served, instead of reading the result as the effect of priority scheduling.
"""

from __future__ import annotations

from npusim.core.text import counted


def settings_notes(config, trace, replicas) -> list[str]:
    """The notes for a serving run of ``trace`` on ``replicas`` under ``config`` (a
    ``ServingWorkloadConfig``), in the order of the config's fields."""
    notes: list[str] = []
    limit = config.trace.limit
    if limit is not None and len(trace) < limit:
        notes.append(f"workload.trace.limit: {limit:,} is more than the trace's "
                     f"{counted(len(trace), 'request')} ({trace.source}): all of them ran")
    priorities = {request.priority for request in trace}
    orders = {getattr(config.scheduler_for(r.role), "order", "fcfs") for r in replicas}
    order = "priority" if "priority" in orders else "fcfs"
    if order == "priority" and len(priorities) <= 1:
        notes.append(f"workload.scheduler.order: priority, but every request has priority "
                     f"{next(iter(priorities), 0)}: they were served first come, first "
                     "served (give the trace a priority column, or a generator's "
                     "priorities: {0: 1, 1: 4})")
    elif order != "priority" and len(priorities) > 1:
        notes.append(f"the trace has {len(priorities)} priority classes and "
                     f"workload.scheduler.order is {order}: served by arrival (by_priority "
                     "in metrics.json shows how each class fared); order: priority serves "
                     "lower values first")
    entry = [replica for replica in replicas if replica.role != "decode"]
    if config.router != "shared_queue" and len(entry) == 1:
        field = "pd.dp" if config.pd.mode == "fusion" else "pd.prefill_dp"
        notes.append(f"workload.router: {config.router} has one replica to route to "
                     f"({field} = 1): no effect")
    preempts_by_priority = any(getattr(config.scheduler_for(r.role), "preempt_lower_priority",
                                       False) for r in replicas)
    if (config.preemption == "swap" and config.kv_reservation == "max_length"
            and not preempts_by_priority):
        notes.append("workload.preemption: swap, but nothing is preempted: kv_reservation: "
                     "max_length reserves each request's whole KV at admission (preemption "
                     "happens under kv_reservation: incremental, or with "
                     "scheduler.preempt_lower_priority)")
    notes.extend(_pipeline_notes(config, replicas))
    notes.extend(_scheduler_notes(config, replicas))
    shared = getattr(config.trace, "shared_prefix", None)
    if shared is not None and not config.prefix_caching:
        notes.append("workload.trace.shared_prefix gives requests common prompt blocks, but "
                     "workload.prefix_caching is false: every prompt is prefilled whole, so "
                     "the shared prefix changes nothing (prefix_caching: true reuses it)")
    longest = max((r.prompt_tokens + r.output_tokens for r in trace), default=0)
    block = config.kv_block_tokens
    if longest and block > longest:
        capacity = min(replica.kv_capacity_tokens for replica in replicas)
        notes.append(f"workload.kv_block_tokens: {block:,} is more than the longest request "
                     f"({longest:,} tokens): every request holds a block that is mostly "
                     f"empty, so a replica holds at most {capacity // block:,} at once "
                     "(vLLM's block_size is 16; 1 is NpuSim's exact buffer)")
    return notes


#: Options of every scheduler that the static one never acts on (it runs one batch at a
#: time, start to finish, through the whole pipeline).
_NOT_STATIC = ("fill_pipeline", "max_decode_micro_batches_in_flight",
               "max_micro_batches_in_flight")


def _scheduler_notes(config, replicas) -> list[str]:
    """Scheduler fields set away from their defaults that the replica's scheduler kind
    cannot act on (a default is no choice of the user's; a resolved configuration run
    again writes every field, so what was written cannot tell)."""
    notes = []
    for role in dict.fromkeys(replica.role for replica in replicas):
        scheduler = config.scheduler_for(role)
        fields = type(scheduler).model_fields
        changed = {name for name, info in fields.items()
                   if getattr(scheduler, name) != info.get_default(call_default_factory=True)}
        if scheduler.kind == "static":
            for field in _NOT_STATIC:
                if field in changed:
                    notes.append(f"{_owner(config, role, field)}.{field}: the static "
                                 "scheduler runs one batch at a time through the whole "
                                 "pipeline: no effect")
        elif (scheduler.kind == "chunked_prefill" and "max_batch_tokens" in changed
              and scheduler.prefill_chunk_units is None):
            notes.append(f"{_owner(config, role, 'max_batch_tokens')}.max_batch_tokens: "
                         f"{scheduler.max_batch_tokens:,}, but "
                         f"chunked_prefill caps an iteration at token_budget "
                         f"({scheduler.token_budget:,} tokens) and sizes the buffers by it: "
                         "no effect (it acts with prefill_chunk_units, which counts the "
                         "budget in chunk units)")
    return list(dict.fromkeys(notes))


def _owner(config, role: str, field: str) -> str:
    """Where ``field`` of ``role``'s scheduler was written: a decode pool's own
    ``pd.decode_scheduler`` sets only the fields it names; the rest are the scheduler's."""
    if role == "decode" and field in (config.pd.decode_scheduler or {}):
        return "workload.pd.decode_scheduler"
    return "workload.scheduler"


#: Scheduler options that only act on a pipeline of several stages: (field, value that
#: acts, the roles whose replicas it acts on, what it does).
_PIPELINE_OPTIONS = (
    ("fill_pipeline", True, ("fused", "decode"), "splits decodes over the stages"),
    ("decode_lanes", "sticky", ("fused", "decode"), "keeps a decode lane per stage"),
    ("pipeline_chunks", True, ("fused", "prefill"), "lets a prompt's chunks follow each "
                                                    "other through the stages"),
)


def _pipeline_notes(config, replicas) -> list[str]:
    """Pipeline options set where every replica they act on has one stage."""
    notes = []
    for field, value, roles, effect in _PIPELINE_OPTIONS:
        acting = [r for r in replicas if r.role in roles
                  and getattr(config.scheduler_for(r.role), field, None) == value
                  and not (config.scheduler_for(r.role).kind == "static"
                           and field in _NOT_STATIC)]  # (_scheduler_notes says why)
        if acting and all(len(r.groups) == 1 for r in acting):
            owner = _owner(config, acting[0].role, field)
            notes.append(f"{owner}.{field}: {str(value).lower()} {effect}, and "
                         f"{'the replica has' if len(acting) == 1 else 'each replica has'} "
                         "one pipeline stage: no effect (a pool of C cores makes "
                         "C / (tp x dp) stages)")
    return notes


__all__ = ["settings_notes"]
