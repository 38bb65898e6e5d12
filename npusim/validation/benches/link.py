"""Link benches: sustained bandwidth of a point-to-point link preset."""

from __future__ import annotations

from typing import Literal

from npusim.config.loader import deep_merge, validate
from npusim.config.presets import load_preset
from npusim.core.units import PS_PER_S, parse_bytes
from npusim.hw.interconnect.link import Link, LinkConfig
from npusim.validation.bench_registry import bench


def build_link(preset: str | None = None, **fields) -> Link:
    """A :class:`Link` from a preset name (``links/pcie5_x16``) with field overrides."""
    data = deep_merge(load_preset(preset), fields) if preset else dict(fields)
    config = validate(LinkConfig, data, f"preset {preset}" if preset else "link bench")
    return Link("link", config)


@bench("link_transfer")
def link_transfer(preset: str | None = "links/pcie5_x16", size_bytes: int | str = "256MiB",
                  streams: int = 1, mode: Literal["analytic", "tlm"] = "analytic",
                  **fields) -> dict[str, float]:
    """Move ``streams`` transfers of ``size_bytes`` in one direction at once.

    ``bandwidth_gbps`` is total payload / makespan in GB/s (10^9 bytes/s, as link
    bandwidths are quoted); ``analytic`` uses the closed form (a single stream),
    ``tlm`` runs SimPy transactions with contention.
    """
    link = build_link(preset, **fields)
    size = parse_bytes(size_bytes)
    if mode == "analytic":
        makespan = streams * link.serialization_ps(size) + link.config.latency_ps
        if streams == 1:
            makespan = link.transfer_time_ps("a", "b", size)
    else:
        import simpy

        env = simpy.Environment()
        link.bind(env)
        procs = [env.process(link.transfer("a", "b", size)) for _ in range(streams)]
        env.run(env.all_of(procs))
        makespan = env.now
    total = streams * size
    return {"bandwidth_gbps": total * PS_PER_S / makespan / 1e9 if makespan else 0.0,
            "time_ps": makespan, "latency_ps": link.config.latency_ps,
            "effective_bandwidth_gbps": link.effective_bandwidth_bps / 1e9}
