"""Prefix caching in the serving engine: hits skip prefill work, count once, live on the
replicas that prefill, and bad combinations are configuration errors."""

import pytest

from npusim.api import simulate
from npusim.core.errors import ConfigError, MappingError

pytestmark = pytest.mark.component

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
# 60 requests, 600-1200-token prompts, 80% of them opening with one of two 512-token
# system prompts (blocks of 16 tokens)
SHARED = ("workload.trace={arrival: {kind: poisson, rate_per_s: 10}, prompt: {kind: uniform, "
          "low: 600, high: 1200}, output: 8, num_requests: 60, seed: 4, "
          "shared_prefix: {groups: 2, tokens: 512, share: 0.8}}")
SMALL = "workload.model=qwen3_1_7b"


def run(scenario, *extra, caching=True):
    return simulate(scenario, mode="analytic",
                    overrides=[SMALL, SHARED, f"workload.prefix_caching={str(caching).lower()}",
                               *extra])


@pytest.fixture(scope="module")
def fused():
    return run(FUSION), run(FUSION, caching=False)


def test_cached_prefixes_are_not_computed_again_and_shorten_the_time_to_first_token(fused):
    cached, plain = fused
    m, req = cached.metrics, cached.requests
    assert (req["status"] == "finished").all() and m["preemptions"] == 0
    assert m["prefix_cache_hit_tokens"] == req["prefix_cached_tokens"].sum() > 0
    # every prompt token is computed once, except those found cached
    it = cached.table("iterations")
    computed = (it["prefill_tokens"] + it["decode_requests"]).sum()
    assert computed == (req["prompt_tokens"] + req["output_tokens"] - 1
                        - req["prefix_cached_tokens"]).sum()
    # a hit is whole 16-token blocks of the shared 512 (at most), and never a whole prompt
    hits = req["prefix_cached_tokens"]
    assert (hits % 16 == 0).all() and (hits <= 512).all() and (hits < req["prompt_tokens"]).all()
    # no more than an unbounded cache would reuse, and most of it (the KV holds them all):
    # docs/serving.md, trace.stats()["reusable_prompt_share"] bounds the hit rate (0.51
    # here; the hits fall short only where a request arrives while the first of its group
    # is still prefilling the shared blocks)
    assert m["prefix_cache_hit_rate"] == pytest.approx(
        hits.sum() / req["prompt_tokens"].sum())
    assert m["prefix_cache_evicted_blocks"] == 0
    from npusim.config.loader import load_scenario

    bound = load_scenario(FUSION, [SMALL, SHARED]).workload.trace.build().stats()[
        "reusable_prompt_share"]
    assert 0.9 * bound <= m["prefix_cache_hit_rate"] <= bound
    assert plain.metrics["ttft_ms_mean"] > 1.2 * m["ttft_ms_mean"]
    assert plain.metrics["prefix_cache_hit_tokens"] == 0
    assert (plain.requests["prefix_cached_tokens"] == 0).all()


def test_the_same_trace_without_caching_runs_every_token(fused):
    _, plain = fused
    it, req = plain.table("iterations"), plain.requests
    assert (it["prefill_tokens"] + it["decode_requests"]).sum() == \
        (req["prompt_tokens"] + req["output_tokens"] - 1).sum()


def test_disaggregation_caches_on_the_prefill_pool_and_hands_over_the_whole_kv():
    split = ["workload.pd.prefill_cores=32", "workload.pd.decode_cores=32", "workload.pd.tp=4"]
    result = run(DISAGG, *split)
    plain = run(DISAGG, *split, caching=False)
    req, it = result.requests, result.table("iterations")
    assert (req["status"] == "finished").all()
    assert result.metrics["prefix_cache_hit_tokens"] > 0
    assert (it.loc[it["role"] == "decode", "requests"] > 0).all()
    # The prefill pool computes less: no more than its uncached prompt tokens (plus the
    # one token left after a hit that is shaped as a decode step).
    prefill = it[it["role"] == "prefill"]
    assert (prefill["prefill_tokens"] + prefill["decode_requests"]).sum() == \
        (req["prompt_tokens"] - req["prefix_cached_tokens"]).sum()
    # The decode pool reads the whole prompt's KV, hit or not: each request's decode steps
    # see the same contexts as without caching, whatever the batching, so the pool's
    # summed context is the same; and each hand-over moves the same KV (the same time on
    # an idle NoC) as it does without caching.
    decode_context = {name: r.table("iterations").query("role == 'decode'")["context_tokens"].sum()
                      for name, r in (("cached", result), ("plain", plain))}
    assert decode_context["cached"] == decode_context["plain"]

    def handovers(r):
        kv = r.segments[r.segments["label"].str.startswith("kv ")]
        return dict(zip(kv["label"].str.split().str[1], kv["end_ps"] - kv["start_ps"]))
    assert len(handovers(result)) == len(req)   # one each (8 output tokens: all decode)
    assert handovers(result) == handovers(plain)


def test_kv_blocks_must_tile_the_cached_prompt_blocks():
    with pytest.raises(MappingError, match=r"kv_block_tokens = 24 does not divide the trace's "
                                           r"hash block of 16 tokens"):
        run(FUSION, "workload.kv_block_tokens=24")
    assert run(FUSION, "workload.kv_block_tokens=16").metrics["prefix_cache_hit_tokens"] > 0


def test_prefix_caching_needs_a_trace_that_names_its_blocks():
    with pytest.raises(MappingError, match="no request of the trace .* names its prompt blocks"):
        simulate(FUSION, mode="analytic", overrides=[SMALL, "workload.trace.limit=4",
                                                     "workload.prefix_caching=true"])


def test_prefix_caching_with_chunks_that_keep_no_kv_is_a_config_error():
    with pytest.raises(ConfigError, match="chunk_kv: recompute keeps none"):
        run(FUSION, "workload.scheduler={kind: chunked_prefill, chunk_kv: recompute}")
