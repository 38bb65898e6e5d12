"""The command line: outputs, and one clear message plus a non-zero exit for bad input."""

import io
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from npusim.cli import main
from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component
QUICKSTART = REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml"


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def test_run_writes_every_output(tmp_path, capsys):
    code, out, _ = run_cli(["run", str(QUICKSTART), "--out", str(tmp_path), "--mode", "analytic"], capsys)
    assert code in (0, None)
    for name in ("metrics.json", "ops.csv", "units.csv", "trace.json", "config.resolved.yaml"):
        assert (tmp_path / name).is_file(), name
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["mode"] == "analytic"
    assert "latency" in out
    # energy and power as metrics.json has them (area: serving runs, below)
    energy = metrics["energy"]
    assert f"{energy['average_power_w']:,.1f} / {energy['peak_power_w']:,.1f} W" in out
    assert f"{energy['energy_j'] * 1e3:.3g} mJ" in out and "chip area" not in out


def test_the_serving_summary_names_the_makespan_and_each_pool(tmp_path, capsys):
    scenario = REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
    code, out, _ = run_cli(["run", str(scenario), "--out", str(tmp_path), "--mode", "analytic",
                            "--set", "workload.model=qwen3_1_7b",
                            "--set", "workload.trace.limit=4"], capsys)
    assert code in (0, None)
    assert "simulated time (makespan)" in out and "compute throughput" in out
    assert "decode0: arrays busy / MFU / HBM MBU" in out and "prefill1: arrays busy" in out
    area = json.loads((tmp_path / "metrics.json").read_text())["area_mm2"]["total"]
    assert f"{area:,.0f} mm²" in out and "energy per output token" in out
    assert out.count("│ throughput ") == 1  # tokens/s; FLOP/s is "compute throughput"
    assert "run.trace is false: ops.csv and trace.json hold no per-task rows" in out


def test_the_serving_summary_shows_prefix_cache_hits_when_caching(tmp_path, capsys):
    scenario = REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
    trace = ("workload.trace={arrival: {kind: fixed, rate_per_s: 4}, prompt: 64, output: 2, "
             "num_requests: 4, shared_prefix: {groups: 1, tokens: 32}}")
    code, out, _ = run_cli(["run", str(scenario), "--out", str(tmp_path), "--mode", "analytic",
                            "--set", "workload.model=qwen3_1_7b", "--set", trace,
                            "--set", "workload.prefix_caching=true"], capsys)
    assert code in (0, None)
    # three of the four prompts find their first 32 of 64 tokens cached
    assert "prefix cache hits / evictions" in out and "37.5% of prompt tokens / 0 blocks" in out


def test_summary_helpers_switch_to_seconds():
    from npusim.cli_summary import milliseconds as _milliseconds

    assert _milliseconds([1.25, 2.0, 9999.0]) == "1.2 / 2.0 / 9999.0 ms"
    assert _milliseconds([65687.9, 88056.2, 90124.0]) == "65.69 / 88.06 / 90.12 s"


