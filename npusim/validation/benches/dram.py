"""DRAM micro-benchmarks: a read (or write) stream through one DRAM part.

``dram_stream`` mirrors the DRAMsim3 stream/random generators behind components.md:
each initiator issues requests back to back, limited only by the controller queue
(backpressure at END_REQ), so the queue stays full; bandwidth is bytes moved over the
time from the first BEGIN_REQ to the last END_RESP.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npusim.config.presets import load_preset
from npusim.core.units import PS_PER_S, parse_bytes
from npusim.hw.base import AccessPattern, MemoryTransaction
from npusim.hw.memory.dram import DramChannel, DramConfig
from npusim.validation.bench_registry import bench


def build_dram(preset: str, **overrides: Any) -> DramChannel:
    """A :class:`DramChannel` from preset ``preset`` with ``overrides`` (None values ignored)."""
    data = load_preset(preset)
    data.update({key: value for key, value in overrides.items() if value is not None})
    return DramChannel(preset.rsplit("/", 1)[-1], DramConfig.model_validate(data))


def stream_addresses(pattern: str, request_bytes: int, count: int, range_bytes: int,
                     base: int, rng: np.random.Generator) -> list[int]:
    """Request addresses: consecutive from ``base``, or request-aligned random in range."""
    if pattern == "sequential":
        return [base + i * request_bytes for i in range(count)]
    if pattern == "random":
        slots = max(1, range_bytes // request_bytes)
        return (rng.integers(0, slots, count) * request_bytes).tolist()
    raise ValueError(f"pattern must be 'sequential' or 'random', got {pattern!r}")


def run_streams(dram: DramChannel, streams: list[list[int]], request_bytes: int,
                is_write: bool = False) -> list[MemoryTransaction]:
    """Run one initiator per address list in a fresh SimPy environment (tlm)."""
    import simpy

    env = simpy.Environment()
    dram.reset_stats()
    dram.bind(env)
    done: list[MemoryTransaction] = []

    def initiator(name: str, addresses: list[int]):
        for addr in addresses:
            txn = MemoryTransaction(addr, request_bytes, is_write, name)
            done.append(txn)
            handle = dram.submit(txn)
            if not handle.is_accepted:  # backpressure: wait for END_REQ
                yield handle.accepted

    for index, addresses in enumerate(streams):
        env.process(initiator(f"init{index}", addresses))
    env.run()
    return done


@bench("dram_stream")
def dram_stream(preset: str = "memory/ddr4_3200", pattern: str = "sequential",
                request_bytes: int | str = 64, total_bytes: int | str = "2MiB",
                queue_depth: int | None = None, ranks: int | None = None,
                channels: int | None = None, mode: str = "tlm", initiators: int = 1,
                is_write: bool = False, range_bytes: int | str | None = None, seed: int = 0,
                overrides: dict[str, Any] | None = None) -> dict[str, float]:
    """Stream ``total_bytes`` of ``request_bytes`` requests through a DRAM preset.

    ``mode`` is ``tlm`` (SimPy, contention) or ``analytic`` (closed form, one stream).
    ``initiators`` > 1 splits the bytes over independent initiators (own regions for
    sequential streams).  Returns bandwidth_gbps (1e9 B/s), efficiency (of peak),
    row_hit_rate (per burst), time_ps, avg_latency_ns and peak_gbps.
    """
    request = parse_bytes(request_bytes)
    total = parse_bytes(total_bytes)
    dram = build_dram(preset, queue_depth=queue_depth, ranks=ranks, channels=channels,
                      **(overrides or {}))
    span = parse_bytes(range_bytes) if range_bytes is not None else dram.config.capacity_bytes
    peak = dram.peak_bandwidth_bps
    if mode == "analytic":
        time_ps = dram.access_time_ps(total, is_write, AccessPattern(pattern, request, span))
        return _result(total, time_ps, peak, float("nan"), float("nan"))
    if mode != "tlm":
        raise ValueError(f"mode must be 'tlm' or 'analytic', got {mode!r}")
    rng = np.random.default_rng(seed)
    count = max(1, total // request // initiators)
    region = span // initiators
    streams = [stream_addresses(pattern, request, count, span, i * region, rng) for i in range(initiators)]
    txns = run_streams(dram, streams, request, is_write)
    time_ps = max(t.end_resp_ps for t in txns) - min(t.begin_req_ps for t in txns)
    extra = dram.stats.extra
    hits = extra.get("row_hits", 0)
    accesses = hits + extra.get("row_misses", 0) + extra.get("row_conflicts", 0)
    latency = sum(t.latency_ps for t in txns) / len(txns) / 1000
    return _result(count * initiators * request, time_ps, peak, hits / max(1, accesses), latency)


def _result(size: int, time_ps: int, peak_bps: int, hit_rate: float, latency_ns: float) -> dict[str, float]:
    bandwidth = size * PS_PER_S / time_ps
    return {"bandwidth_gbps": bandwidth / 1e9, "efficiency": bandwidth / peak_bps,
            "row_hit_rate": hit_rate, "time_ps": float(time_ps), "avg_latency_ns": latency_ns,
            "peak_gbps": peak_bps / 1e9}
