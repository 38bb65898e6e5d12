"""End-to-end: simulate() on the quickstart scenario and on hand-written task graphs."""

import json

import pytest

from npusim.api import simulate
from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component
QUICKSTART = REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml"


def scenario(tasks, **run):
    return {"name": "t", "hw": {"preset": "npu/large_core_64"},
            "workload": {"kind": "taskgraph", "tasks": tasks}, "run": run}


def test_quickstart_runs_in_both_modes_and_reports_every_level():
    # quickstart.yaml: a 256 x 2560 -> 9728 GEMM (2-byte values) split by output columns
    # over 4 cores, an elementwise activation on its output, then a ring all-gather.
    m, k, n, cores, b = 256, 2560, 9728, 4, 2
    flops = 2 * m * k * n + m * n          # MACs, plus one op per output element
    hbm = k * n * b                         # every weight read from HBM once
    # ring all-gather of the m x n output (docs/partition.md): each of the 4 members
    # sends (G - 1)/G of it
    noc = cores * (cores - 1) * (m * n * b // cores)
    for mode in ("tlm", "analytic"):
        result = simulate(QUICKSTART, mode=mode)
        metrics = result.metrics
        assert metrics["latency_ps"] > 0 and metrics["flops"] == flops, mode
        assert metrics["bytes_by_level"]["hbm"] == hbm, mode
        assert metrics["bytes_by_level"]["noc"] == noc, mode
        # SRAM sees at least the weights coming in and the output slices going out
        assert metrics["bytes_by_level"]["sram"] >= hbm + m * n * b, mode
        assert set(result.ops["type"]) == {"compute", "transfer"}
        assert (result.ops["end_ps"] >= result.ops["start_ps"]).all()
        assert result.ops["end_ps"].max() == metrics["latency_ps"]


def test_peak_utilisation_is_work_over_the_chip_and_over_the_used_units():
    result = simulate(QUICKSTART, mode="analytic")
    metrics, seconds = result.metrics, result.metrics["latency_s"]
    array_flops = sum(stats["flops"] for unit, stats in result.unit_stats.items()
                      if unit.endswith(".sa"))
    # 64 arrays on the chip, 4 of them used; each a 128x128 array at 500 MHz (16.4 TFLOP/s).
    assert metrics["peak_flops_per_s"] == pytest.approx(64 * 2 * 128 * 128 * 500e6)
    assert metrics["flops_utilisation"] == pytest.approx(
        array_flops / (metrics["peak_flops_per_s"] * seconds))
    assert metrics["flops_utilisation_of_used_units"] == pytest.approx(
        16 * metrics["flops_utilisation"])
    # Weight-stationary 256-row tiles: each 128x128 fold computes for 256 of its 512
    # cycles (the other half fills and drains), so the arrays do half their peak's work
    # while busy.
    busy = metrics["unit_utilisation"]["core0.sa"]
    assert metrics["flops_utilisation_of_used_units"] == pytest.approx(busy / 2, rel=0.02)
    hbm = metrics["bandwidth_utilisation_by_level"]["hbm"]
    assert hbm == pytest.approx(metrics["bytes_by_level"]["hbm"]
                                / (metrics["peak_bandwidth_bps_by_level"]["hbm"] * seconds))
    assert 0 < hbm < 1


def test_same_config_gives_an_equal_result_whatever_the_wall_time():
    # Result == Result compared host (wall time) too, so it was always False.
    first, second = simulate(QUICKSTART, mode="analytic"), simulate(QUICKSTART, mode="analytic")
    assert first.host != second.host and first == second
    assert first != simulate(QUICKSTART, mode="analytic", overrides=["workload.m=128"])


@pytest.mark.parametrize("scenario, overrides", [
    ("quickstart.yaml", []),
    ("qwen3_4b_npu64_pd_fusion.yaml", ["workload.trace.limit=3", "run.trace=true"])])
def test_a_written_run_reads_back_as_the_same_result(tmp_path, scenario, overrides):
    # a run directory could be plotted but not reloaded as a Result
    from npusim.metrics.result import Result

    result = simulate(REPO_ROOT / "workloads/scenarios" / scenario, mode="analytic",
                      overrides=overrides)
    again = Result.read(result.write(tmp_path / "run"))
    assert again.metrics == result.metrics and again.config == result.config
    assert again.ops.equals(result.ops) and again.units.equals(result.units)
    assert again.segments.equals(result.segments) and again.host == result.host
    assert sorted(again.tables) == sorted(result.tables)
    for name in result.tables:
        assert again.table(name).equals(result.table(name)), name


def test_reading_a_directory_that_holds_no_run_names_what_is_missing(tmp_path):
    from npusim.core.errors import OutputError
    from npusim.metrics.result import Result

    with pytest.raises(OutputError, match=r"no such directory"):
        Result.read(tmp_path / "absent")
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(OutputError, match=r"no ops.csv, units.csv, config.resolved.yaml"):
        Result.read(tmp_path)
    simulate(QUICKSTART, mode="analytic").write(tmp_path / "run")
    (tmp_path / "run" / "segments.csv").write_text("segment,label\n0,x\n")
    with pytest.raises(OutputError, match=r"segments.csv: no column 'start_ps'"):
        Result.read(tmp_path / "run")
    # a damaged metrics.json, config.resolved.yaml or host.json is named, with where it
    # broke (it was "RUN: cannot read the run back (Expecting value ...)")
    run = tmp_path / "run"
    metrics = (run / "metrics.json").read_text()
    for name, text, message in (
            ("metrics.json", '{"latency_ps": \n', r"metrics.json: line 2, column 1: invalid "
                                                   r"JSON \(Expecting value\); expected the "
                                                   r"metrics.json that npusim run writes"),
            ("metrics.json", "[1, 2]", r"metrics.json: holds list, not a mapping"),
            ("config.resolved.yaml", "x: [\n", r"config.resolved.yaml: line 2, column 1: "
                                               r"invalid YAML"),
            ("host.json", b"\xff{}", r"host.json: not UTF-8 text \(byte 0xff at offset 0\)")):
        original = (run / name).read_bytes()
        (run / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(OutputError, match=message):
            Result.read(run)
        (run / name).write_bytes(original)
    assert (run / "metrics.json").read_text() == metrics


def test_an_untraced_runs_empty_ops_table_has_the_traced_dtypes():
    # every column was float64, text ones included
    traced = simulate(QUICKSTART, mode="analytic").ops
    untraced = simulate(QUICKSTART, mode="analytic", overrides=["run.trace=false"]).ops
    assert untraced.empty and untraced.dtypes.astype(str).equals(traced.dtypes.astype(str))


def test_same_config_gives_byte_identical_metrics(tmp_path):
    first = simulate(QUICKSTART).write(tmp_path / "a")
    second = simulate(QUICKSTART).write(tmp_path / "b")
    for name in ("metrics.json", "ops.csv", "trace.json", "config.resolved.yaml"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    # Runs in one process share its string-hash seed, so anything ordered by a set of
    # unit or task names would repeat in both: a process with another PYTHONHASHSEED must
    # write the same bytes too (only host.json, the wall time, may differ).
    import os
    import subprocess
    import sys

    seed = str(int(os.environ.get("PYTHONHASHSEED") or 0) + 7919)
    proc = subprocess.run([sys.executable, "-m", "npusim.cli", "run", str(QUICKSTART), "-q",
                           "--out", str(tmp_path / "c")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    assert proc.returncode == 0, proc.stderr
    for name in ("metrics.json", "ops.csv", "units.csv", "segments.csv", "trace.json",
                 "config.resolved.yaml"):
        assert (first / name).read_bytes() == (tmp_path / "c" / name).read_bytes(), name


def test_trace_is_valid_chrome_trace_json(tmp_path):
    result = simulate(QUICKSTART, mode="analytic")
    out = result.write(tmp_path)
    trace = json.loads((out / "trace.json").read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert complete and all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in complete)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in trace["traceEvents"])
    # One complete event per task of ops.csv, at its times, on its unit's track (process
    # = owner, thread = part: core0 / hbm for core0.hbm; a unit without a part, such as
    # core0 sending over the NoC, is its own thread).  Chrome's ts and dur are
    # microseconds, the simulator's picoseconds (1 us = 1e6 ps).
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    process = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    ops = result.ops
    assert len(complete) == len(ops)
    def unit(e):
        owner, track = process[e["pid"]], thread[e["pid"], e["tid"]]
        return owner if track == owner else f"{owner}.{track}"
    events = sorted((e["name"], unit(e),
                     round(e["ts"] * 1e6), round(e["dur"] * 1e6)) for e in complete)
    assert events == sorted(zip(ops["name"], ops["unit"], ops["start_ps"], ops["duration_ps"]))


UNCONTENDED = [
    {"name": "load", "type": "transfer", "src": "core0.hbm", "dst": "core0.sram", "size_bytes": "2MiB"},
    {"name": "mm", "type": "compute", "unit": "core0.sa", "after": ["load"],
     "op": {"kind": "gemm", "m": 256, "k": 1024, "n": 1024}},
    {"name": "send", "type": "transfer", "src": "core0.sram", "dst": "core9.sram",
     "size_bytes": "512KiB", "after": ["mm"]},
    {"name": "act", "type": "compute", "unit": "core9.vec", "after": ["send"],
     "op": {"kind": "elementwise", "elements": 262144}},
]


def test_tlm_and_analytic_agree_within_3_percent_when_uncontended():
    tlm = simulate(scenario(UNCONTENDED, mode="tlm")).metrics["latency_ps"]
    analytic = simulate(scenario(UNCONTENDED, mode="analytic")).metrics["latency_ps"]
    assert abs(tlm - analytic) / analytic < 0.03


def test_contention_shows_in_tlm_and_on_the_analytic_noc_but_not_for_the_first_memory_stream():
    # Four DMA streams into one core's HBM at once, and two NoC flows over one link.
    # The analytic level serves a memory first come, first served (the first stream is
    # not slowed) and shares a NoC link between the flows crossing it: the link carries
    # both in the same time as in tlm (whose allocator favours the flow injected at
    # the shared link's router, 3:1, where the analytic level splits it evenly).
    tasks = [{"name": f"load{i}", "type": "transfer", "src": "core0.hbm", "dst": "core0.sram",
              "size_bytes": "1MiB"} for i in range(4)]
    tasks += [{"name": "a", "type": "transfer", "src": "core0.sram", "dst": "core3.sram", "size_bytes": "1MiB"},
              {"name": "b", "type": "transfer", "src": "core1.sram", "dst": "core2.sram", "size_bytes": "1MiB"}]
    tlm = simulate(scenario(tasks, mode="tlm")).ops.set_index("name")["duration_ps"]
    analytic = simulate(scenario(tasks, mode="analytic")).ops.set_index("name")["duration_ps"]
    assert tlm[[f"load{i}" for i in range(4)]].max() > 3 * analytic["load0"]
    alone = simulate(scenario(tasks[4:5], mode="analytic")).ops.set_index("name")["duration_ps"]
    assert tlm[["a", "b"]].max() > 1.5 * alone["a"]
    assert abs(analytic[["a", "b"]].max() / tlm[["a", "b"]].max() - 1) < 0.03


def test_memoisation_reuses_identical_segments_with_identical_timing():
    base = {"name": "m", "hw": {"preset": "npu/large_core_64"},
            "workload": {"kind": "taskgraph", "tasks": UNCONTENDED, "repeat": 4}}
    memo = simulate(base).metrics
    plain = simulate({**base, "run": {"memoize": False}}).metrics
    assert memo["memo"] == {"hits": 3, "misses": 1, "hit_rate": 0.75}
    assert memo["latency_ps"] == plain["latency_ps"]
    assert memo["events"] < plain["events"]


def test_simulate_restores_the_garbage_collector_thresholds_even_on_error():
    import gc

    before = gc.get_threshold()
    simulate(QUICKSTART, mode="analytic")
    assert gc.get_threshold() == before
    with pytest.raises(Exception):
        simulate(scenario([{"name": "x", "kind": "nonsense"}]))
    assert gc.get_threshold() == before


@pytest.mark.parametrize("config, kwargs, message", [
    (None, {}, "expected a scenario path, a mapping or a Scenario, got NoneType"),
    ("name: x\nhw: {}\n", {}, "got YAML text"),
    (QUICKSTART, {"overrides": None}, "expected a list of 'PATH=VALUE' strings"),
    (QUICKSTART, {"overrides": {"run.mode": "analytic"}}, "expected a list of 'PATH=VALUE' strings"),
    (QUICKSTART, {"progress": 5}, "expected a function progress"),
    # an empty mode ran the scenario's own mode silently; a typo was blamed on the file
    (QUICKSTART, {"mode": ""}, r"^mode: got ''; expected 'tlm' or 'analytic'$"),
    (QUICKSTART, {"mode": "fast"}, r"^mode: got 'fast'; expected 'tlm' or 'analytic'$"),
    # an override's own problem is the argument's, not worded as the --set flag
    (QUICKSTART, {"overrides": ["run.mode"]}, r"^overrides: invalid configuration .*\n"
                                              r"  run.mode: expected PATH=VALUE"),
])
def test_simulate_rejects_arguments_of_the_wrong_kind(config, kwargs, message):
    from npusim.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        simulate(config, **kwargs)


def test_simulate_takes_one_override_as_a_string():
    assert simulate(QUICKSTART, overrides="run.mode=analytic").metrics["mode"] == "analytic"


def test_the_loaders_take_one_override_as_a_string():
    from npusim.config.loader import load_scenario, scenario_from_dict

    # before: the text was iterated character by character ("r" is not PATH=VALUE)
    assert load_scenario(QUICKSTART, "run.mode=analytic").run.mode == "analytic"
    data = load_scenario(QUICKSTART).model_dump(mode="json")
    assert scenario_from_dict(data, overrides="run.seed=7").run.seed == 7


def test_a_scenario_file_that_cannot_run_is_named_in_the_error():
    from npusim.core.errors import MappingError

    path = REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64.yaml"
    with pytest.raises(MappingError) as info:
        simulate(path, overrides=["run.mode=analytic", "workload.model=qwen3_32b", "hw.hbm=null"])
    assert str(info.value).startswith(f"{path}: qwen3_32b needs ")
    assert str(info.value).count(str(path)) == 1


def test_unit_counters_stay_integers_where_some_parts_lack_them(tmp_path):
    # flops exists only on compute units: the others were NaN, then 0.0, and every
    # counter column turned float64 (units.csv printed 12451840.0)
    result = simulate(QUICKSTART, mode="analytic")
    units = result.units
    counters = [c for c in units.columns if c != "utilisation"]
    assert {"flops", "bytes_read", "busy_ps"} <= set(counters)
    assert all(units[c].dtype == "int64" for c in counters)
    assert units.loc["core0.hbm", "flops"] == 0 and units["utilisation"].dtype == "float64"
    result.write(tmp_path)
    assert ".0," not in (tmp_path / "units.csv").read_text().splitlines()[1]