@pytest.mark.parametrize("override, expected", [
    ("hw.noc.widht=4", "unknown key"),                          # unknown key
    ("hw.core.sram.capacity_bytes=12XB", "'12XB'"),             # malformed unit
    ("hw.core.sram.capacity_bytes=-4MiB", "non-negative"),      # negative size
    ("hw.preset=npu/does_not_exist", "no preset named"),       # missing preset
    ("workload.kind=warp_drive", "unknown kind 'warp_drive'"),  # unknown part
    ("name=../../escape", "'../../escape'"),                    # the name is the default --out
    ("run.energy={mac_fp16_pj: .inf}", "finite number (got inf)"),  # would be invalid JSON
    ("workload.m=true", "workload.m: expected a number, got the boolean True"),  # not m = 1
    ("workload={kind: taskgraph, tasks: [{type: compute, name: c, unit: core99.sa, "
     "op: {kind: gemm, m: 8, k: 8, n: 8}}]}", "workload.tasks[0].unit: device 'large_core_64' has no unit"),
    # paths name what the user wrote: no union tags, no shorthand internals, the real tag key
    ("workload={kind: gemm, m: 8, k: 4096, n: 65536, weights_in: sram}",  # 128 MiB a core
     "each core's weight slice is 128 MiB"),
    ("workload={kind: taskgraph, tasks: [{name: c, unit: core0.sa}]}",
     "workload.tasks[0]: missing 'type:' key"),
    ("workload={kind: taskgraph, tasks: [{type: transfer, name: c, size_bytes: -1, "
     "src: core0.sram, dst: core1.sram}]}", "workload.tasks[0].size_bytes: expected a non-negative"),
    ("workload={kind: taskgraph, tasks: [{type: transfer, size_bytes: 64, src: core0.sa, "
     "dst: core1.sram}]}", "workload.tasks[0].src: transfer endpoint 'core0.sa' is not a memory"),
    ("workload={kind: taskgraph, tasks: [{type: collective, collective: allreduce, "
     "group: [core0, core99], size_bytes: 64}]}", "workload.tasks[0].group[1]: endpoint 'core99'"),
])
def test_bad_input_gives_one_clear_message_and_nonzero_exit(override, expected, tmp_path, capsys):
    code, _, err = run_cli(["run", str(QUICKSTART), "--set", override, "--out", str(tmp_path)], capsys)
    assert code != 0
    assert expected in err and "Traceback" not in err
    assert err.startswith("error: ")


