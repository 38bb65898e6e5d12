"""T10 placement: consecutive core indices, ring in index order."""

from __future__ import annotations

from typing import Collection, Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import Group, check_fit, line_groups


class LinearSeqConfig(PartConfig):
    """Linear placement in core-index order (T10)."""

    kind: Literal["linear_seq"] = "linear_seq"


@register("placement", LinearSeqConfig)
def linear_seq(width: int, height: int, tp: int, groups: int,
               config: LinearSeqConfig | None = None,
               cores: Collection[int] | None = None) -> list[Group]:
    check_fit(tp, groups, width, height, cores)
    return [Group(tuple(run)) for run in line_groups(list(range(width * height)), tp, groups, cores)]
