"""Replayed GEMM lowerings (:class:`LoweringReplay`) build exactly the graph a direct
lowering builds: same tasks, names, ops, dependencies and outputs."""

from __future__ import annotations

import pytest

from npusim.core import registry
from npusim.core.errors import MappingError
from npusim.mapping.taskgraph import TaskGraph
from npusim.strategies.npu.partition import GemmSpec, get_partition

WIDTH = 8
STRATEGIES = [{"kind": "mn"}, {"kind": "mn", "rotate": "input"}, {"kind": "k"},
              {"kind": "mnk"}, {"kind": "mnk", "rotate": "input"}]


def place(kind: str, tp: int):
    return registry.lookup("placement", kind).impl(WIDTH, WIDTH, tp, 1)[0]


def build(lower, calls) -> tuple[TaskGraph, list]:
    """A graph with a few inputs, then every ``(gemm, deps pattern)`` of ``calls`` lowered in
    turn; a pattern picks, per core, earlier ids by position (negative: from the end)."""
    graph = TaskGraph()
    for index in range(4):
        graph.host(10 * index, name=f"in{index}", resource=f"in{index}")
    outputs = []
    for gemm, group, pattern in calls:
        deps = {core: [len(graph) + i if i < 0 else i for i in picks]
                for core, picks in zip(group.cores, pattern)}
        outputs.append(lower(graph, gemm, group, deps, WIDTH))
    return graph, outputs


@pytest.mark.parametrize("strategy", STRATEGIES, ids=str)
def test_replayed_lowering_matches_the_direct_one(strategy):
    group, other = place("ring", 4), place("mesh2d", 4)
    hbm = GemmSpec("L0.q_proj", m=64, k=1024, n=768, weights_in="hbm", weight_tile_bytes=1 << 16)
    calls = [
        (hbm, group, [[0], [1], [2, 0], [3, 3]]),
        (GemmSpec("L0.k_proj", m=64, k=1024, n=768, weights_in="hbm",
                  weight_tile_bytes=1 << 16), group, [[-1], [-2], [-3], [-4]]),
        # same shape, name and order pattern again, then other orders and duplicates
        (GemmSpec("L1.q_proj", m=64, k=1024, n=768, weights_in="hbm",
                  weight_tile_bytes=1 << 16), group, [[-1], [-2], [-3], [-4]]),
        (GemmSpec("L1.k_proj", m=64, k=1024, n=768, weights_in="hbm",
                  weight_tile_bytes=1 << 16), group, [[-4], [-3], [-2], [-1]]),
        (GemmSpec("L1.v_proj", m=64, k=1024, n=768, weights_in="hbm",
                  weight_tile_bytes=1 << 16), group, [[-1, -1], [-1], [], [-2, -1]]),
        (GemmSpec("", m=64, k=1024, n=768, weights_in="hbm", weight_tile_bytes=1 << 16),
         group, [[-1], [-2], [-3], [-4]]),
        (GemmSpec("L2.o_proj", m=32, k=768, n=1024, batch=2), other, [[-1], [-1], [-1], [-1]]),
        (GemmSpec("L3.o_proj", m=32, k=768, n=1024, batch=2), other, []),
    ]
    replayed = get_partition(strategy)
    direct = get_partition(strategy)
    graph, outputs = build(replayed.lower, calls)
    expected, expected_outputs = build(direct._lower, calls)
    assert graph.tasks == expected.tasks  # dataclass equality: every field, ops included
    assert [task.id for task in graph.tasks] == list(range(len(graph)))
    assert outputs == expected_outputs
    assert graph.signature() == expected.signature()


def test_invalid_dependencies_still_raise():
    graph = TaskGraph()
    with pytest.raises(MappingError):
        get_partition("k").lower(graph, GemmSpec("g", m=8, k=64, n=64), place("ring", 4),
                                 {0: [7]}, WIDTH)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=str)
def test_a_cores_loads_queue_in_program_order_across_operators(strategy):
    # One DMA queue per core: the second GEMM's first weight tile waits for the first
    # GEMM's last one on the same core (so a stage does not issue every operator's
    # first tiles at once), whether the lowering is replayed or not.
    group = place("ring", 4)
    gemms = [GemmSpec(f"L0.{name}", m=64, k=1024, n=768, weights_in="hbm",
                      weight_tile_bytes=1 << 16) for name in ("q_proj", "k_proj")]
    for lower in (get_partition(strategy).lower, get_partition(strategy)._lower):
        graph, _ = build(lower, [(gemm, group, [[0], [1], [2], [3]]) for gemm in gemms])
        for core in group.cores:
            loads = [t for t in graph.tasks if getattr(t, "src", "") == f"core{core}.hbm"]
            firsts = [next(t for t in loads if t.name.startswith(g.name)) for g in gemms]
            lasts = [[t for t in loads if t.name.startswith(g.name)][-1] for g in gemms]
            assert lasts[0].id in firsts[1].deps
            assert graph.dma_tails[core] == lasts[1].id


def test_tile_buffers_are_shared_across_operators():
    # Two tile buffers per core for the whole graph (what the SRAM plan reserves): the
    # second GEMM's first tile loads once the first GEMM's next-to-last tile has been
    # multiplied, whether the lowering is replayed or not.
    group = place("ring", 4)
    gemms = [GemmSpec(f"L0.{name}", m=64, k=1024, n=768, weights_in="hbm",
                      weight_tile_bytes=1 << 16) for name in ("q_proj", "k_proj", "v_proj")]
    k = get_partition("k")
    for lower in (k.lower, k._lower):
        graph, _ = build(lower, [(gemm, group, [[0], [1], [2], [3]]) for gemm in gemms])
        for core in group.cores:
            loads = [t for t in graph.tasks if getattr(t, "src", "") == f"core{core}.hbm"]
            users = {t.id: [u.id for u in graph.tasks if t.id in u.deps
                            and getattr(u, "unit", "") == f"core{core}.sa"] for t in loads}
            assert all(len(ids) == 1 for ids in users.values())
            for before, load in zip(loads, loads[2:]):
                assert users[before.id][0] in load.deps, load.name
            assert graph.tile_slots[core] == [users[t.id][0] for t in loads[-2:]]
