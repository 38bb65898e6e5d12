"""Attention heads over a TP group and the KV each core needs (grouped-query attention)."""

import pytest

from npusim.strategies.npu.heads import busiest_kv_heads, head_split, kv_bytes_on_core
from npusim.workload.models import load_model

pytestmark = pytest.mark.unit


def test_head_ranges_cover_every_query_head_once():
    for heads, kv, tp in ((32, 8, 7), (32, 8, 5), (16, 8, 32), (40, 8, 6), (32, 32, 4)):
        split = head_split(heads, kv, tp)
        assert len(split) == tp and sum(q for q, _ in split) == heads
        assert all(1 <= k <= q for q, k in split if q) and all(k == 0 for q, k in split if not q)


def test_a_range_that_cuts_a_kv_group_needs_both_kv_heads():
    # Qwen3-4B: 32 query heads in 8 groups of 4.  TP 4 and 8 line up with the groups;
    # TP 5 gives ranges of 7, 7, 6, 6, 6 heads and the second (heads 7-13) reads 3 groups;
    # TP 16 gives 2 heads a core, both from one group, so each KV head sits on 2 cores.
    assert head_split(32, 8, 4) == ((8, 2),) * 4
    assert head_split(32, 8, 5) == ((7, 2), (7, 3), (6, 2), (6, 2), (6, 2))
    assert head_split(32, 8, 16) == ((2, 1),) * 16
    model = load_model("qwen3_4b")
    assert [busiest_kv_heads(model, tp) for tp in (1, 4, 5, 7, 8, 16, 32)] == [8, 2, 3, 2, 1, 1, 1]
    # KV per core: 1/8 of the layer's on TP 16 (replicated), not 1/16; 2/8 on TP 7, not 1/7.
    assert kv_bytes_on_core(8192, busiest_kv_heads(model, 16), 8) == 1024
    assert kv_bytes_on_core(8192, busiest_kv_heads(model, 7), 8) == 2048
