"""LLM runs on the multi-core NPU: phases, FLOP conservation, memory placement, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npusim.api import simulate
from npusim.core.errors import ConfigError, MappingError
from npusim.workload.layer_ops import SequenceChunk, layer_ops, lm_head_ops
from npusim.workload.models import load_model

pytestmark = pytest.mark.component

SCENARIO = "workloads/scenarios/qwen3_4b_npu64.yaml"
SMALL = ["run.mode=analytic", "workload.model=qwen3_1_7b", "run.trace=false"]


def run(*overrides, mode=None):
    return simulate(SCENARIO, mode=mode, overrides=[*SMALL, *overrides])


def test_single_request_reports_ttft_tbt_and_end_to_end():
    metrics = run("workload.prompt_len=128", "workload.output_len=5").metrics
    assert 0 < metrics["ttft_ps"] < metrics["e2e_latency_ps"] == metrics["latency_ps"]
    assert metrics["decode_steps"] == 4 and metrics["output_tokens"] == 5
    # TBT is the mean decode step: TTFT + steps x TBT rebuilds the end-to-end latency.
    rebuilt = metrics["ttft_ps"] + 4 * metrics["tbt_ps"]
    assert abs(rebuilt - metrics["e2e_latency_ps"]) <= 4
    assert metrics["tokens_per_s"] == pytest.approx(5 / (metrics["e2e_latency_ps"] / 1e12))
    # and under the serving runs' names, in ms (one sweep column for both kinds of run)
    assert metrics["ttft_ms_mean"] == pytest.approx(metrics["ttft_ps"] / 1e9)
    assert metrics["tpot_ms_mean"] == pytest.approx(metrics["tbt_ps"] / 1e9)
    assert metrics["e2e_ms_mean"] == pytest.approx(metrics["e2e_latency_ps"] / 1e9)
    assert run("workload.prompt_len=128", "workload.output_len=1").metrics["tpot_ms_mean"] is None


def test_every_gemm_flop_of_the_model_runs_on_a_systolic_array():
    model = load_model("qwen3_1_7b")
    prompt = 96
    result = run(f"workload.prompt_len={prompt}", "workload.output_len=1")
    chunk = [SequenceChunk(prompt, 0)]
    expected = sum(op.flops for layer in range(model.num_hidden_layers)
                   for op in layer_ops(model, chunk, 2, layer=layer) if op.op.kind == "gemm")
    expected += sum(op.flops for op in lm_head_ops(model, chunk, 2) if op.op.kind == "gemm")
    units = result.units
    simulated = units.loc[units.index.str.endswith(".sa"), "flops"].sum()
    assert simulated == expected


def test_a_batch_raises_throughput_and_each_step_costs_at_least_as_much():
    one = run("workload.prompt_len=64", "workload.output_len=3").metrics
    eight = run("workload.prompt_len=64", "workload.output_len=3", "workload.batch=8").metrics
    assert eight["tbt_ps"] >= one["tbt_ps"]
    assert eight["tokens_per_s"] > 2 * one["tokens_per_s"]


def test_weights_stream_from_hbm_only_when_the_sram_cannot_hold_them():
    resident = run("workload.prompt_len=64", "workload.output_len=2", "workload.dtype_bytes=1",
                   "hw.core.sram=128MiB").metrics
    streamed = run("workload.prompt_len=64", "workload.output_len=2", "hw.core.sram=16MiB").metrics
    model = load_model("qwen3_1_7b")
    weights = model.params_layers * 2
    # Resident: only embedding rows come from HBM.  Streamed: most weights, every step.
    assert resident["bytes_by_level"]["hbm"] < 0.01 * weights
    assert streamed["bytes_by_level"]["hbm"] > 0.5 * 2 * weights
    assert streamed["e2e_latency_ps"] > resident["e2e_latency_ps"]


def test_kv_that_does_not_fit_in_sram_is_read_back_from_hbm():
    result = simulate(SCENARIO, overrides=[
        "run.mode=analytic", "workload.model=qwen3_1_7b", "workload.prompt_len=4096",
        "workload.output_len=2", "workload.prefill_chunk=512", "hw.core.sram=16MiB",
        "workload.decode_kv_bucket_tokens=1", "run.trace_max_tasks=100000000"])
    names = result.ops["name"]
    assert names.str.contains(r"attn_(?:qk|av)\[s0\]:load KV\.\d+@").any(), "no KV read from HBM"
    assert names.str.contains(r"kv_write\[s0\]\.spill@").any(), "no KV spilled to HBM"


def test_decode_kv_bucketing_changes_tbt_by_less_than_one_percent():
    exact = run("workload.prompt_len=200", "workload.output_len=20",
                "workload.decode_kv_bucket_tokens=1").metrics
    bucketed = run("workload.prompt_len=200", "workload.output_len=20",
                   "workload.decode_kv_bucket_tokens=16").metrics
    assert bucketed["tbt_ps"] >= exact["tbt_ps"]  # rounded up: never optimistic
    assert bucketed["tbt_ps"] / exact["tbt_ps"] - 1 < 0.01
    assert bucketed["memo"]["misses"] < exact["memo"]["misses"]


def test_grouped_query_heads_share_one_gemm_per_kv_head(tmp_path):
    # Qwen3-4B's attention (32 query heads over 8 KV heads, groups of 4), two layers.  On
    # TP=7 the cores hold 5, 5, 5, 5, 4, 4, 4 query heads; 5 read 2 KV heads: 2 GEMMs of 3
    # rows (query heads) each, not 5 one-row GEMMs that each load the same keys again;
    # 4 heads of one KV group are one GEMM of 4 rows.
    config = json.loads(Path("workloads/models/qwen3_4b.json").read_text())
    config["num_hidden_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))

    def decode_qk(tp):
        ops = simulate(SCENARIO, overrides=[
            "run.mode=analytic", f"workload.model={tmp_path}", f"workload.tp={tp}",
            "workload.pipeline_stages=1", "workload.placement=linear_interleave",
            "workload.prompt_len=128", "workload.output_len=2",
            "workload.decode_kv_bucket_tokens=1"]).ops
        return ops[ops["name"].str.startswith("L0.attn_qk") & ops["label"].str.startswith("decode")]

    qk = decode_qk(7)
    keys, head_dim = 129, 128
    assert len(qk) == 7
    assert sorted(qk["flops"]) == [2 * 4 * head_dim * keys] * 3 + [2 * (2 * 3) * head_dim * keys] * 4
    # One query head per core (TP=32): one pass over its KV head's keys.  Six rows over
    # two KV heads cost less than five such passes.
    assert qk["duration_ps"].max() < 5 * decode_qk(32)["duration_ps"].max()


def test_pipeline_stages_and_placement_are_reported_and_honoured():
    metrics = run("workload.prompt_len=32", "workload.pipeline_stages=4",
                  "workload.placement=linear_interleave", "workload.partition=mnk").metrics
    assert (metrics["pipeline_stages"], metrics["placement"], metrics["partition"]) == \
        (4, "linear_interleave", "mnk")
    used = {unit.split(".")[0] for unit in metrics["unit_busy_ps"] if unit.endswith(".sa")}
    assert len(used) == 16  # 4 stages x TP 4 (the LM head runs on the same cores)


def test_a_model_that_does_not_fit_says_by_how_much():
    with pytest.raises(MappingError, match=r"qwen3_32b needs .* short by [\d.]+ GiB"):
        simulate(SCENARIO, overrides=["run.mode=analytic", "workload.model=qwen3_32b", "hw.hbm=null"])


def test_buffers_larger_than_a_cores_sram_name_the_per_core_sizes_and_the_settings():
    # Switching to the 16 MiB-per-core preset: the buffers were compared with the SRAM of
    # the cores in use ("the chip has 2.2 GiB" on a 4 GiB chip) and prefill_chunk went
    # unnamed.
    with pytest.raises(MappingError) as caught:
        simulate(SCENARIO, overrides=["run.mode=analytic", "hw.preset=npu/small_core_256"])
    message = str(caught.value)
    assert "each core needs 17.5 MiB of SRAM" in message and "but has 16 MiB" in message
    assert "workload.prefill_chunk" in message and "= 1024" in message
    assert "workload.weight_tile_bytes" in message
    # and what it suggests works
    assert run("hw.preset=npu/small_core_256", "workload.prefill_chunk=256").metrics["ttft_ps"] > 0


@pytest.mark.parametrize("override, message", [
    ("workload.placement=spiral", "unknown placement 'spiral'; known: linear_interleave"),
    ("workload.partition=diagonal", "unknown partition 'diagonal'; known: k, mn, mnk"),
    ("workload.model=qwen9_100b", "no shipped model of that name"),
    ("workload.tp=128", "exceeds the chip's 64 cores"),
    ("workload.pipeline_stages=40", "needs 160 cores"),
    ("workload.output_len=40960", r"prompt_len \+ output_len = 40976 tokens exceed qwen3_1_7b's "
                                  "context window of 40960"),
])
def test_bad_mapping_choices_name_the_field_and_the_choices(override, message):
    with pytest.raises((ConfigError, MappingError), match=message):
        run("workload.prompt_len=16", override)


def test_the_cli_reports_the_shortfall_and_exits_2(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", SCENARIO, "--out", str(tmp_path),
                           "--model", "qwen3_32b", "--set", "hw.hbm=null", "--mode", "analytic"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "short by" in proc.stderr and "Traceback" not in proc.stderr


def test_without_hbm_an_untied_embedding_table_takes_the_first_stages_sram():
    # The table was reserved in HBM only, so with hw.hbm unset it was not placed at all
    # and a model whose layers alone just fitted the SRAM ran.  Qwen3-8B's input
    # embedding (untied) is 1.16 GiB; on 16 cores it adds ~74 MiB to each first-stage core.
    chip = ["run.mode=analytic", "workload.model=qwen3_8b", "workload.prompt_len=128",
            "workload.output_len=2", "run.trace=false", "hw.hbm=null", "hw.noc.width=4",
            "hw.noc.height=4"]
    with pytest.raises(MappingError) as caught:
        simulate(SCENARIO, overrides=[*chip, "hw.core.sram.capacity_bytes=1200MiB"])
    message = str(caught.value)
    assert "qwen3_4b_npu64.yaml: core 0: " in message and "the core has no HBM" in message
    assert "(1 tensor) must stream" in message
    metrics = simulate(SCENARIO, overrides=[*chip, "hw.core.sram.capacity_bytes=1220MiB"]).metrics
    assert metrics["output_tokens"] == 2
