"""The serving engine end to end on the NPU (analytic mode, small traces)."""

import subprocess
import sys
from pathlib import Path

import pytest

from npusim.api import simulate
from tests.data import AZURE_CONV, missing

pytestmark = pytest.mark.component

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
SMALL = ["workload.model=qwen3_1_7b", "workload.trace.limit=8"]


def serve(scenario, *overrides):
    return simulate(scenario, overrides=[*SMALL, *overrides])


def test_every_request_is_finished_and_accounted_for():
    result = serve(FUSION)
    m = result.metrics
    assert m["requests_finished"] + m["requests_rejected"] == m["requests_total"] == 8
    table = result.requests
    assert len(table) == 8 and set(table["status"]) == {"finished"}
    assert (table["first_token_ps"] >= table["arrival_ps"]).all()
    assert (table["finish_ps"] >= table["first_token_ps"]).all()
    assert (table["generated"] == table["output_tokens"]).all()
    assert m["ttft_ms_p50"] <= m["ttft_ms_p99"] and m["throughput_tokens_per_s"] > 0


def test_cores_no_pool_uses_are_counted():
    # Qwen3-1.7B has 28 layers: fused at TP 4 on 64 cores it fills 28 one-layer stages
    # (112 of 256 cores on the small-core chip); four copies of 16 stages use them all.
    fused = serve(FUSION, "hw.preset=npu/small_core_256", "workload.trace.limit=2").metrics
    assert (fused["chip_cores"], fused["cores_idle"]) == (256, 256 - 28 * 4)
    assert sum(r["cores"] for r in fused["replicas"]) == 28 * 4
    both = serve(FUSION, "hw.preset=npu/small_core_256", "workload.trace.limit=2",
                 "workload.pd.dp=4").metrics
    assert both["cores_idle"] == 0
    assert serve(DISAGG, "workload.trace.limit=2").metrics["cores_idle"] == 1  # 42 + 21 of 64


def test_a_request_that_can_never_fit_is_rejected_with_a_reason():
    # 8-byte KV in 256 MiB of HBM per core: room for ~12.6k tokens, within the context window
    result = serve(FUSION, "workload.trace={arrival: {kind: fixed, interval_s: 0.5}, "
                           "prompt: 30000, output: 4, num_requests: 2}",
                   "workload.kv_sram_fraction=0", "hw.hbm.rows=4096", "workload.kv_dtype_bytes=8")
    table = result.requests
    assert set(table["status"]) == {"rejected"}
    assert table["reason"].str.contains("needs KV for 30004 tokens").all()


def test_continuous_batching_beats_static_batching_on_ttft():
    static = serve(FUSION, "workload.scheduler={kind: static}").metrics
    continuous = serve(FUSION, "workload.scheduler={kind: continuous}").metrics
    assert continuous["ttft_ms_mean"] < static["ttft_ms_mean"]


def test_incremental_kv_preempts_and_recomputes_when_full():
    # A chip with almost no KV room: every request still finishes, some after preemption.
    # 8-byte KV and 256 MiB of HBM per core leave room for ~12.6k tokens; 16 requests
    # of 100 + 1000 tokens arriving within ~2.5 s need ~16k at their peak.
    result = serve(FUSION, "workload.kv_reservation=incremental", "workload.kv_sram_fraction=0",
                   "hw.hbm.rows=4096", "workload.kv_dtype_bytes=8", "workload.trace.limit=16",
                   "workload.trace.rate_scale=4", "workload.trace.file=traces/ratio_1_10_32.csv")
    m = result.metrics
    assert m["requests_finished"] == 16
    assert m["preemptions"] > 0
    assert result.requests["preempted"].sum() == m["preemptions"]
    # what preempting cost: the KV dropped and prefilled again (chunk recompute is apart)
    table = result.requests
    assert m["preemption_recomputed_tokens"] == table["preemption_recomputed_tokens"].sum() > 0
    assert (table.loc[table["preempted"] == 0, "preemption_recomputed_tokens"] == 0).all()
    # iterations.csv: a batch's victims count as preempted, not as running requests it left
    # out (here every batch took all running requests, so it left none out)
    log = result.table("iterations")
    hit = log[log["preempted"] > 0]
    assert len(hit) > 0 and (hit["running"] == 0).all()


HOST = "hw.host={link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200, channels: 4}}"
TIGHT_KV = ["workload.kv_reservation=incremental", "workload.kv_sram_fraction=0",
            "hw.hbm.rows=4096", "workload.kv_dtype_bytes=8", "workload.trace.limit=16",
            "workload.trace.rate_scale=4", "workload.trace.file=traces/ratio_1_10_32.csv", HOST]


