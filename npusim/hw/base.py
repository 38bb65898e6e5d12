"""Base classes shared by every hardware part.

A part is built in phases, as in gem5 and Ramulator 2:

1. **construct** – ``Part(name, config=...)`` derives every fixed quantity from the
   typed config (periods in ps, bytes per cycle…) and does no simulation work;
2. **connect** – a device wires parts together through named endpoints;
3. **validate** – :meth:`Component.validate` checks cross-part consistency eagerly;
4. **run** – for the ``tlm`` fidelity :meth:`Component.bind` attaches the part to a
   SimPy environment; for ``analytic`` the closed-form methods are called directly.

Each part offers both fidelities behind one interface: a closed-form method giving the
uncontended time (``*_time_ps``) and a SimPy generator that models contention (queues,
banks, link arbitration).  The analytic form is the test oracle: on an uncontended
workload both must agree closely.

Memory traffic uses four-phase transactions (BEGIN_REQ, END_REQ, BEGIN_RESP, END_RESP)
as in DRAMSys / SystemC TLM-2.0 approximately-timed: the initiator offers a request
(BEGIN_REQ); the target accepts it into its queue (END_REQ, delayed while the queue is
full: that is backpressure); the target starts returning data (BEGIN_RESP); the
initiator has taken all of it (END_RESP).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Generator

if TYPE_CHECKING:  # SimPy is imported lazily by the tlm executor
    import simpy


class Phase(IntEnum):
    """The four phases of a memory transaction."""

    BEGIN_REQ = 0
    END_REQ = 1
    BEGIN_RESP = 2
    END_RESP = 3


@dataclass(slots=True)
class MemoryTransaction:
    """A burst group: one tile-sized DMA request to a memory target.

    The target splits it into bursts internally (analytically), so one transaction
    costs a handful of events however many bursts it holds.  The four phase times
    (picoseconds, -1 until reached) are filled in by the target as the request moves.
    """

    addr: int
    size_bytes: int
    is_write: bool = False
    initiator: str = ""
    begin_req_ps: int = -1
    end_req_ps: int = -1
    begin_resp_ps: int = -1
    end_resp_ps: int = -1

    @property
    def latency_ps(self) -> int:
        """Time from BEGIN_REQ to END_RESP."""
        return self.end_resp_ps - self.begin_req_ps


@dataclass(frozen=True, slots=True)
class AccessPattern:
    """How a DMA walks memory, for the closed-form (analytic) estimate.

    ``sequential`` streams consecutive addresses; ``random`` issues independent
    ``chunk_bytes`` requests at random addresses inside ``range_bytes``.
    """

    kind: str = "sequential"  # "sequential" | "random"
    chunk_bytes: int = 4096
    range_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        if self.kind not in ("sequential", "random"):
            raise ValueError(f"access pattern must be 'sequential' or 'random', got {self.kind!r}")


SEQUENTIAL = AccessPattern()


@dataclass(slots=True)
class UnitStats:
    """Counters every part keeps; the collectors turn them into per-unit metrics."""

    busy_ps: int = 0
    ops: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    transactions: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, amount: int = 1) -> None:
        self.extra[key] = self.extra.get(key, 0) + amount

    def as_dict(self) -> dict[str, int]:
        out = {"busy_ps": self.busy_ps, "ops": self.ops, "flops": self.flops,
               "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
               "transactions": self.transactions}
        out.update(sorted(self.extra.items()))
        return out


class Component:
    """Base of every hardware part (see the module docstring for the build phases)."""

    #: Category name the part is registered under ("memory", "compute", "interconnect").
    category: str = ""

    def __init__(self, name: str, config: Any):
        self.name = name
        self.config = config
        self.stats = UnitStats()
        self.env: simpy.Environment | None = None

    def validate(self) -> None:
        """Check cross-part consistency after wiring; raise ``MappingError`` with a clear message."""

    def bind(self, env: simpy.Environment) -> None:
        """Attach to a SimPy environment for the tlm fidelity (create resources, processes)."""
        self.env = env

    def reset_stats(self) -> None:
        self.stats = UnitStats()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class MemoryTarget(Component):
    """A memory level: DRAM channel or system, SRAM scratchpad, flash."""

    category = "memory"
    #: On the chip (a scratchpad): data leaving it was produced on the chip.  A load out
    #: of an off-chip memory (weights, KV cache) that waits for nothing else can instead
    #: be issued ahead of the computation that needs it (prefetch).
    on_chip = False
    #: Peak data bandwidth in bytes/s (the denominator of bandwidth utilisation, MBU);
    #: ``None`` for a target without one.
    peak_bandwidth_bps: int | None = None

    def access_time_ps(self, size_bytes: int, is_write: bool = False,
                       pattern: AccessPattern = SEQUENTIAL) -> int:
        """Closed-form, uncontended time to move ``size_bytes`` with ``pattern``."""
        raise NotImplementedError

    def transact(self, txn: MemoryTransaction) -> Generator[Any, Any, MemoryTransaction]:
        """SimPy process body (tlm): run ``txn`` through the four phases, return it at END_RESP."""
        raise NotImplementedError


class ComputeUnit(Component):
    """A compute engine whose time for an op is a shape-aware formula."""

    category = "compute"
    #: Peak dense FLOP/s (the denominator of FLOPs utilisation, MFU); ``None`` for a unit
    #: whose work is not rated in FLOPs (a vector unit's ALU operations).
    peak_flops_per_s: float | None = None

    def op_time_ps(self, op: Any) -> int:
        """Time to execute ``op`` (an :class:`npusim.mapping.taskgraph.Op`) on an idle unit."""
        raise NotImplementedError

    def supports(self, op: Any) -> bool:
        """Whether this unit can execute ``op``'s kind."""
        return True


class Interconnect(Component):
    """Something that moves bytes between endpoints: a NoC or a point-to-point link."""

    category = "interconnect"

    def transfer_time_ps(self, src: str, dst: str, size_bytes: int) -> int:
        """Closed-form, uncontended time for ``size_bytes`` from ``src`` to ``dst``."""
        raise NotImplementedError

    def transfer(self, src: str, dst: str, size_bytes: int) -> Generator[Any, Any, None]:
        """SimPy process body (tlm) moving ``size_bytes`` with contention."""
        raise NotImplementedError

    def busy_share_ps(self, src: str, dst: str, size_bytes: int) -> int:
        """Busy time a transfer adds to this part's counters (both fidelities), so that
        busy / latency is the part's utilisation: for a single channel, the transfer's
        uncontended time."""
        return self.transfer_time_ps(src, dst, size_bytes)
