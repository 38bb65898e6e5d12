"""Device base: a set of named parts wired together, plus how transfers cross them.

A device answers three questions for the executors and nothing else:

* which compute unit an endpoint name means (``core3.sa``) and how long an op takes;
* how long a transfer takes uncontended (analytic) and how it moves through the parts
  with contention (tlm, a SimPy generator);
* what parts it has, for statistics.

Transfers are **pipelined through stages** (read the source memory, cross the network,
write the destination memory) in burst-group chunks; a DMA engine keeps up to
``max_outstanding`` chunks in flight, as a real DMA engine does.  The closed form for
the same pipeline is the bottleneck stage's total time plus the other stages' time for
one chunk (fill and drain), which is what the tlm run converges to without contention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator

from npusim.core.errors import MappingError
from npusim.hw.base import AccessPattern, Component, ComputeUnit, Interconnect, MemoryTarget
from npusim.hw.devices.dma import DmaWorker, stage_steps
from npusim.mapping.taskgraph import TransferTask


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage a transfer chunk passes: a memory read/write or a network hop sequence."""

    part: Component
    action: str  # "read" | "write" | "net"
    src_node: Any = None
    dst_node: Any = None

    def time_ps(self, size_bytes: int, pattern: AccessPattern) -> int:
        if self.action == "net":
            assert isinstance(self.part, Interconnect)
            return self.part.transfer_time_ps(self.src_node, self.dst_node, size_bytes)
        assert isinstance(self.part, MemoryTarget)
        return self.part.access_time_ps(size_bytes, self.action == "write", pattern)

    def hops(self) -> int | None:
        """Router-to-router links a network stage crosses (its route on a mesh, ring or
        line), or ``None`` where that is not known: a memory stage, or a network without
        routes (a point-to-point link).  Energy charges NoC bytes per hop crossed."""
        hops = getattr(self.part, "hops", None) if self.action == "net" else None
        return hops(self.src_node, self.dst_node) if callable(hops) else None


@dataclass(frozen=True, slots=True)
class TransferPlan:
    """How one transfer task moves: its stages, chunking and addressing."""

    stages: tuple[Stage, ...]
    chunk_bytes: int
    max_outstanding: int
    pattern: AccessPattern
    base_addr: int


