"""Layers per pipeline stage: even by default (the first stages one larger), or as
``workload.layers_per_stage`` / ``workload.pd.*layers_per_stage`` give them."""

from __future__ import annotations

import re

import pytest

from npusim.api import simulate
from npusim.core.errors import ConfigError, MappingError
from npusim.strategies.npu.llm_mapping import split_layers, stage_layers

pytestmark = pytest.mark.component

LLM = "workloads/scenarios/qwen3_4b_npu64.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
SHORT_LLM = ["run.mode=analytic", "run.trace=false", "workload.prompt_len=64",
             "workload.output_len=3"]
SHORT_SERVING = ["run.mode=analytic", "run.trace=false", "workload.trace.limit=6"]


def test_counts_become_consecutive_ranges_and_default_to_the_even_split():
    assert stage_layers(36, 7) == split_layers(36, 7)
    assert [len(r) for r in split_layers(36, 7)] == [6, 5, 5, 5, 5, 5, 5]
    assert stage_layers(10, 3, [2, 5, 3]) == [range(0, 2), range(2, 7), range(7, 10)]
    with pytest.raises(MappingError, match=r"x = \[2, 5, 3\]: gives 3 stages, but the pipeline "
                                           r"has 4 \(y\); expected 4 counts"):
        stage_layers(10, 4, [2, 5, 3], "x", "y")
    with pytest.raises(MappingError, match=r"x = \[2, 5, 4\]: sums to 11 layers, but the model "
                                           r"has 10"):
        stage_layers(10, 3, [2, 5, 4], "x")


def test_an_llm_run_given_the_default_split_is_the_same_run():
    even = ",".join(str(len(r)) for r in split_layers(36, 16))
    default = simulate(LLM, overrides=SHORT_LLM).metrics
    given = simulate(LLM, overrides=[*SHORT_LLM, f"workload.layers_per_stage=[{even}]"]).metrics
    assert given["ttft_ps"] == default["ttft_ps"] and given["tbt_ps"] == default["tbt_ps"]


def test_the_number_of_counts_sets_the_stages():
    three = simulate(LLM, overrides=[*SHORT_LLM, "workload.layers_per_stage=[12,12,12]"]).metrics
    assert three["pipeline_stages"] == 3
    used = {unit.split(".")[0] for unit in three["unit_busy_ps"] if unit.endswith(".sa")}
    assert len(used) == 12  # 3 stages x TP 4
    # one request passes every stage in turn: the split moves where the LM head's core
    # time and the hand-offs fall, not the layers' sum, so the latency barely moves ...
    lopsided = simulate(LLM, overrides=[*SHORT_LLM, "workload.layers_per_stage=[2,2,32]"]).metrics
    assert lopsided["ttft_ps"] == pytest.approx(three["ttft_ps"], rel=0.02)
    # ... while the last stage's arrays do 32 of the 36 layers' work instead of 12
    def busiest(metrics):
        return max(busy for unit, busy in metrics["unit_busy_ps"].items() if unit.endswith(".sa"))
    assert busiest(lopsided) > 2 * busiest(three)


@pytest.mark.parametrize("overrides, message", [
    (["workload.layers_per_stage=[12,12]"], r"workload.layers_per_stage: \[12, 12\] sums to 24 "
                                            r"layers, but qwen3_4b has 36"),
    (["workload.layers_per_stage=[12,12,12]", "workload.pipeline_stages=4"],
     r"gives 3 stages, but the pipeline has 4 \(pipeline_stages = 4; or leave it out\)"),
    (["workload.layers_per_stage=[0,36]"], r"workload.layers_per_stage\[0\]: Input should be "
                                           "greater than 0"),
    (["workload.layers_per_stage=[true,35]"], r"workload.layers_per_stage\[0\]: got True, a "
                                              "boolean; expected a number"),
    ([f"workload.layers_per_stage=[{','.join(['2'] * 18)}]"],
     r"workload.layers_per_stage: \[2, 2, .*\] \(18 stages\) x tp=4 needs 72 cores; the "
     r"chip has 64 \(expected at most 16 stages at tp=4\)"),
])
def test_bad_llm_splits_name_the_field(overrides, message):
    with pytest.raises((ConfigError, MappingError), match=message):
        simulate(LLM, overrides=[*SHORT_LLM, *overrides])


def test_a_serving_split_equal_to_the_default_is_the_same_run_and_a_lopsided_one_is_slower():
    default = simulate(DISAGG, overrides=SHORT_SERVING).metrics
    given = simulate(DISAGG, overrides=[*SHORT_SERVING,
                                        "workload.pd.prefill_layers_per_stage=[6,6,6,6,6,6]",
                                        "workload.pd.decode_layers_per_stage=[12,12,12]"]).metrics
    assert (given["ttft_ms_mean"], given["tbt_ms_mean"]) == (default["ttft_ms_mean"],
                                                             default["tbt_ms_mean"])
    # the decode pipeline runs at its slowest stage's pace once several micro-batches are
    # in flight: 28 layers on one stage of three is slower than 12 on each (20.5 -> 58.0 ms)
    lopsided = simulate(DISAGG, overrides=[*SHORT_SERVING,
                                           "workload.pd.decode_layers_per_stage=[4,4,28]"]).metrics
    assert lopsided["tbt_ms_mean"] > 1.2 * default["tbt_ms_mean"]
    # and says so: the split as built, and the 28-layer stage's arrays the busiest
    assert [r["layers_per_stage"] for r in lopsided["replicas"]] == [[4, 4, 28], [6] * 6]
    decode = lopsided["sa_utilisation_by_stage"]["decode0"]
    assert decode[2] > 3 * max(decode[:2])
    even = default["sa_utilisation_by_stage"]["decode0"]
    assert max(even) < 1.1 * min(even)


