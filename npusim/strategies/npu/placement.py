"""Core placement: which cores form each tensor-parallel group, and in what ring order.

The cores are divided into pipeline stages; each stage is one TP group of ``tp`` cores
holding one or more layers (NpuSim §4.1).  A placement decides the physical cores of
every group and the *logical ring order* used by ring AllGather / AllReduce, which
sets the hop count of every ring step on the mesh:

* ``linear_seq`` (T10): ``tp`` consecutive core indices, ring in index order; the step
  closing the ring crosses the whole segment;
* ``linear_interleave`` (WaferLLM): the same cores, ring order 0,2,4,…,5,3,1 so every
  step is at most two hops;
* ``ring``: a compact block with a Hamiltonian cycle, every step one hop;
* ``mesh2d``: the same compact block seen as a 2-D grid (rows x cols) for 2-D
  partitions, each row and column interleaved.

Groups are laid out in snake order over the chip so consecutive pipeline stages are
neighbours.  Each placement is a registered part (``kind:``) in its own file, called as
``place(width, height, tp, groups, config=None, cores=None)``: ``cores`` restricts the
groups to those cores (PD disaggregation lays out the second pool on the cores the first
left free, which need not line up with a layout of the whole chip).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import isqrt
from typing import Collection

from npusim.core.errors import MappingError


@dataclass(frozen=True)
class Group:
    """One TP group: its cores in ring order and, for 2-D partitions, its grid."""

    cores: tuple[int, ...]
    rows: int = 1
    cols: int = 0

    @property
    def grid(self) -> tuple[tuple[int, ...], ...]:
        """Cores as ``rows`` rows of ``cols`` (ring order read row by row)."""
        cols = self.cols or len(self.cores)
        return tuple(self.cores[r * cols:(r + 1) * cols] for r in range(self.rows))


def coords(core: int, width: int) -> tuple[int, int]:
    return core % width, core // width


def hops(a: int, b: int, width: int) -> int:
    """Manhattan distance between cores (XY routing on a mesh)."""
    (ax, ay), (bx, by) = coords(a, width), coords(b, width)
    return abs(ax - bx) + abs(ay - by)


def ring_hops(cores: tuple[int, ...], width: int) -> list[int]:
    """Hops of every ring step, including the step closing the ring."""
    return [hops(a, b, width) for a, b in zip(cores, cores[1:] + cores[:1])] if len(cores) > 1 else []


def interleave(sequence: list[int]) -> list[int]:
    """WaferLLM order over a line: evens ascending, then odds descending (≤ 2 hops a step)."""
    return sequence[0::2] + sequence[1::2][::-1]


def block_shape(tp: int, width: int, height: int) -> tuple[int, int]:
    """The most square ``bw x bh`` block of ``tp`` cores that tiles the mesh."""
    shape = _block_shape(tp, width, height)
    if shape is None:
        fitting = [n for n in range(1, width * height + 1) if _block_shape(n, width, height)]
        raise MappingError(f"tp = {tp}: groups of {tp} cores cannot tile the {width}x{height} "
                           f"mesh in equal blocks; expected one of {', '.join(map(str, fitting))} "
                           "(the TP group size: workload.tp, or workload.pd.tp / prefill_tp / "
                           "decode_tp when serving)")
    return shape


def _block_shape(tp: int, width: int, height: int) -> tuple[int, int] | None:
    for bh in range(isqrt(tp), 0, -1):
        if tp % bh == 0:
            bw = tp // bh
            if bw <= width and bh <= height and width % bw == 0 and height % bh == 0:
                return bw, bh
            if bh <= width and bw <= height and width % bh == 0 and height % bw == 0:
                return bh, bw
    return None


def hamiltonian_cycle(bw: int, bh: int) -> list[tuple[int, int]]:
    """A cycle through every cell of a ``bw x bh`` block with one-hop steps (when one
    exists: at least one even side); otherwise a snake whose closing step is longer."""
    if bw == 1 or bh == 1:
        return [(x, y) for y in range(bh) for x in range(bw)]
    if bh % 2 == 1 and bw % 2 == 0:
        return [(x, y) for y, x in hamiltonian_cycle(bh, bw)]
    cells = [(x, 0) for x in range(bw)]
    for row in range(1, bh):
        columns = range(bw - 1, 0, -1) if row % 2 == 1 else range(1, bw)
        cells += [(x, row) for x in columns]
    cells += [(0, row) for row in range(bh - 1, 0, -1)]
    return cells


def block_origins(bw: int, bh: int, width: int, height: int) -> list[tuple[int, int]]:
    """Block origins in snake order (left-to-right, then right-to-left on the next row)."""
    origins = []
    for by, y in enumerate(range(0, height, bh)):
        xs = list(range(0, width, bw))
        origins += [(x, y) for x in (xs if by % 2 == 0 else xs[::-1])]
    return origins


def check_fit(tp: int, groups: int, width: int, height: int,
              cores: Collection[int] | None = None) -> None:
    if tp < 1 or groups < 1:
        raise MappingError(f"tp ({tp}) and number of groups ({groups}) must be positive")
    available = width * height if cores is None else len(cores)
    if tp * groups > available:
        where = (f"the {width}x{height} mesh has {available}" if cores is None
                 else f"{available} are free")
        raise MappingError(f"{groups} groups of tp={tp} need {tp * groups} cores; {where}")


def line_groups(line: list[int], tp: int, groups: int, cores: Collection[int] | None
                ) -> list[list[int]]:
    """``groups`` runs of ``tp`` consecutive positions of ``line`` (a path over the mesh),
    skipping positions outside ``cores``: a run may then jump over taken cores."""
    if cores is not None:
        free = set(cores)
        line = [core for core in line if core in free]
    return [line[g * tp:(g + 1) * tp] for g in range(groups)]


def free_block_origins(bw: int, bh: int, width: int, height: int, groups: int,
                       cores: Collection[int] | None) -> list[tuple[int, int]]:
    """The first ``groups`` block origins in snake order whose whole block is in
    ``cores`` (all blocks if ``None``); a clear error if fewer are free."""
    origins = block_origins(bw, bh, width, height)
    if cores is not None:
        free = set(cores)
        origins = [(ox, oy) for ox, oy in origins
                   if all((oy + y) * width + ox + x in free for y in range(bh) for x in range(bw))]
        if len(origins) < groups:
            raise MappingError(f"{groups} blocks of {bw}x{bh} cores needed; {len(origins)} "
                               f"whole blocks are free")
    return origins[:groups]
