"""The per-iteration log (iterations.csv) and queueing delay of serving runs."""

from __future__ import annotations

import pytest

from npusim.api import simulate

pytestmark = pytest.mark.component

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
SMALL = ["workload.model=qwen3_1_7b", "workload.trace.limit=12"]


def test_the_log_accounts_for_every_prompt_and_output_token():
    result = simulate(FUSION, overrides=[*SMALL, "workload.scheduler={kind: continuous}"])
    log, requests, m = result.table("iterations"), result.requests, result.metrics
    assert len(log) == m["iterations"] and list(log["iteration"]) == list(range(len(log)))
    assert (log["prefill_requests"] + log["decode_requests"] == log["requests"]).all()
    # No preemption: each prompt is prefilled once; the first token comes with the
    # prefill, every other token from one decode entry.
    assert log["prefill_tokens"].sum() == requests["prompt_tokens"].sum()
    assert log["decode_requests"].sum() == (requests["output_tokens"] - 1).sum()
    assert (log["kv_used_tokens"] <= log["kv_capacity_tokens"]).all()
    assert (log["end_ps"] > log["start_ps"]).all()
    summary = m["iterations_by_replica"]
    assert sum(s["iterations"] for s in summary.values()) == len(log)


def test_a_saturated_pool_shows_full_batches_and_a_queue():
    # 12 requests at once, at most 2 per micro-batch (the decode pipeline's 3 stages
    # hold 6): batches fill up and requests wait.
    burst = "workload.trace.rate_scale=100000"
    result = simulate(DISAGG, overrides=[*SMALL, burst, "workload.scheduler.max_batch_size=2"])
    log, requests, m = result.table("iterations"), result.requests, result.metrics
    assert log["requests"].max() == 2
    decode = log[log["role"] == "decode"]
    assert (decode["running"] > 0).any()        # decodes left out of a full batch
    prefill = log[log["role"] == "prefill"]
    assert (prefill["waiting"] > 0).any()       # prompts queued behind the pipeline
    assert m["iterations_by_replica"]["decode0"]["batch_requests_mean"] <= 2
    assert (requests["queue_ps"] >= 0).all() and (requests["queue_ps"] <= requests["ttft_ps"]).all()
    assert m["queue_ms_p99"] > 0 and m["queue_ms_p50"] <= m["queue_ms_p99"]


def test_the_batches_plot_has_a_line_per_replica_in_each_panel(tmp_path, capsys):
    from npusim import analysis
    from tests.integration.test_cli import run_cli

    result = simulate(DISAGG, overrides=SMALL)
    figure = analysis.plot_serving_timeline(result)
    assert [len(ax.get_lines()) for ax in figure.axes] == [2, 2, 2]  # prefill1, decode0
    # requests in flight fall to 0 while a pool idles between its iterations (they were
    # held at the last launch's count: the prefill pool looked busy all run long)
    log = result.table("iterations")
    prefill = log[log["role"] == "prefill"]
    busy_s = (prefill["end_ps"] - prefill["start_ps"]).sum() / 1e12
    line = next(l for l in figure.axes[0].get_lines() if l.get_label().startswith("prefill"))
    times, counts = line.get_xdata(), line.get_ydata()
    shown_busy = sum(b - a for a, b, n in zip(times, times[1:], counts) if n > 0)
    assert counts[-1] == 0 and min(counts) == 0
    assert shown_busy == pytest.approx(busy_s, rel=1e-6)  # (axis in s for this run)
    # KV and queue panels run to the pool's last end too (they stopped at its last launch)
    ends = {tuple(ax.get_lines()[0].get_xdata()[-1:]) for ax in figure.axes}
    assert len(ends) == 1
    out = tmp_path / "run"
    result.write(out)
    code, stdout, _ = run_cli(["plot", str(out), "--kind", "batches"], capsys)
    assert code == 0 and (out / "plot-batches.png").stat().st_size > 0


def test_the_batches_plot_names_what_is_missing_or_damaged(tmp_path, capsys):
    from npusim.analysis import AnalysisError, plot_serving_timeline
    from tests.integration.test_cli import QUICKSTART, run_cli

    out = tmp_path / "run"
    run_cli(["run", str(QUICKSTART), "--out", str(out), "--quiet"], capsys)
    code, _, err = run_cli(["plot", str(out), "--kind", "batches"], capsys)
    assert code != 0 and "needs a serving run directory with iterations.csv" in err
    # every request rejected on arrival: the table keeps its header and says so
    rejected = tmp_path / "rejected"
    run_cli(["run", str(DISAGG), "--set", "workload.trace={arrival: {kind: fixed, interval_s: "
             "0.5}, prompt: 60000000, output: 4, num_requests: 2}", "--out", str(rejected),
             "--quiet"], capsys)
    assert (rejected / "iterations.csv").read_text().startswith("iteration,replica,role,")
    # the memory levels are still there, at 0 (bytes_by_level was {}: a KeyError in
    # Python, lost columns in a sweep)
    import json

    moved = json.loads((rejected / "metrics.json").read_text())["bytes_by_level"]
    assert moved == {"hbm": 0, "noc": 0, "sa": 0, "sram": 0, "vec": 0}
    with pytest.raises(AnalysisError, match="launched no micro-batch"):
        plot_serving_timeline(rejected)
    (out / "iterations.csv").write_text("iteration,replica\n0,0\n")
    with pytest.raises(AnalysisError, match=r"iterations.csv: no column 'role'"):
        plot_serving_timeline(out)


def test_requests_in_flight_add_up_the_micro_batches_under_way():
    # A pipelined replica alternates big and small micro-batches; the plot shows what the
    # replica holds under way instead of a band between the two sizes, and 0 when idle.
    import pandas as pd

    from npusim.analysis.run_plots import _in_flight

    rows = pd.DataFrame({"start_ps": [0, 2, 10, 30], "end_ps": [10, 12, 20, 40],
                         "requests": [4, 1, 3, 2]})
    when, count = _in_flight(rows)
    assert when.tolist() == [0, 2, 10, 12, 20, 30, 40]  # a batch ends at 10 as one starts
    assert count.tolist() == [4, 5, 4, 3, 0, 2, 0]
