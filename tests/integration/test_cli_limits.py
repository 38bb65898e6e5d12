"""Inputs past what Python or the machine can take give one clear message, not a crash.

Found by fuzzing the CLI: integers longer than Python converts (4300 digits), nesting
deeper than it recurses, lengths past 64-bit integers, meshes too large to build, and
options a scenario's workload has no use for.  Each case exits non-zero with ``error:``
and the file, field or line named.
"""

import json

import pytest

from npusim.config.presets import REPO_ROOT
from tests.integration.test_cli import QUICKSTART, run_cli

pytestmark = pytest.mark.component

FUSION = REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml"
HUGE = "9" * 5001


def expect_error(args, capsys, *needles):
    code, _, err = run_cli(args, capsys)
    assert code != 0 and err.startswith("error: ") and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def test_an_integer_too_long_for_python_is_a_field_error(tmp_path, capsys):
    err = expect_error(["run", str(QUICKSTART), "--set", f"workload.m={HUGE}",
                        "--out", str(tmp_path)], capsys, "workload.m: an integer of 5001 digits")
    assert len(err) < 400  # the value is shown shortened
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: x\nhw: {{preset: npu/large_core_64}}\n"
                        f"workload: {{kind: gemm, m: {HUGE}, k: 1, n: 1}}\n")
    expect_error(["run", str(scenario), "--out", str(tmp_path / "o")], capsys,
                 "line 3, column 27", "an integer of 5001 digits")


def test_nesting_deeper_than_python_recurses_is_a_yaml_error(tmp_path, capsys):
    scenario = tmp_path / "deep.yaml"
    scenario.write_text("name: x\ndescription: " + "[" * 5000 + "]" * 5000 + "\n")
    expect_error(["run", str(scenario)], capsys, "deep.yaml", "nested too deeply")


@pytest.mark.parametrize("suffix, body, needle", [
    (".csv", f"id,arrival_ps,prompt_tokens,output_tokens\na,0,{HUGE},10\n",
     "t.csv:2: column 'prompt_tokens'"),
    (".csv", "id,arrival_ps,prompt_tokens,output_tokens\na,0,3000000000,10\n",
     "expected an integer from 1 to 2147483647"),
    (".jsonl", f'{{"arrival_ps": 0, "prompt_tokens": {HUGE}, "output_tokens": 4}}\n',
     "t.jsonl:1: an integer of more than 4300 digits"),
    (".jsonl", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "t.jsonl:1: JSON nested too deeply"),
])
def test_trace_values_past_the_limits_name_the_line(suffix, body, needle, tmp_path, capsys):
    trace = tmp_path / f"t{suffix}"
    trace.write_text(body)
    expect_error(["run", str(FUSION), "--trace", str(trace), "--out", str(tmp_path / "o")],
                 capsys, needle)


@pytest.mark.parametrize("prompt, where", [
    ("99999999999999999999", "workload.trace.prompt:"),
    ("{kind: uniform, low: 1, high: 99999999999999999999}", "workload.trace.prompt.high:"),
    ("{kind: empirical, values: [5, 99999999999999999999]}", "workload.trace.prompt.values[1]:"),
])
def test_generated_lengths_past_the_limit_are_field_errors(prompt, where, tmp_path, capsys):
    spec = f"workload.trace={{arrival: {{kind: poisson, rate_per_s: 10}}, prompt: {prompt}, " \
           "output: 10, num_requests: 5}"
    expect_error(["run", str(FUSION), "--set", spec, "--out", str(tmp_path)], capsys, where,
                 "less than or equal to 2147483647")


def test_model_files_huge_deep_with_bom_or_empty(tmp_path, capsys):
    config = json.loads((REPO_ROOT / "workloads" / "models" / "qwen3_1_7b.json").read_text())
    bom = tmp_path / "bom.json"
    bom.write_text(json.dumps(config), encoding="utf-8-sig")   # read like trace files
    code, _, _ = run_cli(["run", str(FUSION), "--set", f"workload.model={bom}", "--set",
                          "workload.trace.limit=1", "--out", str(tmp_path / "ok"), "--quiet"], capsys)
    assert code in (0, None)
    big = tmp_path / "big.json"
    big.write_text(json.dumps(config).replace('"hidden_size": 2048', f'"hidden_size": {HUGE}'))
    expect_error(["run", str(FUSION), "--set", f"workload.model={big}"], capsys,
                 "big.json", "an integer of more than 4300 digits")
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({**config, "hidden_size": 0}))
    err = expect_error(["run", str(FUSION), "--set", f"workload.model={zero}"], capsys,
                       "hidden_size: Input should be greater than 0 (got 0)")
    assert err.count("(got") == 1  # the file is named once, at the start
    expect_error(["run", str(FUSION), "--set", "workload.model="], capsys,
                 "workload.model: empty; expected a shipped model name")


def test_a_mesh_too_large_to_build_is_refused(tmp_path, capsys):
    expect_error(["run", str(QUICKSTART), "--set", "hw.noc.width=1000", "--out", str(tmp_path)],
                 capsys, "hw.noc.width", "less than or equal to 256")


@pytest.mark.parametrize("option, needle", [
    (["--trace", "traces/ratio_1_1_32.csv"], "--trace: this scenario's workload has no trace"),
    (["--mode", "fast"], "--mode: Input should be 'tlm' or 'analytic' (got 'fast')"),
])
def test_options_name_themselves_not_the_scenario_key(option, needle, tmp_path, capsys):
    expect_error(["run", str(QUICKSTART), *option, "--out", str(tmp_path)], capsys, needle)


