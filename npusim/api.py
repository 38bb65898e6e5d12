"""``simulate(config) -> Result``: the one entry point every front end uses.

Pure: it reads only its argument (and preset files a scenario names), keeps no state
between calls and writes nothing; the same config and seed give the same Result.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from npusim import __version__
from npusim.core import registry
from npusim.executor.analytic import run_analytic
from npusim.executor.base import SegmentRun, prepare
from npusim.executor.memo import SegmentMemo
from npusim.executor.tlm import run_tlm
from npusim.metrics.result import OP_COLUMNS, Result
from npusim.mapping.taskgraph import ComputeTask, HostTask, TaskGraph, TransferTask
from npusim.workload.program import LazySegment

_EXECUTORS = {"tlm": run_tlm, "analytic": run_analytic}


def _as_scenario(config: Any, overrides: Iterable[str]):
    from npusim.config.loader import load_scenario, scenario_from_dict

    if isinstance(config, (str, Path)):
        return load_scenario(config, overrides)
    if isinstance(config, Mapping):
        return scenario_from_dict(config, overrides=overrides)
    if overrides:
        return scenario_from_dict(config.model_dump(mode="json"), overrides=overrides)
    return config


def build_device(hw_config: Any):
    """Construct, wire and validate the device a hardware config describes."""
    device = registry.build("device", hw_config, getattr(hw_config, "name", hw_config.kind))
    device.validate()
    return device


def simulate(config: Any, *, mode: str | None = None, overrides: Iterable[str] = (),
             progress: Callable[[int, int], None] | None = None) -> Result:
    """Run one scenario and return its :class:`Result`.

    ``config`` is a scenario path, a mapping, or a validated Scenario; ``mode`` overrides
    ``run.mode``; ``overrides`` are ``path=value`` strings as on the command line;
    ``progress(done, total)`` is called after each segment.
    """
    started = time.perf_counter()
    overrides = list(overrides) + ([f"run.mode={mode}"] if mode else [])
    scenario = _as_scenario(config, overrides)
    run_cfg = scenario.run
    device = build_device(scenario.hw)
    lower = registry.lookup("workload", scenario.workload.kind).impl
    program = lower(device, config=scenario.workload, seed=run_cfg.seed)

    executor = _EXECUTORS[run_cfg.mode]
    memo = SegmentMemo(enabled=run_cfg.memoize, canonical=device.canonical_cores)
    prepared: dict[int, Any] = {}

    def execute(graph) -> SegmentRun:
        return executor(graph, device, run_cfg.seed)

    columns: dict[str, list] = {name: [] for name in OP_COLUMNS}
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    busy_by_op: dict[str, int] = defaultdict(int)
    segment_rows: list[tuple] = []
    clock = events = transactions = 0
    ends: list[int] = []
    def prepared_graph(graph: TaskGraph) -> TaskGraph:
        if id(graph) not in prepared:
            prepared[id(graph)] = (graph, prepare(graph, device))
        return prepared[id(graph)][1]

    for index, (segment, label) in enumerate(zip(program.segments, program.labels)):
        if isinstance(segment, LazySegment):
            run, reused = memo.lazy_run(
                segment.key, segment.cores,
                lambda: memo.run(prepared_graph(segment.build()), execute)[0])
        else:
            run, reused = memo.run(prepared_graph(segment), execute)
        tasks = len(run.starts)
        if run_cfg.trace and len(columns["task"]) + tasks <= run_cfg.trace_max_tasks:
            if run.graph is None:  # a lazy hit: build the graph only for its task names
                run = SegmentRun(prepared_graph(segment.build()), run.starts, run.ends,
                                 run.unit_stats, run.events, run.transactions, run.extra)
            _append_rows(columns, run, index, label, clock)
        for op, busy in _run_busy_by_op(run).items():
            busy_by_op[op] += busy
        segment_rows.append((index, label, clock, clock + run.makespan_ps, reused))
        for unit, stats in run.unit_stats.items():
            for name, value in stats.items():
                totals[unit][name] += value
        clock += run.makespan_ps
        ends.append(clock)
        if not reused:  # a memo hit replays timing without processing any event
            events += run.events
            transactions += run.transactions
        if progress is not None:
            progress(index + 1, len(program.segments))

    wall = time.perf_counter() - started
    unit_stats = {unit: dict(stats) for unit, stats in sorted(totals.items())}
    metrics = _metrics(clock, unit_stats, program.info, memo, events, transactions,
                       len(program.segments), run_cfg.mode, scenario.name)
    metrics["busy_by_op_ps"] = dict(sorted(busy_by_op.items()))
    traced = len(set(columns["segment"]))
    metrics["trace_segments"] = traced
    if program.finish is not None:
        metrics.update(program.finish(ends))
    return Result(metrics=metrics, op_columns=columns, unit_stats=unit_stats,
                  segment_rows=segment_rows,
                  config=scenario.model_dump(mode="json"),
                  host={"wall_time_s": wall, "npusim_version": __version__,
                        "events_per_s": events / wall if wall > 0 else 0.0})


def _task_fields(task) -> tuple[str, str, str, int, int]:
    """``(type, unit, op name, flops, bytes)`` of a task for the per-op table."""
    if isinstance(task, ComputeTask):
        return ("compute", task.unit, task.op.name or task.op.kind, task.op.flops,
                task.op.input_bytes + task.op.output_bytes)
    if isinstance(task, TransferTask):
        return "transfer", task.src, "transfer", 0, task.size_bytes
    if isinstance(task, HostTask):
        return "host", task.resource, "host", 0, 0
    return "other", "", "other", 0, 0


def _append_rows(columns: dict[str, list], run: SegmentRun, index: int, label: str,
                 offset: int) -> None:
    for task in run.graph.tasks:
        kind, unit, op, flops, size = _task_fields(task)
        if kind == "host" and task.resource == "none":
            continue  # collective joins: zero-time bookkeeping
        start, end = run.starts[task.id] + offset, run.ends[task.id] + offset
        for name, value in (("segment", index), ("label", label), ("task", task.id),
                            ("name", task.name), ("op", op), ("type", kind), ("unit", unit),
                            ("start_ps", start), ("end_ps", end), ("duration_ps", end - start),
                            ("flops", flops), ("bytes", size)):
            columns[name].append(value)


_LAYER_PREFIX = re.compile(r"^L\d+\.")


def _run_busy_by_op(run: SegmentRun) -> dict[str, int]:
    """Busy time of one segment summed over units per operator (``q_proj``,
    ``attn_qk``, ``transfer``…), layer prefixes dropped; cached on the run, so a memo
    hit costs nothing.  Overlapping tasks on different units both count."""
    cached = run.extra.get("busy_by_op")
    if cached is None and run.graph is None:
        return {}
    if cached is None:
        cached = defaultdict(int)
        for task in run.graph.tasks:
            kind, _, op, _, _ = _task_fields(task)
            if kind == "host" and task.resource == "none":
                continue
            cached[_LAYER_PREFIX.sub("", op)] += run.ends[task.id] - run.starts[task.id]
        run.extra["busy_by_op"] = cached = dict(cached)
    return cached


def _level(unit: str) -> str:
    """Memory/network level of a part name: ``core3.hbm`` → ``hbm``, ``noc`` → ``noc``."""
    return unit.rsplit(".", 1)[-1] if "." in unit else unit


def _metrics(latency_ps: int, unit_stats: dict[str, dict[str, int]], info: dict[str, Any],
             memo: SegmentMemo, events: int, transactions: int, segments: int, mode: str,
             name: str) -> dict[str, Any]:
    bytes_by_level: dict[str, int] = defaultdict(int)
    busy: dict[str, int] = {}
    for unit, stats in unit_stats.items():
        if ".link" in unit:
            continue
        bytes_by_level[_level(unit)] += stats.get("bytes_read", 0) + stats.get("bytes_written", 0)
        busy[unit] = stats.get("busy_ps", 0)
    flops = sum(stats.get("flops", 0) for stats in unit_stats.values())
    seconds = latency_ps / 1e12
    metrics: dict[str, Any] = {
        "scenario": name,
        "mode": mode,
        "latency_ps": latency_ps,
        "latency_s": seconds,
        "flops": flops,
        "throughput_flops_per_s": flops / seconds if seconds else 0.0,
        "bytes_by_level": dict(sorted(bytes_by_level.items())),
        "unit_busy_ps": dict(sorted(busy.items())),
        "unit_utilisation": {u: (b / latency_ps if latency_ps else 0.0) for u, b in sorted(busy.items())},
        "events": events,
        "transactions": transactions,
        "segments": segments,
        "memo": {"hits": memo.hits, "misses": memo.misses, "hit_rate": memo.hit_rate},
    }
    metrics.update({key: value for key, value in info.items() if key not in metrics})
    return metrics