def test_swap_preemption_moves_kv_to_the_host_and_back_instead_of_recomputing():
    recompute = serve(FUSION, *TIGHT_KV, "workload.preemption=recompute")
    swap = serve(FUSION, *TIGHT_KV, "workload.preemption=swap")
    m = swap.metrics
    assert m["requests_finished"] == 16
    assert m["swap_outs"] == m["preemptions"] > 0
    assert swap.requests["swapped_out"].sum() == m["swap_outs"]
    labels = swap.segments["label"]
    assert labels.str.startswith("swap-out").sum() == m["swap_outs"]
    assert labels.str.startswith("swap-in").sum() == m["swap_outs"]  # every one came back
    # The KV crossed the host link both ways and was written to host memory once.
    link, host = swap.unit_stats["host.link"], swap.unit_stats["host.dram"]
    assert link["bytes_read"] == 2 * host["bytes_written"] > 0
    # Nothing is prefilled twice: less compute than dropping and recomputing the KV.
    flops = lambda r: sum(u.get("flops", 0) for u in r.unit_stats.values())  # noqa: E731
    assert recompute.metrics["preemptions"] > 0 and flops(swap) < flops(recompute)


def test_disaggregation_moves_kv_over_the_noc_and_decodes_on_other_cores():
    result = serve(DISAGG)
    assert result.metrics["requests_finished"] == 8
    labels = result.segments["label"]
    assert labels.str.startswith("kv ").sum() == 8  # one KV hand-over per request
    util = result.metrics["sa_utilisation_by_replica"]
    assert util["decode0"] > 0 and util["prefill1"] > 0
    # Decode streams every weight for a handful of tokens: its arrays are busy but do a
    # small share of their peak FLOPs, and its HBM is the busier resource; no share
    # exceeds the arrays' busy time or 1.
    flops = result.metrics["flops_utilisation_by_replica"]
    hbm = result.metrics["hbm_bandwidth_utilisation_by_replica"]
    assert set(flops) == set(hbm) == set(util)
    assert all(0 < flops[r] <= util[r] for r in util), (flops, util)
    assert hbm["decode0"] > 10 * flops["decode0"] and hbm["decode0"] < 1


def test_kv_hand_overs_spread_over_every_decode_replica():
    # Requests go to the decode replica with the most uncommitted KV.  They once all went
    # to the first one: the choice only looked at requests waiting for admission, and a
    # request that fits is admitted at once.
    result = serve(DISAGG, "workload.pd.decode_dp=3", "workload.trace.rate_scale=100")
    targets = result.segments["label"].str.extract(r"^kv \S+ r\d+->r(\d+)$")[0].dropna()
    assert len(targets) == 8 and targets.nunique() == 3, targets.value_counts().to_dict()
    util = result.metrics["sa_utilisation_by_replica"]
    assert all(u > 0 for role, u in util.items() if role.startswith("decode")), util


def test_chunks_that_recompute_their_prompt_prefix_cost_more_than_chunks_that_keep_kv():
    # 1000-token prompts in chunks of at most 512: with chunk_kv: recompute the second
    # chunk runs the first one's tokens again (NpuSim §5.5's "redundant computations").
    runs = {kv: serve(FUSION, "workload.trace.file=traces/ratio_10_1_32.csv",
                      f"workload.scheduler.chunk_kv={kv}") for kv in ("keep", "recompute")}
    keep, again = (runs[kv].metrics for kv in ("keep", "recompute"))
    assert keep["prefill_tokens_recomputed"] == 0
    assert 8 * 488 <= again["prefill_tokens_recomputed"] <= 8 * 512  # one re-run first chunk each
    assert again["flops"] > keep["flops"] and again["ttft_ms_mean"] > keep["ttft_ms_mean"]
    assert again["requests_finished"] == keep["requests_finished"] == 8


def test_no_systolic_array_is_booked_twice_under_a_saturating_load():
    # The LM head runs on every core of a replica: its share must be added to each
    # stage's timeline, not overlap the next micro-batches (a decode core's SA once
    # read 107% busy on this run).
    result = serve(DISAGG, "workload.trace.rate_scale=100",
                   "workload.trace.file=traces/ratio_1_10_32.csv")
    util = {unit: u for unit, u in result.metrics["unit_utilisation"].items()
            if unit.endswith(".sa")}
    busiest = max(util, key=util.get)
    assert 0.5 < util[busiest] <= 1.0, (busiest, util[busiest])


def test_part_granularity_times_each_stage_as_a_chain_of_its_parts():
    # Parts alternate [entry + dense][attention][dense]...; a stage is one segment whose
    # parts compute one after another while the weight loads of a part start as soon
    # as the loads before it are done.  Traced, every part's tasks lie inside its
    # stage's segment, some part's loads run before the part before it ends, and no
    # unit computes two tasks at once.
    result = serve(FUSION, "workload.segment_granularity=part", "workload.model=qwen3_4b",
                   "run.trace=true")
    rows = {index: (label, start, end) for index, label, start, end, _ in result.segment_rows}
    ops = result.ops
    stages = ops[ops["label"].str.contains(".stage")]
    assert len(stages) and stages["label"].str.contains(r"\.stage\d+\.part\d+$").all()
    prefetched = 0
    for index, tasks in stages.groupby("segment"):
        label, start, end = rows[index]
        assert tasks["start_ps"].min() >= start and tasks["end_ps"].max() <= end, label
        firsts = tasks.groupby("label")["start_ps"].min()
        ends = tasks.groupby("label")["end_ps"].max()
        order = sorted(firsts.index, key=lambda name: int(name.rpartition(".part")[2]))
        prefetched += sum(firsts[b] < ends[a] for a, b in zip(order, order[1:]))
        computes = tasks[tasks["type"] == "compute"].sort_values("start_ps")
        for unit, busy in computes.groupby("unit"):
            assert (busy["start_ps"].to_numpy()[1:] >= busy["end_ps"].to_numpy()[:-1]).all(), \
                (label, unit)
    assert prefetched > 0


