"""Per-request tables of a sweep's serving points (``store: {requests: true}``): the spec
option, the stored files (resume, compaction, a changed spec, determinism), the
``load_sweep_requests`` reader and ``npusim plot --kind cdf`` on such a sweep."""

from __future__ import annotations

import pandas as pd
import pytest

from npusim import analysis
from npusim.analysis import AnalysisError
from npusim.api import simulate
from npusim.config.presets import REPO_ROOT
from npusim.core.errors import ConfigError
from npusim.sweep import ResultStore, run_sweep, spec_from_dict
from npusim.sweep.request_tables import REQUESTS_DIR, request_file
from npusim.sweep.store import StoreError
from tests.sweep.test_cli_analysis import cli

SCENARIOS = REPO_ROOT / "workloads" / "scenarios"
SERVE = str(SCENARIOS / "qwen3_4b_npu64_pd_fusion.yaml")
QUICKSTART = str(SCENARIOS / "quickstart.yaml")
#: Three requests at once; the middle one's prompt never fits, so it is rejected and
#: its first_token_ps, ttft_ps ... are missing (nullable Int64 columns).
TRACE = "arrival_ps,prompt_tokens,output_tokens\n0,16,4\n1000,2000000,4\n2000,32,3\n"
#: Two other requests: a spec that switches to it changes every point's key.
OTHER_TRACE = "arrival_ps,prompt_tokens,output_tokens\n0,24,2\n5000,8,2\n"
BUDGETS = [16, 512]  # a 32-token prompt takes 2 chunks at 16: its TTFT differs


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    (root / "t.csv").write_text(TRACE)
    (root / "other.csv").write_text(OTHER_TRACE)
    return root


def serving_spec(traces, trace="t.csv", store=True, **extra):
    body = {"name": "serve", "base": SERVE, "set": {"workload.trace.file": str(traces / trace)},
            "axes": {"workload.scheduler.token_budget": BUDGETS}, **extra}
    if store is not None:
        body["store"] = {"requests": store}
    return spec_from_dict(body, "serve.yaml")


def table_bytes(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / REQUESTS_DIR).glob("*.parquet"))}


@pytest.fixture(scope="module")
def stored(traces, tmp_path_factory):
    """The two-point serving sweep run once with its per-request tables kept."""
    out = tmp_path_factory.mktemp("stored") / "sweep"
    spec = serving_spec(traces)
    summary = run_sweep(spec, out, executor="serial")
    assert (summary.ok, summary.failed) == (2, 0)
    return out, spec


# ---------------------------------------------------------------- the spec option
@pytest.mark.unit
def test_the_option_is_off_unless_set():
    base = {"base": QUICKSTART, "axes": {"workload.m": [64]}}
    assert spec_from_dict(base, "grid.yaml").store_requests is False
    assert spec_from_dict({**base, "store": {}}, "grid.yaml").store_requests is False
    assert spec_from_dict({**base, "store": {"requests": True}}, "grid.yaml").store_requests


@pytest.mark.unit
@pytest.mark.parametrize("store, expected", [
    (True, "store: expected a mapping such as {requests: true} (keep each serving point's "
           "per-request table), got True"),
    ({"requests": "yes"}, "store.requests: expected true or false, got 'yes'"),
    ({"requests": 1}, "store.requests: expected true or false, got 1"),
    ({"request": True}, "store.request: unknown key; did you mean 'requests'? (known keys: "
                        "requests)"),
])
def test_a_bad_store_value_names_the_file_field_and_value(store, expected):
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": QUICKSTART, "axes": {"workload.m": [64]}, "store": store},
                       "grid.yaml")
    text = str(info.value)
    assert text.startswith("grid.yaml: invalid configuration") and expected in text, text


@pytest.mark.unit
def test_a_capacity_sweep_keeps_no_request_tables():
    with pytest.raises(ConfigError, match="store.requests: a capacity sweep stores its search"):
        spec_from_dict({"base": SERVE, "capacity": True, "store": {"requests": True},
                        "axes": {"workload.pd.tp": [4]}}, "cap.yaml")


# ---------------------------------------------------------------- storing
@pytest.mark.component
def test_without_the_option_nothing_is_stored_and_the_reader_says_what_to_set(traces, tmp_path):
    summary = run_sweep(serving_spec(traces, store=None), tmp_path, executor="serial")
    assert summary.ok == 2
    assert not (tmp_path / REQUESTS_DIR).exists()
    assert "store" not in ResultStore(tmp_path).manifest()
    with pytest.raises(AnalysisError) as info:
        analysis.load_sweep_requests(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: no per-request tables: the sweep ran "
                                      "without them; add store: {requests: true} to its spec")


