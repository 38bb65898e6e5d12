"""Ring placement: compact blocks with a one-hop Hamiltonian ring."""

from __future__ import annotations

from typing import Collection, Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import (Group, block_shape, check_fit, free_block_origins,
                                             hamiltonian_cycle)


class RingConfig(PartConfig):
    """Ring placement on compact blocks."""

    kind: Literal["ring"] = "ring"


@register("placement", RingConfig)
def ring(width: int, height: int, tp: int, groups: int,
         config: RingConfig | None = None,
         cores: Collection[int] | None = None) -> list[Group]:
    check_fit(tp, groups, width, height, cores)
    bw, bh = block_shape(tp, width, height)
    cycle = hamiltonian_cycle(bw, bh)
    return [Group(tuple((oy + y) * width + ox + x for x, y in cycle))
            for ox, oy in free_block_origins(bw, bh, width, height, groups, cores)]
