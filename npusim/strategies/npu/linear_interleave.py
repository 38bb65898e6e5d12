"""WaferLLM placement: consecutive cores, ring order interleaved (≤ 2 hops per step)."""

from __future__ import annotations

from typing import Literal

from npusim.core.registry import PartConfig, register
from npusim.strategies.npu.placement import Group, check_fit, interleave


class LinearInterleaveConfig(PartConfig):
    """Interleaved linear placement (WaferLLM)."""

    kind: Literal["linear_interleave"] = "linear_interleave"


@register("placement", LinearInterleaveConfig)
def linear_interleave(width: int, height: int, tp: int, groups: int,
                      config: LinearInterleaveConfig | None = None) -> list[Group]:
    check_fit(tp, groups, width, height)
    return [Group(tuple(interleave(list(range(g * tp, (g + 1) * tp))))) for g in range(groups)]
