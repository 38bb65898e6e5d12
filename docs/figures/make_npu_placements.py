"""Draw the four core placements of a TP=4 pipeline on the 8x8 large_core_64 mesh.

Run: ``python docs/figures/make_npu_placements.py`` (writes npu_placements.png here).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from npusim.core import registry  # noqa: E402
from npusim.strategies.npu.placement import ring_hops  # noqa: E402

WIDTH = HEIGHT = 8
TP, STAGES = 4, 16
SHOWN = 4  # stages whose ring is drawn


def draw(ax, kind: str) -> None:
    place = registry.lookup("placement", kind).impl
    groups = place(WIDTH, HEIGHT, TP, STAGES)
    colours = plt.get_cmap("tab20")
    for index, group in enumerate(groups):
        for core in group.cores:
            x, y = core % WIDTH, core // WIDTH
            ax.add_patch(plt.Rectangle((x - 0.42, y - 0.42), 0.84, 0.84,
                                       color=colours(index % 20), alpha=0.55))
            ax.text(x, y, str(index), ha="center", va="center", fontsize=7)
        if index < SHOWN:
            ring = list(group.cores) + [group.cores[0]]
            for a, b in zip(ring, ring[1:]):
                ax.annotate("", xy=(b % WIDTH, b // WIDTH), xytext=(a % WIDTH, a // WIDTH),
                            arrowprops={"arrowstyle": "->", "lw": 1.2, "color": "black",
                                        "connectionstyle": "arc3,rad=0.25"})
    worst = max(max(ring_hops(g.cores, WIDTH)) for g in groups)
    ax.set_title(f"{kind}\nmax hops per ring step: {worst}", fontsize=9)
    ax.set_xlim(-0.6, WIDTH - 0.4)
    ax.set_ylim(HEIGHT - 0.4, -0.6)
    ax.set_aspect("equal")
    ax.set_xticks(range(WIDTH))
    ax.set_yticks(range(HEIGHT))
    ax.tick_params(labelsize=6)


def main() -> Path:
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6))
    for ax, kind in zip(axes, ("linear_seq", "linear_interleave", "ring", "mesh2d")):
        draw(ax, kind)
    fig.suptitle("TP=4 groups (numbers = pipeline stage) on the 8x8 mesh; arrows: ring order "
                 "of the first four stages", fontsize=10)
    fig.tight_layout()
    out = Path(__file__).with_name("npu_placements.png")
    fig.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    print(main())
