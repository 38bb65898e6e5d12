"""A session runs segments on one device and accumulates what a Result reports.

``simulate()`` runs a program's segments back to back; the serving engine runs the
segments of overlapping iterations at times it chooses.  Both go through a
:class:`Session`, which owns the device, the memo and the collectors (per-unit counters,
per-operator busy time, the per-task timeline up to a cap, one row per segment), so the
bookkeeping lives in one place.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace
from functools import lru_cache
from typing import Any

from npusim.executor.analytic import run_analytic
from npusim.executor.base import SegmentRun, prepare
from npusim.executor.blend import (blend_runs, chain_runs, common_scale, scaled_count, tally,
                                   unscale)
from npusim.executor.memo import SegmentMemo
from npusim.executor.tlm import run_tlm
from npusim.hw.base import MemoryTarget
from npusim.mapping.taskgraph import ComputeTask, HostTask, TaskGraph, TransferTask
from npusim.metrics.result import OP_COLUMNS
from npusim.workload.program import BlendedSegment, ChainedSegment, LazySegment

EXECUTORS = {"tlm": run_tlm, "analytic": run_analytic}
_NO_OPS: dict[str, int] = {}  # shared, never mutated: what a run without tasks reports
_LAYER_PREFIX = re.compile(r"^L\d+\.")


class Session:
    """Runs segments (task graphs or lazy segments) and collects their statistics."""

    def __init__(self, device: Any, mode: str = "tlm", seed: int = 0, memoize: bool = True,
                 trace: bool = True, trace_max_tasks: int = 200_000):
        self.device, self.mode, self.seed = device, mode, seed
        self.trace, self.trace_max_tasks = trace, trace_max_tasks
        self.trace_truncated = False  # a segment's rows left out for the cap
        self._executor = EXECUTORS[mode]
        self.memo = SegmentMemo(enabled=memoize, canonical=device.canonical_cores)
        self._prepared: dict[int, tuple[TaskGraph, TaskGraph]] = {}
        self._composites: dict = {}  # BlendedSegment / ChainedSegment key -> its run
        self._off_chip_names: dict[str, bool] = {}
        self.columns: dict[str, list] = {name: [] for name in OP_COLUMNS}
        # Per-unit counters are summed lazily: each distinct stats dict (memo hits share
        # them) is kept once with the number of times it occurred.
        self._stat_refs: dict[int, list] = {}
        # Per-operator busy time, likewise: each distinct per-segment dict with its count.
        self._busy_refs: dict[int, list] = {}
        # Composite runs recorded since the last total, with their counts (see _hand_down).
        self._composite_refs: dict[int, list] = {}
        self.segment_rows: list[tuple] = []
        self._totals: tuple[int, dict] | None = None
        self.events = self.transactions = 0

    # -- running -----------------------------------------------------------------------
    def prepared(self, graph: TaskGraph) -> TaskGraph:
        """``graph`` with collectives expanded and units checked (cached per graph)."""
        if id(graph) not in self._prepared:
            self._prepared[id(graph)] = (graph, prepare(graph, self.device))
        return self._prepared[id(graph)][1]

    def _execute(self, graph: TaskGraph) -> SegmentRun:
        return self._executor(graph, self.device, self.seed)

    def time(self, segment: TaskGraph | LazySegment | BlendedSegment | ChainedSegment
             ) -> tuple[SegmentRun, bool]:
        """Timing of ``segment`` on an idle device, without recording it."""
        if isinstance(segment, BlendedSegment):
            weights = [weight for weight, _ in segment.parts]
            return self._composite(segment, [part for _, part in segment.parts],
                                   lambda runs, events, transactions: blend_runs(
                                       list(zip(weights, runs)), segment.denominator,
                                       events, transactions))
        if isinstance(segment, ChainedSegment):
            return self._composite(segment, list(segment.parts), chain_runs)
        if isinstance(segment, LazySegment):
            def compute() -> SegmentRun:
                graph = prepare(segment.build(), self.device)
                if segment.exact_key:
                    self.memo.misses += 1
                    run = self._execute(graph)
                    # Per-op busy time (and a chain part's prefetch profile) now, while
                    # the graph is here: later hits are copies without it that share
                    # this ``extra``.
                    busy_by_op(run)
                    if segment.prefetch:
                        self._measure_prefetch(graph, run)
                    return self._compact(run)
                run = self.memo.run(graph, self._execute)[0]
                if segment.prefetch and "prefetched_ps" not in run.extra:
                    self._measure_prefetch(graph, run)
                return run
            return self.memo.lazy_run(segment.key, segment.cores, compute, segment.lead_cores)
        return self.memo.run(self.prepared(segment), self._execute)

    def _measure_prefetch(self, graph: TaskGraph, run: SegmentRun) -> None:
        """Put the prefetch profile of ``graph`` (timed as ``run``) in ``run.extra``: when
        its prefetchable loads end (``prefetch_ps``), its makespan with them already
        done (``prefetched_ps``, a second run of the graph without them), when its
        other off-chip loads end in that run (``last_load_ps``, 0 without any) and when
        the first of its core's two tile buffers is free for the next part's loads in
        that run (``tile_free_ps``: the end of the use of the tile before its last, on
        the core where that is latest; 0 if no core loads two tiles), for
        :func:`~npusim.executor.blend.chain_runs`.  A load is prefetchable if it reads
        an off-chip memory and waits only for other prefetchable loads; the others wait
        for computation (a tile buffer to free up), so they pace the part's DMA queue."""
        flags = self._prefetchable(graph)
        if not any(flags):
            run.extra.update(prefetch_ps=0, prefetched_ps=run.makespan_ps,
                             last_load_ps=self._last_load_end(graph, run, flags),
                             tile_free_ps=_tile_free(graph, run))
            return
        loaded = TaskGraph(name=graph.name)
        loaded.tasks = [HostTask(0, "none", task.deps, task.name, task.id) if flag else task
                        for task, flag in zip(graph.tasks, flags)]
        warm = self._execute(loaded)
        run.events += warm.events  # the simulator's work, not the hardware's
        run.extra.update(prefetch_ps=max(end for flag, end in zip(flags, run.ends) if flag),
                         prefetched_ps=warm.makespan_ps,
                         last_load_ps=self._last_load_end(loaded, warm, flags),
                         tile_free_ps=_tile_free(graph, warm))

    def _last_load_end(self, graph: TaskGraph, run: SegmentRun, prefetchable: list[bool]) -> int:
        """When the last off-chip load of ``graph`` that is not prefetchable ends in
        ``run`` (0 if it has none)."""
        off_chip = self._off_chip
        return max((end for task, flag, end in zip(graph.tasks, prefetchable, run.ends)
                    if not flag and type(task) is TransferTask and off_chip(task.src)),
                   default=0)

    def _prefetchable(self, graph: TaskGraph) -> list[bool]:
        """Per task of ``graph``: whether it is a prefetchable load."""
        off_chip = self._off_chip
        flags: list[bool] = []
        for task in graph.tasks:
            flags.append(type(task) is TransferTask and off_chip(task.src)
                         and all(flags[dep] for dep in task.deps))
        return flags

    def _off_chip(self, endpoint: str) -> bool:
        """Whether ``endpoint`` is a memory off the chip (cached per endpoint name)."""
        known = self._off_chip_names.get(endpoint)
        if known is None:
            part = self.device.parts.get(endpoint)
            known = self._off_chip_names[endpoint] = (isinstance(part, MemoryTarget)
                                                      and not part.on_chip)
        return known

    def _composite(self, segment: BlendedSegment | ChainedSegment, parts: list,
                   compose) -> tuple[SegmentRun, bool]:
        """The run of a blend or chain (computed once per key by ``compose(part runs,
        events, transactions)``): its parts are timed through the memo like any lazy
        segment, and the events are those of the parts not known yet.  It counts as
        reused when every part was already known."""
        run = self._composites.get(segment.key) if self.memo.enabled else None
        if run is not None:
            self.memo.hits += 1
            return run, True
        timed = [self.time(part) for part in parts]
        new = [part_run for part_run, hit in timed if not hit]
        run = compose([part_run for part_run, _ in timed], sum(r.events for r in new),
                      sum(r.transactions for r in new))
        if self.memo.enabled:
            self._composites[segment.key] = run
        if isinstance(segment, BlendedSegment):
            self.memo.blends += 1
        return run, not new

    def _compact(self, run: SegmentRun) -> SegmentRun:
        """Once no more per-task rows will be recorded, keep only what later hits need
        (makespan, counters, and what the caller has put in ``extra``): a long serving
        run stores thousands of timed segments, and their graphs would fill the memory."""
        if self.trace and len(self.columns["task"]) < self.trace_max_tasks:
            return run
        return SegmentRun(None, [], [run.makespan_ps],  # type: ignore[arg-type]
                          run.unit_stats, run.events, run.transactions, run.extra)

    def run(self, segment: TaskGraph | LazySegment | BlendedSegment | ChainedSegment, label: str,
            start_ps: int) -> SegmentRun:
        """Time ``segment`` and record it as running from ``start_ps``."""
        run, reused = self.time(segment)
        index = len(self.segment_rows)
        if self.trace:
            if isinstance(segment, ChainedSegment):  # each part's tasks where it ran
                for (offset, part_run, head_ps), part in zip(run.extra["chain"], segment.parts):
                    self._trace_tasks(part, part_run, index,
                                      label + part.name[len(segment.name):], start_ps + offset,
                                      head_ps)
            else:
                self._trace_tasks(segment, run, index, label, start_ps)
        self.segment_rows.append((index, label, start_ps, start_ps + run.makespan_ps, reused))
        if "blend" in run.extra:
            # A composite (blend, chain) has no counters of its own: it is counted here
            # and handed down to its parts once, when totals are asked for.
            ref = self._composite_refs.get(id(run))
            if ref is None:
                ref = self._composite_refs[id(run)] = [run, {}]
            tally(ref[1], 1, 1)
        else:
            self._count(run, 1, 1)
        if not reused:  # a memo hit replays timing without processing any event
            self.events += run.events
            self.transactions += run.transactions
        return run

    def _count(self, run: SegmentRun, weight: int, denominator: int) -> None:
        """Add ``weight / denominator`` occurrences of ``run``'s counters (per unit, per
        operator) to the totals."""
        busy = busy_by_op(run)
        ref = self._busy_refs.get(id(busy))
        if ref is None:
            ref = self._busy_refs[id(busy)] = [busy, {}]
        tally(ref[1], weight, denominator)
        ref = self._stat_refs.get(id(run.unit_stats))
        if ref is None:
            ref = self._stat_refs[id(run.unit_stats)] = [run.unit_stats, {}]
        tally(ref[1], weight, denominator)

    def _hand_down(self) -> None:
        """Count the recorded composites' parts: each composite's occurrences go to its
        parts with their weights, a level at a time, so parts shared by many composites
        (the corner stages of thousands of blends) are visited once per level."""
        level, self._composite_refs = self._composite_refs, {}
        while level:
            below: dict[int, list] = {}
            for run, weights in level.values():
                for weight, denominator, part in run.extra["blend"]:
                    for outer_denominator, numerator in weights.items():
                        if "blend" in part.extra:
                            ref = below.get(id(part))
                            if ref is None:
                                ref = below[id(part)] = [part, {}]
                            tally(ref[1], numerator * weight, outer_denominator * denominator)
                        else:
                            self._count(part, numerator * weight, outer_denominator * denominator)
            level = below

    def _trace_tasks(self, segment, run: SegmentRun, index: int, label: str, start_ps: int,
                     head_start_ps: int = 0) -> None:
        """Per-task rows of ``run`` while under the cap (blends have none); a chain part
        whose loads have a head start is timed again with it for its rows."""
        if not run.starts:
            return
        if len(self.columns["task"]) + len(run.starts) > self.trace_max_tasks:
            self.trace_truncated = True  # said in metrics (and by npusim run)
            return
        if run.graph is None:  # a lazy hit: build the graph only for its task names
            assert isinstance(segment, LazySegment)
            run = SegmentRun(prepare(segment.build(), self.device), run.starts, run.ends,
                             run.unit_stats, run.events, run.transactions, run.extra)
        if head_start_ps:
            run = self._head_start_run(run.graph, head_start_ps)
        append_rows(self.columns, run, index, label, start_ps)

    def _head_start_run(self, graph: TaskGraph, head_start_ps: int) -> SegmentRun:
        """``graph`` timed with its prefetchable loads issued ``head_start_ps`` before
        everything else (a gate in front of the rest), indexed like ``graph``."""
        flags = self._prefetchable(graph)
        gated = TaskGraph(name=graph.name)
        gated.tasks = [HostTask(head_start_ps, "none", (), "head start", 0)]
        for task, flag in zip(graph.tasks, flags):
            deps = tuple(dep + 1 for dep in task.deps)
            if not flag and all(flags[dep] for dep in task.deps):
                deps += (0,)
            gated.tasks.append(replace(task, deps=deps, id=task.id + 1))
        run = self._execute(gated)
        return SegmentRun(graph, run.starts[1:], run.ends[1:], run.unit_stats)

    @property
    def busy_by_op(self) -> dict[str, int]:
        """Busy time per operator summed over every recorded segment."""
        self._hand_down()
        totals: dict[str, int] = defaultdict(int)
        scale = common_scale(weights for _, weights in self._busy_refs.values())
        for busy, weights in self._busy_refs.values():
            count = scaled_count(weights, scale)
            for op, value in busy.items():
                totals[op] += value * count
        return {op: unscale(value, scale) for op, value in totals.items()}

    @property
    def totals(self) -> dict[str, dict[str, int]]:
        """Counters of every unit summed over every recorded segment (computed again only
        after more segments were recorded)."""
        if self._totals is not None and self._totals[0] == len(self.segment_rows):
            return self._totals[1]
        self._hand_down()
        totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # Blends weigh their parts' counters by fractions: counts are scaled to integers.
        scale = common_scale(weights for _, weights in self._stat_refs.values())
        for stats, weights in self._stat_refs.values():
            count = scaled_count(weights, scale)
            for unit, values in stats.items():
                target = totals[unit]
                for name, value in values.items():
                    target[name] += value * count
        if scale != 1:
            for target in totals.values():
                for name, value in target.items():
                    target[name] = unscale(value, scale)
        self._totals = (len(self.segment_rows), totals)
        return totals

    def unit_stats(self) -> dict[str, dict[str, int]]:
        return {unit: dict(stats) for unit, stats in sorted(self.totals.items())}