@pytest.mark.component
def test_each_point_keeps_the_table_its_run_gives(stored):
    out, spec = stored
    points = spec.points()
    files = table_bytes(out)
    assert sorted(files) == sorted(f"{p.key}.parquet" for p in points)
    # compacted at the end of the run: no part left, the tables untouched
    assert (out / "results.parquet").is_file() and not list((out / "parts").glob("*.parquet"))
    frame = analysis.load_sweep_requests(out)
    assert frame.attrs["points_with_requests"] == 2 and frame.attrs["points_without_requests"] == 0
    assert list(frame.columns[:2]) == ["point", "workload.scheduler.token_budget"]
    assert frame.attrs["params"] == ["workload.scheduler.token_budget"]
    assert analysis.varying_params(frame) == ["workload.scheduler.token_budget"]
    assert analysis.varying_params(frame[frame["point"] == 1]) == []  # one point: none
    assert frame.columns[-1] == "key"
    for point in points:
        expected = simulate(point.config).requests
        rows = frame[frame["point"] == point.index]
        assert set(rows["key"]) == {point.key}
        assert set(rows["workload.scheduler.token_budget"]) == {point.params[
            "workload.scheduler.token_budget"]}
        # the run's own table, dtypes too: Int64 where the rejected request has no value
        pd.testing.assert_frame_equal(rows[list(expected.columns)].reset_index(drop=True),
                                      expected)
    assert frame["first_token_ps"].dtype == "Int64" and frame["first_token_ps"].isna().sum() == 2
    assert frame["arrival_ps"].dtype == "int64" and frame["request_id"].dtype != object
    ttft = frame.groupby("workload.scheduler.token_budget")["ttft_ps"].max()
    assert ttft[16] > ttft[512]  # the 32-token prompt waits for its second chunk


@pytest.mark.component
def test_compaction_leaves_the_tables(stored, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stored[0], out)
    before = table_bytes(out)
    store = ResultStore(out)
    row = store.read().iloc[0].to_dict()
    store.write_row({**row, "wall_time_s": 9.0})  # a part for the compaction to absorb
    assert store.compact() == out / "results.parquet"
    assert table_bytes(out) == before and not list(store.parts.glob("*.parquet"))
    assert len(analysis.load_sweep_requests(out)) == 6


@pytest.mark.component
def test_a_resumed_sweep_keeps_the_tables_without_rerunning(stored, traces, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stored[0], out)
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / REQUESTS_DIR).iterdir()}
    before = table_bytes(out)
    summary = run_sweep(serving_spec(traces), out, executor="serial")
    assert (summary.skipped_done, summary.ok, summary.rerun_for_requests) == (2, 0, 0)
    assert table_bytes(out) == before
    assert {p.name: p.stat().st_mtime_ns for p in (out / REQUESTS_DIR).iterdir()} == stamps


@pytest.mark.component
def test_setting_the_option_later_runs_finished_serving_points_again(traces, tmp_path,
                                                                    stored):
    run_sweep(serving_spec(traces, store=None), tmp_path, executor="serial")
    summary = run_sweep(serving_spec(traces), tmp_path, executor="serial")
    assert (summary.rerun_for_requests, summary.ok, summary.skipped_done) == (2, 2, 0)
    assert table_bytes(tmp_path) == table_bytes(stored[0])  # the same tables
    again = run_sweep(serving_spec(traces), tmp_path, executor="serial")
    assert (again.rerun_for_requests, again.ok) == (0, 0)


@pytest.mark.component
def test_a_lost_table_is_warned_about_then_stored_again(stored, traces, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stored[0], out)
    before = table_bytes(out)
    first = stored[1].points()[0]
    request_file(out, first.key).unlink()
    with pytest.warns(UserWarning, match=r"1 of 2 serving points that ran have no stored "
                                         r"per-request table .*or the file was moved away"):
        frame = analysis.load_sweep_requests(out)
    assert set(frame["point"]) == {1} and frame.attrs["points_without_requests"] == 1
    summary = run_sweep(serving_spec(traces), out, executor="serial")
    assert (summary.rerun_for_requests, summary.ok) == (1, 1)
    assert table_bytes(out) == before


@pytest.mark.component
def test_points_a_later_run_added_without_the_option_are_counted_as_missing(stored, traces,
                                                                            tmp_path):
    # the reader loaded the two stored points and said nothing of the third, which a run
    # of the spec without store: added (its manifest has no per-point flags)
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stored[0], out)
    wider = spec_from_dict({"name": "serve", "base": SERVE,
                            "set": {"workload.trace.file": str(traces / "t.csv")},
                            "axes": {"workload.scheduler.token_budget": [*BUDGETS, 1024]}},
                           "serve.yaml")
    assert run_sweep(wider, out, executor="serial").ok == 1
    with pytest.warns(UserWarning, match=r"1 of 3 serving points that ran have no stored "
                                         r"per-request table \(they ran while store: "):
        frame = analysis.load_sweep_requests(out)
    assert set(frame["point"]) == {0, 1} and frame.attrs["points_without_requests"] == 1


