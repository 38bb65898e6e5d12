"""Priority classes: `scheduler.order: priority` serves lower priority values first (as
vLLM's priority policy), and metrics.json reports each class."""

import pytest

from npusim import simulate
from npusim.workload.traces import read_trace

pytestmark = pytest.mark.component

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
# Qwen3-1.7B with 8-byte KV in 256 MiB of HBM per core: KV runs out (tests/serving/test_kv_accounting.py)
TIGHT = ["workload.model=qwen3_1_7b", "workload.kv_sram_fraction=0", "hw.hbm.rows=4096",
         "workload.kv_dtype_bytes=8"]


def write_trace(path, rows, priority=True):
    header = "id,arrival_ps,prompt_tokens,output_tokens" + (",priority" if priority else "")
    path.write_text(header + "\n" + "".join(
        ",".join(map(str, row if priority else row[:4])) + "\n" for row in rows))
    return f"workload.trace={{file: {path}}}"


# a burst: one request every ms, every fourth urgent (priority 0, the rest 1)
BURST = [(f"r{i}", i * 10**9, 300, 40, 0 if i % 4 == 3 else 1) for i in range(60)]


def test_fcfs_ignores_the_priority_column_and_priority_serves_class_0_first(tmp_path):
    small = ["workload.scheduler.max_batch_size=8"]
    fcfs = simulate(FUSION, overrides=[write_trace(tmp_path / "p.csv", BURST), *small])
    plain = simulate(FUSION, overrides=[write_trace(tmp_path / "n.csv", BURST, False), *small])
    assert fcfs.requests.drop(columns="priority").equals(plain.requests.drop(columns="priority"))
    assert set(fcfs.requests["priority"]) == {0, 1} and set(plain.requests["priority"]) == {0}
    assert "by_priority" not in plain.metrics  # one class: nothing to split
    ranked = simulate(FUSION, overrides=[write_trace(tmp_path / "p.csv", BURST), *small,
                                         "workload.scheduler.order=priority"])
    before, after = fcfs.metrics["by_priority"], ranked.metrics["by_priority"]
    assert sorted(after) == ["0", "1"]
    assert after["0"]["requests"] == 15 and after["1"]["requests"] == 45
    assert after["0"]["finished"] + after["1"]["finished"] == ranked.metrics["requests_finished"]
    # urgent prompts overtake the queue; the others wait longer
    assert after["0"]["ttft_ms_mean"] < 0.9 * before["0"]["ttft_ms_mean"]
    assert after["1"]["ttft_ms_mean"] > before["1"]["ttft_ms_mean"]


