"""WaferLLM placement: consecutive cores, ring order interleaved (≤ 2 hops per step)."""

from __future__ import annotations

from typing import Collection, Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import Group, check_fit, interleave, line_groups


class LinearInterleaveConfig(PartConfig):
    """Interleaved linear placement (WaferLLM)."""

    kind: Literal["linear_interleave"] = "linear_interleave"


def snake(index: int, width: int) -> int:
    """The ``index``-th core along a boustrophedon path over the mesh rows: a line that
    turns at the row ends, so consecutive positions are always one hop apart."""
    y, x = divmod(index, width)
    return y * width + (x if y % 2 == 0 else width - 1 - x)


@register("placement", LinearInterleaveConfig)
def linear_interleave(width: int, height: int, tp: int, groups: int,
                      config: LinearInterleaveConfig | None = None,
                      cores: Collection[int] | None = None) -> list[Group]:
    check_fit(tp, groups, width, height, cores)
    # Interleave along the snake line, not the index order: a group spanning several
    # rows then still needs at most two hops per ring step (WaferLLM's guarantee; a
    # group on restricted ``cores`` that jumps over taken ones may need more).
    line = [snake(i, width) for i in range(width * height)]
    return [Group(tuple(interleave(run))) for run in line_groups(line, tp, groups, cores)]
