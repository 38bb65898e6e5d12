"""A lowered workload: segments (task graphs) run back to back on an idle device.

Splitting a run into segments is what makes memoisation possible: a decoder layer, or a
repeated micro-benchmark step, is one segment whose timing is reused when it recurs.
Segments are separated by a barrier (every task of one ends before the next starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from npusim.mapping.taskgraph import TaskGraph


@dataclass(frozen=True)
class LazySegment:
    """A segment built only if its timing is not known yet.

    ``key`` identifies the graph ``build()`` returns up to a shift of the cores it uses
    (for a decoder stage: the iteration's shapes and the stage's layer count); ``cores``
    lists those cores in a fixed order, so the executor can tell two shifted copies
    apart from two different placements.  Long runs repeat a few segment shapes on many
    core groups thousands of times; lazy segments make a repeat cost a lookup, not a
    graph build.
    """

    key: Hashable
    cores: tuple[int, ...]
    build: Callable[[], TaskGraph]
    name: str = ""
    #: The key alone determines the graph (up to the shift): a miss runs the graph
    #: without also computing its structural signature.
    exact_key: bool = False
    #: The first ``lead_cores`` of ``cores`` belong to a neighbour (the previous pipeline
    #: stage, which sends the activations) whose placement the key describes itself,
    #: by hop distances: they are not part of the placement key.
    lead_cores: int = 0
    #: A part of a :class:`ChainedSegment`: a miss also measures its prefetch profile.
    prefetch: bool = False


@dataclass(frozen=True)
class BlendedSegment:
    """A segment timed as a weighted mean of segments at nearby shapes (interpolation).

    ``parts`` are ``(weight, segment)`` pairs on the same cores; the blended makespan,
    per-unit counters and per-operator busy times are ``sum(weight * value) /
    denominator`` rounded to integers, so the blend is deterministic.  ``key`` identifies
    the blend (the shape it stands for and where it runs).  A blend has no task graph of
    its own: traced runs record its segment row but no per-task rows.
    """

    key: Hashable
    parts: tuple[tuple[int, LazySegment], ...]
    denominator: int
    name: str = ""


@dataclass(frozen=True)
class ChainedSegment:
    """A segment timed as its parts run one after another: a pipeline stage cut at its
    attention blocks (``segment_granularity: part``), so the dense parts between them
    are shared by every batch with the same token count.

    Each part's computation starts when the part before it ends, while its prefetchable
    loads (weight tiles and KV cache from off-chip memory, which wait for nothing in the
    stage graph) start as soon as the loads of the parts before it are done: the parts
    are lazy segments with ``prefetch=True``, whose misses also measure how long those
    loads take and how long the part runs once they are done (see
    :func:`~npusim.executor.blend.chain_runs`).  Counters are the parts' own.  ``key``
    identifies the chain and where it runs; it has no task graph of its own.
    """

    key: Hashable
    parts: tuple[LazySegment | BlendedSegment, ...]
    name: str = ""


@dataclass
class Program:
    """Ordered segments plus workload-level facts for the metrics (tokens, FLOPs…)."""

    segments: list[TaskGraph | LazySegment] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    #: Optional: workload-level metrics (TTFT, TBT, ...) from every segment's end time (ps).
    finish: Callable[[list[int]], dict[str, Any]] | None = None

    def append(self, graph: TaskGraph | LazySegment, label: str = "") -> None:
        self.segments.append(graph)
        self.labels.append(label or graph.name)


@dataclass
class DriveOutcome:
    """What a workload driver (one that schedules segments itself) hands back."""

    latency_ps: int
    segments: int
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    #: Extra tables written as ``<name>.csv`` next to metrics.json (rows as dicts, or
    #: columns as lists, which keep an empty table's header).
    tables: dict[str, list[dict[str, Any]] | dict[str, list]] = field(default_factory=dict)