class Device:
    """Base of every device: owns parts, resolves endpoint names, times tasks."""

    def __init__(self, name: str, config: Any):
        self.name = name
        self.config = config
        self.parts: dict[str, Component] = {}
        # Closed-form stage times are pure functions of (part, action, route, size,
        # pattern); LLM runs ask for the same ones thousands of times.
        self._stage_times: dict[tuple, int] = {}
        #: :meth:`analytic_transfer` results by (src, dst, bytes, pattern, chunk): the
        #: analytic executor reads it directly on its hot path.
        self.analytic_cache: dict[tuple, tuple] = {}
        #: Unit names and routes already checked by ``prepare`` (checked once per device).
        self.checked_names: set = set()
        self._part_names: dict[int, str] = {}
        #: :meth:`operand_port` answers by unit name.
        self._operand_ports: dict[str, tuple[str, Any] | None] = {}

    # -- construction helpers ------------------------------------------------------
    def add_part(self, name: str, part: Component) -> Component:
        if name in self.parts:
            raise MappingError(f"device {self.name!r} has two parts named {name!r}")
        self.parts[name] = part
        self._part_names[id(part)] = name
        return part

    def replace_part(self, name: str, part: Component) -> Component:
        """Swap an existing part before the run (e.g. different decode cores) and drop
        every cached timing, which may have used the old part."""
        if name not in self.parts:
            raise MappingError(f"device {self.name!r} has no part named {name!r}")
        del self._part_names[id(self.parts[name])]
        self.parts[name] = part
        self._part_names[id(part)] = name
        self._stage_times.clear()
        self.analytic_cache.clear()
        self._operand_ports.clear()
        part.validate()
        return part

    def validate(self) -> None:
        for part in self.parts.values():
            part.validate()

    # -- queries used by executors -------------------------------------------------
    def part(self, name: str) -> Component:
        try:
            return self.parts[name]
        except KeyError:
            raise MappingError(f"device {self.name!r} has no unit {name!r}; "
                               f"units look like {self.example_units()}") from None

    def example_units(self) -> str:
        names = list(self.parts)
        return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")

    def compute_unit(self, name: str) -> ComputeUnit:
        part = self.part(name)
        if not isinstance(part, ComputeUnit):
            raise MappingError(f"{name!r} is a {type(part).__name__}, not a compute unit; "
                               f"expected a compute unit such as {self.example_compute_units()}")
        return part

    def operand_port(self, unit: str) -> tuple[str, Any] | None:
        """``(name, memory)`` whose port compute unit ``unit`` shares with transfers
        for its operands (an SRAM with ``shared_port``), or ``None`` when its operands
        have a port of their own.  Executors hold that port for the op's operand bytes
        (:meth:`Sram.port_time_ps <npusim.hw.memory.sram.Sram.port_time_ps>`)."""
        cached = self._operand_ports.get(unit, False)
        if cached is False:
            cached = self._operand_ports[unit] = self._find_operand_port(unit)
        return cached

    def _find_operand_port(self, unit: str) -> tuple[str, Any] | None:
        """Device-specific lookup behind :meth:`operand_port` (default: none shared)."""
        return None

    def example_compute_units(self) -> str:
        names = list(self.compute_units())
        return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")

    def compute_units(self) -> Iterator[str]:
        return (name for name, part in self.parts.items() if isinstance(part, ComputeUnit))

    def plan_transfer(self, task: TransferTask, seed: int = 0) -> TransferPlan:
        """Stages, chunking and addresses for ``task`` (device-specific)."""
        raise NotImplementedError

    def canonical_cores(self, cores: set[int]) -> dict[int, int] | None:
        """A relabelling of ``cores`` under which timing is unchanged, or ``None``.

        Devices with a translation-symmetric topology (a mesh with dimension-order
        routing, a ring) return the shift that moves the set to the origin, so that the
        same layer placed on another group of cores is recognised as the same segment by
        the memo.  The default is no symmetry.
        """
        return None

    def reduce_unit(self, endpoint: str) -> str | None:
        """Compute unit that adds partial sums arriving at ``endpoint`` (None: free)."""
        return None

    def analytic_transfer(self, task: TransferTask, seed: int = 0
                          ) -> tuple[int, list[tuple[str, int]], list[tuple[Any, str, int, int, int]],
                                     tuple[tuple[str, ...], int, int] | None]:
        """Everything the analytic executor needs about a transfer, cached by shape.

        Returns ``(duration_ps, reservations, accounting, shared)``: ``reservations`` and
        ``shared`` as :meth:`transfer_reservations` gives them; ``accounting`` lists
        ``(part, action, busy_ps, bytes, transactions, hop_bytes)`` to add per stage,
        ``hop_bytes`` being bytes x router-to-router hops on a routed network and
        ``None`` elsewhere (:meth:`Stage.hops`).  The closed form ignores the task's base
        address, so transfers with the same endpoints, size, pattern and chunking share
        one entry (the route, hence the hop count, is computed once per entry).
        """
        key = (task.src, task.dst, task.size_bytes, task.pattern, task.chunk_bytes)
        cached = self.analytic_cache.get(key)
        if cached is None:
            if task.size_bytes <= 0:
                cached = (0, [], [], None)
            else:
                plan = self.plan_transfer(task, seed)
                chunks = -(-task.size_bytes // max(1, plan.chunk_bytes))
                accounting = [(stage.part, stage.action,
                               self.stage_busy_ps(stage, task.size_bytes, plan.pattern),
                               task.size_bytes, chunks, _hop_bytes(stage, task.size_bytes))
                              for stage in plan.stages]
                reservations, shared = self.transfer_reservations(task, seed, plan)
                cached = (self.transfer_time_ps(task, seed, plan), reservations, accounting,
                          shared)
            self.analytic_cache[key] = cached
        return cached

    def stage_time_ps(self, stage: Stage, size_bytes: int, pattern: AccessPattern) -> int:
        """Closed-form time of ``size_bytes`` through one stage (cached per device)."""
        key = (id(stage.part), stage.action, stage.src_node, stage.dst_node, size_bytes, pattern)
        cached = self._stage_times.get(key)
        if cached is None:
            cached = self._stage_times[key] = stage.time_ps(size_bytes, pattern)
        return cached

    def stage_busy_ps(self, stage: Stage, size_bytes: int, pattern: AccessPattern) -> int:
        """Busy time ``size_bytes`` through one stage adds to its part's counters: the
        stage's time, except on a network, whose busy time is its own
        (:meth:`Interconnect.busy_share_ps`: a mesh averages over its links)."""
        if stage.action != "net":
            return self.stage_time_ps(stage, size_bytes, pattern)
        key = (id(stage.part), "busy", stage.src_node, stage.dst_node, size_bytes)
        cached = self._stage_times.get(key)
        if cached is None:
            cached = self._stage_times[key] = stage.part.busy_share_ps(  # type: ignore[union-attr]
                stage.src_node, stage.dst_node, size_bytes)
        return cached

    def transfer_reservations(self, task: TransferTask, seed: int = 0,
                              plan: TransferPlan | None = None
                              ) -> tuple[list[tuple[str, int]],
                                         tuple[tuple[str, ...], int, int] | None]:
        """What a transfer occupies in the analytic model: ``(reservations, shared)``.

        ``reservations`` are ``(resource, busy_ps)``, each memory it reads or writes (and
        a point-to-point link), served first come, first served for that stage's time.
        ``shared`` is ``(resources, busy_ps, latency_ps)`` for a routed network (a mesh,
        ring or line NoC), or ``None``: its source's injection port, each link on its
        route and its destination's ejection port, which the transfer's packets cross at
        once and which share their bandwidth between the transfers crossing them (routers
        interleave their packets; the tlm level's injection port serves one flit a cycle
        whatever the destinations).  ``busy_ps`` is the flits' time, which is shared;
        ``latency_ps`` the head's path latency, paid once after it whatever the sharing
        (shared too, it made six 128-byte sends into one core 2.4x slower than tlm).  A
        transfer crosses at most one routed network."""
        if task.size_bytes <= 0:
            return [], None
        plan = plan or self.plan_transfer(task, seed)
        out: list[tuple[str, int]] = []
        shared = None
        for stage in plan.stages:
            busy = self.stage_time_ps(stage, task.size_bytes, plan.pattern)
            name = self._part_names.get(id(stage.part), stage.part.name)
            route = getattr(stage.part, "route", None) if stage.action == "net" else None
            if callable(route):
                node = getattr(stage.part, "node", None)  # endpoint -> node id
                src, dst = ((node(stage.src_node), node(stage.dst_node)) if callable(node)
                            else (stage.src_node, stage.dst_node))
                zero_load = getattr(stage.part, "zero_load_cycles", None)
                latency = (min(busy, (zero_load(src, dst, 1) - 1) * stage.part.period_ps)
                           if callable(zero_load) else 0)
                shared = ((f"{name}.inject({src})",
                           *(f"{name}.link{tuple(link)}" for link in route(src, dst)),
                           f"{name}.eject({dst})"), busy - latency, latency)
            else:
                out.append((name, busy))
        return out, shared

    def account_transfer(self, task: TransferTask, duration_ps: int, seed: int = 0,
                         plan: TransferPlan | None = None) -> None:
        """Count a transfer's bytes and transactions on its parts (analytic level; the
        tlm parts count their own as transactions pass through them)."""
        if task.size_bytes <= 0:
            return
        plan = plan or self.plan_transfer(task, seed)
        chunks = -(-task.size_bytes // max(1, plan.chunk_bytes))
        for stage in plan.stages:
            stats = stage.part.stats
            stats.busy_ps += self.stage_busy_ps(stage, task.size_bytes, plan.pattern)
            if stage.action == "write":
                stats.bytes_written += task.size_bytes
            else:
                stats.bytes_read += task.size_bytes
            stats.transactions += chunks
            hop_bytes = _hop_bytes(stage, task.size_bytes)
            if hop_bytes is not None:
                stats.add("hop_bytes", hop_bytes)

    def bind(self, env: Any) -> None:
        for part in self.parts.values():
            part.bind(env)

    def reset_stats(self) -> None:
        for part in self.parts.values():
            part.reset_stats()

    def unit_stats(self) -> dict[str, dict[str, int]]:
        """Counters of every part that did any work (idle parts are omitted: a 256-core
        chip running a 4-core segment reports 4 cores, not 256 rows of zeros).

        A routed network (a part with ``hops``) that counts per-link traffic also reports
        ``hop_bytes``, the bytes its links carried (bytes x router-to-router hops), the
        counter the analytic level derives from routes: both fidelities report it."""
        stats = {}
        for name, part in self.parts.items():
            values = part.stats.as_dict()
            if any(values.values()):
                stats[name] = values
            extra = getattr(part, "link_stats", None)
            if callable(extra):
                links = extra()
                for link, counters in links.items():
                    if any(counters.values()):
                        stats[f"{name}.link{link}"] = dict(counters)
                if (name in stats and callable(getattr(part, "hops", None))
                        and "hop_bytes" not in values):  # not already counted analytically
                    values["hop_bytes"] = sum(c.get("bytes", 0) for c in links.values())
        return stats

    # -- transfer timing -----------------------------------------------------------
    def transfer_time_ps(self, task: TransferTask, seed: int = 0,
                         plan: TransferPlan | None = None) -> int:
        """Closed-form, uncontended time of ``task``: the bottleneck stage + fill/drain,
        or, when the DMA keeps fewer chunks in flight than the transfer has stages, the
        rounds of ``max_outstanding`` chunks each passing every stage in turn."""
        if task.size_bytes <= 0:
            return 0
        plan = plan or self.plan_transfer(task, seed)
        chunk = min(plan.chunk_bytes, task.size_bytes)
        totals = [self.stage_time_ps(stage, task.size_bytes, plan.pattern) for stage in plan.stages]
        bottleneck = max(range(len(totals)), key=totals.__getitem__)
        fill = sum(self.stage_time_ps(stage, chunk, plan.pattern)
                   for i, stage in enumerate(plan.stages) if i != bottleneck)
        pipelined = totals[bottleneck] + fill
        if plan.max_outstanding >= len(plan.stages):
            # W chunks in flight, each taking the stages in turn, finish W chunks per
            # sum-of-stages time, never fewer than one per bottleneck-stage time when
            # W >= the number of stages: the bottleneck alone bounds the transfer.
            return pipelined
        return max(pipelined, self._window_bound_ps(task.size_bytes, plan))

    def _window_bound_ps(self, size_bytes: int, plan: TransferPlan) -> int:
        """Time of ``size_bytes`` when at most ``max_outstanding`` chunks are in flight
        and each passes every stage before its worker takes the next: rounds of that many
        chunks, each round as long as one chunk's trip (the last round holds the
        transfer's partial chunk alone when the chunks leave one over)."""
        chunk = max(1, plan.chunk_bytes)
        chunks, remainder = -(-size_bytes // chunk), size_bytes % chunk

        def trip(size: int) -> int:
            return sum(self.stage_time_ps(stage, size, plan.pattern) for stage in plan.stages)

        rounds = -(-chunks // plan.max_outstanding)
        full = trip(min(chunk, size_bytes))
        last_alone = (chunks - 1) % plan.max_outstanding == 0
        return (rounds - 1) * full + (trip(remainder) if remainder and last_alone else full)

    def transfer_process(self, env: Any, task: TransferTask, seed: int = 0,
                         on_chunk: Callable[[int], None] | None = None) -> Generator:
        """SimPy process body moving ``task`` chunk by chunk with contention (tlm)."""
        if task.size_bytes <= 0:
            return
        plan = self.plan_transfer(task, seed)
        chunks = _chunk_offsets(task.size_bytes, plan)
        cursor = iter(chunks)
        # Each worker takes the next chunk through every stage (devices/dma.py: an
        # event-driven worker with the schedule of a process running
        # ``for stage: yield from part.transact(...)``).
        steps = stage_steps(plan.stages)
        workers = [DmaWorker(env, cursor, steps, task.name, on_chunk)
                   for _ in range(min(plan.max_outstanding, len(chunks)))]
        yield env.all_of(workers)


def _hop_bytes(stage: Stage, size_bytes: int) -> int | None:
    """Bytes x router-to-router hops of ``size_bytes`` through ``stage`` (``None`` for a
    stage whose hop count is unknown, see :meth:`Stage.hops`)."""
    hops = stage.hops()
    return None if hops is None else size_bytes * hops


def _chunk_offsets(size_bytes: int, plan: TransferPlan) -> list[tuple[int, int, int]]:
    """(offset, size, address) of every chunk; random patterns scatter addresses with a
    deterministic hash so that the same task and seed always touch the same rows."""
    chunk = max(1, plan.chunk_bytes)
    out = []
    span = max(chunk, plan.pattern.range_bytes)
    for index, offset in enumerate(range(0, size_bytes, chunk)):
        size = min(chunk, size_bytes - offset)
        if plan.pattern.kind == "random":
            slot = (_mix(plan.base_addr + index) % max(1, span // chunk))
            addr = slot * chunk
        else:
            addr = plan.base_addr + offset
        out.append((offset, size, addr))
    return out


def _mix(value: int) -> int:
    """SplitMix64 finaliser: a cheap deterministic scatter (no global RNG state)."""
    value = (value + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return value ^ (value >> 31)
