"""Core placements: group membership, ring hop counts, tiling."""

import pytest

from npusim.core import registry
from npusim.core.errors import MappingError
from npusim.strategies.npu.placement import hamiltonian_cycle, interleave, ring_hops

pytestmark = pytest.mark.unit


def place(kind, width, height, tp, groups):
    return registry.lookup("placement", kind).impl(width, height, tp, groups)


@pytest.mark.parametrize("kind", ["linear_seq", "linear_interleave", "ring", "mesh2d"])
@pytest.mark.parametrize("width, tp", [(8, 4), (16, 16), (8, 8), (8, 2)])
def test_groups_partition_distinct_cores(kind, width, tp):
    groups = place(kind, width, width, tp, width * width // tp)
    cores = [core for group in groups for core in group.cores]
    assert sorted(cores) == list(range(width * width))
    assert all(len(group.cores) == tp for group in groups)


def test_interleaved_linear_never_needs_more_than_two_hops():
    # S004-048: WaferLLM's interleaving bounds every ring step at 2 hops.
    for tp in (4, 8, 16):
        group = place("linear_interleave", 16, 16, tp, 1)[0]
        assert max(ring_hops(group.cores, 16)) == 2
        seq = place("linear_seq", 16, 16, tp, 1)[0]
        assert max(ring_hops(seq.cores, 16)) == tp - 1


def test_ring_placement_is_one_hop_everywhere():
    for width, tp in ((8, 4), (16, 16), (8, 8), (8, 2)):
        for group in place("ring", width, width, tp, 2):
            assert set(ring_hops(group.cores, width)) == {1}


def test_mesh2d_groups_expose_a_grid():
    group = place("mesh2d", 16, 16, 16, 1)[0]
    assert (group.rows, group.cols) == (4, 4)
    assert sorted(c for row in group.grid for c in row) == sorted(group.cores)


def test_hamiltonian_cycle_and_interleave_helpers():
    cycle = hamiltonian_cycle(4, 3)
    assert len(set(cycle)) == 12
    steps = zip(cycle, cycle[1:] + cycle[:1])
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in steps)
    assert interleave([0, 1, 2, 3, 4, 5]) == [0, 2, 4, 5, 3, 1]


def test_too_many_cores_is_a_clear_error():
    with pytest.raises(MappingError, match="need 128 cores"):
        place("ring", 8, 8, 4, 32)
    with pytest.raises(MappingError, match="cannot tile"):
        place("ring", 8, 8, 3, 2)


@pytest.mark.parametrize("tp", [4, 8, 16, 32])
def test_linear_interleave_keeps_two_hops_when_a_group_spans_rows(tp):
    from npusim.strategies.npu.linear_interleave import linear_interleave
    from npusim.strategies.npu.placement import ring_hops

    groups = linear_interleave(8, 8, tp, 64 // tp)
    assert max(max(ring_hops(g.cores, 8)) for g in groups) <= 2
    assert sorted(c for g in groups for c in g.cores) == list(range(64))


@pytest.mark.parametrize("kind", ["linear_seq", "linear_interleave", "ring", "mesh2d"])
def test_groups_on_restricted_cores_use_only_those(kind):
    # The second PD pool is laid out on the cores the first one left free.
    free = [core for core in range(64) if not 16 <= core < 32]  # rows 2 and 3 taken
    groups = registry.lookup("placement", kind).impl(8, 8, 4, 12, cores=free)
    used = [core for group in groups for core in group.cores]
    assert len(used) == len(set(used)) == 48 and set(used) <= set(free)


def test_linear_groups_on_restricted_cores_jump_over_taken_ones():
    # tp=6 groups on the cores 21 central ones leave: runs of the snake line skip them.
    taken = set(range(21, 42))
    free = [core for core in range(64) if core not in taken]
    groups = registry.lookup("placement", "linear_interleave").impl(8, 8, 6, 7, cores=free)
    assert all(not taken.intersection(group.cores) for group in groups)
    with pytest.raises(MappingError, match="need 48 cores; 43 are free"):
        registry.lookup("placement", "linear_seq").impl(8, 8, 6, 8, cores=free)
    with pytest.raises(MappingError, match="whole blocks are free"):
        registry.lookup("placement", "ring").impl(8, 8, 4, 10, cores=free)
