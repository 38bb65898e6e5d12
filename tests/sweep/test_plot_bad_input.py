"""``npusim plot`` on damaged run and sweep directories: one ``error:`` line naming the
file (and column or line) and what was expected, exit 2, never a traceback."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from npusim import analysis
from npusim.cli import main
from npusim.config.presets import REPO_ROOT
from npusim.core.errors import OutputError
from tests.sweep.test_cli_analysis import cli

pytestmark = pytest.mark.component
SCENARIOS = REPO_ROOT / "workloads" / "scenarios"


def user_error(args, capsys, *expected):
    code, _, err = cli(args, capsys)
    assert code == 2 and "Traceback" not in err and err.startswith("error: "), err
    for text in expected:
        assert str(text) in err, err
    return err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A traced single-run directory (ops.csv) and a serving one (requests.csv too)."""
    root = tmp_path_factory.mktemp("runs")
    for name, args in (("gemm", [SCENARIOS / "quickstart.yaml", "--mode", "analytic"]),
                       ("serve", [SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml",
                                  "--set", "workload.trace.limit=4"])):
        with pytest.raises(SystemExit) as info:
            main(["run", *map(str, args), "--out", str(root / name), "-q"])
        assert (info.value.code or 0) == 0
    return root


def damaged(runs, tmp_path, name):
    copy = tmp_path / name
    shutil.copytree(runs / name, copy)
    return copy


# ---------------------------------------------------------------- finding 1: tracebacks
@pytest.mark.parametrize("run, file, kind", [("gemm", "ops.csv", "timeline"),
                                             ("gemm", "ops.csv", "cdf"),
                                             ("serve", "requests.csv", "cdf")])
def test_an_empty_table_names_the_file(runs, tmp_path, capsys, run, file, kind):
    copy = damaged(runs, tmp_path, run)
    (copy / file).write_bytes(b"")  # was pandas' EmptyDataError
    user_error(["plot", copy, "--kind", kind, "--out", tmp_path / "f.png"], capsys,
               f"{copy / file}: the file is empty; expected the ")


@pytest.mark.parametrize("run, file", [("gemm", "ops.csv"), ("serve", "requests.csv")])
def test_bytes_that_are_not_utf8_name_the_file_and_line(runs, tmp_path, capsys, run, file):
    copy = damaged(runs, tmp_path, run)
    lines = (copy / file).read_bytes().splitlines(keepends=True)
    (copy / file).write_bytes(b"".join(lines[:2]) + b"\xff\xfe garbage\n" + b"".join(lines[2:]))
    user_error(["plot", copy, "--kind", "cdf", "--out", tmp_path / "f.png"], capsys,
               f"{copy / file}: line 3 is not UTF-8 text (byte 0xff)")  # was UnicodeDecodeError


@pytest.mark.parametrize("value, shown", [("1e400", "'1e400'"),  # was OverflowError
                                          ("1" + "0" * 30, "'1" + "0" * 30 + "'"),  # UFuncTypeError
                                          ("soon", "'soon'"), ("", "an empty cell")])
def test_a_bad_time_in_ops_names_file_line_and_column(runs, tmp_path, capsys, value, shown):
    copy = damaged(runs, tmp_path, "gemm")
    ops = pd.read_csv(copy / "ops.csv", dtype=str, keep_default_na=False)
    ops.loc[1, "end_ps"] = value
    ops.to_csv(copy / "ops.csv", index=False)
    user_error(["plot", copy, "--kind", "timeline", "--out", tmp_path / "f.png"], capsys,
               f"{copy / 'ops.csv'}: line 3, column 'end_ps': expected a time in picoseconds",
               f"got {shown}")


def test_a_non_finite_time_in_an_ops_frame_is_an_analysis_error():
    ops = pd.DataFrame({"unit": ["a", "b"], "start_ps": [0, 5], "end_ps": [10, float("inf")]})
    with pytest.raises(analysis.AnalysisError, match="row 1, column 'end_ps' of the ops table: "
                                                     "expected a time in picoseconds"):
        analysis.utilisation_timeline(ops, bins=2)  # was OverflowError


def test_a_huge_point_index_in_the_manifest_names_the_point(swept, tmp_path, capsys):
    copy = tmp_path / "grid"
    shutil.copytree(swept, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["points"][1]["index"] = 10 ** 30  # was OverflowError (int64)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    user_error(["plot", copy, "--kind", "line", "-x", "workload.m", "-y", "metrics.latency_ps",
                "--out", tmp_path / "f.png"], capsys,
               f"{copy / 'manifest.json'}: points[1].index: expected a point number from 0 to ",
               f"got {10 ** 30}", "re-run the sweep")


# ---------------------------------------------------------------- finding 2: no silent fallback
@pytest.mark.parametrize("text, expected", [
    ("garbage\n", "no column 'arrival_ps'; expected the per-request table"),
    ("APPEND garbage\n", "line 6, column 'arrival_ps': expected a time in picoseconds "
                         "(a finite number of magnitude below 2^63), got an empty cell"),
    ("request_id,arrival_ps,finish_ps\nr0,soon,5\n",
     "line 2, column 'arrival_ps': expected a time in picoseconds (a finite number of "
     "magnitude below 2^63), got 'soon'"),
])
def test_a_damaged_requests_csv_is_an_error_not_the_ops_durations(runs, tmp_path, capsys,
                                                                  text, expected):
    copy = damaged(runs, tmp_path, "serve")
    requests = copy / "requests.csv"
    if text.startswith("APPEND "):
        requests.write_text(requests.read_text() + text[len("APPEND "):])
    else:
        requests.write_text(text)
    shutil.copy(runs / "gemm" / "ops.csv", copy / "ops.csv")  # durations it could fall back to
    user_error(["plot", copy, "--kind", "cdf", "--out", tmp_path / "f.png"], capsys,
               f"{requests}: {expected}")
    assert not (tmp_path / "f.png").exists()
    with pytest.raises(analysis.AnalysisError, match="requests.csv: "):
        analysis.latency_samples(copy)  # was the ops durations