@pytest.mark.parametrize("scenario, overrides, error, message", [
    (DISAGG, ["workload.pd.decode_layers_per_stage=[18,18]"], ConfigError,
     r"workload.pd.decode_layers_per_stage: \[18, 18\] gives 2 stages, but the pipeline has 3 "
     r"\(decode_cores / \(decode tp x decode_dp\) = 21 / \(7 x 1\)\); expected 3 counts"),
    (DISAGG, ["workload.pd.decode_layers_per_stage=[true,12,23]"], ConfigError,
     r"workload.pd.decode_layers_per_stage\[0\]: got True, a boolean; expected a number"),
    (DISAGG, ["workload.pd.prefill_layers_per_stage=[5,5,5,5,5,5]"], ConfigError,
     r"workload.pd.prefill_layers_per_stage: \[5, 5, 5, 5, 5, 5\] sums to 30 layers, but "
     r"qwen3_4b has 36"),
    (DISAGG, ["workload.pd.layers_per_stage=[36]"], ConfigError,
     r"pd.layers_per_stage=\[36\]: only mode: fusion uses it"),
    (FUSION, ["workload.pd.decode_layers_per_stage=[36]"], ConfigError,
     r"only mode: disaggregation uses it; .*; mode: fusion takes pd.layers_per_stage"),
    # fusion's default cores (the whole chip) are known when the chip is cut
    (FUSION, ["workload.pd.layers_per_stage=[12,12,12]"], MappingError,
     r"workload.pd.layers_per_stage: \[12, 12, 12\] gives 3 stages, but the pipeline has 16 "
     r"\(64 cores / \(tp 4 x dp 1\)\); expected 16 counts"),
    (FUSION, ["workload.pd.tp=1", "workload.pd.layers_per_stage=[12,12,12]"], MappingError,
     r"the pipeline has 36 \(64 cores / \(tp 1 x dp 1\), at most one stage per layer\)"),
    # more stages than layers: the cores would idle whatever the list, and that is the error
    (DISAGG, ["workload.pd.prefill_cores=21", "workload.pd.decode_cores=40",
              "workload.pd.decode_tp=1", "workload.pd.decode_layers_per_stage=[36]"], MappingError,
     r"workload.pd.decode_cores = 40: 1 pipeline of TP 1 groups make 40 stages each, but "
     r"qwen3_4b has 36 layers"),
    (FUSION, ["workload.pd.cores=32", "workload.pd.layers_per_stage=[12,12,12]"], ConfigError,
     r"workload.pd.layers_per_stage: \[12, 12, 12\] gives 3 stages, but the pipeline has 8 "
     r"\(cores / \(tp x dp\) = 32 / \(4 x 1\)\)"),
])
def test_bad_serving_splits_name_the_field(scenario, overrides, error, message):
    with pytest.raises(error, match=message):
        simulate(scenario, overrides=[*SHORT_SERVING, *overrides])


def test_fusion_and_prefill_pools_take_their_lists_too():
    fused = simulate(FUSION, overrides=[*SHORT_SERVING,
                                        f"workload.pd.layers_per_stage=[{','.join(['1'] * 15)},21]"]
                     ).metrics
    assert fused["replicas"][0]["layers_per_stage"] == [1] * 15 + [21]
    stages = fused["sa_utilisation_by_stage"]["fused0"]
    assert stages.index(max(stages)) == 15
    split = simulate(DISAGG, overrides=[*SHORT_SERVING,
                                        "workload.pd.prefill_layers_per_stage=[1,1,1,1,1,31]"]
                     ).metrics
    prefill = next(r for r in split["replicas"] if r["role"] == "prefill")
    assert prefill["layers_per_stage"] == [1, 1, 1, 1, 1, 31]
    stages = next(v for k, v in split["sa_utilisation_by_stage"].items() if k.startswith("prefill"))
    assert stages.index(max(stages)) == 5


def test_the_console_names_the_least_and_the_most_busy_stage(tmp_path, capsys, monkeypatch):
    from npusim.cli import main

    monkeypatch.setenv("COLUMNS", "200")  # the piped width, whatever the calling shell's

    with pytest.raises(SystemExit) as info:
        main(["run", DISAGG, "--mode", "analytic", "--set", "workload.trace.limit=6",
              "--set", "workload.pd.decode_layers_per_stage=[4,4,28]", "--out", str(tmp_path)])
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert info.value.code in (0, None)
    assert re.search(r"decode0: stage arrays busy, least / most 1\d\.\d% \(stage 0\) / "
                     r"9\d\.\d% \(stage 2\)", out), out
    assert "prefill1: stage arrays busy, least / most 0.4% on every stage" in out, out