def task_fields(task) -> tuple[str, str, str, int, int]:
    """``(type, unit, op name, flops, bytes)`` of a task for the per-op table."""
    if isinstance(task, ComputeTask):
        return ("compute", task.unit, task.op.name or task.op.kind, task.op.flops,
                task.op.input_bytes + task.op.output_bytes)
    if isinstance(task, TransferTask):
        return "transfer", task.src, "transfer", 0, task.size_bytes
    if isinstance(task, HostTask):
        return "host", task.resource, "host", 0, 0
    return "other", "", "other", 0, 0


def append_rows(columns: dict[str, list], run: SegmentRun, index: int, label: str,
                offset: int) -> None:
    """One row per task of ``run`` (joins of collectives omitted), times shifted by ``offset``."""
    # The column lists are looked up once: this runs once per traced task.
    (segments, labels, ids, names, ops, kinds, units, starts, ends, durations, flops_col,
     bytes_col) = (columns[name] for name in OP_COLUMNS)
    for task, start, end in zip(run.graph.tasks, run.starts, run.ends):
        kind, unit, op, flops, size = task_fields(task)
        if kind == "host" and task.resource == "none":
            continue  # collective joins: zero-time bookkeeping
        start += offset
        end += offset
        segments.append(index)
        labels.append(label)
        ids.append(task.id)
        names.append(task.name)
        ops.append(op)
        kinds.append(kind)
        units.append(unit)
        starts.append(start)
        ends.append(end)
        durations.append(end - start)
        flops_col.append(flops)
        bytes_col.append(size)


