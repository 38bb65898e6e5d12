"""2-D mesh placement: compact blocks used as rows x cols grids (for 2-D partitions)."""

from __future__ import annotations

from typing import Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import (Group, block_origins, block_shape, check_fit,
                                             interleave)


class Mesh2dConfig(PartConfig):
    """2-D mesh placement; rows and columns each in interleaved order."""

    kind: Literal["mesh2d"] = "mesh2d"


@register("placement", Mesh2dConfig)
def mesh2d(width: int, height: int, tp: int, groups: int,
           config: Mesh2dConfig | None = None) -> list[Group]:
    check_fit(tp, groups, width, height)
    bw, bh = block_shape(tp, width, height)
    xs, ys = interleave(list(range(bw))), interleave(list(range(bh)))
    out = []
    for ox, oy in block_origins(bw, bh, width, height)[:groups]:
        cores = tuple((oy + y) * width + ox + x for y in ys for x in xs)
        out.append(Group(cores, rows=bh, cols=bw))
    return out
