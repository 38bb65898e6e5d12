"""``npusim sweep`` / ``npusim plot`` and the analysis helpers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from npusim import analysis
from npusim.cli import main
from npusim.config.presets import REPO_ROOT
from tests.sweep.conftest import SWEEP

pytestmark = pytest.mark.component
QUICKSTART = REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml"


def cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code or 0, captured.out, captured.err


def test_sweep_command_writes_the_store(swept):
    frame = analysis.load_sweep(swept)
    assert len(frame) == 9 and set(frame["workload.tile_n"]) == {128, 256, 512}


def test_a_line_plot_draws_one_line_per_hue_through_each_points_value(swept):
    # What `plot --kind line -x workload.m -y metrics.latency_ps --hue workload.tile_n`
    # draws: one line per tile_n, through (m, latency) of the sweep's own rows, in the
    # unit the values call for (latencies of 0.1-1 ms: microseconds, 1 us = 1e6 ps).
    frame = analysis.load_sweep(swept)
    figure = analysis.plot_metric(frame, "workload.m", "metrics.latency_ps", hue="workload.tile_n")
    (ax,) = figure.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == [f"workload.tile_n={t}" for t in (128, 256, 512)]
    assert ax.get_ylabel() == "metrics.latency (us)"
    for tile_n, rows in frame.groupby("workload.tile_n"):
        line = lines[f"workload.tile_n={tile_n}"]
        rows = rows.sort_values("workload.m")
        assert list(line.get_xdata()) == [64, 128, 256]
        assert list(line.get_ydata()) == pytest.approx(list(rows["metrics.latency_ps"] / 1e6))


@pytest.mark.parametrize("args", [
    ["--kind", "line", "-x", "workload.m", "-y", "metrics.latency_ps", "--hue", "workload.tile_n"],
    ["--kind", "heatmap", "-x", "workload.m", "-y", "workload.tile_n", "--value", "metrics.latency_ps"],
    ["--kind", "pareto", "-x", "metrics.latency_ps", "-y", "metrics.bytes_by_level.hbm"],
    ["--kind", "cdf", "--value", "metrics.latency_ps"],
])
def test_plot_command_writes_figures(swept, args, tmp_path, capsys):
    for suffix in (".png", ".svg"):
        target = tmp_path / f"fig{suffix}"
        code, out, err = cli(["plot", swept, *args, "--out", target], capsys)
        assert code == 0, err
        assert target.stat().st_size > 1000 and "wrote" in out
    assert target.read_text().lstrip().startswith("<?xml")


def test_default_figure_names_name_the_columns_so_plots_do_not_overwrite(swept, capsys):
    # The Fig. 11 sweep's header suggests a TTFT plot and an end-to-end plot of the same
    # directory: both went to plot-line.png, the second replacing the first.
    for y in ("metrics.latency_ps", "metrics.bytes_by_level.hbm"):
        code, _, err = cli(["plot", swept, "--kind", "line", "-x", "workload.m", "-y", y],
                           capsys)
        assert code == 0, err
    assert (swept / "plot-line-metrics.latency_ps-vs-workload.m.png").is_file()
    assert (swept / "plot-line-metrics.bytes_by_level.hbm-vs-workload.m.png").is_file()


def test_plot_timeline_from_a_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert cli(["run", QUICKSTART, "--mode", "analytic", "--out", run_dir, "-q"], capsys)[0] == 0
    code, _, err = cli(["plot", run_dir, "--kind", "timeline", "--bins", "40"], capsys)
    assert code == 0, err
    assert (run_dir / "plot-timeline.png").stat().st_size > 1000


@pytest.mark.parametrize("args, expected", [
    (["plot", "{sweep}", "--kind", "line", "-x", "workload.m", "-y", "metrics.latncy_ps"],
     "did you mean 'metrics.latency_ps'"),
    # the message names the sweep it looked in
    (["plot", "{sweep}", "--kind", "line", "-x", "workload.m", "-y", "nothing_like_it"],
     "{sweep}: no column 'nothing_like_it' in the table; its columns: point, status"),
    (["plot", "{sweep}", "--kind", "pie"], "unknown plot 'pie'"),
    (["plot", "{sweep}", "--kind", "heatmap", "-x", "workload.m"], "needs --y"),
    (["plot", "{sweep}", "--kind", "timeline"], "needs a run directory"),
    (["plot", "{sweep}", "--kind", "line", "-x", "a", "-y", "b", "--out", "f.jpg"], "unsupported figure format"),
    (["sweep", SWEEP, "--executor", "spark"], "unknown executor 'spark'"),
    (["sweep", SWEEP, "--scheduler", "tcp://127.0.0.1:1"], "needs --executor dask"),
    # Path('') is the current directory: results would be scattered there.
    (["sweep", SWEEP, "--out", ""], "--out: got an empty path"),
    (["run", QUICKSTART, "--out", ""], "--out: got an empty path"),
    (["run", QUICKSTART, "--trace", "", "--out", "{sweep}/run"], "--trace: got an empty path"),
    (["plot", "{sweep}", "--kind", "cdf", "--value", "metrics.latency_ps", "--out", ""],
     "--out: got an empty path"),
])
def test_user_errors_are_one_message_exit_2(swept, args, expected, capsys):
    args = [str(a).replace("{sweep}", str(swept)) for a in args]
    expected = expected.replace("{sweep}", str(swept))
    code, _, err = cli(args, capsys)
    assert code == 2 and expected in err and "Traceback" not in err


def test_bad_spec_file_names_file_field_and_value(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(f"base: {QUICKSTART}\naxes: {{workload.m: [64, -1]}}\n")
    code, _, err = cli(["sweep", path, "--out", tmp_path / "o"], capsys)
    assert code == 2 and str(path) in err and "workload.m" in err and "-1" in err


def test_pareto_front_keeps_only_non_dominated_rows():
    frame = pd.DataFrame({"lat": [1, 2, 3, 2, 4], "area": [5, 3, 4, 3.5, 1], "status": "ok"})
    assert list(analysis.pareto_front(frame, "lat", "area").index) == [0, 1, 4]
    # maximising the second column flips which rows survive
    assert list(analysis.pareto_front(frame, "lat", "area", minimize=(True, False)).index) == [0]


def test_utilisation_timeline_counts_overlaps_once():
    ops = pd.DataFrame({"unit": ["a", "a", "b"], "start_ps": [0, 0, 50], "end_ps": [50, 50, 100]})
    frame, edges = analysis.utilisation_timeline(ops, bins=2)
    assert edges == [0, 50, 100]
    assert frame.loc["a"].tolist() == [1.0, 0.0] and frame.loc["b"].tolist() == [0.0, 1.0]


def test_latency_samples_prefer_a_per_request_table():
    from npusim.metrics.result import OP_COLUMNS, Result

    ops = {name: [] for name in OP_COLUMNS}
    plain = Result(metrics={"latency_ps": 0}, op_columns=ops, unit_stats={}, config={})
    assert analysis.latency_samples(plain)[1] == "duration_ps"  # no requests table: ops
    served = Result(metrics={"latency_ps": 0}, op_columns=ops, unit_stats={}, config={},
                    tables={"requests": [{"arrival_ps": 0, "finish_ps": 3},
                                         {"arrival_ps": 1, "finish_ps": 2}]})
    values, column = analysis.latency_samples(served)
    assert column == "e2e_ps" and sorted(values) == [1, 3]
    assert analysis.latency_samples(served, "finish_ps")[0].tolist() == [3, 2]
    values, column = analysis.latency_samples(pd.DataFrame({"x": ["[1, 2]", "[3]"]}), "x")
    assert list(values) == [1.0, 2.0, 3.0]


def test_a_per_request_table_read_back_from_a_run_directory_has_the_results_dtypes(tmp_path):
    # From the directory, times with gaps (a rejected request) came back float64
    # (4.005622e+10, inexact past 2**53 ps) and an empty reason as NaN, not "".
    import npusim

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_ps,prompt_tokens,output_tokens\n0,64,2\n1000,50000,4\n")
    result = npusim.simulate(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml",
                             mode="analytic", overrides=[f"workload.trace.file={trace}"])
    result.write(tmp_path / "run")
    written = analysis.request_table(tmp_path / "run")
    assert list(written["status"]) == ["finished", "rejected"]
    assert str(written["first_token_ps"].dtype) == "Int64" and written["reason"][0] == ""
    assert written.equals(result.requests)
    # the CDF reaches 1.0 over the finished requests: its title says one was left out
    title = analysis.plot_latency_cdf(tmp_path / "run").axes[0].get_title()
    assert " ".join(title.split()) == "CDF of e2e_ps (1 of 2 requests rejected: not in the CDF)"
    # a misspelt directory is an error naming it (it read as a run without the table)
    for read in (analysis.request_table, analysis.iteration_table, analysis.token_table):
        with pytest.raises(analysis.AnalysisError, match=r"runn: no such file or directory"):
            read(tmp_path / "runn")


def test_load_sweep_on_a_wrong_directory_is_a_user_error(tmp_path):
    with pytest.raises(analysis.AnalysisError, match="not a sweep output directory"):
        analysis.load_sweep(tmp_path)


def test_load_sweep_says_how_many_points_have_no_result_yet(swept, tmp_path):
    # A running or stopped sweep loaded as if it were whole: 2 of 4 rows, no word.
    import json
    import shutil

    partial = tmp_path / "partial"
    shutil.copytree(swept, partial)
    manifest = json.loads((partial / "manifest.json").read_text())
    manifest["points"] += [{"index": 9, "key": "not-run-1", "params": {}},
                           {"index": 10, "key": "not-run-2", "params": {}}]
    (partial / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match=r"2 of 11 points have no result yet \(the sweep "
                                         r"stopped before them; run it again"):
        frame = analysis.load_sweep(partial)
    assert len(frame) == 9 and frame.attrs["points_missing"] == 2
    (partial / ".sweep.lock").write_text('{"pid": 1, "host": "elsewhere"}')
    with pytest.warns(UserWarning, match=r"a sweep is writing here \(\.sweep\.lock\)"):
        analysis.load_sweep(partial, status="ok")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert analysis.load_sweep(swept).attrs == {"sweep_dir": str(swept), "points_total": 9,
                                                    "points_missing": 0}


def test_load_sweep_takes_what_it_is_confused_with_or_says_what_it_got(swept):
    from types import SimpleNamespace

    summary = SimpleNamespace(out_dir=swept)  # what run_sweep returns carries its directory
    assert len(analysis.load_sweep(summary)) == 9
    with pytest.raises(analysis.AnalysisError, match=r"expected its directory, "
                                                     r"load_sweep\('.*grid'\)"):
        analysis.load_sweep(swept / "results.parquet")
    with pytest.raises(analysis.AnalysisError, match="got a DataFrame"):
        analysis.load_sweep(pd.DataFrame())


def test_a_swept_null_is_plotted_as_its_own_category():
    # workload.pd.prefill_cores: [null, 32] (fusion and a split): pandas' groupby and
    # pivot_table dropped the null, so the fusion point vanished from every figure.
    frame = pd.DataFrame({"status": ["ok"] * 4,
                          "workload.pd.prefill_cores": pd.array([None, 32, None, 32], "Int64"),
                          "workload.pd.mode": ["fusion", "disaggregation", "fusion", "x"],
                          "metrics.e2e_ms_mean": [1.0, 2.0, 3.0, 4.0]})
    ax = analysis.plot_metric(frame, "workload.pd.prefill_cores", "metrics.e2e_ms_mean").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "null"]
    assert ax.lines[0].get_xydata().tolist() == [[0.0, 3.0], [1.0, 2.0]]
    ax = analysis.plot_metric(frame, "workload.pd.mode", "metrics.e2e_ms_mean",
                              hue="workload.pd.prefill_cores").axes[0]
    assert [line.get_label() for line in ax.lines] == ["workload.pd.prefill_cores=32",
                                                       "workload.pd.prefill_cores=null"]
    ax = analysis.plot_heatmap(frame, "workload.pd.mode", "workload.pd.prefill_cores",
                               "metrics.e2e_ms_mean").axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["32", "null"]
    ax = analysis.plot_latency_cdf(frame, "metrics.e2e_ms_mean",
                                   by="workload.pd.prefill_cores").axes[0]
    assert len(ax.lines) == 2
    with pytest.raises(analysis.AnalysisError, match="null for some points"):
        analysis.plot_metric(frame, "workload.pd.prefill_cores", "metrics.e2e_ms_mean", logx=True)


@pytest.mark.parametrize("minimize, drawstyle", [((True, True), "steps-post"),
                                                 ((False, False), "steps-pre"),
                                                 ((True, False), "steps-post"),
                                                 ((False, True), "steps-pre")])
def test_the_pareto_staircase_bounds_the_dominated_region(minimize, drawstyle):
    # Both maximised, steps-post drew the front through (5, 10), which no design reaches.
    frame = pd.DataFrame({"tput": [1.0, 5.0, 2.0, 4.0], "eff": [10.0, 3.0, 2.0, 12.0]})
    line = analysis.plot_pareto(frame, "tput", "eff", minimize=minimize).axes[0].lines[0]
    assert line.get_drawstyle() == drawstyle


def test_times_on_x_ticks_and_legends_are_in_readable_units():
    # The y axis was scaled, but a time on x showed 3.15007e+08 and a swept latency's
    # heatmap ticks and legend entries raw picoseconds.
    frame = pd.DataFrame({"status": ["ok"] * 4, "hw.noc.hop_latency_ps": [1000, 2000] * 2,
                          "workload.m": [64, 64, 128, 128],
                          "metrics.latency_ps": [3.1e8, 3.2e8, 3.3e8, 3.4e8],
                          "metrics.flops": [1.0, 2.0, 3.0, 4.0]})
    ax = analysis.plot_metric(frame, "metrics.latency_ps", "metrics.flops").axes[0]
    assert ax.get_xlabel() == "metrics.latency (us)"
    assert list(ax.lines[0].get_xdata()) == [310.0, 320.0, 330.0, 340.0]
    ax = analysis.plot_heatmap(frame, "hw.noc.hop_latency_ps", "workload.m",
                               "metrics.latency_ps").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1 ns", "2 ns"]
    ax = analysis.plot_metric(frame, "workload.m", "metrics.latency_ps",
                              hue="hw.noc.hop_latency_ps").axes[0]
    assert [line.get_label() for line in ax.lines] == ["hw.noc.hop_latency_ps=1 ns",
                                                       "hw.noc.hop_latency_ps=2 ns"]


def small_spec(tmp_path, extra=""):
    """A two-point analytic sweep over quickstart, plus ``extra`` YAML lines."""
    path = tmp_path / "small.yaml"
    path.write_text(f"base: {QUICKSTART}\nset: {{run.mode: analytic}}\n"
                    f"axes: {{workload.m: [64, 128]}}\n{extra}")
    return path


def test_sweep_output_path_problems_are_caught_before_running(tmp_path, capsys):
    spec = small_spec(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "store" / "parts").parent.mkdir()
    (tmp_path / "store" / "parts").write_text("not a directory")
    for out, expected in ((afile, "exists and is not a directory"),  # were NotADirectoryError,
                          (afile / "sub", f"{afile} is a file"),      # FileNotFoundError and
                          (Path("/proc/sweepx"), "cannot create"),    # FileExistsError
                          (tmp_path / "store", "parts is a file")):
        code, _, err = cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)
        assert code == 2 and f"--out {out}: " in err and expected in err, err
        assert "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["parts"]  # nothing written


def test_damaged_store_is_reported_and_kept(tmp_path, capsys):
    spec, out = small_spec(tmp_path), tmp_path / "sw"
    assert cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)[0] == 0
    manifest = (out / "manifest.json").read_text()
    (out / "results.parquet").write_bytes(b"garbage")
    code, _, err = cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)
    assert code == 2 and "Traceback" not in err  # was pyarrow's ArrowInvalid
    assert f"{out / 'results.parquet'}: not a readable Parquet file (" in err
    assert "move it away to start over" in err
    assert (out / "results.parquet").read_bytes() == b"garbage"
    assert (out / "manifest.json").read_text() == manifest  # stopped before writing

    (out / "results.parquet").unlink()
    (out / "parts" / "x.parquet").write_bytes(b"garbage")
    code, _, err = cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)
    assert code == 2 and f"{out / 'parts' / 'x.parquet'}: not a readable Parquet file" in err
    assert (out / "parts" / "x.parquet").read_bytes() == b"garbage"

    (out / "parts" / "x.parquet").unlink()
    assert cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)[0] == 0
    plot = ["plot", out, "--kind", "line", "-x", "workload.m", "-y", "metrics.latency_ps"]
    for text, expected in (("{oops", "not a readable sweep manifest"),  # was JSONDecodeError
                           ('{"params": []}', "no 'points' list")):    # was KeyError
        (out / "manifest.json").write_text(text)
        code, _, err = cli(plot, capsys)
        assert code == 2 and f"{out / 'manifest.json'}: " in err and expected in err
        assert "Traceback" not in err and (out / "manifest.json").read_text() == text


def test_spec_limits_and_bounds_via_the_cli(tmp_path, capsys):
    for extra, where, expected in (
            ("  - random: {samples: 2, params: {workload.k: {uniform: [.nan, 10], integer: true}}}",
             "axes[1].random.params.workload.k.uniform", "bounds must be finite, got [nan, 10]"),
            ("  - random: {samples: 2, params: {workload.k: {uniform: [1, .inf], integer: true}}}",
             "axes[1].random.params.workload.k.uniform", "bounds must be finite, got [1, inf]"),
            ("  - random: {samples: 100000000, params: {workload.k: [64]}}",
             "axes[1].random.samples", "at most 1,000,000 samples")):
        path = tmp_path / "limits.yaml"
        path.write_text(f"base: {QUICKSTART}\nset: {{run.mode: analytic}}\naxes:\n"
                        f"  - grid: {{workload.m: [64]}}\n{extra}\n")
        code, _, err = cli(["sweep", path, "--out", tmp_path / "o", "-q"], capsys)
        assert code == 2 and str(path) in err and f"{where}: {expected}" in err, err
        assert "Traceback" not in err


def test_set_error_names_the_spec_field(tmp_path, capsys):
    path = tmp_path / "set.yaml"
    path.write_text(f"base: {QUICKSTART}\nset: {{run.mode: fast}}\naxes: {{workload.m: [64]}}\n")
    code, _, err = cli(["sweep", path, "--out", tmp_path / "o", "-q"], capsys)
    assert code == 2 and str(path) in err and "set.run.mode: " in err and "'fast'" in err
    assert "base (" not in err  # was blamed on quickstart.yaml


def test_huge_power_is_refused_not_computed(tmp_path):
    import subprocess
    import sys

    spec = small_spec(tmp_path, 'constraints: ["9 ** 9 ** 9 > 1"]\n')
    done = subprocess.run([sys.executable, "-m", "npusim.cli", "sweep", str(spec), "--out",
                           str(tmp_path / "o"), "-q"], capture_output=True, text=True,
                          timeout=120)  # it used to run for hours
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "constraints[0].require (point 0" in done.stderr and "is too large" in done.stderr


@pytest.mark.parametrize("args, expected", [
    (["--kind", "heatmap", "-x", "workload.m", "-y", "workload.m", "--value", "metrics.latency_ps"],
     "a heatmap needs three different columns, got x='workload.m', y='workload.m'"),
    (["--kind", "line", "-x", "workload.m", "-y", "metrics.scenario"],
     "column 'metrics.scenario' is not numeric (values like 'quickstart'); numeric columns: "),
    (["--kind", "line", "-x", "metrics.mode", "-y", "metrics.latency_ps", "--logx"],
     "column 'metrics.mode' is not numeric"),
    (["--kind", "heatmap", "-x", "workload.m", "-y", "workload.tile_n", "--value", "metrics.mode"],
     "column 'metrics.mode' is not numeric (values like 'analytic')"),
    (["--kind", "pareto", "-x", "metrics.scenario", "-y", "metrics.latency_ps"],
     "column 'metrics.scenario' is not numeric"),
    (["--kind", "pareto", "-x", "metrics.latency_ps", "-y", "metrics.latency_ps"],
     "a Pareto front needs two different columns, got x = y = 'metrics.latency_ps'"),
    (["--kind", "cdf", "--value", "metrics.scenario"], "column 'metrics.scenario' is not numeric"),
    (["--kind", "cdf", "--value", "error"], "no point has a value in error ("),  # not requests
    (["--kind", "line", "-x", "workload.m", "-y", "metrics.latency_ps", "--out", "{tmp}/d.png"],
     "--out {tmp}/d.png: is a directory; expected a figure file name"),
    (["--kind", "line", "-x", "workload.m", "-y", "metrics.latency_ps", "--out", "{tmp}/f/x.png"],
     "--out {tmp}/f/x.png: {tmp}/f is a file, not a directory"),
])
def test_plot_errors_name_the_column_or_path(swept, args, expected, tmp_path, capsys):
    (tmp_path / "d.png").mkdir()
    (tmp_path / "f").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, _, err = cli(["plot", swept, *args], capsys)
    assert code == 2 and expected.replace("{tmp}", str(tmp_path)) in err, err
    assert "Traceback" not in err


def test_timeline_bins_must_be_positive(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert cli(["run", QUICKSTART, "--mode", "analytic", "--out", run_dir, "-q"], capsys)[0] == 0
    for bins in ("-3", "0"):  # -3 was a numpy ValueError, 0 an empty figure
        code, _, err = cli(["plot", run_dir, "--kind", "timeline", "--bins", bins], capsys)
        assert code == 2 and f"--bins: expected a number of time bins from 1 to 100,000, got {bins}" in err
    assert not (run_dir / "plot-timeline.png").exists()
    with pytest.raises(analysis.AnalysisError, match="bins: expected a whole number"):
        analysis.utilisation_timeline(run_dir, bins=0)
    code, _, err = cli(["plot", run_dir, "--kind", "cdf", "--value", "unit"], capsys)
    assert code == 2 and "column 'unit' is not numeric (values like 'core0." in err


def test_analysis_helpers_say_what_they_expected():
    from npusim.api import simulate

    result = simulate(REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml", mode="analytic")
    with pytest.raises(analysis.AnalysisError, match="expected a sweep DataFrame .* got Result"):
        analysis.plot_metric(result, "workload.m", "metrics.latency_ps")
    table = pd.DataFrame({"a": [1.0, 2.0], "b": [2.0, 1.0]})
    with pytest.raises(analysis.AnalysisError, match="minimize: expected two booleans"):
        analysis.pareto_front(table, "a", "b", minimize=True)
    with pytest.raises(analysis.AnalysisError, match="status: expected 'ok'"):
        analysis.load_sweep(REPO_ROOT, status="bogus")
    # these reached pandas ("unhashable type: 'list'") and matplotlib internals
    with pytest.raises(analysis.AnalysisError, match=r"expected one column name, got \['a'\]"):
        analysis.plot_metric(table, ["a"], "b")
    with pytest.raises(analysis.AnalysisError, match="ax: expected matplotlib Axes"):
        analysis.plot_metric(table, "a", "b", ax="left")


def test_cdf_and_timeline_arguments_are_used_or_rejected():
    from npusim.api import simulate

    gemm = simulate(REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml", mode="analytic")
    with pytest.raises(analysis.AnalysisError, match="no column 'bogus' in the ops table"):
        analysis.plot_latency_cdf(gemm, column="bogus")  # was silently ignored
    served = simulate(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml",
                      overrides=["workload.trace.limit=4"])
    figure = analysis.plot_latency_cdf(served, by="status")  # a request column
    assert figure.axes[0].get_title() == "CDF of e2e_ps"
    one = analysis.utilisation_timeline(gemm, units="core0.sa")[0]  # a name, not its letters
    assert list(one.index) == ["core0.sa"]
    with pytest.raises(analysis.AnalysisError, match="units: no unit matches 'nope'"):
        analysis.utilisation_timeline(gemm, units=["nope"])
    # glob patterns pick a level; rows come in natural order (core1, core8, not core10 first)
    arrays = analysis.utilisation_timeline(gemm, units="*.sa")[0]
    assert list(arrays.index) == ["core0.sa", "core1.sa", "core8.sa", "core9.sa"]


def test_a_sweep_with_failed_points_writes_every_row_and_exits_1(tmp_path, capsys):
    spec = tmp_path / "fail.yaml"
    spec.write_text(f"name: fail\nbase: {QUICKSTART}\nset: {{run.mode: analytic}}\n"
                    "axes:\n  - grid:\n      workload.cores[3]: [8, 99]\n")  # no core 99
    out = tmp_path / "out"
    code, stdout, err = cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)
    assert code == 1 and "1 ok, 1 failed" in stdout and "core 99 does not exist" in err
    frame = analysis.load_sweep(out)
    assert list(frame["status"]) == ["ok", "failed"]
    # whole-number metrics stay integers beside the failed row's gap (they were float64)
    latency = frame["metrics.latency_ps"]
    assert latency.dtype == "Int64" and latency.isna().tolist() == [False, True]
    assert latency[0] == analysis.load_sweep(out, status="ok")["metrics.latency_ps"][0]
    assert analysis.load_sweep(out, status="ok")["metrics.latency_ps"].dtype == "int64"
    # and the analysis helpers take such columns
    analysis.plot_metric(frame, "workload.cores[3]", "metrics.latency_ps")
    analysis.plot_pareto(frame, "metrics.latency_ps", "metrics.flops")
    assert len(analysis.pareto_front(frame, "metrics.latency_ps", "metrics.flops")) == 1
    # A rerun skips the stored failures but still says the table is incomplete.
    code, _, err = cli(["sweep", spec, "--out", out, "--executor", "serial", "-q"], capsys)
    assert code == 1 and "stored as failed by an earlier run" in err


def test_a_line_plot_says_when_each_marker_averages_other_parameters():
    import pandas as pd

    from npusim import analysis

    frame = pd.DataFrame({"status": ["ok"] * 4, "x": [1, 1, 2, 2], "z": [3, 4, 3, 4],
                          "y": [1.0, 3.0, 2.0, 4.0]})
    averaged = analysis.plot_metric(frame, "x", "y").axes[0]
    assert averaged.get_title() == "y vs x (mean over the other parameters)"
    assert list(averaged.lines[0].get_ydata()) == [2.0, 3.0]
    assert analysis.plot_metric(frame, "x", "y", hue="z").axes[0].get_title() == "y vs x"
    # a point that failed: the markers average different sets, and the title says so
    frame.loc[3, "status"] = "failed"
    uneven = " ".join(analysis.plot_metric(frame, "x", "y").axes[0].get_title().split())
    assert uneven == "y vs x (mean over the other parameters; 1 to 2 points per marker)"


def test_swept_sizes_bandwidths_and_clocks_are_labelled_in_their_units():
    # were raw integers (134217728, 16000000000) beside time axes shown in ms
    frame = pd.DataFrame({"hw.core.sram.capacity_bytes": [2**24, 2**27] * 2,
                          "hw.hbm.bandwidth_bps": [16 * 10**9] * 2 + [32 * 10**9] * 2,
                          "hw.noc.freq_hz": [10**9] * 4,
                          "metrics.latency_ps": [4e9, 3e9, 2e9, 1e9]})
    heat = analysis.plot_heatmap(frame, "hw.core.sram.capacity_bytes", "hw.hbm.bandwidth_bps",
                                 "metrics.latency_ps").axes[0]
    assert [t.get_text() for t in heat.get_xticklabels()] == ["16 MiB", "128 MiB"]
    assert [t.get_text() for t in heat.get_yticklabels()] == ["16 GB/s", "32 GB/s"]
    line = analysis.plot_metric(frame, "hw.core.sram.capacity_bytes", "metrics.latency_ps").axes[0]
    assert [t.get_text() for t in line.get_xticklabels()] == ["16 MiB", "128 MiB"]
    assert line.get_ylabel() == "metrics.latency (ms)"
    clock = analysis.plot_metric(frame, "hw.noc.freq_hz", "metrics.latency_ps", logx=True).axes[0]
    assert [t.get_text() for t in clock.get_xticklabels()] == ["1 GHz"]


def test_a_plot_is_shown_as_an_image_in_a_fresh_notebook_kernel():
    # the Agg figures showed as "<Figure size 600x400 with 1 Axes>" in Jupyter unless
    # %matplotlib inline had registered a formatter for Figure
    import pickle

    from IPython.core.interactiveshell import InteractiveShell

    frame = pd.DataFrame({"status": ["ok"] * 2, "x": [1, 2], "y": [1.0, 2.0]})
    figure = analysis.plot_metric(frame, "x", "y")
    shown, _ = InteractiveShell.instance().display_formatter.format(figure)
    assert shown["image/png"].startswith(b"\x89PNG\r\n\x1a\n")
    assert pickle.loads(pickle.dumps(figure)).axes[0].get_xlabel() == "x"
    # several panels: new_figure is public, so ax= draws into a figure that shows too
    panels = analysis.new_figure((10.0, 4.0))
    left, _ = panels.subplots(1, 2)
    drawn = analysis.plot_metric(frame, "x", "y", ax=left)
    assert drawn is panels and "image/png" in InteractiveShell.instance().display_formatter.format(drawn)[0]