def test_priority_order_preempts_the_low_class_first(tmp_path):
    trace = read_trace("traces/ratio_1_10_32.csv")
    rows = [(r.request_id, r.arrival_ps // 4, r.prompt_tokens, r.output_tokens, i % 2)
            for i, r in enumerate(list(trace)[:16])]
    preempted = {}
    for order in ("fcfs", "priority"):
        result = simulate(DISAGG, overrides=[*TIGHT, write_trace(tmp_path / "t.csv", rows),
                                             "workload.kv_reservation=incremental",
                                             f"workload.scheduler.order={order}"])
        counts = result.requests["preempted"].tolist()
        preempted[order] = (sum(counts[0::2]), sum(counts[1::2]))  # class 0, class 1
    assert sum(preempted["fcfs"]) > 0
    urgent, other = preempted["priority"]
    assert urgent < preempted["fcfs"][0] and urgent < other


def test_a_decode_pool_takes_over_the_urgent_request_first(tmp_path):
    # long low-priority requests (each 1,500 of the decode replica's 1,567 KV tokens)
    # fill the P42/D21 decode KV under TIGHT; an urgent one arriving later is handed
    # over as soon as one of them finishes, ahead of two low-priority requests that
    # arrived before it (found by a review: the decode pool took handed-over requests in
    # arrival order)
    rows = [("L0a", 0, 200, 1300, 1), ("L0b", 1, 200, 1300, 1), ("L0c", 2, 200, 1300, 1),
            ("L1", 10**9, 200, 50, 1), ("L2", 2 * 10**9, 200, 50, 1), ("H", 10**11, 200, 50, 0)]
    second = {}
    for order in ("fcfs", "priority"):
        table = simulate(DISAGG, overrides=[*TIGHT, write_trace(tmp_path / "t.csv", rows),
                                            f"workload.scheduler.order={order}"]).requests
        times = table.set_index("request_id")["token_times_ps"].str.split().str[1].astype(int)
        second[order] = times
        assert table["priority"].tolist() == [1, 1, 1, 1, 1, 0]
    assert second["fcfs"]["H"] > second["fcfs"]["L0c"]         # behind every earlier request
    assert second["priority"]["H"] < second["priority"]["L0b"]  # first after L0a's KV is free


HOST = "hw.host={link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200, channels: 4}}"


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_an_urgent_prompt_preempts_running_requests_of_a_lower_class(tmp_path, preemption):
    # Seven long low-priority requests fill the KV (12.6k tokens); an urgent 2000-token
    # prompt arriving at 0.3 s waits ~4 s for one to finish, unless it may preempt them.
    rows = [(f"low{i}", i * 10**9, 1400, 300, 1) for i in range(8)]
    rows.append(("urgent", 300 * 10**9, 2000, 20, 0))
    trace = write_trace(tmp_path / "t.csv", rows)
    common = [*TIGHT, trace, "workload.scheduler.order=priority",
              f"workload.preemption={preemption}"] + ([HOST] if preemption == "swap" else [])
    waits = simulate(FUSION, overrides=common).requests.set_index("request_id")
    jumps = simulate(FUSION, overrides=[*common, "workload.scheduler.preempt_lower_priority=true"]
                     ).requests.set_index("request_id")
    assert waits.loc["urgent", "ttft_ps"] > 4 * 10**12 and waits["preempted"].sum() == 0
    assert jumps.loc["urgent", "ttft_ps"] < 0.1 * waits.loc["urgent", "ttft_ps"]
    assert jumps.loc["urgent", "preempted"] == 0 and jumps["preempted"].sum() > 0
    assert (jumps["status"] == "finished").all()
    if preemption == "swap":
        assert jumps["swapped_out"].sum() == jumps["preempted"].sum()
    else:
        assert jumps["preemption_recomputed_tokens"].sum() > 0


def test_priority_preemption_needs_priority_order(tmp_path):
    from npusim.config.loader import load_scenario
    from npusim.core.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_scenario(FUSION, ["workload.scheduler.preempt_lower_priority=true"])
    assert "workload.scheduler" in str(caught.value)
    assert "needs order: priority (got order: fcfs)" in str(caught.value)


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_an_urgent_hand_over_preempts_a_lower_class_on_the_decode_pool(tmp_path, preemption):
    # The decode pool of test_a_decode_pool_takes_over_the_urgent_request_first: full of
    # low-priority requests (max-length reservation) when the urgent one is handed over.
    # Without preemption it waits ~14 s for L0a to finish; with it, L0a gives way at once.
    rows = [("L0a", 0, 200, 1300, 1), ("L0b", 1, 200, 1300, 1), ("L0c", 2, 200, 1300, 1),
            ("L1", 10**9, 200, 50, 1), ("L2", 2 * 10**9, 200, 50, 1), ("H", 10**11, 200, 50, 0)]
    common = [*TIGHT, write_trace(tmp_path / "t.csv", rows), "workload.scheduler.order=priority",
              f"workload.preemption={preemption}"] + ([HOST] if preemption == "swap" else [])
    waits = simulate(DISAGG, overrides=common).requests.set_index("request_id")
    jumps = simulate(DISAGG, overrides=[*common, "workload.scheduler.preempt_lower_priority=true"]
                     ).requests.set_index("request_id")

    def second_token(table, name):
        return int(table.loc[name, "token_times_ps"].split()[1])

    assert second_token(waits, "H") > 10 * 10**12 and waits["preempted"].sum() == 0
    assert second_token(jumps, "H") < 0.2 * 10**12
    assert jumps["preempted"].tolist() == [1, 0, 0, 0, 0, 0]  # the one decoding: L0a
    assert (jumps["status"] == "finished").all()
    # L0a comes back only once H is done: swapped back in, it reserves its whole length
    # again (max-length reservation), not just the KV it had, so H's KV is not overbooked
    times = [int(t) for t in jumps.loc["L0a", "token_times_ps"].split()]
    resumed = next(b for a, b in zip(times, times[1:]) if b - a > 10**11)
    assert resumed > jumps.loc["H", "finish_ps"]
    if preemption == "swap":
        assert jumps.loc["L0a", "swapped_out"] == 1
    else:
        assert jumps.loc["L0a", "preemption_recomputed_tokens"] > 200
