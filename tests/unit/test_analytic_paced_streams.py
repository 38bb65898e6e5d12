"""The analytic executor's paced streams: a transfer slowed by one resource uses the
others at its own pace, beside later work, instead of holding them from its start."""

from __future__ import annotations

import pytest

from npusim.api import build_device
from npusim.config.loader import scenario_from_dict
from npusim.executor.analytic import run_analytic
from npusim.executor.sharing import finish as _finish
from npusim.executor.base import prepare
from npusim.executor.tlm import run_tlm
from npusim.mapping.taskgraph import TaskGraph

LOAD_BYTES = 4 << 20   # HBM -> SRAM on large_core_64: ~45.7 us HBM-bound, 16.4 us of SRAM
SEND_BYTES = 32 << 10  # core 6 -> core 5 over the NoC: ~2.3 us


@pytest.fixture(scope="module")
def device():
    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64"},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def _send_after_load(load: bool) -> TaskGraph:
    graph = TaskGraph()
    if load:
        graph.transfer("core5.hbm", "core5.sram", LOAD_BYTES, chunk_bytes=64 << 10)
    gate = graph.host(1_000_000, [], "gate", resource="none")  # 1 us: the load is booked first
    graph.transfer("core6.sram", "core5.sram", SEND_BYTES, [gate], chunk_bytes=64 << 10)
    return graph


@pytest.mark.unit
def test_a_small_transfer_is_not_held_behind_a_slow_load_into_the_same_sram(device):
    # The load fills the SRAM at HBM speed, about a third of the SRAM's bandwidth.  Booked
    # whole from its start it held the SRAM for 16.4 us, and a 32 KiB activation arriving
    # over the NoC at 1 us ended at 16.5 us instead of 3.3 us, as tlm has it.
    alone = run_analytic(prepare(_send_after_load(False), device), device).makespan_ps
    beside = run_analytic(prepare(_send_after_load(True), device), device)
    send_end = beside.ends[-1]
    tlm_end = run_tlm(prepare(_send_after_load(True), device), device).ends[-1]
    assert send_end < 1.1 * alone
    assert abs(send_end / tlm_end - 1) < 0.05
    # ... and the load still ends at its HBM pace
    assert beside.ends[0] == run_analytic(prepare(_load_only(), device), device).makespan_ps


def _load_only() -> TaskGraph:
    graph = TaskGraph()
    graph.transfer("core5.hbm", "core5.sram", LOAD_BYTES, chunk_bytes=64 << 10)
    return graph


@pytest.mark.unit
def test_work_beside_paced_streams_gets_the_bandwidth_they_leave():
    # A stream using 40% of a resource over [0, 100): 60 units of work from 0 take 100
    # (60% of the rate while it runs); 80 units take 100 + 20 (full rate after it ends).
    streams = [[0, 100, 0.4]]
    assert _finish(0, 60, [list(s) for s in streams]) == 100
    assert _finish(0, 80, [list(s) for s in streams]) == 120
    # A resource its streams use whole serves nothing new until they end (work-conserving)
    assert _finish(10, 5, [[0, 50, 0.7], [0, 50, 0.3]]) == 55
    # Streams already ended are dropped; a later one only slows what overlaps it
    ended = [[0, 10, 0.5], [40, 60, 0.5]]
    assert _finish(20, 10, ended) == 30 and len(ended) == 1
    assert _finish(35, 10, [[40, 60, 0.5]]) == 40 + 10


def _chip_with_hbm_channels(channels: int):
    """``large_core_64`` with ``channels`` HBM channels per core (8: the HBM is the
    slower end of a tile into the SRAM; 16: the SRAM is)."""
    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64",
                                                       "hbm": {"channels": channels}},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def _timed_three_ways(graph_of, device):
    """The send alone (analytic), beside the tile (analytic) and beside it (tlm), for
    ``graph_of(load)`` building the graph with or without the tile."""
    return (run_analytic(prepare(graph_of(False), device), device),
            run_analytic(prepare(graph_of(True), device), device),
            run_tlm(prepare(graph_of(True), device), device))