@pytest.mark.parametrize("granularity", ["stage", "part"])
def test_traced_and_untraced_runs_count_the_same_work(granularity):
    # Blends and chains count their parts' counters when totals are asked for; a traced
    # run keeps the graphs, an untraced one compacts them: the totals must not differ.
    runs = [serve(FUSION, f"workload.segment_granularity={granularity}", f"run.trace={trace}",
                  "workload.trace.limit=16")
            for trace in ("true", "false")]
    traced, untraced = (r.metrics for r in runs)
    assert traced["busy_by_op_ps"] == untraced["busy_by_op_ps"]
    assert traced["unit_utilisation"] == untraced["unit_utilisation"]
    assert traced["memo"]["blends"] > 0


def test_serving_is_deterministic(tmp_path):
    # Two runs in one process share its string-hash seed, so an order taken from a set or
    # a hash of request ids would repeat in both: the second run is a separate process
    # with another PYTHONHASHSEED, and every file a serving run writes but host.json (wall
    # time) must come out byte-identical (README: "the same config and seed give
    # byte-identical metrics.json").  The 8 requests arrive within a few ms on a 2-stage
    # pipeline taking one request per micro-batch, so which one goes first matters.
    import os

    contended = ["workload.trace.rate_scale=1000", "workload.scheduler.max_batch_size=1",
                 "workload.pd.cores=8"]
    first = serve(FUSION, *contended)
    assert first.requests.equals(serve(FUSION, *contended).requests)
    first.write(tmp_path / "here")
    seed = str(int(os.environ.get("PYTHONHASHSEED") or 0) + 7919)
    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", FUSION, "-q",
                           *[f"--set={o}" for o in (*SMALL, *contended)],
                           "--out", str(tmp_path / "there")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed})
    assert proc.returncode == 0, proc.stderr
    for name in ("metrics.json", "requests.csv", "iterations.csv", "segments.csv", "units.csv"):
        here, there = (tmp_path / d / name for d in ("here", "there"))
        assert here.read_bytes() == there.read_bytes(), name


