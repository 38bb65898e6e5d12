"""A DMA engine's chunk worker for the tlm level, driven by event callbacks.

:meth:`Device.transfer_process` keeps up to ``max_outstanding`` chunks in flight with
one worker each; a worker takes the next chunk, passes it through the transfer's stages
(read the source memory, cross the network, write the destination memory) one after the
other, and ends when no chunk is left.  An LLM run moves hundreds of thousands of
chunks, so the worker is not a SimPy process around nested generators
(``part.transact(txn)``, ``noc.transfer(...)``) but an event whose callback books the
next stage directly: parts that offer a plain booking call (an SRAM's
``reserve``, a NoC's ``start_transfer``) are used without a generator and without a
:class:`MemoryTransaction`; any other part's ``transact`` generator is driven here the
way :class:`simpy.Process` would drive it.

The schedule is exactly that of the process version (``tests/hw/test_dma_worker.py``):
the worker starts on an URGENT initialisation event, waits on the same events in the
same order, and succeeds (scheduled now, NORMAL) when its last chunk is done, as a
process does when its generator returns; so event counts and ties are unchanged.
"""

from __future__ import annotations

from heapq import heappush
from typing import Any, Callable, Iterator

from simpy.events import NORMAL, URGENT, Event

from npusim.hw.base import MemoryTransaction

_new_event = object.__new__


class _Done:
    """A stage's completion (what the event loops read of a triggered Event)."""

    __slots__ = ("callbacks",)
    _ok = True
    _value = None

#: Stage kinds of a worker step.
_GENERIC, _RESERVE, _NET = 0, 1, 2


def stage_steps(stages: tuple) -> tuple[tuple, ...]:
    """Per stage ``(kind, bound call or part, src, dst, is_write)`` for :class:`DmaWorker`."""
    steps = []
    for stage in stages:
        part = stage.part
        if stage.action == "net":
            start = getattr(part, "start_transfer", None)
            if start is not None:
                steps.append((_NET, start, stage.src_node, stage.dst_node, False))
            else:
                steps.append((_GENERIC, part, stage.src_node, stage.dst_node, False))
            continue
        is_write = stage.action == "write"
        reserve = getattr(part, "reserve", None)
        if reserve is not None:
            steps.append((_RESERVE, reserve, None, None, is_write))
        else:
            steps.append((_GENERIC, part, None, None, is_write))
    return tuple(steps)


class DmaWorker(Event):
    """One in-flight chunk slot of a DMA (see the module docstring); succeeds when the
    shared ``cursor`` of ``(offset, size, addr)`` chunks is exhausted."""

    def __init__(self, env: Any, cursor: Iterator[tuple[int, int, int]], steps: tuple,
                 initiator: str, on_chunk: Callable[[int], None] | None = None):
        self.env = env
        self.callbacks: list = []
        self._cursor = cursor
        self._steps = steps
        self._initiator = initiator
        self._on_chunk = on_chunk
        self._index = len(steps)  # no chunk yet: take one on the first step
        self._size = 0
        self._addr = 0
        self._gen: Any = None  # a generic stage's transact/transfer generator in progress
        # What simpy.Process does on creation: start on an URGENT event now.
        init = _new_event(Event)
        init.env = env
        init.callbacks = [self._step]
        init._value = None
        init._ok = True
        env.schedule(init, URGENT)

    def _step(self, event: Any) -> None:
        gen = self._gen
        if gen is not None:  # a generic stage waits on its generator's events
            if self._drive(gen, event):
                return
            self._gen = None
        steps = self._steps
        index = self._index
        env = self.env
        while True:
            if index == len(steps):
                if self._size and self._on_chunk is not None:
                    self._on_chunk(self._size)
                chunk = next(self._cursor, None)
                if chunk is None:
                    # A finished process: succeed now with no value.
                    self._ok = True
                    self._value = None
                    env.schedule(self)
                    return
                _offset, self._size, self._addr = chunk
                index = 0
            kind, call, src, dst, is_write = steps[index]
            index += 1
            if kind == _RESERVE:
                # env.timeout(end - now) as a small slotted event, pushed as
                # env.schedule would (same priority, same place in the queue).
                done = _new_event(_Done)
                done.callbacks = [self._step]
                heappush(env._queue, (call(self._addr, self._size, is_write, env._now),
                                      NORMAL, next(env._eid), done))
                self._index = index
                return
            if kind == _NET:
                done = call(src, dst, self._size)
                if done is None:  # nothing to move
                    continue
                done.callbacks.append(self._step)
                self._index = index
                return
            if kind == _GENERIC:
                if src is not None or dst is not None:
                    gen = call.transfer(src, dst, self._size)
                else:
                    gen = call.transact(MemoryTransaction(self._addr, self._size, is_write,
                                                          self._initiator))
                self._index = index
                if self._drive(gen, None):
                    self._gen = gen
                    return

    def _drive(self, gen: Any, event: Any) -> bool:
        """Advance ``gen`` as simpy.Process would (sending ``event``'s value, or
        starting it if None); True if it now waits on an event, False if it returned."""
        while True:
            try:
                if event is None:
                    event = next(gen)
                elif event._ok:
                    event = gen.send(event._value)
                else:
                    event._defused = True
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    event = gen.throw(exc)
            except StopIteration:
                return False
            if event.callbacks is not None:
                event.callbacks.append(self._step)
                return True
