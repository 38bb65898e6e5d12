"""Memoisation of identical segments.

Serving-length runs execute the same sub-graph (a decoder layer at a given batch shape)
thousands of times.  A segment always starts on an idle device, so its timing depends
only on its structure, the device and the mode: the structural signature of the graph
(ops, shapes, placement, dependencies) is the key.  Hits and misses are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from npusim.executor.base import SegmentRun
from npusim.mapping.taskgraph import TaskGraph


@dataclass
class SegmentMemo:
    """Per-simulation cache (never global: two simulations never share one implicitly)."""

    enabled: bool = True
    hits: int = 0
    misses: int = 0
    _runs: dict[str, SegmentRun] = field(default_factory=dict)
    _signatures: dict[int, tuple[TaskGraph, str]] = field(default_factory=dict)

    def signature(self, graph: TaskGraph) -> str:
        cached = self._signatures.get(id(graph))
        if cached is not None and cached[0] is graph:
            return cached[1]
        signature = graph.signature()
        self._signatures[id(graph)] = (graph, signature)
        return signature

    def run(self, graph: TaskGraph, compute: Callable[[TaskGraph], SegmentRun]) -> tuple[SegmentRun, bool]:
        """The run of ``graph``, computed or reused; the flag says whether it was a hit."""
        if not self.enabled:
            self.misses += 1
            return compute(graph), False
        key = self.signature(graph)
        run = self._runs.get(key)
        if run is not None:
            self.hits += 1
            return run, True
        self.misses += 1
        run = compute(graph)
        self._runs[key] = run
        return run, False

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