@pytest.mark.parametrize("command", ["run", "capacity"])
def test_a_bad_mode_is_worded_alike_by_run_and_capacity(command, tmp_path, capsys):
    # capacity said "invalid configuration (1 problem) run.mode: ... (from the override
    # run.mode=fast)", naming a field the user never wrote
    serving = QUICKSTART.parent / "qwen3_4b_npu64_pd_disagg.yaml"
    expect_error([command, str(serving), "--mode", "fast", "--out", str(tmp_path)], capsys,
                 f"{serving}: --mode: Input should be 'tlm' or 'analytic' (got 'fast')")


def test_an_empty_scenario_path_is_named_as_empty(capsys):
    # it was ".: is a directory; expected a YAML file" (Path('') is the working directory)
    code, _, err = run_cli(["run", ""], capsys)
    assert code == 2 and "Traceback" not in err and "is a directory" not in err
    assert "got an empty path ''; expected a scenario YAML" in " ".join(
        err.replace("│", " ").split())


def test_a_reused_output_directory_loses_the_last_runs_serving_tables(tmp_path, capsys):
    out = tmp_path / "mix"
    run_cli(["run", str(FUSION), "--set", "workload.trace.limit=2", "--out", str(out), "--quiet"], capsys)
    assert (out / "requests.csv").is_file() and (out / "iterations.csv").is_file()
    run_cli(["run", str(QUICKSTART), "--out", str(out), "--quiet"], capsys)
    assert not (out / "requests.csv").exists()  # plot must not read it as this run's
    assert not (out / "iterations.csv").exists()
    # a user's own file of that name is not npusim's table: it stays
    (out / "requests.csv").write_text("my,own,data\n")
    run_cli(["run", str(QUICKSTART), "--out", str(out), "--quiet"], capsys)
    assert (out / "requests.csv").read_text() == "my,own,data\n"


def test_an_alias_chain_that_expands_past_the_limit_is_a_yaml_error(tmp_path, capsys):
    # Nine levels of ten aliases each: 10^9 values if walked, loaded in microseconds.
    lines = ["name: x", "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    scenario = tmp_path / "laughs.yaml"
    scenario.write_text("\n".join(lines) + "\n")
    for command in (["run", str(scenario)], ["sweep", str(scenario)]):
        expect_error(command, capsys, "laughs.yaml", "expands to more than 1,000,000 values")


@pytest.mark.parametrize("args, option", [
    (["run", str(FUSION), "--trace", "traces/ratio_1_1_32.csv", "--trace=traces/ratio_1_1_512.csv"],
     "--trace"),
    (["run", str(QUICKSTART), "--out", "a", "--mode", "tlm", "--out", "b"], "--out"),
    (["sweep", "spec.yaml", "--workers", "1", "--workers=2"], "--workers"),
    (["plot", "somewhere", "-k", "line", "--kind", "cdf"], "--kind"),
    (["plot", "somewhere", "-kline", "--kind=cdf"], "--kind"),  # a short option's value attached
    (["plot", "somewhere", "-xa", "-x", "b", "-k", "line"], "--x"),
])
def test_a_single_valued_option_given_twice_is_refused(args, option, tmp_path, capsys, monkeypatch):
    # click would keep the last value silently; nothing may run or be written
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(args, capsys)
    assert code == 2 and f"'{option}'" in err and "given 2 times" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, shown", [
    (["sweep", "spec.yaml", "--workers", "abc"], "'--workers': got 'abc'; expected a whole number"),
    (["plot", "somewhere", "-k", "timeline", "--bins", "1e3"], "'--bins': got '1e3'"),
    (["run", str(QUICKSTART), "--batch", "two"], "'--batch': got 'two'"),
    (["run", str(QUICKSTART), "--prompt-len", "1.5"], "'--prompt-len': got '1.5'"),
    (["capacity", str(FUSION), "--attainment", "most"], "'--attainment': got 'most'; expected a "
                                                        "number"),
    (["capacity", str(FUSION), "--seeds", "three"], "'--seeds': got 'three'"),
])
def test_a_numeric_option_that_does_not_parse_shows_the_value(args, shown, tmp_path, capsys,
                                                               monkeypatch):
    # typer's own message ("unable to parse string as an integer") did not show the value
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(args, capsys)
    assert code == 2 and shown in " ".join(err.replace("│", " ").split()), err
    assert list(tmp_path.iterdir()) == []


def test_repeatable_options_flags_and_option_like_values_are_not_repeats(tmp_path, capsys):
    code, _, err = run_cli(["run", str(QUICKSTART), "-q", "--quiet", "--set", "workload.m=64",
                            "--set", "workload.n=64", "--out", str(tmp_path), "--mode", "analytic"],
                           capsys)
    assert code in (0, None), err
    # --help wins over a repeat, as over any other mistake
    code, out, _ = run_cli(["run", str(QUICKSTART), "--out", "a", "--out", "b", "--help"], capsys)
    assert code in (0, None) and "Usage" in out
    # '--out' as the value of --set is a value, not a second --out
    expect_error(["run", str(QUICKSTART), "--set", "--out", "--out", str(tmp_path / "x")],
                 capsys, "--set", "expected PATH=VALUE")
