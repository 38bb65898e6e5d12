"""Task-graph IR and collective expansion."""

import pytest

from npusim.core.errors import MappingError
from npusim.mapping.collectives import expand_collectives
from npusim.mapping.taskgraph import ComputeTask, HostTask, Op, TaskGraph, TransferTask

pytestmark = pytest.mark.unit


def test_ids_are_dense_and_deps_must_exist():
    graph = TaskGraph()
    a = graph.transfer("core0.hbm", "core0.sram", 1024)
    b = graph.compute("core0.sa", Op("gemm", m=4, k=8, n=16), [a])
    assert (a, b) == (0, 1)
    assert graph.sinks() == [1]
    with pytest.raises(MappingError, match="unknown task 7"):
        graph.compute("core0.sa", Op("gemm"), [7])


def test_gemm_flops_and_bytes():
    op = Op("gemm", m=2, k=3, n=4, batch=5, dtype_bytes=2)
    assert op.flops == 2 * 5 * 2 * 3 * 4
    assert op.input_bytes == 5 * (2 * 3 + 3 * 4) * 2
    assert op.output_bytes == 5 * 2 * 4 * 2


def test_signature_is_structural():
    def build(n):
        graph = TaskGraph()
        graph.compute("core0.sa", Op("gemm", m=1, k=2, n=n))
        return graph
    assert build(3).signature() == build(3).signature()
    assert build(3).signature() != build(4).signature()


def test_ring_allgather_expands_to_p_minus_1_steps_per_member():
    graph = TaskGraph()
    src = graph.host(0, name="start")
    graph.collective("allgather", ["core0", "core1", "core2", "core3"], 4096, [src])
    out = expand_collectives(graph, lambda endpoint: None)
    transfers = [t for t in out.tasks if isinstance(t, TransferTask)]
    assert len(transfers) == 4 * 3
    assert all(t.size_bytes == 1024 for t in transfers)
    assert isinstance(out.tasks[-1], HostTask) and out.tasks[-1].resource == "none"
    # step s of member i waits for what member i received in step s-1
    step1 = [t for t in transfers if ":ag1:" in t.name]
    assert all(len(t.deps) == 1 and isinstance(out.tasks[t.deps[0]], TransferTask) for t in step1)


def test_expansion_keeps_the_dma_queues_and_tile_buffers_on_their_tasks():
    # A chain part's prefetch profile reads when its last tiles were used, from the
    # expanded graph: the recorded ids must follow the tasks they name.
    graph = TaskGraph()
    start = graph.host(0, name="start")
    gathered = graph.collective("allgather", ["core0", "core1"], 4096, [start])
    load = graph.transfer("core0.hbm", "core0.sram", 64, [gathered], "tile")
    use = graph.host(5, [load], "use")
    graph.dma_tails[0], graph.tile_slots[0] = load, [gathered, use]
    out = expand_collectives(graph, lambda endpoint: None)
    assert out.tasks[out.dma_tails[0]].name == "tile"
    assert [out.tasks[task].name for task in out.tile_slots[0]] == [out.tasks[-3].name, "use"]
    assert out.tile_slots[0][0] != gathered  # the collective became several tasks


def test_broadcast_is_a_binomial_tree_of_log2_rounds():
    # It was a store-and-forward chain: P - 1 rounds of the whole message (63 for the
    # LM head's broadcast over 64 cores).
    graph = TaskGraph()
    src = graph.host(0, name="start")
    members = [f"core{i}" for i in range(6)]
    graph.collective("broadcast", members, 512, [src])
    out = expand_collectives(graph, lambda endpoint: None)
    transfers = {t.id: t for t in out.tasks if isinstance(t, TransferTask)}
    assert sorted((t.src, t.dst) for t in transfers.values()) == sorted(
        [("core0", "core1"), ("core0", "core2"), ("core1", "core3"),
         ("core0", "core4"), ("core1", "core5")])
    assert all(t.size_bytes == 512 for t in transfers.values())

    def rounds(task):  # transfers on the longest dependency path ending with ``task``
        return 1 + max((rounds(transfers[d]) for d in task.deps if d in transfers), default=0)
    assert max(rounds(t) for t in transfers.values()) == 3           # ceil(log2 6)
    assert set(out.tasks[-1].deps) == set(transfers)                 # the join waits for all


def test_ring_allreduce_adds_reductions_on_the_receiver():
    graph = TaskGraph()
    graph.collective("allreduce", ["core0", "core1"], 2048)
    out = expand_collectives(graph, lambda endpoint: f"{endpoint}.vec", dtype_bytes=2)
    adds = [t for t in out.tasks if isinstance(t, ComputeTask)]
    assert [t.unit for t in adds] == ["core1.vec", "core0.vec"]
    assert adds[0].op.elements == 1024 // 2


def test_bad_collective_is_a_clear_error():
    graph = TaskGraph()
    graph.collective("allgather", ["core0", "core0"], 64)
    with pytest.raises(MappingError, match="twice"):
        expand_collectives(graph, lambda e: None)
    graph = TaskGraph()
    graph.collective("gossip", ["core0", "core1"], 64)
    with pytest.raises(MappingError, match="unknown kind 'gossip'"):
        expand_collectives(graph, lambda e: None)
