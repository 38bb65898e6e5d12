"""A lowered workload: segments (task graphs) run back to back on an idle device.

Splitting a run into segments is what makes memoisation possible: a decoder layer, or a
repeated micro-benchmark step, is one segment whose timing is reused when it recurs.
Segments are separated by a barrier (every task of one ends before the next starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from npusim.mapping.taskgraph import TaskGraph


@dataclass
class Program:
    """Ordered segments plus workload-level facts for the metrics (tokens, FLOPs…)."""

    segments: list[TaskGraph] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    #: Optional: workload-level metrics (TTFT, TBT, ...) from every segment's end time (ps).
    finish: Callable[[list[int]], dict[str, Any]] | None = None

    def append(self, graph: TaskGraph, label: str = "") -> None:
        self.segments.append(graph)
        self.labels.append(label or graph.name)
