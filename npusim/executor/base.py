"""What an executor returns for one task graph (a *segment*), shared by both fidelities."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from npusim.hw.devices.base import Device
from npusim.mapping.collectives import expand_collectives
from npusim.mapping.taskgraph import (CollectiveTask, ComputeTask, HostTask, TaskGraph,
                                      TransferTask)


@dataclass
class SegmentRun:
    """Timing of one segment, relative to its own start (picoseconds).

    ``starts``/``ends`` are indexed by task id of ``graph`` (the expanded graph);
    ``unit_stats`` are the parts' counters accumulated while the segment ran.
    """

    graph: TaskGraph
    starts: list[int]
    ends: list[int]
    unit_stats: dict[str, dict[str, int]]
    events: int = 0
    transactions: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    @functools.cached_property
    def makespan_ps(self) -> int:
        """End of the last task (asked several times per segment by the serving engine)."""
        return max(self.ends, default=0)


def prepare(graph: TaskGraph, device: Device) -> TaskGraph:
    """Expand collectives over the device topology; check every unit name eagerly."""
    # A graph without collectives is its own expansion; the kinds present are found
    # without a Python-level pass over the tasks.
    kinds = set(map(type, graph.tasks))
    expanded = (expand_collectives(graph, device.reduce_unit)
                if any(issubclass(kind, CollectiveTask) for kind in kinds) else graph)
    # Names are checked once per device: long runs build thousands of graphs over the
    # same few hundred units and routes.
    checked = device.checked_names
    for task in expanded.tasks:
        if isinstance(task, ComputeTask):
            if task.unit not in checked:
                device.compute_unit(task.unit)
                checked.add(task.unit)
        elif isinstance(task, TransferTask):
            route = (task.src, task.dst, task.pattern, task.chunk_bytes)
            if route not in checked:
                device.plan_transfer(task)
                checked.add(route)
    return expanded


#: Counters of a compute unit's operand traffic with its core's scratchpad (bytes): the
#: systolic array's fold model, the vector unit's streamed elements.  Kept apart from
#: ``bytes_read``/``bytes_written``, which are transfers (DMA) on the memory parts.
SRAM_OPERAND_READ = "sram_operand_bytes_read"
SRAM_OPERAND_WRITTEN = "sram_operand_bytes_written"
#: On a shared scratchpad port (``hw.core.sram.shared_port``): a compute unit's time held
#: past its compute time, waiting for its operands behind transfers (its ``busy_ps``
#: stays the compute time), and a scratchpad's port time taken by operands (its
#: ``busy_ps`` stays the transfers').  Counted only when nonzero.
OPERAND_STALL = "operand_stall_ps"
SRAM_OPERAND_PORT = "operand_port_ps"


def operand_sram_bytes(unit, op) -> tuple[int, int]:
    """``(bytes read, bytes written)`` of ``op``'s operands between ``unit`` and its
    scratchpad: the unit's ``operand_bytes(op)`` if it models them, else ``(0, 0)``
    (a roofline unit has no dataflow to derive them from)."""
    counts = getattr(unit, "operand_bytes", None)
    return counts(op) if counts is not None else (0, 0)


def operand_port_busy(device: Device, unit: str, op) -> tuple[str, Any, int] | None:
    """``(port name, memory, busy ps)`` when ``unit`` shares its scratchpad's port with
    transfers (:meth:`Device.operand_port`) and ``op`` moves operands through it, else
    ``None``: the executor holds that port for ``busy`` ps from the op's start, so
    transfers queue behind the op's operands and the op behind earlier transfers."""
    port = device.operand_port(unit)
    if port is None:
        return None
    read, written = operand_sram_bytes(device.parts[unit], op)
    busy = port[1].port_time_ps(read + written)
    return (port[0], port[1], busy) if busy else None


def account_compute(device: Device, task: ComputeTask, duration_ps: int,
                    port: tuple[str, Any, int] | None = None, stall_ps: int = 0) -> None:
    """Executors, not units, count compute work: units only give times (pure formulas).
    Operand traffic goes into the unit's ``extra`` counters only when nonzero, as the
    analytic level's :func:`~npusim.executor.analytic._unit_stats` adds them; so do, on
    a shared port (``port`` from :func:`operand_port_busy`), the unit's operand stall and
    the port time its operands took on the scratchpad."""
    part = device.parts[task.unit]
    stats = part.stats
    stats.busy_ps += duration_ps
    stats.ops += 1
    stats.flops += task.op.flops
    read, written = operand_sram_bytes(part, task.op)
    if read:
        stats.add(SRAM_OPERAND_READ, read)
    if written:
        stats.add(SRAM_OPERAND_WRITTEN, written)
    if stall_ps:
        stats.add(OPERAND_STALL, stall_ps)
    if port is not None:
        port[1].stats.add(SRAM_OPERAND_PORT, port[2])


def host_resource(task: HostTask) -> str | None:
    """The serialising resource of a host task (``none`` means a pure join)."""
    return None if task.resource == "none" else task.resource