def _send_beside_a_tile_into_a_slower_sram(load: bool) -> TaskGraph:
    graph = TaskGraph()
    if load:  # 3 MiB at the SRAM port's 256 GB/s (the 16-channel HBM is faster): ~12 us
        graph.transfer("core5.hbm", "core5.sram", 3 << 20, chunk_bytes=256 << 10)
    gate = graph.host(1_000_000, [], "gate", resource="none")
    graph.transfer("core5.sram", "core6.sram", 4 << 10, [gate])  # a ring step's send
    return graph


@pytest.mark.unit
def test_a_small_transfer_goes_between_the_chunks_of_a_tile_that_holds_the_sram():
    # With 16 HBM channels (409.6 GB/s) the SRAM port (256 GB/s) sets a tile's pace, so
    # the tile holds it.  A 4 KiB NoC send from that SRAM waited for the whole tile
    # (ending at 13.3 us, not 2.0 us as at the tlm level, whose chunks interleave):
    # every ring step of a K-partitioned GEMM beside a streamed tile paid it, and more
    # HBM bandwidth made a decode step slower.  It now waits for at most one chunk.
    device = _chip_with_hbm_channels(16)
    alone, beside, tlm = _timed_three_ways(_send_beside_a_tile_into_a_slower_sram, device)
    chunk_ps = device.parts["core5.sram"].port_time_ps(256 << 10)
    assert beside.ends[-1] <= alone.ends[-1] + chunk_ps
    assert abs(beside.ends[-1] / tlm.ends[-1] - 1) < 0.05
    # ... and the tile is not sped up by it (the SRAM frees 4 KiB later instead)
    assert beside.ends[0] >= run_analytic(prepare(_tile_only(), device), device).makespan_ps


def _tile_only() -> TaskGraph:
    graph = TaskGraph()
    graph.transfer("core5.hbm", "core5.sram", 3 << 20, chunk_bytes=256 << 10)
    return graph


def _send_while_a_chunk_lands(load: bool, at_ps: int = 1_700_000) -> TaskGraph:
    graph = TaskGraph()
    if load:  # 1 MiB from 8 HBM channels (~182 GB/s) into the 256 GB/s SRAM, 256 KiB chunks
        graph.transfer("core0.hbm", "core0.sram", 1 << 20, chunk_bytes=256 << 10)
    gate = graph.host(at_ps, [], "gate", resource="none")  # (default) as chunk 0 lands
    graph.transfer("core1.sram", "core0.sram", 1170, [gate])  # a ring step's send
    return graph


@pytest.mark.unit
def test_a_small_transfer_waits_for_the_chunk_a_faster_sram_is_writing():
    # With 8 HBM channels the SRAM is the faster end: the tile is a paced stream there,
    # but its chunks still land as bursts (each holds the SRAM ~1 us, as the tlm level's
    # transactions do).  Spread evenly, the stream left a 1 KiB send arriving during a
    # chunk most of the SRAM, so it did not wait (1.8 us, tlm 2.4 us): every ring step
    # beside a streamed tile was too cheap, which made more HBM bandwidth look slower.
    device = _chip_with_hbm_channels(8)
    alone, beside, tlm = _timed_three_ways(_send_while_a_chunk_lands, device)
    assert beside.ends[-1] > alone.ends[-1] + 500_000
    assert abs(beside.ends[-1] / tlm.ends[-1] - 1) < 0.1
    # ... and the tile still ends at its HBM pace
    load_only = TaskGraph()
    load_only.transfer("core0.hbm", "core0.sram", 1 << 20, chunk_bytes=256 << 10)
    assert beside.ends[0] >= run_analytic(prepare(load_only, device), device).makespan_ps


@pytest.mark.unit
def test_a_small_transfer_before_the_first_chunk_of_a_held_tile_does_not_wait():
    # With 16 HBM channels the SRAM is the slower end and the tile holds it, but its
    # first chunk reaches the SRAM only after a chunk's time in the HBM (~0.6 us).  A
    # 1 KiB send arriving before that goes first, as in tlm; the rule this replaced made
    # it wait for a whole chunk (1.34 us instead of 0.41), which made more HBM bandwidth
    # look slower.
    device = _chip_with_hbm_channels(16)
    alone, beside, tlm = _timed_three_ways(lambda load: _send_while_a_chunk_lands(load, 300_000), device)
    assert beside.ends[-1] == alone.ends[-1] == tlm.ends[-1]