def busy_by_op(run: SegmentRun) -> dict[str, int]:
    """Busy time of one segment summed over units per operator (``q_proj``, ``attn_qk``,
    ``transfer``…), layer prefixes dropped; cached on the run, so a memo hit costs
    nothing.  Overlapping tasks on different units both count."""
    cached = run.extra.get("busy_by_op")
    if cached is None and run.graph is None:
        return _NO_OPS
    if cached is None and "busy_by_name" in run.extra:  # summed by the executor already
        cached = {}
        for op, busy in run.extra.pop("busy_by_name").items():
            op = _without_layer(op)
            cached[op] = cached.get(op, 0) + busy
        run.extra["busy_by_op"] = cached
    if cached is None:
        # Summed per op name as the tasks carry it first, then per name without its layer
        # prefix: a segment has a few hundred distinct names and tens of thousands of
        # tasks.  Keys keep the order of their first task either way.
        by_name: dict[str, int] = {}
        get = by_name.get
        for task, start, end in zip(run.graph.tasks, run.starts, run.ends):
            kind = type(task)
            if kind is ComputeTask:
                op = task.op.name or task.op.kind
            elif kind is TransferTask:
                op = "transfer"
            else:
                kind, _, op, _, _ = task_fields(task)
                if kind == "host" and task.resource == "none":
                    continue
            by_name[op] = get(op, 0) + end - start
        cached = {}
        for op, busy in by_name.items():
            op = _without_layer(op)
            cached[op] = cached.get(op, 0) + busy
        run.extra["busy_by_op"] = cached
    return cached


@lru_cache(maxsize=4096)
def _without_layer(op: str) -> str:
    """``L3.q_proj`` -> ``q_proj``."""
    return _LAYER_PREFIX.sub("", op)


def _tile_free(graph: TaskGraph, run: SegmentRun) -> int:
    """When, in ``run`` of ``graph``, the first of a core's two tile buffers is free for
    what follows the graph: the end of the use of the tile before the last, latest over
    the cores that loaded at least two tiles (0 if none did)."""
    return max((run.ends[used[-2]] for used in graph.tile_slots.values() if len(used) >= 2),
               default=0)
