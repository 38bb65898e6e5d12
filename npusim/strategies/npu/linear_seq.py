"""T10 placement: consecutive core indices, ring in index order."""

from __future__ import annotations

from typing import Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import Group, check_fit


class LinearSeqConfig(PartConfig):
    """Linear placement in core-index order (T10)."""

    kind: Literal["linear_seq"] = "linear_seq"


@register("placement", LinearSeqConfig)
def linear_seq(width: int, height: int, tp: int, groups: int,
               config: LinearSeqConfig | None = None) -> list[Group]:
    check_fit(tp, groups, width, height)
    return [Group(tuple(range(g * tp, (g + 1) * tp))) for g in range(groups)]
