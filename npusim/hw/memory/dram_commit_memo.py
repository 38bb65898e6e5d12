"""Memoised DRAM controller commits (a mixin of :class:`ChannelController`).

Booking a request's commands is a pure function of the request's shape and of the
controller state it reads, relative to the current time; a bulk stream keeps meeting
the same few relative states, so a commit is recorded once and replayed.  Split from
``dram_controller.py`` so the controller's scheduling and this cache read on their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from npusim.hw.memory.dram_state import ChannelRequest

#: Replays of a record after which it is compiled (compiling costs ~40 plain replays).
COMPILE_AFTER = 64
#: Compiled state-key builders per (banks, bank groups, ranks) of a channel.
_KEY_BUILDERS: dict[tuple[int, int, int], Callable] = {}


class _Entry:
    """What the memo knows of one state key: the record of its commit (False: not
    replayable), the compiled replay once it has been replayed often, and its key."""

    __slots__ = ("key", "record", "replay", "replays")

    def __init__(self, key: tuple, record: tuple | bool):
        self.key = key
        self.record = record
        self.replay: Callable | None = None
        self.replays = 0


class CommitMemo:
    """``_commit`` with record / replay; the host class provides the bank, bank-group,
    rank and bus state, ``decisions``, ``transitions``, ``_prev``, ``_refreshed``,
    ``_past``, ``stats`` and ``_commit_batches``."""

    def _commit(self, req: ChannelRequest, now: int) -> tuple[int, int]:
        """Book ``req``'s commands (see :meth:`_commit_batches`), memoised.

        A commit is a pure function of the request's shape and of the state it reads
        (bank, bank-group, rank and bus times relative to ``now``, open rows relative to
        the request's rows); times further in the past than ``self._past`` are
        equivalent.  A bulk stream keeps meeting the same few relative states, so the
        controller records what a commit changed (relative to ``now``) and replays it
        when the state key recurs: the same numbers for a fraction of the work.  Off
        while the command log is on (the replay issues no commands).

        Transitions: the state a commit leaves, relative to its time, is a function of
        its key; the next commit's key is then a function of that, of the time and row
        offset since, of the next request's shape and direction, and of what refreshes
        did in between (they only close the rank's rows and set their ACT bound to the
        refresh's end).  So ``transitions`` maps (previous key's entry, those) to the
        next key's entry, and most commits build no key at all.
        """
        decisions = self.decisions
        if decisions is None or req.shape is None or self.command_log is not None:
            self._prev = None
            return self._commit_batches(req, now)
        row_base = req.row_base
        refreshed = self._refreshed
        if refreshed:
            self._refreshed = ()
        prev = self._prev
        entry = None
        if prev is not None:
            step = (prev[0], now - prev[1], row_base - prev[2], req.shape, req.is_write,
                    tuple([(rank, done - now) for rank, done in refreshed]) if refreshed else None)
            entry = self.transitions.get(step)
        if entry is None:
            build = self._key_builder
            if build is None:
                build = self._key_builder = key_builder(len(self.banks), len(self.bg_last_act),
                                                        len(self.ranks))
            key = build(self, req, now)
            entry = decisions.get(key)
            if entry is None:  # a new state: commit and record it
                before = self._snapshot()
                extra = dict(self.stats.extra)
                result = self._commit_batches(req, now)
                if len(decisions) >= 100_000:  # bound the memory of long, varied runs
                    decisions.clear()
                    self.transitions.clear()
                entry = decisions[key] = _Entry(key, self._record(before, extra, result, row_base, now))
                if prev is not None:
                    self.transitions[step] = entry
                self._prev = (entry, now, row_base)
                return result
            if prev is not None:
                transitions = self.transitions
                if len(transitions) >= 200_000:
                    transitions.clear()
                transitions[step] = entry
        self._prev = (entry, now, row_base)
        replay = entry.replay
        if replay is not None:
            return replay(self, now, row_base)
        record = entry.record
        if record is False:  # not replayable (see _record)
            return self._commit_batches(req, now)
        entry.replays += 1
        if entry.replays >= COMPILE_AFTER:
            entry.replay = compile_replay(record)
        return self._replay(record, row_base, now)

    _key_builder: Callable[[Any, ChannelRequest, int], tuple] | None = None

    def _state_key(self, req: ChannelRequest, now: int) -> tuple:
        """Everything a commit of ``req`` at ``now`` reads, relative to ``now`` (the
        reference for :func:`key_builder`, whose keys are this one flattened)."""
        past = self._past
        old = now - past
        never = -past  # any time at or before ``old``: equivalent for a commit
        row_base = req.row_base
        bus_free = self.bus_free
        key: list[Any] = [req.shape, req.is_write, self.bus_rank, self.bus_write,
                          bus_free - now if bus_free > old else never]
        key += [(row - row_base if (row := b.open_row) >= 0 else None,
                 v - now if (v := b.act_ok) > old else never,
                 v - now if (v := b.pre_ok) > old else never,
                 v - now if (v := b.col_ok) > old else never) for b in self.banks]
        key += [v - now if v > old else never for v in self.bg_last_act]
        key += [v - now if v > old else never for v in self.bg_col_ok]
        for state in self.ranks:
            key += (v - now if (v := state.last_act) > old else never,
                    v - now if (v := state.col_ok) > old else never,
                    v - now if (v := state.wtr_ok) > old else never, len(state.faw))
            key += [v - now if v > old else never for v in state.faw]
        return tuple(key)

    def _snapshot(self) -> tuple:
        return ([(b.open_row, b.act_ok, b.pre_ok, b.col_ok) for b in self.banks],
                list(self.bg_last_act), list(self.bg_col_ok),
                [(s.last_act, tuple(s.faw), s.col_ok, s.wtr_ok) for s in self.ranks])

    def _record(self, before: tuple, extra: dict[str, int], result: tuple[int, int],
                row_base: int, now: int) -> tuple | bool:
        """What the commit just made of ``before``, relative to ``now`` (``None``:
        unchanged).  A field the commit left alone is left alone on replay too: it may
        hold a past time the key did not tell apart.  False if a changed value lies that
        far in the past (never expected; then the state is not replayable)."""
        old = now - self._past
        after = self._snapshot()
        replayable = True

        def rel(a: int, b: int) -> int | None:
            nonlocal replayable
            if a == b:
                return None
            if b <= old:
                replayable = False
            return b - now

        banks = []
        for i, (a, b) in enumerate(zip(before[0], after[0])):
            if a != b:
                row = None if a[0] == b[0] else b[0] - row_base
                if b[0] < 0 and row is not None:
                    replayable = False  # a commit never closes a row
                banks.append((i, row, rel(a[1], b[1]), rel(a[2], b[2]), rel(a[3], b[3])))
        groups = [(i, rel(a, b), rel(c, d)) for i, (a, b, c, d)
                  in enumerate(zip(before[1], after[1], before[2], after[2])) if a != b or c != d]
        ranks = []
        for i, (a, b) in enumerate(zip(before[3], after[3])):
            if a != b:
                faw = None
                if a[1] != b[1]:
                    if any(v <= old for v in b[1]):
                        replayable = False
                    faw = tuple(v - now for v in b[1])
                ranks.append((i, rel(a[0], b[0]), faw, rel(a[2], b[2]), rel(a[3], b[3])))
        stats = tuple((name, value - extra.get(name, 0)) for name, value in self.stats.extra.items()
                      if name not in extra or value != extra[name])
        if not replayable:
            return False
        return (tuple(banks), tuple(groups), tuple(ranks), stats, result[0] - now,
                result[1] - now, self.bus_rank, self.bus_write, self.horizon - now)

    def _replay(self, record: tuple, row_base: int, now: int) -> tuple[int, int]:
        """Apply a recorded commit at ``now`` (see :meth:`_record`)."""
        banks, groups, ranks, stats, first, end, bus_rank, bus_write, horizon = record
        all_banks = self.banks
        for i, row, act_ok, pre_ok, col_ok in banks:
            bank = all_banks[i]
            if row is not None:
                bank.open_row = row + row_base
            if act_ok is not None:
                bank.act_ok = act_ok + now
            if pre_ok is not None:
                bank.pre_ok = pre_ok + now
            if col_ok is not None:
                bank.col_ok = col_ok + now
        bg_last_act, bg_col_ok = self.bg_last_act, self.bg_col_ok
        for i, last_act, col_ok in groups:
            if last_act is not None:
                bg_last_act[i] = last_act + now
            if col_ok is not None:
                bg_col_ok[i] = col_ok + now
        for i, last_act, faw, col_ok, wtr_ok in ranks:
            state = self.ranks[i]
            if last_act is not None:
                state.last_act = last_act + now
            if faw is not None:
                state.faw.clear()
                state.faw.extend(v + now for v in faw)
            if col_ok is not None:
                state.col_ok = col_ok + now
            if wtr_ok is not None:
                state.wtr_ok = wtr_ok + now
        add = self.stats.add
        for name, amount in stats:
            add(name, amount)
        self.bus_free, self.bus_rank, self.bus_write = end + now, bus_rank, bus_write
        self.horizon = horizon + now
        return first + now, end + now


# -- compiled fast paths ----------------------------------------------------------------
# A tlm LLM run makes ~180 k commits, nearly all replays; building the ~90-value key
# and applying a record with loops and branches per field was a fifth of the run.
# Both are generated once as straight-line code (no branch on what a record changed,
# no per-bank tuples) and compute exactly what ``_state_key`` (flattened) and
# ``_replay`` do; ``tests/hw/test_dram_memo.py`` checks both against them.

def key_builder(banks: int, groups: int, ranks: int) -> Callable[[Any, Any, int], tuple]:
    """``state_key(controller, req, now)``: :meth:`CommitMemo._state_key` flattened into
    one tuple (per bank its four values in line, per rank the FAW length then its
    times), for a controller with this many banks, bank groups and ranks."""
    found = _KEY_BUILDERS.get((banks, groups, ranks))
    if found is not None:
        return found
    rel = "(v - now if (v := {}) > old else never)"
    items = ["req.shape", "req.is_write", "self.bus_rank", "self.bus_write", rel.format("self.bus_free")]
    for i in range(banks):
        items += [f"(r - rb if (r := b{i}.open_row) >= 0 else None)",
                  rel.format(f"b{i}.act_ok"), rel.format(f"b{i}.pre_ok"), rel.format(f"b{i}.col_ok")]
    items += [rel.format(f"a{i}") for i in range(groups)]
    items += [rel.format(f"c{i}") for i in range(groups)]
    for i in range(ranks):
        items += [rel.format(f"r{i}.last_act"), rel.format(f"r{i}.col_ok"),
                  rel.format(f"r{i}.wtr_ok"), f"len(r{i}.faw)",
                  f"*[v - now if v > old else never for v in r{i}.faw]"]
    names = lambda prefix, n: "".join(f"{prefix}{i}, " for i in range(n))  # noqa: E731
    source = "\n    ".join([
        "def state_key(self, req, now):",
        "past = self._past", "old = now - past", "never = -past", "rb = req.row_base",
        f"{names('b', banks)}= self.banks", f"{names('a', groups)}= self.bg_last_act",
        f"{names('c', groups)}= self.bg_col_ok", f"{names('r', ranks)}= self.ranks",
        "return (" + ", ".join(items) + ",)"])
    found = _KEY_BUILDERS[(banks, groups, ranks)] = _compile(source, "state_key")
    return found


def compile_replay(record: tuple) -> Callable[[Any, int, int], tuple[int, int]]:
    """``replay(controller, now, row_base)``: :meth:`CommitMemo._replay` of ``record``
    as straight-line code (only the fields the commit changed, in the same order)."""
    banks, groups, ranks, stats, first, end, bus_rank, bus_write, horizon = record
    lines = ["def replay(self, now, row_base):"]
    if banks:
        lines.append("banks = self.banks")
    for i, row, act_ok, pre_ok, col_ok in banks:
        lines.append(f"b = banks[{i}]")
        if row is not None:
            lines.append(f"b.open_row = {row} + row_base")
        for name, value in (("act_ok", act_ok), ("pre_ok", pre_ok), ("col_ok", col_ok)):
            if value is not None:
                lines.append(f"b.{name} = {value} + now")
    if groups:
        lines.append("bg_last_act, bg_col_ok = self.bg_last_act, self.bg_col_ok")
    for i, last_act, col_ok in groups:
        if last_act is not None:
            lines.append(f"bg_last_act[{i}] = {last_act} + now")
        if col_ok is not None:
            lines.append(f"bg_col_ok[{i}] = {col_ok} + now")
    for i, last_act, faw, col_ok, wtr_ok in ranks:
        lines.append(f"state = self.ranks[{i}]")
        if last_act is not None:
            lines.append(f"state.last_act = {last_act} + now")
        if faw is not None:
            lines.append("state.faw.clear()")
            if faw:
                lines.append("state.faw.extend((" + "".join(f"{v} + now, " for v in faw) + "))")
        if col_ok is not None:
            lines.append(f"state.col_ok = {col_ok} + now")
        if wtr_ok is not None:
            lines.append(f"state.wtr_ok = {wtr_ok} + now")
    if stats:
        lines.append("extra = self.stats.extra")  # UnitStats.add, inlined
    for name, amount in stats:
        lines.append(f"extra[{name!r}] = extra.get({name!r}, 0) + {amount}")
    lines += [f"self.bus_free = end = {end} + now", f"self.bus_rank = {bus_rank!r}",
              f"self.bus_write = {bus_write!r}", f"self.horizon = {horizon} + now",
              f"return {first} + now, end"]
    return _compile("\n    ".join(lines), "replay")


def _compile(source: str, name: str) -> Callable:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<dram memo {name}>", "exec"), namespace)  # noqa: S102
    return namespace[name]
