"""2-D mesh placement: compact blocks used as rows x cols grids (for 2-D partitions)."""

from __future__ import annotations

from typing import Collection, Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import (Group, block_shape, check_fit, free_block_origins,
                                             interleave)


class Mesh2dConfig(PartConfig):
    """2-D mesh placement; rows and columns each in interleaved order."""

    kind: Literal["mesh2d"] = "mesh2d"


@register("placement", Mesh2dConfig)
def mesh2d(width: int, height: int, tp: int, groups: int,
           config: Mesh2dConfig | None = None,
           cores: Collection[int] | None = None) -> list[Group]:
    check_fit(tp, groups, width, height, cores)
    bw, bh = block_shape(tp, width, height)
    xs, ys = interleave(list(range(bw))), interleave(list(range(bh)))
    out = []
    for ox, oy in free_block_origins(bw, bh, width, height, groups, cores):
        block = tuple((oy + y) * width + ox + x for y in ys for x in xs)
        out.append(Group(block, rows=bh, cols=bw))
    return out
