"""How a TP group splits a layer's attention heads, and which KV each core then needs.

Each core takes a contiguous range of query heads (the first ``heads % tp`` cores one
more).  With grouped-query attention a core needs the keys and values of every KV head
that one of its query heads reads, so when ``tp`` exceeds the KV heads, or a core's
range cuts a KV group (Qwen3-4B's 32 query / 8 KV heads over TP 7: ranges of 5 and 4
heads, the busiest core reads 2 of the 8 KV heads), those KV heads are held and read on
more than one core, as vLLM replicates KV heads when TP exceeds them.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def head_split(num_heads: int, num_kv_heads: int, tp: int) -> tuple[tuple[int, int], ...]:
    """``(query heads, KV heads)`` of each of the ``tp`` cores, in core order."""
    group = max(1, num_heads // max(1, num_kv_heads))
    base, extra = divmod(num_heads, tp)
    out, start = [], 0
    for core in range(tp):
        count = base + (1 if core < extra else 0)
        kv = (start + count - 1) // group - start // group + 1 if count else 0
        out.append((count, kv))
        start += count
    return tuple(out)


def kv_bytes_on_core(total_bytes: int, kv_heads: int, num_kv_heads: int) -> int:
    """The part of ``total_bytes`` of KV (all KV heads) that belongs to ``kv_heads``."""
    return -(-total_bytes * kv_heads // max(1, num_kv_heads))


def busiest_kv_heads(model, tp: int) -> int:
    """The most KV heads one core of a TP group of ``tp`` needs (it sizes every core's
    KV budget: the cores of a stage share one memory plan)."""
    return max(kv for _, kv in head_split(model.num_attention_heads,
                                          model.num_key_value_heads, tp))