def test_the_cli_replays_a_trace_file_and_writes_requests_csv(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,50,5\n0.1,60,4\n0.2,70,3\n")
    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", FUSION, "-q",
                           "--trace", str(trace), "--set", "workload.model=qwen3_1_7b",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    assert len(rows) == 4 and all(",finished," in row for row in rows[1:])


def test_a_bad_trace_line_is_a_clear_error(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,50,5\n0.1,-3,4\n")
    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", FUSION, "-q",
                           "--trace", str(trace), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "bad.csv:3" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not AZURE_CONV.is_file(), reason=missing(AZURE_CONV))
def test_azure_conversation_replay_of_300_requests_accounts_for_every_request(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", FUSION, "-q",
                           "--trace", str(AZURE_CONV), "--set", "workload.trace.limit=300",
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "requests.csv").read_text().splitlines()[1:]
    assert len(rows) == 300


def test_heterogeneous_decode_cores_change_decode_speed_and_chip_area():
    plain = serve(DISAGG).metrics
    small = serve(DISAGG, "workload.pd.decode_core={systolic_size: 32, hbm_channels: 2}").metrics
    assert small["tbt_ms_mean"] > plain["tbt_ms_mean"]          # 16x fewer MACs per decode core
    assert small["ttft_ms_mean"] == plain["ttft_ms_mean"]       # prefill cores unchanged
    assert small["area_mm2"]["systolic"] < plain["area_mm2"]["systolic"]


def _decode_core_parts(*overrides):
    from npusim.api import _as_scenario, build_device
    from npusim.core import registry

    scenario = _as_scenario(DISAGG, [*SMALL, *overrides])
    device = build_device(scenario.hw)
    driver = registry.lookup("workload", "serving").impl(device, config=scenario.workload)
    decode = next(r for r in driver.replicas if r.role == "decode")
    prefill = next(r for r in driver.replicas if r.role == "prefill")
    part = lambda core, unit: device.parts[f"core{core}.{unit}"].config  # noqa: E731
    return ([(part(c, "sram").bytes_per_cycle, part(c, "vec").operand_bandwidth_bps)
             for c in decode.cores],
            [(part(c, "sram").bytes_per_cycle, part(c, "vec").operand_bandwidth_bps)
             for c in prefill.cores])


def test_smaller_decode_arrays_get_an_sram_port_scaled_with_them():
    # NpuSim §5.5 adjusts SRAM bandwidth to the array: 512 B/cycle for 128 columns is
    # 4 B per column, so 128 B at 32; the vector unit reads through that port (500 MHz).
    decode, prefill = _decode_core_parts("workload.pd.decode_core={systolic_size: 32}")
    assert set(decode) == {(128, 128 * 500_000_000)}
    assert set(prefill) == {(512, 512 * 500_000_000)}
    decode, _ = _decode_core_parts(
        "workload.pd.decode_core={systolic_size: 32, sram_bytes_per_cycle: 256}")
    assert set(decode) == {(256, 256 * 500_000_000)}
    decode, _ = _decode_core_parts("workload.pd.decode_core={hbm_channels: 8}")
    assert set(decode) == {(512, 512 * 500_000_000)}  # the array is unchanged


def test_metrics_say_what_each_replicas_cores_are_made_of():
    replicas = serve(DISAGG, "workload.pd.decode_core={systolic_size: 32}").metrics["replicas"]
    cores = {r["role"]: r["core"] for r in replicas}
    assert cores["decode"] == {"systolic": "32x32", "sram_bytes_per_cycle": 128, "hbm_channels": 4}
    assert cores["prefill"] == {"systolic": "128x128", "sram_bytes_per_cycle": 512,
                                "hbm_channels": 4}
    ids = [set(r["core_ids"]) for r in replicas]
    assert all(len(i) == r["cores"] for i, r in zip(ids, replicas)) and not set.intersection(*ids)


def test_decode_core_variant_needs_disaggregation():
    from npusim.core.errors import ConfigError

    with pytest.raises(ConfigError, match="pd.decode_core needs mode: disaggregation"):
        serve(FUSION, "workload.pd.decode_core={systolic_size: 32}")


@pytest.mark.parametrize("override, message", [
    ("workload.pd.prefill_cores=63", "prefill_cores + decode_cores = 63 + 21 = 84 exceeds the chip's 64 cores"),
    ("workload.scheduler=fifo_magic", "unknown scheduler 'fifo_magic'"),
    ("workload.preemption=swap", "'swap' moves a preempted request's KV to host memory"),
    ("hw.host={link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200}, "
     "port_core: 64}", "host.port_core = 64 is not a core of this 64-core chip"),
    ("workload.pd.decode_core={hbm_channels: 3}",
     "workload.pd.decode_core.hbm_channels: expected a power of two (1, 2, 4, ...), got 3"),
    # A typo'd size is an error, not a 100000 x 100000 array simulated in silence.
    ("workload.pd.decode_core={systolic_size: 100000}",
     "workload.pd.decode_core.systolic_size: Input should be less than or equal to 4096"),
    ("workload.pd.decode_core={hbm_channels: 2048}",
     "workload.pd.decode_core.hbm_channels: Input should be less than or equal to 1024"),
    ("workload.pd.prefill_cores=40", "pd.prefill_cores = 40 is not a multiple of prefill tp x dp = 7"
                                     ": 5 cores would sit idle; expected a multiple of 7 (35 or 42)"),
    # fewer cores than one group: the nearest multiple is not 0 (which is refused too)
    ("workload.pd.decode_tp=64", "pd.decode_cores = 21 is fewer than decode tp x dp = 64 (a stage "
                                 "of TP 64 in each of 1 replica); expected at least 64"),
    ("workload.pd.dp=2", "pd.dp=2: only mode: fusion uses it"),
    # fusion too: an explicit core count that leaves cores idle is an error, not rounded
    ("workload.pd={mode: fusion, cores: 50, tp: 4}",
     "pd.cores = 50 is not a multiple of tp x dp = 4: 2 cores would sit idle"),
    # Qwen3-4B has 36 layers: 42 one-core stages would leave 6 cores without a layer.
    ("workload.pd.tp=1", "workload.pd.prefill_cores = 42: 1 pipeline of TP 1 groups make "
                         "42 stages each, but qwen3_4b has 36 layers"),
    # a core's memory plan that fails says whose core it is
    ("hw.hbm.rows=4096", "the decode pool (workload.pd.decode_cores = 21: 1 pipeline of 3 "
                         "stages at TP 7, layers per stage 12 x 3): qwen3_4b needs 7.5 GiB"),
])
def test_bad_serving_settings_exit_2_with_one_clear_message(override, message, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", DISAGG, "-q",
                           "--set", override, "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert Path(DISAGG).name in proc.stderr  # every message says which scenario


def test_a_pool_whose_memory_plan_fails_is_named_with_its_layers():
    from npusim.core.errors import MappingError

    # the layers as given, not the even split; the error keeps its type
    with pytest.raises(MappingError, match=r": the decode pool \(workload.pd.decode_cores = 21: "
                                           r"1 pipeline of 3 stages at TP 7, layers per "
                                           r"stage 4 x 2, 28\): "):
        simulate(DISAGG, overrides=["workload.trace.limit=2", "hw.hbm.rows=4096",
                                    "workload.pd.decode_layers_per_stage=[4,4,28]"])
    # fusion's default pool is the chip's cores, not a pd.cores the scenario never set
    with pytest.raises(MappingError, match=r": the fused pool \(the chip's 64 cores: 1 pipeline"):
        simulate(FUSION, overrides=["workload.trace.limit=2", "hw.hbm.rows=4096"])


def test_a_decode_pool_sizes_its_buffers_for_one_token_per_request():
    # It never prefills (recompute victims prefill again on the prefill pool), so its
    # activation buffers hold max_batch_size tokens, not the prefill pool's 2048.
    def buffers(*overrides):
        replicas = simulate(DISAGG, overrides=["workload.trace.limit=2", *overrides]
                            ).metrics["replicas"]
        return {r["role"]: r["memory_by_stage"][0]["sram_buffer_bytes"] for r in replicas}
    default = buffers()  # max_batch_size 64
    assert default["decode"] < 0.5 * default["prefill"]
    more_tokens = buffers("workload.scheduler.max_batch_tokens=4096")
    assert more_tokens["decode"] == default["decode"] and more_tokens["prefill"] > default["prefill"]
    fewer_requests = buffers("workload.scheduler.max_batch_size=16")
    assert fewer_requests["decode"] < default["decode"]
    assert fewer_requests["prefill"] == default["prefill"]


def test_a_tp_the_placement_cannot_tile_names_the_setting():
    from npusim.core.errors import MappingError

    with pytest.raises(MappingError, match=r"workload.pd.tp = 3 with workload.placement: ring: "
                                           r"tp = 3: groups of 3 cores cannot tile"):
        serve(FUSION, "workload.pd.tp=3")


def test_pools_with_different_tp_are_placed_on_the_cores_left():
    # P42 as 7 stages of TP 6 beside D21 as 3 stages of TP 7: on the whole chip the TP-6
    # groups straddle the decode cores, so the prefill pool is laid out on the free cores.
    result = serve(DISAGG, "workload.pd.prefill_tp=6")
    replicas = result.metrics["replicas"]
    assert [(r["role"], r["stages"], r["cores"]) for r in replicas] == [
        ("decode", 3, 21), ("prefill", 7, 42)]
    assert result.metrics["requests_finished"] == 8


def test_static_batching_on_a_decode_pool_takes_no_request_into_a_running_batch(tmp_path):
    # r0 decodes alone; r1 and r2 (prefilled meanwhile) wait until it has finished and
    # then decode together.  The decode pool used to take them into r0's batch.
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\nr0,0,100,20\n"
                     "r1,5000000000,100,20\nr2,10000000000,100,20\n")
    result = simulate(DISAGG, overrides=["workload.model=qwen3_1_7b",
                                         f"workload.trace.file={trace}",
                                         "workload.scheduler.kind=static"])
    log = result.table("iterations")
    sizes = log[log["role"] == "decode"]["decode_requests"].tolist()
    assert sizes == [1] * 19 + [2] * 19
    first = log[(log["role"] == "decode") & (log["decode_requests"] == 2)]["start_ps"].min()
    finish = result.requests.set_index("request_id")["finish_ps"]
    assert first >= finish["r0"]
    # and the two waited on the decode pool's queue, which iterations.csv shows
    assert log[log["role"] == "decode"]["waiting"].max() == 2


def test_a_request_past_the_models_context_window_is_rejected_with_a_reason(tmp_path):
    trace = tmp_path / "t.csv"  # qwen3_1_7b: max_position_embeddings 40960
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\nr0,0,40950,11\nr1,1000,100,4\n")
    table = simulate(FUSION, overrides=["workload.model=qwen3_1_7b",
                                        f"workload.trace.file={trace}"]).requests
    assert table["status"].tolist() == ["rejected", "finished"]
    assert "40961 tokens exceed qwen3_1_7b's context window of 40960" in table["reason"][0]
    # The rejected row's empty times keep the finished row's integral: no "1234.0" in
    # requests.csv.
    assert str(table["first_token_ps"].dtype) == "Int64" and table["first_token_ps"].isna()[0]
    simulate(FUSION, overrides=["workload.model=qwen3_1_7b",
                                f"workload.trace.file={trace}"]).write(tmp_path / "out")
    lines = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    finished = dict(zip(lines[0].split(","), lines[2].split(",")))
    for column in ("first_token_ps", "finish_ps", "ttft_ps", "max_tbt_ps", "replica"):
        assert finished[column].isdigit(), (column, finished[column])


def test_the_serving_window_runs_from_the_first_arrival_to_the_last_work(tmp_path):
    # The same requests 5 s later, and with a request rejected on a late or an early
    # arrival, measure
    # the same window: latency, rates, utilisation and energy per token were diluted by
    # the idle 5 s before the trace (measured from t = 0) and by the rejected arrival
    # (the window ran to the last event of any kind).
    rows = [("r0", 0, 120, 6), ("r1", 10**9, 80, 4), ("r2", 3 * 10**9, 60, 5)]
    late = [(rid, t + 5 * 10**12, p, o) for rid, t, p, o in rows]
    rejected = rows + [("r3", 10**13, 50000, 4)]  # past qwen3_1_7b's context window
    # and refused on an early arrival: it started the window 5 s before the served ones
    early = [("r9", 0, 50000, 4)] + late
    metrics = []
    for name, table in (("base", rows), ("late", late), ("rejected", rejected),
                        ("early", early)):
        trace = tmp_path / f"{name}.csv"
        trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\n" + "".join(
            f"{rid},{t},{p},{o}\n" for rid, t, p, o in table))
        metrics.append(simulate(FUSION, overrides=["workload.model=qwen3_1_7b",
                                                   f"workload.trace.file={trace}"]).metrics)
    base, *others = metrics
    last_token_s = base["latency_s"]
    assert 0 < last_token_s < 1
    for other in others:
        for key in ("latency_ps", "throughput_tokens_per_s", "throughput_flops_per_s",
                    "unit_utilisation"):
            assert other[key] == base[key], key
        assert other["energy"]["energy_per_token_j"] == base["energy"]["energy_per_token_j"]
    assert metrics[2]["requests_rejected"] == 1 == metrics[3]["requests_rejected"]
    assert metrics[3]["goodput_requests_per_s"] == base["goodput_requests_per_s"]


