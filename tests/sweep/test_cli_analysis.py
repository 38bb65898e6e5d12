"""``npusim sweep`` / ``npusim plot`` and the analysis helpers."""

from __future__ import annotations

import pandas as pd
import pytest

from npusim import analysis
from npusim.cli import main
from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component
SWEEP = REPO_ROOT / "workloads" / "sweeps" / "quickstart_grid.yaml"
QUICKSTART = REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml"


def cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code or 0, captured.out, captured.err


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "grid"
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(SWEEP), "--out", str(out), "--executor", "serial", "-q"])
    assert (info.value.code or 0) == 0
    return out


def test_sweep_command_writes_the_store(swept):
    frame = analysis.load_sweep(swept)
    assert len(frame) == 9 and set(frame["workload.tile_n"]) == {128, 256, 512}


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


def test_plot_timeline_from_a_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert cli(["run", QUICKSTART, "--mode", "analytic", "--out", run_dir, "-q"], capsys)[0] == 0
    code, _, err = cli(["plot", run_dir, "--kind", "timeline", "--bins", "40"], capsys)
    assert code == 0, err
    assert (run_dir / "plot-timeline.png").stat().st_size > 1000


@pytest.mark.parametrize("args, expected", [
    (["plot", "{sweep}", "--kind", "line", "-x", "workload.m", "-y", "metrics.latncy_ps"],
     "did you mean 'metrics.latency_ps'"),
    (["plot", "{sweep}", "--kind", "pie"], "unknown plot 'pie'"),
    (["plot", "{sweep}", "--kind", "heatmap", "-x", "workload.m"], "needs --y"),
    (["plot", "{sweep}", "--kind", "timeline"], "needs a run directory"),
    (["plot", "{sweep}", "--kind", "line", "-x", "a", "-y", "b", "--out", "f.jpg"], "unsupported figure format"),
    (["sweep", SWEEP, "--executor", "spark"], "unknown executor 'spark'"),
    (["sweep", SWEEP, "--scheduler", "tcp://127.0.0.1:1"], "needs --executor dask"),
])
def test_user_errors_are_one_message_exit_2(swept, args, expected, capsys):
    args = [str(a).replace("{sweep}", str(swept)) for a in args]
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


def test_load_sweep_on_a_wrong_directory_is_a_user_error(tmp_path):
    with pytest.raises(analysis.AnalysisError, match="not a sweep output directory"):
        analysis.load_sweep(tmp_path)