def test_an_empty_request_table_is_not_replaced_by_ops_durations(runs, tmp_path):
    copy = damaged(runs, tmp_path, "serve")
    header = (copy / "requests.csv").read_text().splitlines()[0]
    (copy / "requests.csv").write_text(header + "\n")
    shutil.copy(runs / "gemm" / "ops.csv", copy / "ops.csv")
    values, column = analysis.latency_samples(copy)
    assert column == "e2e_ps" and values.empty
    with pytest.raises(analysis.AnalysisError, match="no e2e_ps samples to plot"):
        analysis.plot_latency_cdf(copy)


# ---------------------------------------------------------------- finding 3: hue of requests
def test_cdf_hue_of_a_serving_run_is_a_request_column(runs, tmp_path):
    figure = analysis.plot_latency_cdf(runs / "serve", by="status")
    assert figure.axes[0].get_title() == "CDF of e2e_ps"
    with pytest.raises(analysis.AnalysisError) as info:
        analysis.plot_latency_cdf(runs / "serve", by="statu")  # was checked against ops
    message = str(info.value)
    assert message.startswith(f"{runs / 'serve' / 'requests.csv'}: no column 'statu' in the "
                              "per-request table; did you mean 'status'")
    assert "start_ps" not in message


def test_cli_cdf_hue_of_a_serving_run_is_a_request_column(runs, tmp_path, capsys):
    code, _, err = cli(["plot", runs / "serve", "--kind", "cdf", "--hue", "status",
                        "--out", tmp_path / "f.png"], capsys)
    assert code == 0, err
    user_error(["plot", runs / "serve", "--kind", "cdf", "--hue", "statu",
                "--out", tmp_path / "g.png"], capsys, "did you mean 'status'")


# ---------------------------------------------------------------- finding 4: --out
@pytest.mark.parametrize("out, expected", [
    ("{tmp}/dir", "--out {tmp}/dir: is a directory; expected a figure file name ending in "
                  ".png, .svg or .pdf, e.g. {tmp}/dir/plot.png"),
    ("{tmp}/.png", "--out {tmp}/.png: no file name before '.png'; expected a figure file "
                   "name such as {tmp}/plot.png"),
    ("{tmp}/figure", "--out {tmp}/figure: no file suffix; expected a figure file name ending "
                     "in .png, .svg or .pdf, e.g. {tmp}/figure.png"),
])
def test_out_without_a_figure_file_name_says_what_is_expected(runs, tmp_path, capsys,
                                                               out, expected):
    (tmp_path / "dir").mkdir()
    out = out.replace("{tmp}", str(tmp_path))
    err = user_error(["plot", runs / "gemm", "--kind", "timeline", "--out", out], capsys,
                     expected.replace("{tmp}", str(tmp_path)))
    assert "unsupported figure format ''" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]  # nothing written


def test_a_serving_run_that_finished_no_request_says_so_naming_its_files(tmp_path, capsys):
    # "error: no e2e_ps samples to plot" named neither the run's file nor the reason
    # (every request rejected), and an untraced run's timeline did not name its ops.csv.
    trace = tmp_path / "long.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\na,0,50000,4\nb,9,50000,4\n")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["run", str(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml"), "--trace", str(trace),
              "--out", str(out), "-q"])
    assert (info.value.code or 0) == 0
    capsys.readouterr()
    for extra in ([], ["--hue", "status"], ["--value", "ttft_ps"]):
        value = extra[1] if extra[:1] == ["--value"] else "e2e_ps"
        user_error(["plot", out, "--kind", "cdf", *extra, "--out", tmp_path / "f.png"], capsys,
                   f"{out / 'requests.csv'}: no {value} samples to plot: no request has a "
                   f"value in {value} (2 requests: 2 rejected); expected at least one "
                   "finished request")
    user_error(["plot", out, "--kind", "timeline", "--out", tmp_path / "f.png"], capsys,
               f"{out / 'ops.csv'}: no timed tasks to plot (was the run traced?")
    assert not (tmp_path / "f.png").exists()


def test_a_figure_that_fails_half_written_leaves_the_earlier_one_whole(tmp_path):
    # savefig wrote straight into the path: a failure part-way (a full disk, a renderer
    # error) left a truncated file where the previous figure was.
    target = tmp_path / "fig.png"
    target.write_bytes(b"the earlier figure")

    class Failing:
        def savefig(self, handle, **kwargs):
            handle.write(b"half a png")
            raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match=r"fig\.png: cannot write the figure \(No space left"):
        analysis.save_figure(Failing(), target)
    assert target.read_bytes() == b"the earlier figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    figure = analysis.new_figure((2, 2))
    figure.subplots().plot([0, 1], [0, 1])
    analysis.save_figure(figure, target)
    assert target.read_bytes().startswith(b"\x89PNG")
