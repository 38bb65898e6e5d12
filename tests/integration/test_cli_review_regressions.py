"""Bad input a fuzzing review found ending in a traceback, a silent default or a
misleading result; each now gets one clear message (or an honest null)."""

import csv
import json

import pytest

from npusim.cli import main
from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component
SCENARIOS = REPO_ROOT / "workloads" / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"
FUSION = SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml"
MOE = SCENARIOS / "qwen3_30b_a3b_npu64.yaml"


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code or 0, captured.out, captured.err


@pytest.mark.parametrize("scenario, override, message", [
    # a list or mapping as a part's kind raised TypeError: unhashable type
    (FUSION, "workload.scheduler.kind=[]",
     "workload.scheduler.kind: got []; expected a scheduler name (chunked_prefill, continuous, static)"),
    (FUSION, "workload.placement={kind: {a: 1}}", "expected a placement name"),
    # a wrongly cased or misspelt kind got the list but no suggestion, at the block
    (FUSION, "workload.scheduler.kind=Continuous",
     "workload.scheduler.kind: unknown scheduler 'Continuous'; did you mean 'continuous'?"),
    # another kind's option was only an "unknown key"
    (FUSION, "workload.scheduler={kind: continuous, token_budget: 5}",
     "workload.scheduler.token_budget: unknown key for kind: continuous; chunked_prefill takes it"),
    # routing fields the chosen kind does not read were ignored
    (MOE, "workload.routing={kind: balanced, ratio: 16}",
     "routing.ratio=16.0: kind: balanced does not use it"),
    (MOE, "workload.routing={kind: zipf, exponent: 1.0, ratio: 2}", "routing.ratio=2.0"),
    (MOE, "workload.routing={kind: balanced, seed: -1}",
     "workload.routing.seed: Input should be greater than or equal to 0 (got -1)"),
])
def test_malformed_parts_are_named_not_a_traceback(scenario, override, message, tmp_path, capsys):
    code, _, err = run_cli(["run", scenario, "--mode", "analytic", "--out", tmp_path,
                            "--set", override], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_an_empty_mode_or_hw_is_an_error_not_the_default(tmp_path, capsys):
    code, _, err = run_cli(["run", QUICKSTART, "--mode", "", "--out", tmp_path], capsys)
    assert code == 2 and "--mode: Input should be 'tlm' or 'analytic' (got '')" in err
    code, _, err = run_cli(["run", QUICKSTART, "--hw", "", "--out", tmp_path], capsys)
    assert code == 2 and "--hw: got an empty path ''" in err   # it read the current directory


@pytest.mark.parametrize("command, name, extra", [
    ("run", "SCENARIO", []), ("capacity", "SCENARIO", []), ("sweep", "SPEC", []),
    ("plot", "SOURCE", ["--kind", "timeline"])])
def test_an_empty_path_argument_is_named_not_read_as_the_working_directory(
        tmp_path, capsys, monkeypatch, command, name, extra):
    # `npusim run "$SCENARIO"` with the variable unset said "error: .: is a directory;
    # expected a YAML file": Path('') is the working directory.
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli([command, "", *extra], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"Invalid value for '{name}': got an empty path ''; expected " in \
        " ".join(err.replace("│", " ").split())
    assert ".: is a directory" not in err and list(tmp_path.iterdir()) == []


def test_list_with_a_bad_preset_root_says_so(monkeypatch, capsys):
    monkeypatch.setenv("NPUSIM_HWCONFIGS", "/nonexistent")
    code, _, err = run_cli(["list"], capsys)
    assert code == 2 and "$NPUSIM_HWCONFIGS='/nonexistent' is not a directory" in err


def test_a_directory_where_the_sweep_lock_goes_is_named(tmp_path, capsys):
    (tmp_path / "out" / ".sweep.lock").mkdir(parents=True)
    code, _, err = run_cli(["sweep", REPO_ROOT / "workloads/sweeps/npu_design_space.yaml",
                            "--out", tmp_path / "out", "-q"], capsys)
    assert code == 2 and ".sweep.lock is a directory" in err and "Traceback" not in err


def test_a_serving_run_where_nothing_finishes_reports_no_latency(tmp_path, capsys):
    # Two prompts past the model's context window: both rejected.  The latencies were 0,
    # which a sweep or Pareto plot took for the best configuration.
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\na,0,100000,4\nb,9,100000,4\n")
    code, out, err = run_cli(["run", FUSION, "--mode", "analytic", "--trace", trace,
                              "--out", tmp_path / "out"], capsys)
    assert code == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["requests_finished"] == 0
    assert metrics["ttft_ms_p50"] is None and metrics["e2e_ms_mean"] is None
    assert "no request finished (2 rejected): latencies are null" in err
    # why, with the numbers of the first one, even though nothing finished
    assert "2: prompt + output exceed the model's context window" in err
    assert "first: prompt + output = 100004 tokens exceed qwen3_4b's context window" in err
    assert "TTFT p50 / p90 / p99" in out and "n/a" in out


def test_a_run_that_rejects_some_requests_says_how_many_and_why(tmp_path, capsys):
    # The Azure replay on the disaggregation scenario rejected its long prompts (whole-
    # prompt prefill, max_batch_tokens 2048) with exit 0 and nothing on the screen; a
    # comparison with fusion then compared different request sets.
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\n"
                     "a,0,100,4\nb,9,3000,4\nc,19,100000,4\n")
    code, _, err = run_cli(["run", SCENARIOS / "qwen3_4b_npu64_pd_disagg.yaml", "-q",
                            "--trace", trace, "--out", tmp_path / "out"], capsys)
    assert code == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["requests_rejected_by_kind"] == {"batch_tokens": 1, "context_window": 1}
    assert "2 of 3 requests rejected" in err
    assert "1: prompt longer than scheduler.max_batch_tokens" in err
    assert "first: prompt of 3000 tokens exceeds scheduler.max_batch_tokens=2048" in err
    with open(tmp_path / "out" / "requests.csv", newline="") as table:
        kinds = [row["rejected_kind"] for row in csv.DictReader(table)]
    assert kinds == ["", "batch_tokens", "context_window"]
    assert "workload.scheduler.kind=chunked_prefill" in err


@pytest.mark.parametrize("override, message", [
    # blamed on the activation buffers ('use a smaller batch')
    ("workload.weight_tile_bytes=1GiB",
     "workload.weight_tile_bytes = 1 GiB: 2 tiles are buffered in each core's SRAM of 64 MiB; "
     "expected at most 32 MiB"),
    # accepted, and timed as a transfer into memory that does not exist
    ("workload.stream_chunk_bytes=1GiB",
     "workload.stream_chunk_bytes = 1 GiB: a burst group larger than a core's SRAM (64 MiB)"),
    # named neither the field nor the sizes that work
    ("workload.tp=3", "tp = 3: groups of 3 cores cannot tile the 8x8 mesh in equal blocks; "
                      "expected one of 1, 2, 4, 8, 16, 32, 64"),
])
def test_llm_sizes_that_cannot_work_name_their_field(override, message, tmp_path, capsys):
    code, _, err = run_cli(["run", SCENARIOS / "qwen3_4b_npu64.yaml", "--mode", "analytic",
                            "--out", tmp_path, "--set", override], capsys)
    assert code == 2 and message in err


def test_a_missing_plot_column_lists_the_columns_and_says_when_every_point_failed():
    import pandas as pd

    from npusim.analysis.frames import AnalysisError, require_columns

    frame = pd.DataFrame({"point": [0, 1], "status": ["failed", "failed"],
                          "hw.hbm.channels": [1, 2], "error": ["x", "y"]})
    with pytest.raises(AnalysisError) as info:
        require_columns(frame, ["metrics.e2e_latency_ps"])
    message = str(info.value)
    assert "its columns: point, status, hw.hbm.channels, error" in message
    assert "no point of this sweep succeeded, so it has no metrics" in message


def test_a_trace_file_without_hashes_refuses_a_hash_block_size(tmp_path, capsys):
    code, _, err = run_cli(["run", FUSION, "--mode", "analytic", "--out", tmp_path,
                            "--set", "workload.trace.hash_block_tokens=16"], capsys)
    assert code == 2 and "hash_block_tokens = 16, but no request of the file has hash_ids" in err


def test_a_sweep_base_that_is_a_directory_says_so(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nbase: {tmp_path}\naxes:\n  - grid: {{run.seed: [1, 2]}}\n")
    code, _, err = run_cli(["sweep", spec, "--out", tmp_path / "out"], capsys)
    assert code == 2 and f"{tmp_path} is a directory; expected a scenario YAML file" in err


def test_gemm_weight_tiles_that_do_not_fit_sram_are_an_error(tmp_path, capsys):
    # the SRAM capacity used to be ignored unless weights_in: sram
    code, _, err = run_cli(["run", QUICKSTART, "--mode", "analytic", "--out", tmp_path,
                            "--set", "hw.core.sram.capacity_bytes=2MiB"], capsys)
    assert code == 2 and "workload.tile_n = 256: two weight tiles" in err
    assert "expected tile_n at most 204" in err
    code, _, err = run_cli(["run", QUICKSTART, "--mode", "analytic", "--out", tmp_path,
                            "--set", "workload.repeat=100000000"], capsys)
    assert code == 2 and "workload.repeat" in err and "1000000" in err


def test_a_gemm_streaming_weights_from_hbm_on_a_chip_without_hbm_names_the_fields(tmp_path,
                                                                                  capsys):
    # An SRAM-only chip (hw.hbm: null, as the reference allows) with the default
    # weights_in: hbm said only "endpoint 'core0.hbm': this device has no HBM".
    code, _, err = run_cli(["run", QUICKSTART, "--mode", "analytic", "--out", tmp_path / "a",
                            "--set", "hw.hbm=null"], capsys)
    assert code == 2 and "Traceback" not in err
    assert "workload.weights_in = hbm" in err and "hw.hbm is not set" in err
    assert "expected weights_in: sram" in err and "(set by --set hw.hbm=null)" in err
    assert not (tmp_path / "a" / "metrics.json").exists()
    code, _, _ = run_cli(["run", QUICKSTART, "--mode", "analytic", "--out", tmp_path / "b", "-q",
                          "--set", "hw.hbm=null", "--set", "workload.weights_in=sram"], capsys)
    assert code == 0


# -- a new-user walkthrough (session 16) ----------------------------------------------------

def test_a_file_level_problem_is_one_line_naming_the_file(tmp_path, capsys):
    # was "x.yaml: invalid configuration (1 problem)\n  <root>: file not found"
    code, _, err = run_cli(["run", tmp_path / "nonexist.yaml"], capsys)
    assert code == 2 and err.strip() == f"error: {tmp_path / 'nonexist.yaml'}: file not found"
    code, _, err = run_cli(["run", SCENARIOS / "qwen3_4b_npu64.yaml", "--model", "nope",
                            "--out", tmp_path], capsys)
    assert code == 2 and "<root>" not in err and err.count("invalid configuration") == 1
    assert "workload.model: nope: no such file and no shipped model of that name" in err


def test_hw_given_a_part_that_is_not_a_device_says_so(tmp_path, capsys):
    # a DRAM preset as --hw listed 34 problems of a device missing its fields
    code, _, err = run_cli(["run", QUICKSTART, "--hw", REPO_ROOT / "hwconfigs/memory/hbm2e.yaml",
                            "--out", tmp_path], capsys)
    assert code == 2 and "(1 problem)" in err
    assert "kind: 'dram' is a memory part, not a device; --hw expects a device (kind: npu)" in err


def test_a_bad_validate_selection_prints_only_the_error(capsys):
    code, out, err = run_cli(["validate", "--suite", "nope"], capsys)
    assert code == 2 and "no suite 'nope'" in err and "selection" not in out


def test_piped_tables_are_not_wrapped_at_80_columns(monkeypatch):
    from npusim.core.console import PIPE_COLUMNS, console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert not console().is_terminal and console().width == PIPE_COLUMNS  # (pytest captures)
    monkeypatch.setenv("COLUMNS", "123")
    assert console(stderr=True).width == 123


def test_shipped_files_run_by_the_paths_npusim_list_shows_from_any_directory(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # not the checkout: 'file not found' before
    code, _, err = run_cli(["run", "workloads/scenarios/quickstart.yaml", "--mode", "analytic",
                            "--hw", "hwconfigs/npu/large_core_64.yaml", "--out", "q", "-q"],
                           capsys)
    assert code == 0, err
    assert (tmp_path / "q" / "metrics.json").is_file()
    from npusim.sweep.spec import load_spec

    assert len(load_spec("workloads/sweeps/quickstart_grid.yaml").points()) > 1
    (tmp_path / "workloads").mkdir()  # a file of that name here wins
    code, _, err = run_cli(["run", "workloads/x.yaml"], capsys)
    assert code == 2 and "workloads/x.yaml: file not found" in err


@pytest.mark.parametrize("args, message", [
    # --set won over --trace (and --model, --mode won over --set) in either order, silently
    (["run", FUSION, "--trace", REPO_ROOT / "traces/ratio_1_1_32.csv",
      "--set", "workload.trace.file=traces/ratio_10_1_32.csv"],
     "--trace and --set workload.trace.file=traces/ratio_10_1_32.csv both set "
     "workload.trace.file; give one of them"),
    (["run", FUSION, "--set", "workload.trace={file: traces/ratio_10_1_32.csv}",
      "--trace", REPO_ROOT / "traces/ratio_1_1_32.csv"], "--trace and --set workload.trace="),
    (["run", QUICKSTART, "--model", "qwen3_8b", "--set", "workload.model=qwen3_1_7b"],
     "--model and --set workload.model=qwen3_1_7b both set workload.model"),
    (["run", QUICKSTART, "--mode", "tlm", "--set", "run.mode=analytic"],
     "--mode and --set run.mode=analytic both set run.mode"),
    (["capacity", FUSION, "--mode", "tlm", "--set", "run={mode: analytic}"],
     "--mode and --set run={mode: analytic} both set run.mode"),
    (["run", QUICKSTART, "--hw", REPO_ROOT / "hwconfigs/npu/small_core_256.yaml", "--set",
      "hw={preset: npu/large_core_64}"], "--hw and --set hw={preset: npu/large_core_64} both set hw"),
    (["sweep", REPO_ROOT / "workloads/sweeps/quickstart_grid.yaml", "--mode", "tlm",
      "--set", "run.mode=analytic"], "--mode and --set run.mode=analytic both set run.mode"),
])
def test_an_option_and_a_set_of_the_same_field_are_refused(args, message, tmp_path, capsys):
    code, _, err = run_cli([*args, "--out", tmp_path / "out"], capsys)
    assert code == 2 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_trace_option_takes_other_trace_fields_from_set(tmp_path, capsys):
    code, _, _ = run_cli(["run", FUSION, "-q", "--mode", "analytic", "--trace",
                          REPO_ROOT / "traces/ratio_1_1_32.csv", "--set",
                          "workload.trace.limit=3", "--out", tmp_path / "out"], capsys)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert code == 0 and metrics["requests_total"] == 3


@pytest.mark.parametrize("scenario, override", [
    # "Input should be a valid list (got 5)": read as one count, the field's name suggests
    (FUSION, "workload.pd.layers_per_stage=5"),
    (SCENARIOS / "qwen3_4b_npu64_pd_disagg.yaml", "workload.pd.decode_layers_per_stage='6,6'"),
    (SCENARIOS / "qwen3_4b_npu64.yaml", "workload.layers_per_stage=4"),
])
def test_a_layer_count_where_a_list_goes_says_what_the_list_holds(scenario, override,
                                                                   tmp_path, capsys):
    code, _, err = run_cli(["run", scenario, "--set", override, "--out", tmp_path / "out"],
                           capsys)
    assert code == 2 and "expected a list with one layer count per pipeline stage" in err
    assert override.split("=")[0] + ": got " in err


@pytest.mark.parametrize("scenario, overrides, message", [
    # "remove it, or set pd.mode": a --set cannot remove a key; say what replaces it
    (SCENARIOS / "qwen3_4b_npu64_pd_disagg.yaml", ["workload.pd.mode=fusion"],
     "the override workload.pd.mode=fusion keeps workload.pd's other fields: --set "
     "'workload.pd={mode: fusion, ...}' replaces the whole section"),
    (FUSION, ["workload.scheduler.kind=continuous"],
     "workload.scheduler.token_budget: unknown key for kind: continuous"),
    (FUSION, ["workload.scheduler.kind=continuous"],
     "--set 'workload.scheduler={kind: continuous, ...}' replaces the whole section"),
    # read as the text '{mode: fusion, tp: 4' and reported as "not a valid dictionary"
    (FUSION, ["workload.pd={mode: fusion, tp: 4"],
     "workload.pd: got '{mode: fusion, tp: 4', which is not a YAML flow mapping "
     "(expected ',' or '}', but got '<stream end>'); expected a flow mapping"),
    (FUSION, ["workload.pd.layers_per_stage=[4, 4"], "which is not a YAML flow list"),
    (FUSION, ["workload.pd.layers_per_stage=[4, 4]]"], "which is not a YAML flow list"),
    (FUSION, ["workload.pd={mode: fusion tp: 4}"], "which is not a YAML flow mapping"),
    (FUSION, ['workload.pd.layers_per_stage=["a" b]'], "which is not a YAML flow list"),
    # the routing check says "does not use it ... remove it": the hint says how
    (MOE, ["workload.routing={kind: imbalanced, ratio: 2}", "workload.routing.kind=balanced"],
     "--set 'workload.routing={kind: balanced, ...}' replaces the whole section"),
    # text that only starts with a bracket stays text (here: a trace file name)
    (FUSION, ["workload.trace.file=[2024]-trace.csv"],
     "workload.trace.file: [2024]-trace.csv: trace file not found"),
    # neither the two counts nor the override that set one
    (SCENARIOS / "qwen3_4b_npu64_pd_disagg.yaml", ["workload.pd.prefill_cores=49"],
     "prefill_cores + decode_cores = 49 + 21 = 70 exceeds the chip's 64 cores (overrides "
     "inside it: workload.pd.prefill_cores=49)"),
])
def test_section_errors_from_overrides_say_which_override_and_how_to_fix_it(
        scenario, overrides, message, tmp_path, capsys):
    sets = [arg for override in overrides for arg in ("--set", override)]
    code, _, err = run_cli(["run", scenario, *sets, "--out", tmp_path / "out"], capsys)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_every_commands_help_paragraphs_are_reflowed():
    # typer reflows only the first paragraph of a docstring: the later ones kept their
    # source line breaks and wrapped raggedly in a narrow terminal ("change every" /
    # "point's key")
    import typer

    from npusim.cli import app

    commands = typer.main.get_command(app).commands
    assert {"run", "sweep", "capacity", "validate", "plot", "list"} <= set(commands)
    for name, command in commands.items():
        paragraphs = (command.help or "").split("\n\n")
        assert all("\n" not in paragraph for paragraph in paragraphs), name
    assert len(commands["sweep"].help.split("\n\n")) == 3


def test_a_trace_option_naming_no_file_says_where_it_looked(tmp_path, capsys, monkeypatch):
    # from another directory --trace traces/x.csv was reported at workload.trace.file,
    # an absolute path the user never typed
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["run", FUSION, "--trace", "traces/no_such_trace.csv", "--out",
                            tmp_path / "out"], capsys)
    assert code == 2 and err.startswith("error: --trace: traces/no_such_trace.csv: no such file")
    assert f"relative to the working directory {tmp_path}, or to the npusim checkout" in err
    assert "--set workload.trace.file=traces/no_such_trace.csv also looks" in err
    assert not (tmp_path / "out").exists()
    # a shipped trace as `npusim list` shows it (traces/NAME) is found from anywhere, as
    # the scenario argument is
    code, _, err = run_cli(["run", FUSION, "--trace", "traces/ratio_1_1_32.csv", "--mode",
                            "analytic", "-q", "--out", tmp_path / "out"], capsys)
    assert code == 0, err


def test_the_summary_shows_a_small_kv_peak_and_no_empty_event_count(tmp_path, capsys):
    # "KV peak 0%" for 0.14%, and "events / transactions 0 / 0" in analytic mode
    code, out, _ = run_cli(["run", FUSION, "--mode", "analytic", "--out", tmp_path / "out"],
                           capsys)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    peak = 100 * metrics["iterations_by_replica"]["fused0"]["kv_utilisation_peak"]
    assert code == 0 and 0 < peak < 1 and f"/ {peak:.2g}% /" in out
    assert "events / transactions" not in out


def test_a_trace_cut_by_its_task_cap_is_said(tmp_path, capsys):
    # the timeline of a traced serving run ended at 0.4 s of 6.75 s without a word
    from npusim.analysis.run_plots import plot_utilisation_timeline

    args = ["run", FUSION, "--mode", "analytic", "--set", "run.trace=true", "--set",
            "run.trace_max_tasks=20000", "--set", "workload.trace.limit=2", "--out",
            tmp_path / "out"]
    code, _, err = run_cli(args, capsys)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert code == 0 and metrics["trace_truncated"] is True
    assert "per-task rows stopped at run.trace_max_tasks = 20,000" in err
    code, _, err = run_cli([*args, "-q"], capsys)  # quiet: metrics.json says it
    assert code == 0 and "trace_max_tasks" not in err
    figure = plot_utilisation_timeline(tmp_path / "out")
    assert "stop at run.trace_max_tasks" in " ".join(figure.axes[0].get_title().split())
    code, _, err = run_cli(["run", QUICKSTART, "-q", "--set", "run.trace=true", "--out",
                            tmp_path / "all"], capsys)
    assert json.loads((tmp_path / "all" / "metrics.json").read_text())["trace_truncated"] is False
    assert "trace_max_tasks" not in err


def test_a_kind_switch_hint_stays_off_problems_it_cannot_fix(tmp_path, capsys):
    # a range error beside a --mode (an override of run.mode the user never typed)
    code, _, err = run_cli(["run", QUICKSTART, "--mode", "analytic", "--set", "run.seed=-1",
                            "--out", tmp_path / "out"], capsys)
    assert code == 2 and "run.seed" in err and "replaces the whole section" not in err


def test_hw_file_problems_beside_others_are_marked_with_the_file(tmp_path, capsys):
    # every problem went to the scenario file, the --hw file's own (width -3) included;
    # and an unrelated --set hw.X stopped a missing preset being blamed on the file
    chip = tmp_path / "chip.yaml"
    chip.write_text("preset: npu/large_core_64\nnoc: {width: -3}\n")
    code, _, err = run_cli(["run", QUICKSTART, "--hw", chip, "--set", "run.seed=-1",
                            "--out", tmp_path / "out"], capsys)
    assert code == 2 and f"(got -3) (in {chip})" in err
    assert "(from the override run.seed=-1)" in err
    missing = tmp_path / "missing.yaml"
    missing.write_text("preset: npu/large_core_64\nhbm: {preset: memory/hbm4}\n")
    code, _, err = run_cli(["run", QUICKSTART, "--hw", missing, "--set", "hw.noc.width=4",
                            "--out", tmp_path / "out"], capsys)
    assert code == 2 and err.startswith(f"error: {missing}: ")


def test_a_missing_preset_in_a_hw_file_is_blamed_on_that_file(tmp_path, capsys):
    # the scenario file was named (hw.hbm.preset), and every preset folder was listed
    hw = tmp_path / "chip.yaml"
    hw.write_text("preset: npu/large_core_64\nhbm: {preset: memory/hbm4}\n")
    code, _, err = run_cli(["run", QUICKSTART, "--hw", hw, "--out", tmp_path / "out"], capsys)
    assert code == 2 and err.startswith(f"error: {hw}: ")
    assert "hbm.preset: no preset named 'memory/hbm4'; known presets in memory/: " in err
    assert "npu/" not in err.split("known presets in memory/: ")[1]


@pytest.mark.parametrize("command", ["run", "capacity"])
def test_a_pipe_as_trace_says_it_is_not_a_file(tmp_path, capsys, command):
    # `--trace <(head -300 big.csv)` said "trace file not found (looked in
    # /proc/N/fd/pipe:[..])": the pipe's resolved name is no file.
    import os

    fifo = tmp_path / "rows"
    os.mkfifo(fifo)  # nothing writes to it: reading it would block
    read_end, write_end = os.pipe()  # what <(...) hands over: /dev/fd/N
    try:
        for pipe in (fifo, f"/dev/fd/{read_end}"):
            code, _, err = run_cli([command, FUSION, "--trace", pipe, "--out",
                                    tmp_path / "out"], capsys)
            assert code == 2 and "Traceback" not in err
            assert err.startswith(f"error: --trace: {pipe}: not a regular file (a pipe, as "
                                  "<(...) gives, or a device); expected a trace file on disk")
            assert not (tmp_path / "out").exists()
    finally:
        os.close(read_end)
        os.close(write_end)
