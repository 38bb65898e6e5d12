"""The single-VC allocation round (noc_single.allocate_single) makes the decisions of
the general Router.allocate: same finish times, counters and event counts on contended
traffic (DMA-like streams with trains, long packets, synthetic single packets)."""

from __future__ import annotations

import pytest
import simpy

from npusim.hw.interconnect.noc import MeshNoc, NocConfig
from npusim.validation.benches.noc import run_uniform_random

pytestmark = pytest.mark.component

KIB = 1024


def _run(fast: bool, transfers, starts, **noc) -> tuple:
    net = MeshNoc("noc", NocConfig(**noc))
    net.single_vc_fast_path = fast
    env = simpy.Environment()
    net.bind(env)
    assert all(r.single == fast for r in {c.receiver for c in net._all_links()} if r)
    ends = [None] * len(transfers)

    def one(i, src, dst, size, start):
        if start:
            yield env.timeout(start)
        yield from net.transfer(src, dst, size)
        ends[i] = env.now

    for i, (t, start) in enumerate(zip(transfers, starts)):
        env.process(one(i, *t, start))
    steps = 0
    while env.peek() < float("inf"):
        env.step()
        steps += 1
    return ends, net.link_stats(), net.port_stats(), dict(net.stats.extra), steps


@pytest.mark.parametrize("noc", [{"width": 4, "height": 4}, {"buffer_flits": 2},
                                 {"header_flits": 1, "max_packet_bytes": 1 * KIB},
                                 {"topology": "ring", "width": 6, "height": 1}])
def test_single_vc_round_matches_the_general_round(noc):
    cycle = MeshNoc("noc", NocConfig(**noc)).period_ps
    nodes = NocConfig(**noc).num_nodes
    transfers, starts = [], []
    for i in range(60):  # merging and crossing streams, partial packets, same-time starts
        src, dst = (i * 5) % nodes, (i * 7 + 3) % nodes
        if src == dst:
            dst = (dst + 1) % nodes
        transfers.append((src, dst, [16 * KIB, 64 * KIB, 5000, 16 * KIB + 100][i % 4]))
        starts.append((i // 3) * 200 * cycle)
    fast = _run(True, transfers, starts, **noc)
    general = _run(False, transfers, starts, **noc)
    assert fast == general


def test_single_vc_round_matches_on_synthetic_traffic():
    results = []
    for fast in (True, False):
        net = MeshNoc("noc", NocConfig(width=4, height=4))
        net.single_vc_fast_path = fast
        results.append(run_uniform_random(net, 0.45, packet_flits=4, cycles=400,
                                          warmup_cycles=100, seed=5))
    assert results[0] == results[1]
