"""analysis.token_table: one row per generated token, consistent with the run's metrics."""

import math

import pytest

import npusim
from npusim import analysis
from npusim.analysis.frames import AnalysisError
from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component
SCENARIOS = REPO_ROOT / "workloads" / "scenarios"


def test_token_rows_agree_with_the_request_metrics(tmp_path):
    result = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml",
                             overrides=["workload.trace.limit=4"])
    tokens = analysis.token_table(result)
    metrics = result.metrics
    requests = result.requests
    assert len(tokens) == requests["generated"].sum() == 4 * 100
    assert list(tokens.columns) == ["request_id", "token", "time_ps", "gap_ps", "first"]
    # the first token's gap is the TTFT, the others' mean is the run's mean TBT
    assert math.isclose(tokens.loc[tokens["first"], "gap_ps"].mean() / 1e9,
                        metrics["ttft_ms_mean"], rel_tol=1e-12)
    assert math.isclose(tokens.loc[~tokens["first"], "gap_ps"].mean() / 1e9,
                        metrics["tbt_ms_mean"], rel_tol=1e-12)
    assert (tokens.groupby("request_id")["time_ps"].diff().dropna() > 0).all()
    # from the run directory: the same rows
    result.write(tmp_path / "run")
    again = analysis.token_table(tmp_path / "run")
    assert again[["token", "time_ps", "gap_ps"]].equals(tokens[["token", "time_ps", "gap_ps"]])


def test_rejected_requests_have_no_token_rows_and_a_non_serving_run_is_an_error():
    result = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_disagg.yaml",
                             overrides=["workload.trace.limit=3",
                                        "workload.scheduler.max_batch_tokens=64"])
    assert result.metrics["requests_finished"] == 0
    assert analysis.token_table(result).empty
    with pytest.raises(AnalysisError, match="no per-request table"):
        analysis.token_table(npusim.simulate(REPO_ROOT / "workloads/scenarios/quickstart.yaml"))


def test_a_request_rejected_after_some_tokens_is_not_sampled():
    # Preempted, then too long to prefill again (recompute_blocked): its tokens stay in
    # requests.csv, but the tbt_ms_* / ttft_ms_* summaries leave it out, and so must the
    # token table and the CDF samples that say they are those summaries' samples.
    import pandas as pd

    requests = pd.DataFrame({
        "request_id": ["kept", "dropped"], "arrival_ps": [0, 0], "finish_ps": [30, None],
        "status": ["finished", "rejected"], "ttft_ps": [10, 5],
        "token_times_ps": ["10 20 30", "5 6"]})
    tokens = analysis.token_table(requests)
    assert tokens["request_id"].tolist() == ["kept"] * 3
    samples, name = analysis.latency_samples(requests, "ttft_ps")
    assert name == "ttft_ps" and samples.tolist() == [10]
    gaps, _ = analysis.latency_samples(requests, "gap_ps")
    assert gaps.tolist() == [10, 10]


def test_one_token_requests_read_back_from_a_run_directory(tmp_path):
    # a requests.csv whose token_times_ps are all single numbers reads as an int column
    result = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml",
                             overrides=["workload.trace={arrival: {kind: fixed, interval_s: 0.1}, "
                                        "prompt: 16, output: 1, num_requests: 3}"])
    result.write(tmp_path / "run")
    tokens = analysis.token_table(tmp_path / "run")
    assert len(tokens) == 3 and tokens["first"].all()
    assert list(tokens["gap_ps"] / 1e9) == pytest.approx(list(result.requests["ttft_ps"] / 1e9))


def test_one_token_requests_beside_a_rejected_one_read_back(tmp_path):
    # numbers and an empty cell: pandas reads the column as float, and every row was
    # skipped (an empty table, no warning)
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\na,0,16,1\n"
                     "b,1000000000,100000,1\nc,2000000000,16,1\n")
    result = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml",
                             overrides=[f"workload.trace.file={trace}"])
    assert result.metrics["requests_rejected"] == 1
    result.write(tmp_path / "run")
    tokens = analysis.token_table(tmp_path / "run")
    assert list(tokens["request_id"]) == ["a", "c"] and tokens["time_ps"].dtype == "int64"


def test_a_result_without_a_requests_table_says_so_in_npusims_own_error():
    from npusim.core.errors import NpusimError

    result = npusim.simulate(REPO_ROOT / "workloads/scenarios/quickstart.yaml")
    with pytest.raises(NpusimError, match="no table 'requests'; this result has: none") as info:
        result.requests
    assert isinstance(info.value, KeyError)  # still a mapping lookup's error
    assert str(info.value).startswith("no table")  # printed as written, not quoted
    assert "come with serving runs" in str(info.value)
    serving = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml",
                              overrides=["workload.trace.limit=2"])
    with pytest.raises(NpusimError) as info:
        serving.table("request")  # a typo on a run that has the tables: no serving hint
    assert "this result has: requests, iterations" in str(info.value)
    assert "serving runs" not in str(info.value)


def test_a_result_prints_as_one_summary_line():
    # the generated dataclass repr printed every column: 8 MB for 32 requests
    serving = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml", mode="analytic",
                              overrides=["workload.trace.limit=3"])
    text = repr(serving)
    assert "\n" not in text and len(text) < 300
    from npusim.core.units import format_time_ps

    assert text.startswith("Result(scenario='qwen3_4b_npu64_pd_fusion', mode='analytic', "
                           f"latency={format_time_ps(serving.metrics['latency_ps'])}, ")
    # traced_ops: the rows of ops.csv (run.trace), not the operations that ran (it said ops=0)
    assert ", traced_ops=0, " in text
    assert (f"requests=3 (3 finished, 0 rejected), ttft_ms_mean="
            f"{serving.metrics['ttft_ms_mean']:.4g}, tpot_ms_mean=") in text
    assert text.endswith("tables=['iterations', 'requests'])")
    noted = repr(npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml", mode="analytic",
                                 overrides=["workload.trace.limit=300"]))
    assert "notes=1 (metrics['notes']), tables=" in noted and "notes" not in text
    gemm = repr(npusim.simulate(REPO_ROOT / "workloads/scenarios/quickstart.yaml"))
    assert "requests=" not in gemm and "tables=" not in gemm and ", traced_ops=" in gemm


def test_a_cdf_of_every_inter_token_gap_from_the_api_and_the_cli(tmp_path, capsys):
    # 'gap_ps' was "no column 'gap_ps' in the per-request table": every-gap ITL needed Python
    from npusim.cli import main

    result = npusim.simulate(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml", mode="analytic",
                             overrides=["workload.trace.limit=3"])
    gaps, name = analysis.latency_samples(result, "gap_ps")
    assert name == "gap_ps" and len(gaps) == 3 * 99  # 100 tokens each, the first is TTFT
    assert math.isclose(gaps.mean() / 1e9, result.metrics["tbt_ms_mean"], rel_tol=1e-12)
    result.write(tmp_path / "run")
    with pytest.raises(SystemExit) as done:
        main(["plot", str(tmp_path / "run"), "--kind", "cdf", "--value", "gap_ps"])
    assert done.value.code in (0, None)
    assert (tmp_path / "run" / "plot-cdf-gap_ps.png").stat().st_size > 0