@pytest.mark.parametrize("text, ms", [("200ms", 200.0), ("1.5s", 1500.0), ("250", 250.0)])
def test_slo_thresholds_take_times_with_units(text, ms):
    from npusim.config.loader import load_scenario

    scenario = load_scenario(FUSION, [f"workload.slo.ttft_ms={text}", f"workload.slo.tbt_ms={text}"])
    assert scenario.workload.slo.ttft_ms == ms == scenario.workload.slo.tbt_ms


def test_progress_counts_rejected_requests_so_it_reaches_the_total(tmp_path):
    trace = tmp_path / "t.csv"  # r1 is past qwen3_1_7b's 40960-token window: rejected
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\nr0,0,100,4\nr1,1000,50000,4\n")
    seen = []
    simulate(FUSION, overrides=["workload.model=qwen3_1_7b", f"workload.trace.file={trace}"],
             progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (2, 2) and len(seen) == 2


def test_chunks_that_recompute_their_prefix_reserve_room_for_its_activations():
    # A recompute chunk runs its prompt prefix again on top of the budget's new tokens:
    # the activation buffers grow by a whole request, which leaves less SRAM for KV.
    def kv(chunk_kv):
        return serve(FUSION, f"workload.scheduler.chunk_kv={chunk_kv}",
                     "workload.trace.limit=2").metrics["replicas"][0]["kv_capacity_tokens"]
    assert kv("recompute") < kv("keep")


def test_a_fused_pool_on_part_of_the_chip_keeps_its_stages_adjacent():
    # pd.cores=32 took the groups farthest from the centre: stages in the corners.
    from npusim.api import build_device
    from npusim.config.loader import load_scenario
    from npusim.serving.engine import ServingDriver

    scenario = load_scenario(FUSION, [*SMALL, "workload.pd.cores=32"])
    driver = ServingDriver(build_device(scenario.hw), scenario.workload)
    hops = [max(h) for _, h in driver.replicas[0].hand_offs[1:]]
    assert max(hops) <= 2, hops


def test_tbt_pools_token_gaps_and_tpot_averages_each_request():
    # tbt_ms_* (vLLM's ITL) over every gap; tpot_ms_* (vLLM's TPOT) over each request's
    # mean gap, which the SLO checks; e2e per output token; prompt + output throughput.
    import numpy as np

    result = serve(FUSION, "workload.trace.limit=12")
    m, table = result.metrics, result.requests
    times = [np.array(t.split(), dtype=np.int64) for t in table["token_times_ps"]]
    gaps = np.concatenate([np.diff(t) for t in times]) * 1e-9
    tpot = np.array([(t[-1] - t[0]) / (len(t) - 1) for t in times if len(t) > 1]) * 1e-9
    assert m["tbt_ms_mean"] == pytest.approx(gaps.mean())
    assert m["tbt_ms_p95"] == pytest.approx(np.percentile(gaps, 95))
    assert m["tpot_ms_mean"] == pytest.approx(tpot.mean())
    assert m["tpot_ms_p99"] == pytest.approx(np.percentile(tpot, 99))
    assert (table["max_tbt_ps"] >= table["mean_tbt_ps"]).all()
    per_token = table["e2e_ps"] * 1e-9 / table["generated"]
    assert m["e2e_ms_per_token_mean"] == pytest.approx(per_token.mean())
    ratio = m["throughput_total_tokens_per_s"] / m["throughput_tokens_per_s"]
    assert ratio == pytest.approx((table["prompt_tokens"] + table["generated"]).sum()
                                  / table["generated"].sum())


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_a_router_binds_each_request_to_a_replica_on_arrival(router):
    # Two fused replicas: round robin alternates; least outstanding sends a request to
    # the replica holding fewer unfinished ones.  The shared queue (default) lets the
    # first free replica take the head of one queue, the most favourable binding.
    runs = {name: serve(FUSION, "workload.pd.dp=2", f"workload.router={name}",
                        "workload.trace.limit=12", "workload.trace.rate_scale=20")
            for name in ("shared_queue", router)}
    table = runs[router].requests
    assert set(table["replica"]) == {0, 1}
    if router == "round_robin":
        assert table["replica"].tolist() == [0, 1] * 6
    else:
        assert abs((table["replica"] == 0).sum() - 6) <= 2
    assert runs[router].metrics["ttft_ms_mean"] >= runs["shared_queue"].metrics["ttft_ms_mean"]


def test_pipelined_chunks_of_one_prompt_overlap_in_the_stages_and_cut_its_ttft():
    # One 1000-token prompt in four 250-token chunks on fusion's 16 stages: one after
    # another each chunk crosses all 16 stages; pipelined, the next chunk enters the
    # first stage as soon as the previous one has left it.
    lone = ["workload.trace.file=traces/ratio_10_1_32.csv", "workload.trace.limit=1",
            "workload.scheduler.prefill_chunk=250", "workload.scheduler.token_budget=250"]
    runs = {p: serve(FUSION, *lone, f"workload.scheduler.pipeline_chunks={p}")
            for p in ("false", "true")}
    serial, piped = (runs[p] for p in ("false", "true"))
    chunks = {p: r.table("iterations").head(4) for p, r in runs.items()}
    for p in runs:
        assert chunks[p]["prefill_tokens"].tolist() == [250] * 4
    starts, ends = chunks["true"]["start_ps"].to_numpy(), chunks["true"]["end_ps"].to_numpy()
    assert (starts[1:] < ends[:-1]).all()                       # in the pipeline together
    starts, ends = chunks["false"]["start_ps"].to_numpy(), chunks["false"]["end_ps"].to_numpy()
    assert (starts[1:] >= ends[:-1]).all()                      # one after another
    assert piped.metrics["ttft_ms_mean"] < 0.5 * serial.metrics["ttft_ms_mean"]
    assert piped.metrics["flops"] == serial.metrics["flops"]     # the same work, overlapped
    assert piped.requests["generated"].tolist() == serial.requests["generated"].tolist()


def test_fixed_chunk_units_size_the_activation_buffers_by_max_batch_tokens():
    # With prefill_chunk_units the budget counts units, not tokens: an iteration may carry
    # max_batch_tokens tokens, and the SRAM plan must hold their activations (it was sized
    # by the 5-unit budget, promising KV the activations need).
    units = ["workload.scheduler.token_budget=5", "workload.scheduler.prefill_chunk_units=4",
             "workload.scheduler.prefill_chunk=2048", "workload.scheduler.max_batch_tokens=2048"]
    tokens = ["workload.scheduler.token_budget=2048", "workload.scheduler.prefill_chunk=2048",
              "workload.scheduler.max_batch_tokens=2048"]
    kv = {name: serve(FUSION, "workload.trace.limit=1", *o).metrics["replicas"][0]["kv_capacity_tokens"]
          for name, o in (("units", units), ("tokens", tokens))}
    assert kv["units"] == kv["tokens"]


def test_sticky_lanes_decode_one_micro_batch_per_stage_at_once():
    # 35 requests at once on a 7-stage decode pipeline of 5-request micro-batches (NpuSim
    # Fig. 11's decode pools).  Sticky lanes keep 7 micro-batches in the pipeline, so all
    # 35 decode together; re-formed batches fill whichever slot frees first and, as the
    # LM head delays each next launch, keep only 6 in flight: 5 requests wait for a wave.
    def first_gaps_ms(lanes):
        result = serve(DISAGG, "workload.dtype_bytes=1", "workload.pd.tp=1",
                       "workload.pd.prefill_cores=7", "workload.pd.decode_cores=7",
                       "workload.scheduler={kind: continuous, max_batch_size: 5, "
                       f"max_batch_tokens: 100, decode_lanes: {lanes}}}",
                       "workload.trace={num_requests: 35, arrival: {kind: fixed, interval_s: 0}, "
                       "prompt: {kind: fixed, tokens: 100}, output: {kind: fixed, tokens: 20}}")
        times = [[int(t) for t in row.split()] for row in result.requests["token_times_ps"]]
        return sorted((ts[1] - ts[0]) / 1e9 for ts in times), result
    sticky, sticky_run = first_gaps_ms("sticky")
    reform, _ = first_gaps_ms("reform")
    steady_ms = sticky_run.metrics["tpot_ms_p50"]
    assert sticky[-1] < 2 * steady_ms                    # nobody waits for a wave
    assert sum(gap > 10 * steady_ms for gap in reform) == 5
    iterations = sticky_run.table("iterations")
    assert iterations["decode_requests"].max() == 5


def test_decode_micro_batches_stay_one_per_stage_and_tokens_keep_pace():
    # P42/D21 under steady Poisson load, its decode pool split 10/12/14 layers so the
    # later stages are slower than the first.  Launching whenever the first stage is
    # free lets micro-batches queue inside the pipeline in front of the slow stage,
    # and every token waits behind them; one per stage keeps each token one round
    # apart.  (Measured 2026-11-27: 3 in flight, TPOT p50 29.8 ms; up to 8 allowed,
    # 6 in flight and 56.5 ms.)
    overrides = ["workload.trace={num_requests: 150, seed: 1, arrival: {kind: poisson, "
                 "rate_per_s: 28}, prompt: {kind: fixed, tokens: 100}, output: {kind: "
                 "fixed, tokens: 100}}", "workload.pd.decode_layers_per_stage=[10, 12, 14]"]
    result = simulate(DISAGG, overrides=overrides)
    m = result.metrics
    assert m["iterations_by_replica"]["decode0"]["micro_batches_in_flight_max"] == 3
    assert m["tpot_ms_p99"] < 1.1 * m["tpot_ms_p50"]
    # More in flight, on request, lets the micro-batches queue again.
    queued = simulate(DISAGG, overrides=[
        *overrides, "workload.scheduler.max_decode_micro_batches_in_flight=8"])
    assert queued.metrics["iterations_by_replica"]["decode0"]["micro_batches_in_flight_max"] > 3
    assert queued.metrics["tpot_ms_p50"] > 1.5 * m["tpot_ms_p50"]


def test_prompts_launch_whenever_the_first_stage_is_free_unless_bounded_too():
    # A burst of prompts on the 6-stage prefill pool: prompts wait on no earlier
    # iteration, so micro-batches of them follow one another as fast as the first stage
    # frees (more than 6 under way when a big one ahead holds later stages, within the
    # default 12); bounded to one per stage as vLLM's virtual engines, they wait for a
    # slot, the next launch takes a burst, and TTFT grows.
    burst = ["workload.trace.file=traces/ratio_1_1_512.csv", "workload.trace.rate_scale=38",
             "workload.trace.limit=300"]
    free, bounded = (simulate(DISAGG, overrides=[*burst, *extra]) for extra in
                     ([], ["workload.scheduler.max_micro_batches_in_flight=stages"]))
    assert free.metrics["iterations_by_replica"]["prefill1"]["micro_batches_in_flight_max"] > 6
    assert bounded.metrics["iterations_by_replica"]["prefill1"]["micro_batches_in_flight_max"] == 6
    assert bounded.metrics["ttft_ms_p90"] > 4 * free.metrics["ttft_ms_p90"]  # 644 vs 79 ms


def test_an_overloaded_pipeline_backs_up_instead_of_filling_with_one_prompt_batches():
    # A 6-stage prefill pool whose last stage holds 26 of 36 layers, 300 prompts at
    # 100 req/s (more than it prefills).  Unbounded, a one-prompt micro-batch left
    # whenever the first stage was free and queued before the slow stage (180 under
    # way): the slow stage then ran prompts one at a time.  By default a replica holds
    # twice its stages, so prompts wait and are batched.
    overload = ["workload.trace={num_requests: 300, seed: 1, arrival: {kind: poisson, "
                "rate_per_s: 100}, prompt: {kind: fixed, tokens: 100}, output: {kind: fixed, "
                "tokens: 2}}", "workload.pd.prefill_layers_per_stage=[2,2,2,2,2,26]"]
    bounded, unbounded = (simulate(DISAGG, overrides=[*overload, *extra]) for extra in
                          ([], ["workload.scheduler.max_micro_batches_in_flight=1000"]))
    ours, theirs = (run.metrics["iterations_by_replica"]["prefill1"] for run in (bounded, unbounded))
    assert ours["micro_batches_in_flight_max"] == 12 < theirs["micro_batches_in_flight_max"]
    assert ours["batch_requests_mean"] > 3 * theirs["batch_requests_mean"]
    assert bounded.metrics["ttft_ms_p90"] < 0.8 * unbounded.metrics["ttft_ms_p90"]


@pytest.mark.parametrize("option", ["decode_lanes: sticky", "fill_pipeline: true"])
def test_fewer_decode_micro_batches_than_stages_keep_their_batches_whole(option):
    # Bounded to one decode micro-batch on a 3-stage pool, sticky lanes and
    # fill_pipeline share the requests among that one, not among three (which left each
    # request a round of three lanes, or a third of a batch, per token).
    def tpot(extra):
        return serve(DISAGG, "workload.trace.limit=40",
                     "workload.scheduler={kind: continuous, max_decode_micro_batches_in_flight: 1"
                     f"{extra}}}").metrics["tpot_ms_p50"]
    assert tpot(f", {option}") < 1.2 * tpot("")


@pytest.mark.parametrize("value", ["0", "-1", "foo", "true", "2.5"])
def test_a_bad_in_flight_bound_names_the_field_and_what_it_takes(value):
    from npusim.core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        serve(FUSION, f"workload.scheduler.max_micro_batches_in_flight={value}")
    message = str(info.value)
    assert "workload.scheduler.max_micro_batches_in_flight" in message
    assert message.count("max_micro_batches_in_flight:") == 1 and "'stages'" in message
