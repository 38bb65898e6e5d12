"""Memoisation of identical segments.

Serving-length runs execute the same sub-graph (a decoder layer at a given batch shape)
thousands of times.  A segment always starts on an idle device, so its timing depends
only on its structure, the device and the mode: the structural signature of the graph
(ops, shapes, placement, dependencies) is the key.  When the device declares a
symmetry (:meth:`Device.canonical_cores`: a layer on cores 4-7 of a mesh times exactly
like the same layer on cores 0-3), placements are first moved to a canonical position,
so pipeline stages on different core groups share one entry; the reused run's per-unit
counters are renamed back onto the cores the segment actually used.  A lazy segment may
also name *lead cores* (the previous pipeline stage that sends it activations): its key
then describes them by hop distance instead of position, so a stage fed from the left or
from below at the same distance shares one entry too.  Hits and misses are reported.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable

from npusim.executor.base import SegmentRun
from npusim.mapping.taskgraph import TaskGraph

_CORE = re.compile(r"core(\d+)")
_LINK = re.compile(r"link\((\d+), (\d+)\)")
Canonicaliser = Callable[[set[int]], "dict[int, int] | None"]


def graph_cores(graph: TaskGraph) -> set[int]:
    """Core indices named anywhere in ``graph`` (units, endpoints, collective groups)."""
    cores: set[int] = set()
    for task in graph.tasks:
        cores.update(int(found) for found in _CORE.findall(repr(task.signature())))
    return cores


def relabel_units(stats: dict[str, dict[str, int]], mapping: dict[int, int]) -> dict[str, dict[str, int]]:
    """``stats`` with every ``coreN`` and ``link(a, b)`` renamed through ``mapping``."""
    if all(old == new for old, new in mapping.items()):
        return stats

    def rename(name: str) -> str:
        name = _CORE.sub(lambda m: f"core{mapping.get(int(m[1]), int(m[1]))}", name)
        return _LINK.sub(lambda m: f"link({mapping.get(int(m[1]), int(m[1]))}, "
                                   f"{mapping.get(int(m[2]), int(m[2]))})", name)

    return {rename(unit): values for unit, values in stats.items()}


@dataclass
class _Entry:
    run: SegmentRun
    to_canonical: dict[int, int]
    cores: tuple[int, ...] = ()  # lazy entries: the cores the stored run used, in order


@dataclass
class SegmentMemo:
    """Per-simulation cache (never global: two simulations never share one implicitly)."""

    enabled: bool = True
    canonical: Canonicaliser | None = None
    hits: int = 0
    misses: int = 0
    #: Interpolated runs computed (each from memoised runs at grid shapes).
    blends: int = 0
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _lazy: dict[tuple, _Entry] = field(default_factory=dict)
    _canonical_of: dict[tuple, tuple[dict[int, int], tuple[int, ...]]] = field(
        default_factory=dict)  # (cores, lead) -> (relabelling, canonical own cores)
    _relabelled: dict[tuple, SegmentRun] = field(default_factory=dict)
    _keys: dict[int, tuple[TaskGraph, str, dict[int, int]]] = field(default_factory=dict)

    def key(self, graph: TaskGraph) -> tuple[str, dict[int, int]]:
        """Structural key of ``graph`` and the core relabelling that produced it."""
        cached = self._keys.get(id(graph))
        if cached is not None and cached[0] is graph:
            return cached[1], cached[2]
        mapping: dict[int, int] = {}
        if self.canonical is not None:
            mapping = self.canonical(graph_cores(graph)) or {}
        if mapping and any(old != new for old, new in mapping.items()):
            digest = hashlib.blake2b(digest_size=16)
            rename = lambda m: f"core{mapping.get(int(m[1]), int(m[1]))}"  # noqa: E731
            for task in graph.tasks:
                digest.update(_CORE.sub(rename, repr(task.signature())).encode())
            signature = digest.hexdigest()
        else:
            signature = graph.signature()
        self._keys[id(graph)] = (graph, signature, mapping)
        return signature, mapping

    def run(self, graph: TaskGraph, compute: Callable[[TaskGraph], SegmentRun]) -> tuple[SegmentRun, bool]:
        """The run of ``graph``, computed or reused; the flag says whether it was a hit.

        A reused run carries ``graph`` itself and per-unit counters renamed onto the
        cores ``graph`` uses, so callers never see another placement's names.
        """
        if not self.enabled:
            self.misses += 1
            return compute(graph), False
        key, mapping = self.key(graph)
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            run = compute(graph)
            self._entries[key] = _Entry(run, mapping)
            return run, False
        self.hits += 1
        if entry.run.graph is graph:
            return entry.run, True
        from_canonical = {new: old for old, new in mapping.items()}
        original_to_here = {old: from_canonical.get(canon, canon)
                            for old, canon in entry.to_canonical.items()}
        run = entry.run
        return SegmentRun(graph, run.starts, run.ends,
                          relabel_units(run.unit_stats, original_to_here),
                          run.events, run.transactions, run.extra), True

    def lazy_run(self, key: tuple, cores: tuple[int, ...], compute: Callable[[], SegmentRun],
                 lead_cores: int = 0) -> tuple[SegmentRun, bool]:
        """The run of a lazy segment (``key`` up to a shift of ``cores``).

        The first ``lead_cores`` of ``cores`` belong to a neighbour whose placement
        ``key`` describes itself (a previous pipeline stage, by its hop distances): they
        are left out of the placement part of the key.  On a hit nothing is built: the
        stored run's counters are renamed onto ``cores`` position by position and its
        ``graph`` is ``None`` (callers build the graph only if they need task names).
        ``compute`` builds, prepares and runs the segment on a miss.
        """
        placed = self._canonical_of.get((cores, lead_cores))
        if placed is None:
            own = cores[lead_cores:]
            mapping = (self.canonical(set(own)) if self.canonical else None) or {}
            placed = self._canonical_of[(cores, lead_cores)] = (
                mapping, tuple(mapping.get(core, core) for core in own))
        mapping, where = placed
        entry = self._lazy.get((key, where)) if self.enabled else None
        if entry is None:
            run = compute()
            if self.enabled:
                self._lazy[(key, where)] = _Entry(run, mapping, cores)
            return run, False
        self.hits += 1
        run = entry.run
        # The relabelled run is cached per (stored run, placement): a pipeline stage
        # recurs on the same cores thousands of times in a serving run.
        relabel_key = (id(entry), cores)
        placed_run = self._relabelled.get(relabel_key)
        if placed_run is None:
            placed_run = self._relabelled[relabel_key] = SegmentRun(
                None, run.starts, run.ends,  # type: ignore[arg-type]
                relabel_units(run.unit_stats, dict(zip(entry.cores, cores))), run.events,
                run.transactions, run.extra)
        return placed_run, True

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