@pytest.mark.component
def test_a_changed_spec_replaces_the_tables_it_reruns(stored, traces, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stored[0], out)
    summary = run_sweep(serving_spec(traces, "other.csv"), out, executor="serial")
    assert (summary.ok, summary.skipped_done) == (2, 0)
    frame = analysis.load_sweep_requests(out)
    # the new trace's two requests per point, not the earlier three
    assert list(frame.groupby("point").size()) == [2, 2]
    assert (frame["status"] == "finished").all()
    assert set(frame["key"]) == {p.key for p in serving_spec(traces, "other.csv").points()}


@pytest.mark.component
def test_the_same_spec_gives_byte_identical_tables(stored, traces, tmp_path):
    run_sweep(serving_spec(traces), tmp_path, executor="local", workers=2)
    assert table_bytes(tmp_path) == table_bytes(stored[0])


@pytest.mark.component
def test_points_that_are_not_serving_runs_store_nothing(traces, tmp_path):
    workloads = [{"kind": "serving", "model": "qwen3_4b", "trace": {"file": str(traces / "t.csv")},
                  "pd": {"mode": "fusion", "tp": 4}},
                 {"kind": "gemm", "m": 64, "n": 64, "k": 64}]
    spec = spec_from_dict({"name": "mixed", "base": SERVE, "axes": {"workload": workloads},
                           "store": {"requests": True}}, "mixed.yaml")
    summary = run_sweep(spec, tmp_path, executor="serial")
    assert (summary.ok, summary.failed) == (2, 0)
    serving, gemm = spec.points()
    assert list(table_bytes(tmp_path)) == [f"{serving.key}.parquet"]
    frame = analysis.load_sweep_requests(tmp_path)
    assert set(frame["point"]) == {0} and len(frame) == 3
    assert frame.attrs["points_without_requests"] == 0
    again = run_sweep(spec, tmp_path, executor="serial")  # the GEMM has none: not rerun
    assert (again.ok, again.rerun_for_requests) == (0, 0)


@pytest.mark.component
def test_a_sweep_with_no_serving_point_stores_nothing_and_says_why(tmp_path):
    spec = spec_from_dict({"base": QUICKSTART, "set": {"run.mode": "analytic"},
                           "axes": {"workload.m": [64]}, "store": {"requests": True}}, "g.yaml")
    assert run_sweep(spec, tmp_path, executor="serial").ok == 1
    assert not (tmp_path / REQUESTS_DIR).exists()
    with pytest.raises(AnalysisError, match="no point of this sweep is a serving run"):
        analysis.load_sweep_requests(tmp_path)


# ---------------------------------------------------------------- reading
@pytest.mark.component
def test_the_reader_reads_chosen_columns_and_names_an_unknown_one(stored):
    out, _ = stored
    frame = analysis.load_sweep_requests(out, columns=["status", "ttft_ps"])
    assert list(frame.columns) == ["point", "workload.scheduler.token_budget", "status",
                                   "ttft_ps", "key"]
    assert frame["ttft_ps"].dtype == "Int64"
    with pytest.raises(AnalysisError, match=r"no column 'ttft' in the per-request tables; did "
                                            r"you mean 'ttft_ps'"):
        analysis.load_sweep_requests(out, columns=["ttft"])
    with pytest.raises(AnalysisError, match="columns: expected a list of per-request column"):
        analysis.load_sweep_requests(out, columns=3)
    # a swept parameter is always there: asking for it is no error
    chosen = analysis.load_sweep_requests(out, columns=["workload.scheduler.token_budget",
                                                        "status"])
    assert list(chosen.columns) == ["point", "workload.scheduler.token_budget", "status", "key"]


@pytest.mark.component
def test_stored_tables_hold_the_key_not_a_point_number_and_are_read_by_column(stored,
                                                                             monkeypatch):
    import pyarrow.parquet as pq

    out, spec = stored
    # a changed spec renumbers points: the files join to them by key only
    names = pq.read_schema(request_file(out, spec.points()[0].key)).names
    assert names[0] == "key" and "point" not in names
    read = []
    real = pq.read_table
    monkeypatch.setattr(pq, "read_table",
                        lambda path, columns=None, **kw: (REQUESTS_DIR in str(path) and read.append(columns))
                        or real(path, columns=columns, **kw))
    analysis.load_sweep_requests(out, columns=["ttft_ps"])
    assert read == [["key", "ttft_ps"]] * 2  # token_times_ps is not read


