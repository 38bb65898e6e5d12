"""NoC micro-benchmarks: synthetic uniform-random traffic (as BookSim2 runs it) and a
single large transfer.

Traffic follows BookSim's conventions so the numbers compare with components.md: every
node starts a packet each cycle with probability ``injection_rate / packet_flits``
(Bernoulli, rate in flits/node/cycle), destinations are uniform over all nodes including
the source, latency runs from packet creation (source queueing included) to the arrival
of its tail, and only packets created in the measurement window (after a warm-up) count.
Injection continues while the measured packets drain.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import simpy

from npusim.hw.interconnect.noc import MeshNoc, NocConfig
from npusim.validation.bench_registry import bench

#: Cycles of traffic generated per numpy call (bounds memory, not results).
_GEN_BLOCK_CYCLES = 512


def _noc(width: int, height: int, topology: str, noc: dict[str, Any] | None) -> MeshNoc:
    fields = {"width": width, "height": height, "topology": topology, **(noc or {})}
    return MeshNoc("noc", NocConfig(**fields))


def run_uniform_random(net: MeshNoc, injection_rate: float, packet_flits: int = 1,
                       cycles: int = 3000, warmup_cycles: int = 1000,
                       drain_cycles: int | None = None, seed: int = 1,
                       mode: str = "tlm") -> dict[str, float]:
    """Uniform-random traffic on ``net``; see the module docstring for the conventions.

    ``drain_cycles`` (default ``cycles``) bounds how long after the window the run may
    continue for measured packets to arrive; packets still in flight then are reported
    by ``delivered_fraction < 1`` (the network is past saturation).
    """
    if mode not in ("tlm", "analytic"):
        raise ValueError(f"mode must be 'tlm' or 'analytic', got {mode!r}")
    if not 0 < injection_rate <= 1:
        raise ValueError(f"injection_rate is in flits/node/cycle and must be in (0, 1], "
                         f"got {injection_rate}")
    n, period = net.num_nodes, net.period_ps
    drain = cycles if drain_cycles is None else drain_cycles
    window = (warmup_cycles, warmup_cycles + cycles)
    horizon = window[1] + drain
    rng = np.random.default_rng(seed)
    p_packet = injection_rate / packet_flits
    payload = packet_flits * net.flit_bytes

    def traffic(first: int, last: int):
        """(cycle, src, dst) of packets created in cycles [first, last), in order."""
        fires = rng.random((last - first, n)) < p_packet
        when, src = np.nonzero(fires)
        dst = rng.integers(0, n, size=len(src))
        return when + first, src, dst

    if mode == "analytic":
        when, src, dst = traffic(0, window[1])
        keep = when >= window[0]
        lat = [net.zero_load_cycles(int(s), int(d), packet_flits)
               for s, d in zip(src[keep], dst[keep])]
        hops = [net.hops(int(s), int(d)) for s, d in zip(src[keep], dst[keep])]
        offered = keep.sum() * packet_flits / (n * cycles)
        return {"avg_latency_cycles": float(np.mean(lat)), "accepted_rate": float(offered),
                "offered_rate": float(offered), "avg_hops": float(np.mean(hops)),
                "zero_load_latency_cycles": float(np.mean(lat)), "delivered_fraction": 1.0,
                "packets": float(len(lat))}

    env = simpy.Environment()
    net.bind(env)
    half = (window[0] + window[1]) // 2
    # [packets created, delivered, summed latency ps] for each half of the window.
    halves = [[0, 0, 0], [0, 0, 0]]
    totals = {"hops": 0, "zero": 0, "window_flits": 0}
    generation_over = [False]
    finished = env.event()

    def all_delivered() -> bool:
        return all(h[0] == h[1] for h in halves)

    def count_accepted(done_ps: int) -> None:
        if window[0] * period <= done_ps < window[1] * period:
            totals["window_flits"] += packet_flits

    def measured(created: int, tally: list[int]):
        def on_done(done_ps: int) -> None:
            count_accepted(done_ps)
            tally[1] += 1
            tally[2] += done_ps - created
            if generation_over[0] and not finished.triggered and all_delivered():
                finished.succeed()
        return on_done

    def source():
        for first in range(0, horizon, _GEN_BLOCK_CYCLES):
            when, src, dst = traffic(first, min(first + _GEN_BLOCK_CYCLES, horizon))
            for cycle, s, d in zip(when.tolist(), src.tolist(), dst.tolist()):
                if cycle >= window[1] and not generation_over[0]:
                    generation_over[0] = True
                    if all_delivered() and not finished.triggered:
                        finished.succeed()
                if finished.triggered:
                    return
                if cycle * period > env.now:
                    yield env.timeout(cycle * period - env.now)
                if window[0] <= cycle < window[1]:
                    tally = halves[cycle >= half]
                    tally[0] += 1
                    totals["hops"] += net.topology.hops(s, d)
                    totals["zero"] += net.zero_load_cycles(s, d, packet_flits)
                    on_done = measured(env.now, tally)
                else:
                    on_done = count_accepted
                net.inject(s, d, payload, flits=packet_flits, on_done=on_done)

    env.process(source())
    env.run(until=env.any_of([finished, env.timeout(horizon * period)]))
    created = halves[0][0] + halves[1][0]
    done = halves[0][1] + halves[1][1]
    latency = (halves[0][2] + halves[1][2]) / max(1, done) / period
    early, late = (h[2] / max(1, h[1]) / period for h in halves)
    return {
        "avg_latency_cycles": latency,
        "accepted_rate": totals["window_flits"] / (n * cycles),
        "offered_rate": created * packet_flits / (n * cycles),
        "avg_hops": totals["hops"] / max(1, created),
        "zero_load_latency_cycles": totals["zero"] / max(1, created),
        "delivered_fraction": done / max(1, created),
        # Latency of packets created in the second half of the window over the first
        # half: about 1 in steady state, growing when queues build up (saturation).
        "latency_growth": late / early if early else 1.0,
        "packets": float(created),
    }


@bench("noc_uniform_random")
def noc_uniform_random(width: int = 8, height: int = 8, injection_rate: float = 0.01,
                       packet_flits: int = 1, cycles: int = 3000, warmup_cycles: int = 1000,
                       drain_cycles: int | None = None, seed: int = 1, mode: str = "tlm",
                       topology: str = "mesh", noc: dict[str, Any] | None = None
                       ) -> dict[str, float]:
    """Uniform-random synthetic traffic at ``injection_rate`` flits/node/cycle.

    Returns ``avg_latency_cycles``, ``accepted_rate`` (flits/node/cycle delivered in the
    window), ``offered_rate``, ``avg_hops``, ``zero_load_latency_cycles`` (closed form for
    the same packets), ``delivered_fraction`` and ``packets``.  ``noc`` overrides
    :class:`NocConfig` fields (e.g. ``{virtual_channels: 4, buffer_flits: 8}`` for the
    BookSim reference router of components.md; the NocConfig default is one VC).
    """
    net = _noc(width, height, topology, noc)
    return run_uniform_random(net, injection_rate, packet_flits, cycles, warmup_cycles,
                              drain_cycles, seed, mode)


@bench("noc_saturation")
def noc_saturation(width: int = 8, height: int = 8, packet_flits: int = 1,
                   cycles: int = 2000, warmup_cycles: int = 1000, seed: int = 1,
                   latency_factor: float = 3.0, max_growth: float = 1.10,
                   resolution: float = 0.01, topology: str = "mesh",
                   noc: dict[str, Any] | None = None) -> dict[str, float]:
    """Saturation throughput of uniform-random traffic, by bisection on the offered load.

    A load is *sustained* when every measured packet is delivered within the drain
    period, the accepted rate is at least 95% of the offered rate, the average latency
    stays below ``latency_factor`` x zero-load (the usual knee criterion) and latency is
    not still growing through the window (``latency_growth <= max_growth``; queues that
    keep building up mean the load is above saturation even if the window is too short
    for latency to explode).  The search runs between 0 and the topology's channel-load
    bound, which no load above can sustain.

    Returns ``saturation_rate`` (highest sustained load found, flits/node/cycle, within
    ``resolution``), ``bisection_bound`` and ``latency_at_saturation_cycles``.
    """
    net = _noc(width, height, topology, noc)
    bound = _bisection_bound(net)
    best: dict[str, float] = {}

    def sustained(rate: float) -> bool:
        out = run_uniform_random(net, rate, packet_flits, cycles, warmup_cycles, seed=seed)
        ok = (out["delivered_fraction"] >= 1.0
              and out["accepted_rate"] >= 0.95 * out["offered_rate"]
              and out["avg_latency_cycles"] <= latency_factor * out["zero_load_latency_cycles"]
              and out["latency_growth"] <= max_growth)
        if ok:
            best.update(out)
        return ok

    low, high = 0.0, min(1.0, bound)
    while high - low > resolution:
        mid = (low + high) / 2
        if sustained(mid):
            low = mid
        else:
            high = mid
    return {"saturation_rate": low, "bisection_bound": bound,
            "latency_at_saturation_cycles": best.get("avg_latency_cycles", float("nan"))}


def _bisection_bound(net: MeshNoc) -> float:
    """Uniform-random throughput bound (flits/node/cycle) from the busiest link."""
    n = net.num_nodes
    load: dict[tuple[int, int], int] = {}
    for s in range(n):
        for d in range(n):
            for link in net.topology.route(s, d):
                load[link] = load.get(link, 0) + 1
    # Each node sends 1/n of its rate to every node, so a link carrying `k` routes
    # sees k / n times the per-node rate; it saturates when that reaches one flit/cycle.
    return n / max(load.values()) if load else 1.0


@bench("noc_transfer")
def noc_transfer(width: int = 8, height: int = 8, src: Any = 0, dst: Any = 63,
                 size_bytes: int = 1 << 20, concurrent: int = 1, mode: str = "tlm",
                 topology: str = "mesh", noc: dict[str, Any] | None = None
                 ) -> dict[str, float]:
    """``concurrent`` identical transfers of ``size_bytes`` from ``src`` to ``dst``
    started together (1 = a single large transfer); ``analytic`` gives the closed-form
    time of one transfer, which ignores contention by definition.

    Returns ``latency_ps`` (until the last one finishes), ``latency_cycles``,
    ``bandwidth_gbps`` (total bytes / latency) and ``hops``.
    """
    net = _noc(width, height, topology, noc)
    if mode == "analytic":
        latency = net.transfer_time_ps(src, dst, size_bytes)  # uncontended by definition
    elif mode == "tlm":
        env = simpy.Environment()
        net.bind(env)
        procs = [env.process(net.transfer(src, dst, size_bytes)) for _ in range(concurrent)]
        env.run(until=env.all_of(procs))
        latency = env.now
    else:
        raise ValueError(f"mode must be 'tlm' or 'analytic', got {mode!r}")
    return {"latency_ps": float(latency), "latency_cycles": latency / net.period_ps,
            "bandwidth_gbps": concurrent * size_bytes / max(1, latency) * 1e3,
            "hops": float(net.hops(src, dst))}
