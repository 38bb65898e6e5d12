"""Where each stage keeps its weights and KV (``memory_by_stage`` in metrics.json, a
console row): what an SRAM-size what-if needs to see to explain its result."""

from __future__ import annotations

import json

import pytest

from npusim.api import simulate
from npusim.cli import main

pytestmark = pytest.mark.component

LLM = "workloads/scenarios/qwen3_4b_npu64.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
SHORT_LLM = ["run.mode=analytic", "run.trace=false", "workload.prompt_len=64",
             "workload.output_len=3"]
KEYS = ["sram_buffer_bytes", "sram_kv_bytes", "sram_weight_bytes", "hbm_weight_bytes",
        "weights_in_sram_share", "sram_buffer_working_set_bytes"]


def memory(sram: str, *more: str) -> list[dict]:
    return simulate(LLM, overrides=[*SHORT_LLM, f"hw.core.sram.capacity_bytes={sram}",
                                    *more]).metrics["memory_by_stage"]


def test_each_stage_reports_what_its_cores_keep_in_sram_and_stream_from_hbm():
    for sram, size in (("16MiB", 16 << 20), ("64MiB", 64 << 20)):
        stages = memory(sram)
        assert len(stages) == 16  # TP 4 on 64 cores
        for stage in stages:
            assert list(stage) == KEYS
            used = stage["sram_buffer_bytes"] + stage["sram_kv_bytes"] + stage["sram_weight_bytes"]
            assert 0 < used <= size
            held = stage["sram_weight_bytes"] / (stage["sram_weight_bytes"] + stage["hbm_weight_bytes"])
            assert stage["weights_in_sram_share"] == pytest.approx(held)
    # more SRAM holds more of every stage's weights; 8-bit weights in 128 MiB fit whole
    # (the S004-007 setting), so nothing streams from HBM
    small, large = memory("16MiB"), memory("64MiB")
    assert all(a["weights_in_sram_share"] < b["weights_in_sram_share"] for a, b in zip(small, large))
    resident = memory("128MiB", "workload.dtype_bytes=1")
    assert all(stage["weights_in_sram_share"] == 1.0 and stage["hbm_weight_bytes"] == 0
               for stage in resident)


def test_serving_replicas_report_their_stages_and_the_console_shows_the_range(tmp_path, capsys):
    args = ["run", DISAGG, "--mode", "analytic", "--out", str(tmp_path),
            "--set", "workload.trace.limit=4"]
    with pytest.raises(SystemExit):
        main([*args, "--set", "workload.pd.decode_layers_per_stage=[4,4,28]"])
    out = capsys.readouterr().out
    replicas = json.loads((tmp_path / "metrics.json").read_text())["replicas"]
    decode = next(r for r in replicas if r["role"] == "decode")
    shares = [stage["weights_in_sram_share"] for stage in decode["memory_by_stage"]]
    assert len(shares) == len(decode["layers_per_stage"]) == 3
    # the 28-layer stage's cores hold a smaller share of their (seven times larger) weights
    assert shares[2] < shares[0] == shares[1]
    row = next(line for line in out.splitlines() if "decode0: weights held in SRAM" in line)
    assert f"{100 * shares[2]:.1f}% (stage 2) / {100 * shares[0]:.1f}% (stage 0)" in row
    # a 3-stage decode pool keeps at most one decode micro-batch per stage under way
    row = next(line for line in out.splitlines() if "decode0: batch mean" in line)
    most = json.loads((tmp_path / "metrics.json").read_text())[
        "iterations_by_replica"]["decode0"]["micro_batches_in_flight_max"]
    assert 1 <= most <= 3 and f"/ {most} micro-batches" in row
