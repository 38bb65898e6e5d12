"""Running sweeps: local processes and Dask agree, resume skips finished points, a
failing point is recorded, and a sweep killed with SIGKILL resumes without damage."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from npusim.config.presets import REPO_ROOT
from npusim.sweep import load_results, run_sweep, spec_from_dict

pytestmark = pytest.mark.component
QUICKSTART = str(REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml")
GRID = {"base": QUICKSTART, "set": {"run.mode": "analytic"},
        "axes": [{"grid": {"workload.m": [64, 128, 256],
                           "hw.core.sram.capacity_bytes": ["16MiB", "32MiB", "64MiB"]}}]}


def grid_table(out):
    return load_results(out).drop(columns="wall_time_s")


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    summary = run_sweep(spec_from_dict(GRID, "grid.yaml"), out, executor="local", workers=2)
    return out, summary


def test_local_grid_runs_every_point(local_grid):
    out, summary = local_grid
    assert (summary.total, summary.ok, summary.failed, summary.lost) == (9, 9, 0, 0)
    frame = load_results(out)
    assert list(frame["point"]) == list(range(9))
    assert (frame["status"] == "ok").all()
    assert {"workload.m", "hw.core.sram.capacity_bytes", "metrics.latency_ps",
            "metrics.bytes_by_level.hbm", "metrics.memo.hits", "config_hash", "npusim_version",
            "wall_time_s", "error"} <= set(frame.columns)
    # larger GEMMs take longer: the metric really depends on the swept parameter
    by_m = frame.groupby("workload.m")["metrics.latency_ps"].mean()
    assert by_m.is_monotonic_increasing and by_m.iloc[-1] > by_m.iloc[0]
    # Sizes swept as text come back in bytes (a plot orders them by size, not as text).
    assert frame["hw.core.sram.capacity_bytes"].dtype == "int64"
    assert sorted(set(frame["hw.core.sram.capacity_bytes"])) == [16 << 20, 32 << 20, 64 << 20]
    assert (out / "results.parquet").is_file() and not list((out / "parts").glob("*.parquet"))


def test_dask_grid_matches_local(local_grid, tmp_path):
    out = tmp_path / "dask"
    summary = run_sweep(spec_from_dict(GRID, "grid.yaml"), out, executor="dask", workers=2)
    assert (summary.ok, summary.lost) == (9, 0)
    pd.testing.assert_frame_equal(grid_table(out), grid_table(local_grid[0]))


def test_serial_matches_and_rerun_resumes(local_grid, tmp_path):
    out = tmp_path / "serial"
    run_sweep(spec_from_dict(GRID, "grid.yaml"), out, executor="serial")
    first = load_results(out)
    pd.testing.assert_frame_equal(first.drop(columns="wall_time_s"), grid_table(local_grid[0]))
    again = run_sweep(spec_from_dict(GRID, "grid.yaml"), out, executor="serial")
    assert (again.skipped_done, again.ok) == (9, 0)
    pd.testing.assert_frame_equal(load_results(out), first)  # wall times too: not rerun


def test_failing_point_is_recorded_and_the_sweep_continues(tmp_path):
    spec = spec_from_dict({**GRID, "axes": [{"grid": {"workload.cores[3]": [8, 99, 10]}}],
                           "constraints": [{"require": "${workload.cores[3]} != 10",
                                            "reason": "core 10 is reserved"}]}, "fail.yaml")
    summary = run_sweep(spec, tmp_path, executor="local", workers=2)
    assert (summary.ok, summary.failed, summary.skipped) == (1, 1, 1)
    frame = load_results(tmp_path).set_index("workload.cores[3]")
    assert list(frame.loc[[8, 99, 10], "status"]) == ["ok", "failed", "skipped"]
    assert "core 99 does not exist" in frame.loc[99, "error"]
    assert frame.loc[10, "error"] == "core 10 is reserved"
    assert pd.isna(frame.loc[99, "metrics.latency_ps"])
    # failed points count as finished unless asked to retry
    assert run_sweep(spec, tmp_path, executor="serial").skipped_done == 3
    assert run_sweep(spec, tmp_path, executor="serial", retry_failed=True).failed == 1


def test_killed_sweep_resumes_without_losing_or_duplicating_points(tmp_path):
    """SIGKILL mid-run, then re-run: every point exactly once, finished rows unchanged."""
    spec_path = tmp_path / "slow.yaml"
    # tlm points take ~0.4 s each, so the kill lands mid-run
    spec_path.write_text(f"base: {QUICKSTART}\nset: {{run.mode: tlm}}\n"
                         "axes: {workload.m: [32, 64, 96, 128], workload.tile_n: [128, 256, 512]}\n")
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "npusim.cli", "sweep", str(spec_path), "--out", str(out),
         "--workers", "1", "-q"], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(list((out / "parts").glob("*.parquet"))) < 3:
            assert process.poll() is None, "sweep finished before it could be killed"
            assert time.monotonic() < deadline, "sweep made no progress"
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its worker processes
        process.wait()
    survived = load_results(out)
    assert 3 <= len(survived) < 12
    assert survived["key"].is_unique and (survived["status"] == "ok").all()

    summary = run_sweep(spec_path, out, executor="local", workers=2)
    assert summary.skipped_done == len(survived) and summary.ok == 12 - len(survived)
    final = load_results(out)
    assert sorted(final["point"]) == list(range(12)) and final["key"].is_unique
    kept = final.set_index("key").loc[survived["key"]].reset_index()
    pd.testing.assert_frame_equal(kept[survived.columns], survived, check_like=False)


def test_bad_executor_and_workers_are_user_errors(tmp_path):
    from npusim.core.errors import NpusimError

    with pytest.raises(NpusimError, match="unknown executor 'spark'"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), tmp_path, executor="spark")
    with pytest.raises(NpusimError, match="at least 1"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), tmp_path, workers=0)
    # from Python: a string compared with an int raised TypeError; a list as executor too
    with pytest.raises(NpusimError, match="got '2'; expected a whole number of worker"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), tmp_path, workers="2")
    with pytest.raises(NpusimError, match=r"unknown executor \['local'\]"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), tmp_path, executor=["local"])
    # named as the Python arguments are spelt, not as command-line flags
    with pytest.raises(NpusimError, match=r"^scheduler=: 'nowhere' is not a scheduler address"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), tmp_path, scheduler="nowhere")
    with pytest.raises(NpusimError, match=r"^executor=: unknown"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), tmp_path, executor="spark")


def test_run_sweep_takes_a_spec_mapping_and_names_anything_else(tmp_path):
    from npusim.core.errors import NpusimError

    summary = run_sweep(GRID, tmp_path / "from_dict", executor="serial")
    assert summary.ok == summary.total > 0  # a mapping is read as spec_from_dict reads it
    for bad in (42, ["grid.yaml"]):  # before: a TypeError traceback from pathlib
        with pytest.raises(NpusimError, match=r"^spec: got (int|list); expected a sweep spec "
                                              r"path, a mapping .* spec_from_dict"):
            run_sweep(bad, tmp_path / "bad")
    with pytest.raises(NpusimError, match=r"^out_dir: got None; expected a directory path"):
        run_sweep(GRID, None)
    assert not (tmp_path / "bad").exists()


def test_output_directory_is_checked_before_points_are_resolved(tmp_path):
    from npusim.core.errors import OutputError

    afile = tmp_path / "afile"
    afile.write_text("x")
    invalid = {**GRID, "axes": {"hw.core.sram.capacity_bytes": ["12XB"]}}  # fails in points()
    with pytest.raises(OutputError, match="afile: exists and is not a directory"):
        run_sweep(spec_from_dict(invalid, "grid.yaml"), afile, executor="serial")
    with pytest.raises(OutputError, match=r"afile is a file, not a directory"):
        run_sweep(spec_from_dict(GRID, "grid.yaml"), afile / "sub", executor="serial")
    assert afile.read_text() == "x"


def test_a_random_axis_that_draws_a_point_twice_stores_and_counts_it_once(tmp_path):
    spec = spec_from_dict({**GRID, "axes": [{"random": {"seed": 1, "samples": 6,
                                                        "params": {"workload.m": [64, 128]}}}]},
                          "dup.yaml")
    summary = run_sweep(spec, tmp_path, executor="serial")
    assert (summary.total, summary.ok, summary.duplicates) == (2, 2, 4)
    assert sorted(load_results(tmp_path)["workload.m"].unique()) == [64, 128]


def test_the_progress_bar_counts_skipped_points_apart_from_ok_ones():
    # The bar said "ok 6" where the summary said "5 ok, 1 skipped by constraints".
    from npusim.sweep import runner

    calls = []
    bar = runner._Progress(0, "x", enabled=False)
    bar.bar = type("Stub", (), {"update": lambda self, task, **fields: calls.append(fields)})()
    bar.task = 0
    summary = runner.SweepSummary(out_dir=".", total=6, ok=5, skipped=1)
    bar.update(summary, remaining=0)
    assert calls[-1]["ok"] == 5 and calls[-1]["skipped"] == 1 and calls[-1]["failed"] == 0


@pytest.mark.component
@pytest.mark.skipif(not any(Path(task, "children").exists() for task in
                            (Path("/proc/self/task").iterdir() if Path("/proc/self/task").is_dir()
                             else ())),
                    reason="reads worker ids from /proc/PID/task/TID/children")
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_an_interrupt_stops_the_sweep_and_its_workers(how, tmp_path):
    """A SIGTERM to the sweep alone left the workers running as orphans (about 1 GB each)
    until they finished every queued point.  Ctrl-C goes to the whole process group: a
    worker that took it printed its own KeyboardInterrupt traceback.  Either way the
    sweep says what it kept and how to resume."""
    spec = tmp_path / "slow.yaml"
    spec.write_text(f"name: slow\nbase: {REPO_ROOT}/workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml\n"
                    "set: {run.mode: tlm}\n"
                    "axes:\n  - grid: {workload.trace.limit: [40, 41, 42, 43, 44, 45]}\n")
    sweep = subprocess.Popen([sys.executable, "-m", "npusim.cli", "sweep", str(spec), "--out",
                              str(tmp_path / "out"), "--workers", "2", "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,  # its own group, as a terminal's job
                             # (a test runner may ignore SIGINT; a shell's job does not)
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    workers: list[str] = []
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.2)
        tasks = Path(f"/proc/{sweep.pid}/task")
        workers = [pid for task in (tasks.iterdir() if tasks.is_dir() else ())
                   for pid in (task / "children").read_text().split()]
    assert len(workers) == 2, sweep.communicate()
    time.sleep(1.0)                                   # both busy with a point
    if how == "sigterm":
        sweep.send_signal(signal.SIGTERM)
    else:
        os.killpg(sweep.pid, signal.SIGINT)           # what Ctrl-C in a terminal does
    _, err = sweep.communicate(timeout=30)
    assert sweep.returncode == 130, err
    time.sleep(0.5)
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()
             and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]
    assert alive == [], f"workers {alive} outlived the sweep"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert re.search(r"interrupted: this run stored \d of 6 points \(\d ok\) in .*out/; run "
                     r"the same command again to run the rest", err), err


def test_metrics_patterns_keep_only_the_metrics_they_match(local_grid, tmp_path):
    out, _ = local_grid
    full = load_results(out)
    spec = spec_from_dict({**GRID, "metrics": ["latency_ps", "bytes_by_level", "memo.hit*",
                                               "no_such_metric*"]}, "grid.yaml")
    summary = run_sweep(spec, tmp_path, executor="serial")
    kept = load_results(tmp_path)
    metrics = sorted(c for c in kept.columns if c.startswith("metrics."))
    assert metrics == sorted(c for c in full.columns if c == "metrics.latency_ps"
                             or c.startswith("metrics.bytes_by_level.")
                             or c.startswith("metrics.memo.hit"))
    assert "metrics.bytes_by_level.hbm" in metrics and "metrics.memo.hits" in metrics
    # the same values as the full rows, and the parameters and row columns are all there
    assert kept["metrics.latency_ps"].tolist() == full["metrics.latency_ps"].tolist()
    assert {"point", "status", "key", "wall_time_s", "workload.m"} <= set(kept.columns)
    assert summary.unmatched_metrics == ["no_such_metric*"]


@pytest.mark.parametrize("metrics, fragment", [
    ("ttft_ms_p90", "expected a list of metric name patterns"),
    ([], "expected a list of metric name patterns"),
    (["ok", 3], "metrics[1]: expected a metric name or glob pattern"),
])
def test_bad_metrics_patterns_are_named(metrics, fragment):
    from npusim.core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        spec_from_dict({**GRID, "metrics": metrics}, "grid.yaml")
    assert fragment in str(info.value)


def test_a_capacity_sweep_takes_no_metrics_patterns():
    from npusim.core.errors import ConfigError

    disagg = str(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_disagg.yaml")
    with pytest.raises(ConfigError, match="a capacity sweep stores its search"):
        spec_from_dict({"base": disagg, "capacity": {}, "metrics": ["ttft_ms_p90"],
                        "axes": [{"grid": {"workload.pd.tp": [7]}}]}, "cap.yaml")


def test_run_sweep_takes_overrides_and_a_mode_as_the_cli_does(tmp_path):
    # notebooks had to splice --set/--mode into the spec's set: by hand
    spec = {"name": "m", "base": str(REPO_ROOT / "workloads/scenarios/quickstart.yaml"),
            "axes": {"workload.m": [64, 128]}}
    summary = run_sweep(spec, tmp_path / "a", executor="serial", mode="analytic",
                        overrides=["workload.tile_n=256"])
    frame = load_results(summary.out_dir)
    assert list(frame["status"]) == ["ok", "ok"]
    from npusim.sweep.spec import spec_from_dict as checked

    built = checked(spec, extra_set=["run.mode=analytic", "workload.tile_n=256"])
    assert all(p.config["run"]["mode"] == "analytic" and p.config["workload"]["tile_n"] == 256
               for p in built.points())
    from npusim.core.errors import ConfigError, NpusimError

    with pytest.raises(ConfigError, match="mode"):
        run_sweep(spec, tmp_path / "b", mode="fast")
    with pytest.raises(NpusimError, match="a checked SweepSpec is final"):
        run_sweep(built, tmp_path / "c", mode="analytic")


def test_a_command_line_overrides_bad_value_is_said_as_the_overrides(tmp_path):
    # `npusim sweep SPEC --set workload.mm=3` was reported at set.workload.mm of the
    # spec file, which has no such entry
    from npusim.core.errors import ConfigError
    from npusim.sweep.spec import spec_from_dict as checked

    spec = {"name": "m", "base": str(REPO_ROOT / "workloads/scenarios/quickstart.yaml"),
            "set": {"run.mode": "analytic"}, "axes": {"workload.m": [64]}}
    for text, path, said in (
            ("workload.mm=3", "workload.mm", "unknown key; did you mean 'm'?"),
            ("workload.tile_n=abc", "workload.tile_n", "Input should be a valid integer"),
            ("run.mode=fast", "run.mode", "Input should be 'tlm' or 'analytic'")):
        with pytest.raises(ConfigError) as info:
            checked(spec, "s.yaml", extra_set=[text])
        [(where, message)] = info.value.problems
        assert info.value.source == "s.yaml" and where == path and said in message
        assert message.endswith(f"(from the override {text}, which replaces the spec's set: "
                                "run.mode)" if path == "run.mode" else
                                f"(from the override {text})")
    # the spec's own bad entry is still the spec's
    with pytest.raises(ConfigError) as info:
        checked({**spec, "set": {"workload.mm": 3}}, "s.yaml", extra_set=["workload.tile_n=256"])
    assert info.value.problems[0][0] == "set.workload.mm"


@pytest.mark.parametrize("text, problem", [
    ("workload.m", ("workload.m", "expected PATH=VALUE")),
    ("workload.cores=[0, 1", ("workload.cores", "got '[0, 1', which is not a YAML flow list")),
])
def test_a_malformed_command_line_override_is_the_overrides_not_the_specs_set(
        tmp_path, capsys, text, problem):
    # `npusim sweep SPEC --set workload.m` was reported as the spec file's own
    # `set: expected a mapping path: value or a list of 'path=value', got [...]` (or
    # `set.workload.cores` of the spec): a field the file does not hold.
    from npusim.cli import main
    from npusim.core.errors import ConfigError
    from npusim.sweep.spec import spec_from_dict as checked

    spec = {"name": "m", "base": str(REPO_ROOT / "workloads/scenarios/quickstart.yaml"),
            "set": {"run.mode": "analytic"}, "axes": {"workload.m": [64]}}
    with pytest.raises(ConfigError) as info:
        checked(spec, "s.yaml", extra_set=[text])
    assert info.value.source == "--set"
    [(path, message)] = info.value.problems
    assert path == problem[0] and message.startswith(problem[1])
    with pytest.raises(ConfigError) as info:  # from Python, the argument's name
        run_sweep(spec, tmp_path / "api", executor="serial", overrides=[text])
    assert info.value.source == "overrides" and info.value.problems[0][0] == problem[0]
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text("name: m\nbase: " + spec["base"] + "\naxes: {workload.m: [64]}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", str(spec_file), "--out", str(tmp_path / "out"), "--set", text])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.startswith("error: --set: ") and "s.yaml" not in err
    assert not (tmp_path / "out").exists()
