"""KV accounting and preemption in the serving engine, and the rates' time base.

The engine asserts that no replica ever reserves more KV than it holds; these runs drive
it into the corners where that used to break: PD disaggregation with incremental
reservation and preemption, requests that fit one pool but not the other, recompute
victims a whole-prompt scheduler cannot take back, and one-token prompt chunks.
"""

import numpy as np
import pytest

from npusim.api import simulate

pytestmark = pytest.mark.component

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
# Qwen3-1.7B with 8-byte KV in 256 MiB of HBM per core and no SRAM for KV: the P42/D21
# decode replica holds 1,567 KV tokens, the prefill replica 7,018.
TIGHT = ["workload.model=qwen3_1_7b", "workload.kv_sram_fraction=0", "hw.hbm.rows=4096",
         "workload.kv_dtype_bytes=8"]
# 16 requests of 100 + 1000 tokens within ~2.5 s.
LONG = ["workload.trace.limit=16", "workload.trace.rate_scale=4",
        "workload.trace.file=traces/ratio_1_10_32.csv"]


def write_trace(path, rows):
    path.write_text("id,arrival_ps,prompt_tokens,output_tokens\n"
                    + "".join(f"{i},{t},{p},{o}\n" for i, t, p, o in rows))
    return f"workload.trace.file={path}"


def decode_concurrency(requests) -> int:
    """Most requests decoding at once (from their second token to their finish)."""
    spans = [(int(t.split()[1]), f) for t, f in zip(requests["token_times_ps"], requests["finish_ps"])]
    points = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    return int(np.max(np.cumsum([d for _, d in points])))


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_disaggregation_with_incremental_kv_preempts_and_finishes_every_request(preemption):
    host = ["hw.host={link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200, "
            "channels: 4}}"] if preemption == "swap" else []
    result = simulate(DISAGG, overrides=[*TIGHT, *LONG, *host, "workload.kv_reservation=incremental",
                                         f"workload.preemption={preemption}"])
    table = result.requests
    assert result.metrics["preemptions"] > 0
    # recompute victims go back to the prefill pool and are handed over again
    assert set(table["status"]) == {"finished"}
    assert (table["generated"] == table["output_tokens"]).all()
    # each request reserves a token once: several share the decode replica, where
    # their full lengths (1,100 tokens each) would not fit two at a time
    assert decode_concurrency(table) > 2


def test_max_length_reservation_holds_one_such_request_at_a_time():
    result = simulate(DISAGG, overrides=[*TIGHT, *LONG, "workload.trace.limit=4"])
    assert set(result.requests["status"]) == {"finished"}
    assert decode_concurrency(result.requests) == 1


def test_a_request_the_decode_pool_cannot_hold_is_rejected_on_arrival(tmp_path):
    # 2,000 tokens fit the prefill replica (7,018) but never the decode replica (1,567):
    # it must not sit at the head of the decode queue blocking the requests behind it.
    trace = write_trace(tmp_path / "t.csv", [("big", 0, 1000, 1000), ("small1", 10**9, 100, 100),
                                             ("small2", 2 * 10**9, 100, 100)])
    table = simulate(DISAGG, overrides=[*TIGHT, trace]).requests.set_index("request_id")
    assert table.loc["big", "status"] == "rejected"
    assert "a decode replica holds at most 1567" in table.loc["big", "reason"]
    assert (table.loc[["small1", "small2"], "status"] == "finished").all()


def test_a_recompute_victim_too_long_for_a_whole_prompt_scheduler_is_rejected_with_why():
    result = simulate(FUSION, overrides=[*TIGHT, *LONG, "workload.kv_reservation=incremental",
                                         "workload.scheduler={kind: continuous, max_batch_tokens: 512}"])
    table = result.requests
    rejected = table[table["status"] == "rejected"]
    assert len(rejected) > 0 and (rejected["preempted"] > 0).all()
    assert rejected["reason"].str.contains("exceeds scheduler.max_batch_tokens=512").all()
    # the others finish; chunked prefill takes such victims back in chunks
    assert (table["status"] == "finished").sum() == 16 - len(rejected)
    chunked = simulate(FUSION, overrides=[*TIGHT, *LONG, "workload.kv_reservation=incremental",
                                          "workload.scheduler={kind: chunked_prefill, "
                                          "max_batch_tokens: 512}"])
    assert set(chunked.requests["status"]) == {"finished"}


def test_a_recompute_victim_the_prefill_pool_cannot_hold_is_rejected_not_left_blocking(tmp_path):
    # P21/D42: the prefill replica holds 1,523 KV tokens, the decode replica 7,281.  Three
    # 1000 + 2600 requests overflow the decode KV; the victim has 2,441 tokens to prefill
    # again, more than the prefill pool holds.  It waited at the head of the prefill
    # queue forever and the late request behind it ended "never scheduled".
    rows = [("a", 0, 1000, 2600), ("b", 1, 1000, 2600), ("c", 2, 1000, 2600),
            ("late", 100_000_000_000_000, 10, 2)]
    result = simulate(DISAGG, overrides=[
        *TIGHT, write_trace(tmp_path / "t.csv", rows), "workload.pd.prefill_cores=21",
        "workload.pd.decode_cores=42", "workload.kv_reservation=incremental",
        "workload.scheduler={kind: chunked_prefill}"])
    table = result.requests.set_index("request_id")
    assert table.loc["late", "status"] == "finished"
    victim = table[table["preempted"] > 0]
    assert len(victim) == 1 and victim["status"].iloc[0] == "rejected"
    assert "a prefill replica holds at most 1523" in victim["reason"].iloc[0]
    assert (table["status"] == "finished").sum() == 3


