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
