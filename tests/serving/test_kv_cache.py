"""KvPool: block-granular reservations and the prefix cache's books."""

import pytest

from npusim.serving.kv_cache import KvPool

pytestmark = pytest.mark.unit


class Req:
    """A stand-in for RequestState (the pool only needs identity and an id)."""

    def __init__(self, name):
        self.id = name


def test_reservations_are_charged_in_whole_blocks_and_capacity_rounds_down():
    pool = KvPool(capacity_tokens=100, block_tokens=16)
    assert pool.capacity_tokens == 96          # six blocks; 4 tokens hold no block
    a = Req("a")
    pool.reserve(a, 17)                        # two blocks
    assert pool.used_tokens == 32 and pool.free_tokens == 64
    assert pool.growth_cost(a) == 0            # the second block has room
    for _ in range(15):
        pool.grow(a)
    assert pool.used_tokens == 32 and pool.growth_cost(a) == 16
    pool.grow(a)                               # token 33 opens a third block
    assert pool.used_tokens == 48
    assert pool.release(a) == 48 and pool.used_tokens == 0


def test_one_token_blocks_charge_exactly():
    pool = KvPool(capacity_tokens=10)
    a = Req("a")
    pool.reserve(a, 7)
    pool.grow(a)
    assert pool.used_tokens == 8 and pool.free_tokens == 2


def test_reserving_beyond_capacity_is_caught():
    pool = KvPool(capacity_tokens=32, block_tokens=16)
    pool.reserve(Req("a"), 20)
    with pytest.raises(AssertionError, match="beyond its capacity"):
        pool.reserve(Req("b"), 1)


# -- prefix cache ------------------------------------------------------------------------

def cached_pool(capacity=64, block=16):
    """A pool whose prefix blocks are 16 tokens (KV blocks of 1 token)."""
    return KvPool(capacity_tokens=capacity, block_tokens=1, prefix_block_tokens=block)


def test_a_prefilled_prompt_block_is_shared_by_the_next_request_and_held_once():
    pool = cached_pool()
    a, b = Req("a"), Req("b")
    pool.reserve(a, 40)                       # 40 prompt tokens: two full blocks of 16
    pool.cache_prefilled(a, (10, 11), 40)
    assert pool.used_tokens == 40             # moved from a's own KV to cached blocks
    assert pool.match((10, 11, 12)) == 2 and pool.match((12, 10)) == 0  # keys are chained
    # b starts with both blocks: it reserves only the rest
    assert pool.admission_cost(40, (10, 11), 2) == 8
    pool.reserve(b, 40, (10, 11), 2)
    assert pool.used_tokens == 48
    pool.release(a)
    assert pool.used_tokens == 40             # b still holds the shared blocks
    pool.release(b)
    assert pool.used_tokens == 0 and pool.cached_idle_tokens == 32
    assert pool.free_tokens == 64             # unreferenced cached blocks count as free
    # taking an unreferenced block back costs its room again
    assert pool.admission_cost(40, (10, 11), 2) == 8 + 32


def test_unreferenced_blocks_are_evicted_least_recently_used_first_deepest_first():
    pool = cached_pool(capacity=64)
    a, b = Req("a"), Req("b")
    pool.reserve(a, 32)
    pool.cache_prefilled(a, (1, 2), 32)
    pool.release(a)                           # idle: 2 then 1 (deepest first)
    pool.reserve(b, 16)
    pool.cache_prefilled(b, (3,), 16)
    pool.release(b)                           # idle: 2, 1, 3
    pool.reserve(Req("c"), 32)                # 32 + 48 cached > 64: evict one block
    assert pool.evicted_blocks == 1
    assert pool.match((1, 2)) == 1 and pool.match((3,)) == 1   # block 2 went first
    pool.reserve(Req("d"), 16)
    assert pool.match((1,)) == 0 and pool.match((3,)) == 1     # then 1, the older


def test_a_batch_keeps_the_blocks_it_counted_on_until_all_its_requests_hold_them():
    pool = cached_pool(capacity=64)
    a, d = Req("a"), Req("d")
    pool.reserve(a, 32)
    pool.cache_prefilled(a, (1, 2), 32)
    pool.release(a)
    pool.reserve(d, 16)
    pool.cache_prefilled(d, (3,), 16)
    pool.release(d)                           # idle, oldest first: 2, 1, 3
    # one batch: c reserves 17 new tokens, then b takes blocks 1 and 2.  Reserved one by
    # one, c's room (17 + 48 cached > 64) would evict block 2, which b was promised.
    b, c = Req("b"), Req("c")
    assert pool.admission_cost(17, (), 0) + pool.admission_cost(33, (1, 2), 2) <= pool.free_tokens
    with pool.batch():
        pool.reserve(c, 17)
        pool.reserve(b, 33, (1, 2), 2)
    assert pool.used_tokens == 17 + 32 + 1
    assert pool.evicted_blocks == 1 and pool.match((3,)) == 0 and pool.match((1, 2)) == 2


def test_a_block_another_request_cached_first_stays_private():
    pool = cached_pool(capacity=128)
    a, b = Req("a"), Req("b")
    pool.reserve(a, 16)
    pool.reserve(b, 16)                       # both computing the same block at once
    pool.cache_prefilled(a, (7,), 16)
    pool.cache_prefilled(b, (7,), 16)
    assert pool.used_tokens == 32             # two copies, one of them shared
    pool.release(a)
    pool.release(b)
    assert pool.used_tokens == 0 and pool.cached_idle_tokens == 16


def test_a_holder_is_kept_alive_so_a_new_request_never_inherits_its_reservation():
    # The pool keys reservations by id(); without a reference to the holder, a request
    # object freed while it holds KV could hand its id to the next one ("already holds").
    pool = KvPool(capacity_tokens=10**4, block_tokens=1)
    for i in range(1000):
        pool.reserve(Req(f"r{i}"), 1)            # nobody else keeps these alive
    assert pool.used_tokens == 1000