def test_a_one_token_last_chunk_that_recomputes_its_prefix_is_timed_with_it(tmp_path):
    # 20 decodes use 20 of the 512-token budget, so a 493-token prompt ends in a one-token
    # chunk: with chunk_kv: recompute it runs the 492 tokens before it again, as a
    # 494-token prompt's two-token chunk does (it was timed as a decode).
    ttft = {}
    for prompt in (493, 494):
        rows = [(f"d{i}", i * 10**9, 100, 400) for i in range(20)] + [("x", 2 * 10**12, prompt, 2)]
        trace = write_trace(tmp_path / f"t{prompt}.csv", rows)
        table = simulate(FUSION, overrides=[trace, "workload.scheduler.chunk_kv=recompute",
                                            "workload.pd.cores=4"]).requests
        ttft[prompt] = table.set_index("request_id").loc["x", "ttft_ps"]
    assert ttft[493] == pytest.approx(ttft[494], rel=0.02)


def test_rates_count_from_the_first_arrival_and_rejections_miss_the_slo(tmp_path):
    rows = [(f"r{i}", i * 10**11, 100, 20) for i in range(4)]
    late = [(i, t + 100 * 10**12, p, o) for i, t, p, o in rows]
    base = simulate(FUSION, overrides=[write_trace(tmp_path / "a.csv", rows)]).metrics
    shifted = simulate(FUSION, overrides=[write_trace(tmp_path / "b.csv", late)]).metrics
    for key in ("throughput_tokens_per_s", "goodput_requests_per_s", "sa_utilisation_by_replica"):
        assert shifted[key] == base[key]
    # one request too long for any replica: 3 of 4 can meet the SLO
    too_long = rows[:3] + [("huge", 4 * 10**11, 60_000_000, 4)]
    metrics = simulate(FUSION, overrides=[write_trace(tmp_path / "c.csv", too_long)]).metrics
    assert metrics["requests_rejected"] == 1 and metrics["slo_attainment"] == 0.75
    assert metrics["slo_attainment_ttft"] == metrics["slo_attainment_tbt"] == 0.75
    # each threshold alone says which one a run misses
    tight = simulate(FUSION, overrides=[write_trace(tmp_path / "a.csv", rows),
                                        "workload.slo.ttft_ms=1"]).metrics
    assert tight["slo_attainment_ttft"] == tight["slo_attainment"] == 0.0
    assert tight["slo_attainment_tbt"] == 1.0
    # the thresholds applied are recorded beside the shares they were checked against
    assert (tight["slo_ttft_ms"], tight["slo_tbt_ms"]) == (1.0, base["slo_tbt_ms"])


def test_kv_blocks_round_each_reservation_up_and_leave_less_room():
    exact = simulate(FUSION, overrides=[*TIGHT, *LONG, "workload.kv_reservation=incremental"])
    blocks = simulate(FUSION, overrides=[*TIGHT, *LONG, "workload.kv_reservation=incremental",
                                         "workload.kv_block_tokens=256"])
    used = blocks.table("iterations")["kv_used_tokens"]
    assert (used % 256 == 0).all()
    capacity = blocks.table("iterations")["kv_capacity_tokens"]
    assert (capacity % 256 == 0).all() and (used <= capacity).all()
    # partly empty last blocks: the same trace preempts more often
    assert blocks.metrics["preemptions"] > exact.metrics["preemptions"]
    assert set(blocks.requests["status"]) == {"finished"}


def test_handed_over_kv_stays_in_the_prefill_pool_until_decode_takes_it(tmp_path):
    # The prefill pool released a request's KV at its first token, before the decode
    # replica had room for it: 11,200 tokens waited for a decode slot with no pool
    # holding them (the prefill pool holds 7,018), prefill never stalled and the TTFT
    # p90 was 0.58 s while the wait moved into the first decode gap.
    trace = write_trace(tmp_path / "t.csv", [(i, i * 10**9, 400, 300) for i in range(30)])
    result = simulate(DISAGG, mode="analytic", overrides=TIGHT + [trace])
    requests = result.requests
    assert result.metrics["requests_finished"] == 30
    second = [int(times.split()[1]) for times in requests["token_times_ps"]]
    changes = sorted([(int(f), p) for f, p in zip(requests["first_token_ps"],
                                                  requests["prompt_tokens"])]
                     + [(s, -p) for s, p in zip(second, requests["prompt_tokens"])])
    in_transit = int(np.max(np.cumsum([d for _, d in changes])))
    prefill = [r for r in result.metrics["replicas"] if r["role"] == "prefill"]
    assert 4000 < in_transit <= prefill[0]["kv_capacity_tokens"] == 7018
    # the back-pressure shows where it belongs: in the time to first token
    assert result.metrics["ttft_ms_p90"] > 5000
    iterations = result.table("iterations")
    assert iterations.loc[iterations["role"] == "prefill", "kv_used_tokens"].max() <= 7018