def test_a_mapping_error_names_the_option_that_set_the_field(tmp_path, capsys):
    # The message named the scenario file, which holds tp: 4, not the --set that made it 3.
    scenario = str(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64.yaml")
    code, _, err = run_cli(["run", scenario, "--mode", "analytic", "--set", "workload.tp=3",
                            "--out", str(tmp_path)], capsys)
    assert code == 2 and "cannot tile the 8x8 mesh" in err
    assert err.rstrip().endswith("(set by --set workload.tp=3)")
    hw = tmp_path / "chip.yaml"
    hw.write_text("preset: npu/large_core_64\nhbm: null\n")
    code, _, err = run_cli(["run", scenario, "--mode", "analytic", "--model", "qwen3_32b",
                            "--hw", str(hw), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "short by" in err
    assert err.rstrip().endswith(f"(hardware from --hw {hw})")


def test_the_summary_names_the_chip_that_ran(tmp_path, capsys):
    # the scenario's name speaks of its own chip; a --hw file replaces it
    hw = tmp_path / "chip.yaml"
    hw.write_text("preset: npu/large_core_64\nname: my_chip\n")
    code, out, _ = run_cli(["run", str(QUICKSTART), "--mode", "analytic", "--hw", str(hw),
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 0 and "quickstart on my_chip (analytic)" in out


def test_energy_prints_in_a_unit_where_it_is_at_least_one():
    from npusim.cli_summary import joules

    assert joules(2870.4) == "2.87 kJ" and joules(0.9995) == "1 J" and joules(0.0748) == \
        "74.8 mJ" and joules(5e-7) == "0.5 uJ" and joules(1.5e6) == "1.5 MJ"


def test_area_prints_whole_mm2_or_three_digits_below_ten():
    from npusim.cli_summary import square_millimetres

    assert square_millimetres(1234.6) == "1,235 mm²" and square_millimetres(10) == "10 mm²"
    assert square_millimetres(0.4321) == "0.432 mm²"  # was "0 mm²"


def test_dry_run_prints_what_config_resolved_yaml_will_hold_and_writes_nothing(tmp_path,
                                                                               capsys):
    args = ["run", str(QUICKSTART), "--mode", "analytic", "--set", "workload.m=512"]
    code, out, _ = run_cli([*args, "--dry-run", "--out", str(tmp_path / "dry")], capsys)
    assert code in (0, None) and not (tmp_path / "dry").exists()
    code, _, _ = run_cli([*args, "-q", "--out", str(tmp_path / "ran")], capsys)
    assert out == (tmp_path / "ran" / "config.resolved.yaml").read_text()
    code, _, err = run_cli(["run", str(QUICKSTART), "--dry-run", "--set", "workload.m=0"],
                           capsys)
    assert code == 2 and "workload.m" in err  # still checked


def test_a_swapped_block_preset_that_keeps_the_chips_keys_is_a_note(capsys):
    code, out, err = run_cli(["run", str(QUICKSTART), "--dry-run", "--set",
                              "hw.hbm.preset=memory/lpddr5"], capsys)
    assert code in (0, None) and "LPDDR5" in out
    assert "note: hw.hbm: preset memory/lpddr5 in place of the chip's memory/hbm2e keeps " \
           "the chip's channels: 4" in " ".join(err.split())


def test_version_prints_the_package_version(capsys):
    from npusim import __version__

    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out == f"npusim {__version__}\n"


def test_missing_scenario_file(tmp_path, capsys):
    code, _, err = run_cli(["run", str(tmp_path / "nope.yaml")], capsys)
    assert code != 0 and "file not found" in err and "nope.yaml" in err


def test_user_error_from_a_real_process_has_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhw: {preset: npu/large_core_64}\nworkload: {kind: gemm, m: 0, k: 1, n: 1}\n")
    # (``python -m npusim``, the module form of the ``npusim`` script)
    proc = subprocess.run([sys.executable, "-m", "npusim", "run", str(bad)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert "workload.m" in proc.stderr and "Traceback" not in proc.stderr


# Fuzz the loader: arbitrary YAML-able values at arbitrary paths either load or raise
# ConfigError: never any other exception.
_values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["64MiB", "12XB", "-1", "500MHz", "1e400", "[1, 2]", "{a: 1}"]))
_paths = st.sampled_from([
    "hw.noc.width", "hw.core.sram.capacity_bytes", "hw.core.systolic.rows", "hw.hbm",
    "hw.kind", "workload.m", "workload.cores", "workload.kind", "run.mode", "run.seed",
    "hw.core.dma.burst_group_bytes", "name", "hw.noc", "workload.tile_n", "hw.core.vector",
])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=_paths, value=_values)
def test_fuzz_loader_only_raises_config_errors(path, value):
    from npusim.config.loader import load_scenario
    from npusim.core.errors import ConfigError

    try:
        load_scenario(QUICKSTART, [f"{path}={json.dumps(value)}"])
    except ConfigError as exc:
        # an error a user can act on: it names the scenario, then the key the override
        # set (its whole path, or its last key: 'workload: unknown kind ...')
        message = str(exc)
        assert message.startswith(f"{QUICKSTART}: "), message
        assert path in message or path.rsplit(".", 1)[-1] in message, (path, message)


def test_validate_writes_the_report_only_where_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_cli(["validate", "--case", "C-SA-01", "--report", ""], capsys)
    assert code in (0, None) and list(tmp_path.iterdir()) == []  # '' means no report
    code, _, _ = run_cli(["validate", "--case", "C-SA-01", "--report", "r.md"], capsys)
    assert code in (0, None) and "C-SA-01" in (tmp_path / "r.md").read_text()
    # A selection without --report leaves the full docs/validation.md alone.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "validation.md").write_text("every case\n")
    code, out, _ = run_cli(["validate", "--case", "C-SA-01"], capsys)
    assert code in (0, None) and "no report written" in out
    assert (tmp_path / "docs" / "validation.md").read_text() == "every case\n"


@pytest.mark.parametrize("make_out, expected", [
    (lambda tmp: tmp / "afile", "exists and is not a directory"),
    (lambda tmp: tmp / "afile" / "sub", "afile is a file, not a directory"),
])
def test_an_unusable_out_path_fails_before_the_run(make_out, expected, tmp_path, capsys, monkeypatch):
    (tmp_path / "afile").write_text("keep me")
    ran = []
    monkeypatch.setattr("npusim.cli._simulate_with_progress", lambda *a: ran.append(1))
    code, _, err = run_cli(["run", str(QUICKSTART), "--mode", "analytic",
                            "--out", str(make_out(tmp_path))], capsys)
    assert code == 2 and expected in err and "Traceback" not in err
    assert ran == [] and (tmp_path / "afile").read_text() == "keep me"


def test_results_are_moved_in_whole_or_not_at_all(tmp_path, capsys):
    args = ["run", str(QUICKSTART), "--mode", "analytic", "-q", "--out", str(tmp_path)]
    assert run_cli(args, capsys)[0] in (0, None)
    before = (tmp_path / "metrics.json").read_text()
    (tmp_path / "units.csv").unlink()
    (tmp_path / "units.csv").mkdir()  # a directory where a result file goes
    code, _, err = run_cli(args + ["--set", "workload.m=64"], capsys)
    assert code == 2 and "units.csv: is a directory" in err
    assert (tmp_path / "metrics.json").read_text() == before  # the old run stays whole
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_validate_checks_the_report_path_and_refuses_an_empty_selection(tmp_path, capsys):
    code, _, err = run_cli(["validate", "--case", "C-SA-01", "--report", str(tmp_path)], capsys)
    assert code == 2 and "is a directory; expected a file name" in err
    code, _, err = run_cli(["validate", "--case", "C-SA-01", "--report",
                            str(tmp_path / "table.png")], capsys)
    assert code == 2 and "the report is Markdown; expected a file name ending in .md" in err
    assert not (tmp_path / "table.png").exists()
    from npusim.validation.cases import load_cases

    slow = next(c.id for c in load_cases() if c.slow)
    code, _, err = run_cli(["validate", "--fast", "--case", slow, "--report",
                            str(tmp_path / "r.md")], capsys)
    assert code == 2 and "--fast leaves no case to run" in err
    assert not (tmp_path / "r.md").exists()


@pytest.mark.parametrize("args, message", [
    (["--case", "S004-02"], "unknown case id(s) in any suite: 'S004-02' (did you mean S004-0"),
    (["--case", ""], "unknown case id(s) in any suite: ''"),
    (["--suite", ""], "--suite: no suite ''; known suites: components"),  # not "every suite"
    (["--suite", "npusim", "--case", "C-SA-01"], "unknown case id(s) in suite 'npusim'"),
])
def test_validate_names_a_bad_selection(args, message, tmp_path, capsys):
    code, _, err = run_cli(["validate", *args, "--report", str(tmp_path / "r.md")], capsys)
    assert code == 2 and message in err and not (tmp_path / "r.md").exists()


def test_trace_and_model_shorthands_take_any_file_name(tmp_path, capsys):
    trace = tmp_path / "it's #1: a.csv"  # YAML syntax in a file name
    trace.write_text("arrival_ps,prompt_tokens,output_tokens\n0,8,2\n1000000,8,2\n")
    code, _, err = run_cli(["run", str(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"),
                            "-q", "--out", str(tmp_path / "o"), "--trace", str(trace),
                            "--model", "qwen3_1_7b"], capsys)
    assert code in (0, None), err
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["requests_finished"] == 2


def test_an_llm_shorthand_on_a_serving_scenario_names_the_option(tmp_path, capsys):
    code, _, err = run_cli(["run", str(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"),
                            "-q", "--out", str(tmp_path / "o"), "--prompt-len", "10"], capsys)
    assert code == 2 and "--prompt-len: this scenario's workload has no prompt_len" in err
    assert "preemption" not in err  # not a look-alike key of the serving workload


def test_a_run_that_fails_leaves_no_empty_output_directory(tmp_path, capsys):
    out = tmp_path / "new" / "o"
    code, _, err = run_cli(["run", str(QUICKSTART), "--mode", "analytic", "-q", "--out", str(out),
                            "--set", "workload.cores=[0, 200]"], capsys)
    assert code == 2 and "core 200 does not exist" in err
    assert not (tmp_path / "new").exists()  # the --out check probed it and cleaned up


def test_list_shows_what_ships_models_scenarios_sweeps_and_traces(capsys):
    code, out, _ = run_cli(["list"], capsys)
    assert code in (0, None)
    flat = " ".join(out.split())  # rich wraps long lines
    for needle in ("qwen3_4b", "workloads/scenarios/quickstart.yaml",
                   "workloads/sweeps/quickstart_grid.yaml", "traces/ratio_1_1_32.csv",
                   "hardware presets", "component benches"):
        assert needle in flat, needle


def _device_rows() -> dict[str, list[str]]:
    """The rows of ``npusim list``'s device-preset table, rendered wide (a narrow
    terminal, as under pytest-xdist, would wrap the cells)."""
    from rich.console import Console

    from npusim.cli import _device_preset_table
    from npusim.config.presets import list_presets

    console = Console(width=250, record=True, file=io.StringIO())
    console.print(_device_preset_table(list_presets()))
    return {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in console.export_text().splitlines() if line.startswith("│ ")}


def test_list_gives_each_device_presets_headline_figures(tmp_path, monkeypatch, capsys):
    code, out, _ = run_cli(["list"], capsys)
    assert code in (0, None) and "device presets" in out
    rows = _device_rows()
    # large_core_64: 64 cores of 128x128 arrays at 500 MHz (2 FLOP per MAC), 64 MiB
    # SRAM and 4 x 25.6 GB/s HBM2E of 4 GiB per core
    assert rows["npu/large_core_64"] == ["64", "1,049", "4 GiB", "16.38", "256 GiB", "6.55"]
    assert set(rows) == {"npu/ascend_910b", "npu/large_core_64", "npu/small_core_256"}
    # a preset of the user's that does not build says why, and the rest still list
    (tmp_path / "npu").mkdir()
    (tmp_path / "npu" / "broken.yaml").write_text("kind: npu\nname: broken\n")
    (tmp_path / "npu" / "fine.yaml").write_text("preset: " + str(
        REPO_ROOT / "hwconfigs" / "npu" / "large_core_64.yaml") + "\n")
    (tmp_path / "memory").mkdir()  # (the chip's memory preset, found under the new root)
    (tmp_path / "memory" / "hbm2e.yaml").write_text(
        (REPO_ROOT / "hwconfigs" / "memory" / "hbm2e.yaml").read_text())
    # rich markup in a problem is text; a part's preset that does not load is no device
    (tmp_path / "npu" / "markup.yaml").write_text('kind: npu\nname: m\nnoc: "[/x]"\n')
    (tmp_path / "memory" / "bad.yaml").write_text("kind: dram\nchannels: [1\n")
    # one that builds on another and does not build is said too (it was left out)
    (tmp_path / "npu" / "chained.yaml").write_text("preset: npu/fine\n"
                                                    "core: {sram: {capacity_bytes: -5}}\n")
    monkeypatch.setenv("NPUSIM_HWCONFIGS", str(tmp_path))
    rows = _device_rows()
    assert rows["npu/chained"][0] == ("does not build: core.sram.capacity_bytes: expected a "
                                      "non-negative size, got -5")
    assert rows["npu/broken"][0] == "does not build: core: required field is missing"
    assert rows["npu/markup"][0].startswith("does not build: ") and "memory/bad" not in rows
    assert rows["npu/fine"][:2] == ["64", "1,049"] and "memory/hbm2e" not in rows


def test_every_command_has_a_one_line_summary_for_the_command_list():
    # `npusim --help` lists the commands with their summaries; a docstring's first
    # paragraph wrapped over three lines there (run, plot, capacity)
    import typer.main

    from npusim.cli import app

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        summary = command.short_help or (command.help or "").split("\n\n")[0]
        summary = " ".join(summary.split())
        assert summary and len(summary) <= 66, (name, summary)


def test_a_note_made_an_error_by_the_warnings_filter_is_one_message(capsys):
    # python -W error turned the kept-keys note into a rich traceback
    import warnings

    from npusim.core.errors import ConfigNote

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigNote)
        code, _, err = run_cli(["run", str(QUICKSTART), "--dry-run", "--set",
                                "hw.hbm.preset=memory/hbm3"], capsys)
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: hw.hbm: preset memory/hbm3 in place of the chip's")
    assert err.rstrip().endswith("(a note, made an error by the warnings filter: python -W "
                                 "error)")
