"""NpuSim §4.2 memory manager: SRAM KV blocks, HBM ring, SRAM/HBM planning, fit check."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npusim.config.loader import scenario_from_dict
from npusim.core.errors import MappingError
from npusim.mapping.memory_manager import (CoreKvCache, HbmRingBuffer, KvAccess,
                                           OutOfMemoryError, SramBlockAllocator,
                                           UnknownRequestError, check_model_fits,
                                           check_model_fits_chip, hbm_capacity_bytes,
                                           plan_chip_memory, plan_core_memory, split_kv_access)
from npusim.workload.model_config import load_model

pytestmark = pytest.mark.unit

MIB = 1 << 20
GIB = 1 << 30


def npu(**hw):
    data = {"preset": "npu/large_core_64", **hw}
    return scenario_from_dict({"name": "t", "hw": data,
                               "workload": {"kind": "taskgraph",
                                            "tasks": [{"type": "host", "duration_ps": "1ns"}]}}).hw


# ------------------------------------------------------------------ SRAM block allocator
def test_blocks_interleave_across_requests_and_return_to_free_list():
    alloc = SramBlockAllocator(num_blocks=8, block_tokens=4)
    assert alloc.grow("r1", 4) == [0]          # request 1 alone: one full block
    assert alloc.grow("r2", 1) == [1]          # requests 2 and 3 arrive
    assert alloc.grow("r3", 5) == [2, 3]
    assert alloc.grow("r1", 1) == [4]          # r1 grows again: interleaved with r2, r3
    assert alloc.grow("r2", 3) == []           # fits in the slack of r2's block 1
    assert alloc.grow("r2", 1) == [5]
    assert alloc.blocks_of("r1") == (0, 4)
    assert alloc.blocks_of("r2") == (1, 5)
    assert alloc.tokens_of("r2") == 5 and alloc.slack_tokens_of("r2") == 3
    assert (alloc.used_blocks, alloc.free_blocks) == (6, 2)
    assert alloc.free("r1") == [0, 4]
    assert alloc.free_list() == (6, 7, 0, 4)   # freed blocks join the tail
    assert alloc.grow("r4", 9) == [6, 7, 0]
    assert (alloc.used_blocks, alloc.free_blocks) == (7, 1)


def test_grow_is_all_or_nothing_and_partial_grow_stores_what_fits():
    alloc = SramBlockAllocator(num_blocks=2, block_tokens=4)
    alloc.grow("a", 3)
    with pytest.raises(OutOfMemoryError, match="needs 2 more block") as exc:
        alloc.grow("a", 6)                     # 1 slack + 4 per free block = 5 < 6
    assert (exc.value.needed, exc.value.available) == (2, 1)
    assert alloc.tokens_of("a") == 3 and alloc.free_blocks == 1
    assert alloc.grow_partial("a", 6) == (5, [1])
    assert alloc.tokens_of("a") == 8 and alloc.free_blocks == 0
    assert alloc.grow_partial("b", 3) == (0, [])


def test_double_free_and_unknown_request_raise():
    alloc = SramBlockAllocator(num_blocks=4, block_tokens=2)
    alloc.grow(7, 3)
    alloc.free(7)
    with pytest.raises(UnknownRequestError, match="already freed"):
        alloc.free(7)
    with pytest.raises(UnknownRequestError, match="unknown request 'nope'"):
        alloc.blocks_of("nope")
    assert alloc.grow(7, 1) == [2]             # a freed id may be reused


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 20)), max_size=60))
def test_used_plus_free_blocks_is_conserved(ops):
    alloc = SramBlockAllocator(num_blocks=12, block_tokens=4)
    for is_grow, request, tokens in ops:
        if is_grow:
            try:
                alloc.grow(request, tokens)
            except OutOfMemoryError:
                pass
        elif alloc.has(request):
            alloc.free(request)
        owned = [b for r in alloc.requests for b in alloc.blocks_of(r)]
        assert alloc.used_blocks + alloc.free_blocks == alloc.num_blocks
        assert len(owned) == alloc.used_blocks
        assert sorted(owned + list(alloc.free_list())) == list(range(12))  # no block lost or shared
        for r in alloc.requests:
            assert 0 <= alloc.slack_tokens_of(r) < alloc.block_tokens or alloc.tokens_of(r) == 0


# ------------------------------------------------------------------ HBM ring buffer
def test_ring_wraps_around_and_reclaims_only_from_the_tail():
    ring = HbmRingBuffer(capacity_bytes=1000, base_addr=0x2000)
    assert ring.allocate("A", 300) == 0x2000
    assert ring.allocate("B", 300) == 0x2000 + 300
    assert ring.allocate("C", 300) == 0x2000 + 600
    assert not ring.can_allocate(200)          # 100 B at the end, nothing before A
    ring.free("B")                             # out of order: B becomes a hole
    assert (ring.used_bytes, ring.reserved_bytes, ring.fragmented_bytes) == (600, 900, 300)
    assert not ring.can_allocate(200)          # the hole is not reusable yet
    with pytest.raises(OutOfMemoryError, match="largest placeable is 100 B"):
        ring.allocate("D", 200)
    ring.free("A")                             # the tail advances over A and the hole B
    assert ring.requests == ("C",)
    assert ring.allocate("D", 200) == 0x2000   # wraps: 100 B at the end are skipped
    assert ring.reserved_bytes == 300 + 100 + 200  # C, the wrap gap, D
    assert ring.fragmented_bytes == 100
    assert ring.allocate("E", 350) == 0x2000 + 200
    assert not ring.can_allocate(100)          # only 50 B left between E and C
    ring.free("C")                             # tail wraps to D
    assert ring.reserved_bytes == 550 and ring.free_bytes == 450
    assert ring.allocate("F", 450) == 0x2000 + 550


def test_ring_alignment_newest_free_and_errors():
    ring = HbmRingBuffer(capacity_bytes=4096, alignment_bytes=1024)
    ring.allocate("a", 1)
    assert ring.size_of("a") == 1024
    ring.allocate("b", 1500)
    assert ring.address_of("b") == 1024 and ring.size_of("b") == 2048
    ring.free("b")                             # the newest: the head steps back, no hole
    assert ring.reserved_bytes == 1024 and ring.largest_allocatable_bytes() == 3072
    with pytest.raises(UnknownRequestError, match="already freed"):
        ring.free("b")
    with pytest.raises(ValueError, match="already holds"):
        ring.allocate("a", 10)
    ring.free("a")
    assert ring.reserved_bytes == 0 and ring.allocate("c", 4096) == 0
    assert not ring.can_allocate(1)


# ------------------------------------------------------------------ KV access split
def test_kv_split_reads_sram_prefix_then_hbm_and_writes_across_the_boundary():
    access = split_kv_access(context_tokens=100, new_tokens=8, sram_tokens=104, kv_bytes_per_token=10)
    assert access == KvAccess(read_sram_bytes=1000, read_hbm_bytes=0,
                              write_sram_bytes=40, write_hbm_bytes=40)
    spilled = split_kv_access(context_tokens=300, new_tokens=1, sram_tokens=128, kv_bytes_per_token=10)
    assert (spilled.read_sram_bytes, spilled.read_hbm_bytes) == (1280, 1720)
    assert (spilled.write_sram_bytes, spilled.write_hbm_bytes) == (0, 10)
    assert spilled.hbm_bytes == 1730
    assert split_kv_access(5, 3, 0, 2) == KvAccess(0, 10, 0, 6)


def test_core_kv_cache_spills_to_the_requests_hbm_buffer():
    plan = plan_core_memory(sram_capacity_bytes=1000, hbm_capacity_bytes=10_000, buffer_bytes=200,
                            weights=[], kv_bytes_per_token=10, kv_sram_tokens=80, block_tokens=4)
    assert plan.kv_sram_blocks == 20 and plan.kv_sram_tokens == 80
    kv = CoreKvCache(plan)
    assert kv.admit("r1", max_tokens=100) == 0
    assert kv.admit("r2", max_tokens=100) == 1000
    first = kv.step("r1", 50)                  # prefill: 50 tokens, all in SRAM
    assert first == KvAccess(0, 0, 500, 0)
    kv.append("r2", 10)                        # r1 13 blocks, r2 3 blocks, 4 left
    grow = kv.step("r1", 20)                   # 2 slack + 4 blocks x 4 = 18 in SRAM, 2 spill
    assert grow == KvAccess(read_sram_bytes=500, write_sram_bytes=180, write_hbm_bytes=20)
    assert kv.placement("r1").sram_tokens == 68 and kv.placement("r1").hbm_tokens == 2
    assert kv.sram.free_blocks == 0
    kv.release("r2")                           # blocks come back ...
    assert kv.append("r1", 1) == KvAccess(write_hbm_bytes=10)  # ... but r1 keeps spilling
    assert kv.read("r1") == KvAccess(read_sram_bytes=680, read_hbm_bytes=30)
    with pytest.raises(ValueError, match="exceed its max_tokens 100"):
        kv.append("r1", 30)
    kv.release("r1")
    assert kv.sram.free_blocks == 20 and kv.hbm.used_bytes == 0
    with pytest.raises(UnknownRequestError):
        kv.release("r1")


def test_core_kv_cache_without_hbm_refuses_to_spill_atomically():
    plan = plan_core_memory(sram_capacity_bytes=1000, hbm_capacity_bytes=0, buffer_bytes=0,
                            weights=[], kv_bytes_per_token=10, kv_sram_tokens=8, block_tokens=4)
    kv = CoreKvCache(plan)
    assert kv.admit("r", 100) is None
    kv.append("r", 6)
    with pytest.raises(OutOfMemoryError, match="no HBM KV space"):
        kv.append("r", 3)
    assert kv.placement("r").sram_tokens == 6


def test_admission_is_refused_when_the_ring_is_full():
    plan = plan_core_memory(sram_capacity_bytes=0, hbm_capacity_bytes=2500, buffer_bytes=0,
                            weights=[], kv_bytes_per_token=10, kv_sram_tokens=0)
    kv = CoreKvCache(plan)
    kv.admit("a", 100)
    kv.admit("b", 100)
    assert not kv.can_admit(100)
    with pytest.raises(OutOfMemoryError):
        kv.admit("c", 100)
    assert plan.hbm_kv_requests(100) == 2


# ------------------------------------------------------------------ planning
WEIGHTS = [("l0.qkv", 300), ("l0.o", 100), ("l0.mlp", 500), ("l1.qkv", 300), ("l1.o", 100)]


def test_priority_buffers_then_kv_then_weights():
    plan = plan_core_memory(sram_capacity_bytes=1000, hbm_capacity_bytes=5000, buffer_bytes=250,
                            weights=WEIGHTS, kv_bytes_per_token=5, kv_sram_tokens=40,
                            block_tokens=8)
    # buffers 250, KV 5 blocks x 40 B = 200, weights first-fit in lowering order into 550:
    # l0.qkv (300) + l0.o (100) fit, l0.mlp (500) does not, l1.qkv (300) does not, l1.o fits.
    assert plan.kv_sram_blocks == 5 and plan.kv_sram_bytes == 200
    assert [n for n, _ in plan.sram_weights] == ["l0.qkv", "l0.o", "l1.o"]
    assert [n for n, _ in plan.hbm_weights] == ["l0.mlp", "l1.qkv"]
    assert plan.sram_free_bytes == 50 and plan.sram_used_bytes == 950
    assert plan.hbm_weight_bytes == 800 and plan.hbm_kv_capacity_bytes == 4200
    assert plan.weight_location("l0.mlp") == "hbm" and plan.weight_location("l1.o") == "sram"
    # More KV demand squeezes weights out, never buffers: KV comes before weights.
    greedy = plan_core_memory(sram_capacity_bytes=1000, hbm_capacity_bytes=5000, buffer_bytes=250,
                              weights=WEIGHTS, kv_bytes_per_token=5, kv_sram_tokens=10_000,
                              block_tokens=8)
    assert greedy.kv_sram_blocks == 750 // 40 and greedy.sram_weights == ()
    assert greedy.buffer_bytes == 250
    assert "core None" in greedy.describe() or "core" in greedy.describe()


def test_largest_first_order_and_validation():
    common = dict(sram_capacity_bytes=800, hbm_capacity_bytes=5000, buffer_bytes=0,
                  weights=WEIGHTS, kv_bytes_per_token=0, kv_sram_tokens=0)
    largest = plan_core_memory(**common, weight_order="largest_first")
    assert [n for n, _ in largest.sram_weights] == ["l0.qkv", "l0.mlp"]  # listed in lowering order
    lowering = plan_core_memory(**common)
    assert [n for n, _ in lowering.sram_weights] == ["l0.qkv", "l0.o", "l1.qkv", "l1.o"]
    assert largest.sram_free_bytes == lowering.sram_free_bytes == 0
    with pytest.raises(ValueError, match="weight_order"):
        plan_core_memory(**common, weight_order="random")
    with pytest.raises(ValueError, match="unique"):
        plan_core_memory(sram_capacity_bytes=1, hbm_capacity_bytes=1, buffer_bytes=0,
                         weights=[("w", 1), ("w", 2)], kv_bytes_per_token=1, kv_sram_tokens=0)


def test_plan_errors_state_the_shortfall():
    with pytest.raises(MappingError, match=r"buffers need 96\.0 MiB .* short by 32\.0 MiB"):
        plan_core_memory(sram_capacity_bytes=64 * MIB, hbm_capacity_bytes=0, buffer_bytes=96 * MIB,
                         weights=[], kv_bytes_per_token=1, kv_sram_tokens=0, core=3)
    with pytest.raises(MappingError, match=r"core 2: its weights take 100\.0 MiB .* short by 36\.0 MiB"):
        plan_core_memory(sram_capacity_bytes=MIB, hbm_capacity_bytes=64 * MIB, buffer_bytes=0,
                         weights=[("w", 100 * MIB)], kv_bytes_per_token=1, kv_sram_tokens=0, core=2)
    with pytest.raises(MappingError, match="KV for 2048 tokens"):
        plan_core_memory(sram_capacity_bytes=MIB, hbm_capacity_bytes=0, buffer_bytes=0, weights=[],
                         kv_bytes_per_token=1024, kv_sram_tokens=2048, min_kv_tokens=2048)


def test_plan_chip_memory_uses_the_npu_capacities():
    hw = npu()
    per_core_hbm = hbm_capacity_bytes(hw.hbm)
    assert per_core_hbm == 4 * GIB             # 4 HBM2E pseudo-channels of 1 GiB
    assert hbm_capacity_bytes(None) == 0
    plans = plan_chip_memory(hw, [0, 1, 9, 8],
                             {0: [("w", 80 * MIB)], 1: [("w", 10 * MIB)]},
                             buffer_bytes=8 * MIB, kv_bytes_per_token={0: 1024, 1: 1024, 9: 0, 8: 0},
                             kv_sram_tokens=4096)
    assert list(plans) == [0, 1, 9, 8]
    assert plans[0].kv_sram_bytes == 4 * MIB and plans[0].hbm_weights == (("w", 80 * MIB),)
    assert plans[1].sram_weights == (("w", 10 * MIB),)
    assert plans[9].kv_sram_blocks == 0 and plans[9].sram_capacity_bytes == 64 * MIB
    assert plans[0].hbm_kv_capacity_bytes == per_core_hbm - 80 * MIB
    with pytest.raises(MappingError, match="core 64 does not exist"):
        plan_chip_memory(hw, [64], {}, buffer_bytes=0, kv_bytes_per_token=0, kv_sram_tokens=0)


# ------------------------------------------------------------------ whole-chip fit check
def _gib_in(message: str, label: str) -> float:
    return float(re.search(label + r" ([0-9.]+) GiB", message).group(1))


def test_model_that_fits_returns_headroom():
    model = load_model("qwen3_4b")
    headroom = check_model_fits_chip(model, npu(), context_tokens=2048)
    total = 64 * (64 * MIB + 4 * GIB)
    need = model.weight_bytes(2) + 2048 * model.kv_bytes_per_token(2)
    assert headroom == total - need > 0


def test_model_that_does_not_fit_names_the_shortfall():
    model = load_model("qwen3_32b")
    with pytest.raises(MappingError) as exc:
        check_model_fits_chip(model, npu(hbm=None), context_tokens=2048)
    message = str(exc.value)
    # The weights alone overflow: the message says so and leaves the KV out.
    assert message.startswith(f"{model.name} needs ")
    assert "of weights before any KV" in message and "request at" not in message
    assert "4.0 GiB SRAM + 0.0 GiB HBM" in message
    assert _gib_in(message, "short by") == pytest.approx(
        (model.weight_bytes(2) - 4 * GIB) / GIB, abs=0.05)
    assert "add HBM (hw.hbm)" in message


def test_kv_that_does_not_fit_beside_the_weights_names_the_request():
    with pytest.raises(MappingError) as exc:
        check_model_fits(3 * GIB, 2 * GIB, 4 * GIB, 0, kv_tokens=2048)
    message = str(exc.value)
    assert "3.0 GiB of weights + 2.0 GiB of KV for one request at 2048 tokens" in message
    assert _gib_in(message, "short by") == pytest.approx(1.0, abs=0.01)


def test_check_model_fits_counts_reserved_sram():
    assert check_model_fits(GIB, 0, 2 * GIB, 0) == GIB
    with pytest.raises(MappingError, match=r"1\.5 GiB of it reserved for buffers.*short by 512\.0 MiB"):
        check_model_fits(GIB, 0, 2 * GIB, 0, reserved_sram_bytes=3 * GIB // 2)


def test_check_model_fits_names_a_batch_and_buffers_larger_than_the_sram():
    with pytest.raises(MappingError, match=r"KV for 8 requests at 100 tokens each"):
        check_model_fits(GIB, 8 * GIB, 2 * GIB, 0, kv_tokens=100, kv_requests=8)
    with pytest.raises(MappingError, match=r"buffers need 3\.0 GiB of SRAM but the chip has 2\.0 GiB"):
        check_model_fits(GIB, 0, 2 * GIB, 8 * GIB, reserved_sram_bytes=3 * GIB)


def test_weights_that_need_more_hbm_name_what_the_sram_held_and_what_took_the_hbm():
    common = dict(sram_capacity_bytes=1 << 20, buffer_bytes=0, kv_bytes_per_token=0,
                  kv_sram_tokens=0, core=0,
                  weights=[("a", 1 << 20), ("b", 1 << 20), ("c", 1 << 20)])
    with pytest.raises(MappingError) as info:
        plan_core_memory(hbm_capacity_bytes=3 << 20, hbm_reserved_bytes=2 << 20,
                         hbm_reserved_for="the embedding table", **common)
    message = str(info.value)
    assert "its weights take 3.0 MiB (3 tensors)" in message
    assert "holding 1.0 MiB of them (whole tensors), so 2.0 MiB (2 tensors) must stream" in message
    assert "1.0 MiB of HBM for them (3.0 MiB less 2.0 MiB for the embedding table)" in message
    with pytest.raises(MappingError, match=r"the core has no HBM \(hw.hbm is not set\)"):
        plan_core_memory(hbm_capacity_bytes=0, **common)


def test_data_reserved_in_hbm_that_exceeds_it_is_an_error_even_when_the_weights_fit_sram():
    # The first stage's embedding table lives in HBM; larger than the HBM it was accepted
    # whenever every other weight fitted in SRAM.
    with pytest.raises(MappingError, match=r"core 3: the embedding table takes 5\.0 MiB of "
                                           r"HBM, but the core has 4\.0 MiB: short by 1\.0 MiB"):
        plan_core_memory(sram_capacity_bytes=8 << 20, hbm_capacity_bytes=4 << 20,
                         buffer_bytes=0, kv_bytes_per_token=0, kv_sram_tokens=0, core=3,
                         weights=[("a", 1 << 20)], hbm_reserved_bytes=5 << 20,
                         hbm_reserved_for="the embedding table")