@pytest.mark.component
def test_a_damaged_table_is_named(stored, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(stored[0], out)
    path = request_file(out, stored[1].points()[1].key)
    path.write_bytes(b"not parquet")
    with pytest.raises(StoreError) as info:
        analysis.load_sweep_requests(out)
    assert str(info.value).startswith(f"{path}: not a readable Parquet file (")
    assert "move it away" in str(info.value)
    with pytest.raises(AnalysisError, match=r"expected its directory, "
                                            r"load_sweep_requests\('.*copy'\)"):
        analysis.load_sweep_requests(path)


# ---------------------------------------------------------------- the CLI
@pytest.mark.component
def test_plot_cdf_of_a_sweep_draws_one_curve_per_point_or_hue_value(stored, tmp_path, capsys,
                                                                    monkeypatch):
    from npusim.analysis import plots

    drawn = []
    save = plots.save_figure
    monkeypatch.setattr(plots, "save_figure",
                        lambda fig, path: drawn.append(fig) or save(fig, path))
    out, _ = stored
    for extra in ([], ["--value", "ttft_ps"], ["--hue", "workload.scheduler.token_budget"]):
        code, stdout, err = cli(["plot", out, "--kind", "cdf", *extra, "--out",
                                 tmp_path / "cdf.png"], capsys)
        assert code == 0 and "wrote" in stdout, err
    labels = [[line.get_label() for line in fig.axes[0].get_lines()] for fig in drawn]
    # each point's curve is named by the parameter that tells it apart (was point=0, 1)
    assert labels[0] == labels[1] == labels[2] == ["token_budget=16", "token_budget=512"]
    assert "e2e" in drawn[0].axes[0].get_xlabel() and "ttft" in drawn[1].axes[0].get_xlabel()
    # a row's metric still draws the CDF over the points
    code, _, err = cli(["plot", out, "--kind", "cdf", "--value", "metrics.ttft_ms_mean",
                        "--out", tmp_path / "m.png"], capsys)
    lines = drawn[-1].axes[0].get_lines()
    assert code == 0 and len(lines) == 1 and lines[0].get_label().startswith("_"), err
    # a misspelt metric is a row's column, named as such (not a per-request column)
    code, _, err = cli(["plot", out, "--kind", "cdf", "--value", "metrics.ttft_ms_maen",
                        "--out", tmp_path / "m.png"], capsys)
    assert code == 2 and "did you mean 'metrics.ttft_ms_mean'" in err, err
    code, _, err = cli(["plot", out, "--kind", "cdf", "--value", "ttft",
                        "--out", tmp_path / "m.png"], capsys)
    assert code == 2 and "no column 'ttft' in the per-request table; did you mean " \
                         "'ttft_ps'" in err, err


@pytest.mark.component
def test_plot_cdf_of_a_request_column_without_stored_tables_says_how_to_keep_them(
        traces, tmp_path, capsys):
    out = tmp_path / "plain"
    assert run_sweep(serving_spec(traces, store=None), out, executor="serial").ok == 2
    code, _, err = cli(["plot", out, "--kind", "cdf", "--value", "ttft_ps",
                        "--out", tmp_path / "c.png"], capsys)
    assert code == 2 and "--value ttft_ps: not a column of the sweep's rows" in err
    assert "store: {requests: true}" in err


@pytest.mark.component
def test_cli_sweep_says_which_points_ran_again_for_their_tables(traces, tmp_path, capsys):
    spec = tmp_path / "serve.yaml"
    spec.write_text(f"name: serve\nbase: {SERVE}\n"
                    f"set: {{workload.trace.file: {traces / 't.csv'}}}\n"
                    "axes: {workload.scheduler.token_budget: [16]}\n")
    code, _, _ = cli(["sweep", spec, "--out", tmp_path / "out", "--executor", "serial", "-q"],
                     capsys)
    assert code == 0
    spec.write_text(spec.read_text() + "store: {requests: true}\n")
    code, stdout, err = cli(["sweep", spec, "--out", tmp_path / "out", "--executor", "serial",
                             "-q"], capsys)
    assert code == 0
    assert "1 finished serving point ran again to store per-request tables" in err, err
    assert "load_sweep_requests(" in stdout


@pytest.mark.unit
def test_a_file_in_the_way_of_the_tables_is_an_error_only_when_they_are_kept(tmp_path):
    from npusim.core.errors import OutputError

    (tmp_path / REQUESTS_DIR).write_text("mine\n")
    ResultStore(tmp_path).check_output("--out")  # not kept: the file is no concern
    with pytest.raises(OutputError) as info:
        ResultStore(tmp_path).check_output("--out", requests=True)
    assert str(info.value).startswith(f"--out {tmp_path}: {tmp_path / REQUESTS_DIR} is a file")
    assert (tmp_path / REQUESTS_DIR).read_text() == "mine\n"
