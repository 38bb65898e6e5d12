"""Results store: atomic parts, compaction, merge and de-duplication on read."""

from __future__ import annotations

from pathlib import Path

import pytest

from npusim.core.errors import OutputError
from npusim.sweep.store import ResultStore, StoreError, flatten_metrics, load_results

pytestmark = pytest.mark.unit


def row(key, point, status="ok", **extra):
    return {"point": point, "status": status, "workload.m": 64 * (point + 1),
            "metrics.latency_ps": 1000 * point, "error": None, "wall_time_s": 0.1,
            "config_hash": f"h{key}", "key": key, "npusim_version": "0", "sweep": "t", **extra}


def test_flatten_metrics_nests_with_dots():
    flat = flatten_metrics({"latency_ps": 5, "memo": {"hits": 1, "deep": {"x": 2}}, "ids": [1, 2]})
    assert flat == {"metrics.latency_ps": 5, "metrics.memo.hits": 1, "metrics.memo.deep.x": 2,
                    "metrics.ids": "[1, 2]"}
    # a mapping keyed by free text (the energy basis per DRAM standard) stays one JSON
    # column: it made columns like 'metrics.energy.basis.dram.HBM2E 3.2 Gb/s, 64-bit ...'
    basis = {"dram": {"HBM2E 3.2 Gb/s, 64-bit pseudo-channel": {"activations": 4}},
             "noc": {"hops_basis": "link_stats"}}
    assert flatten_metrics({"energy": {"basis": basis}}) == {
        "metrics.energy.basis.dram": '{"HBM2E 3.2 Gb/s, 64-bit pseudo-channel": {"activations": 4}}',
        "metrics.energy.basis.noc.hops_basis": "link_stats"}


def test_parts_compaction_and_reader(tmp_path):
    store = ResultStore(tmp_path)
    for i in range(3):
        store.write_row(row(f"k{i}", i))
    assert sorted(p.name for p in store.parts.iterdir()) == ["k0.parquet", "k1.parquet", "k2.parquet"]
    before = load_results(tmp_path)
    assert list(before["point"]) == [0, 1, 2]
    assert store.compact() == tmp_path / "results.parquet"
    assert not list(store.parts.glob("*.parquet"))
    after = load_results(tmp_path)
    assert after.equals(before)
    assert list(after.columns[:2]) == ["point", "status"] and after.columns[-1] == "sweep"


def test_a_reader_racing_a_compaction_lists_again(tmp_path, monkeypatch):
    # A reader listed the parts, the running sweep compacted them (merged table written,
    # parts deleted), and the reader called the vanished part "not a readable Parquet
    # file ... move it away".
    store = ResultStore(tmp_path)
    for i in range(3):
        store.write_row(row(f"k{i}", i))
    listed = store._part_files()
    calls = []

    def stale_listing():
        calls.append(1)
        if len(calls) == 1:
            store.compact()  # between the listing and the reads
            return listed
        return original()

    original = store._part_files
    monkeypatch.setattr(store, "_part_files", stale_listing)
    frame = store.read()
    assert list(frame["key"]) == ["k0", "k1", "k2"] and not list(store.parts.glob("*.parquet"))


def test_newer_part_wins_and_duplicates_collapse(tmp_path):
    store = ResultStore(tmp_path)
    store.write_row(row("k0", 0, status="failed", error="boom"))
    store.write_row(row("k1", 1))
    store.compact()
    store.write_row(row("k0", 0))  # a retried point
    store.write_row(row("k1", 1))  # left over by a compaction interrupted before unlink
    (store.parts / ".k2.parquet.123.tmp").write_bytes(b"half a file")  # killed writer
    frame = load_results(tmp_path)
    assert list(frame["key"]) == ["k0", "k1"]
    assert list(frame["status"]) == ["ok", "ok"]
    assert store.finished() == {"k0": "ok", "k1": "ok"}


def test_mixed_value_types_survive_compaction(tmp_path):
    store = ResultStore(tmp_path)
    store.write_row(row("a", 0, **{"hw.core.sram.capacity_bytes": "32MiB"}))
    store.write_row(row("b", 1, **{"hw.core.sram.capacity_bytes": 1 << 25}))
    store.write_row(row("c", 2, **{"metrics.extra": 1.5}))
    store.compact()
    frame = load_results(tmp_path)
    assert list(frame["hw.core.sram.capacity_bytes"].iloc[:2]) == ["32MiB", str(1 << 25)]
    assert frame["metrics.extra"].isna().sum() == 2


def test_empty_store_reads_as_empty_table(tmp_path):
    store = ResultStore(tmp_path)
    assert store.finished() == {}
    assert len(store.read()) == 0
    assert store.compact() is None


def test_damaged_files_are_named_and_kept(tmp_path):
    store = ResultStore(tmp_path)
    store.write_row(row("k0", 0))
    store.compact()
    results = tmp_path / "results.parquet"
    results.write_bytes(b"garbage\n")  # was an ArrowInvalid traceback
    with pytest.raises(StoreError) as info:
        store.finished()
    assert str(info.value).startswith(f"{results}: not a readable Parquet file (")
    assert "move it away to start over" in str(info.value)
    store.write_row(row("k1", 1))
    with pytest.raises(StoreError, match="results.parquet: not a readable"):
        store.compact()  # reads everything before writing or deleting anything
    assert results.read_bytes() == b"garbage\n" and (store.parts / "k1.parquet").is_file()

    results.unlink()
    (store.parts / "zz.parquet").write_bytes(b"")  # an empty part
    with pytest.raises(StoreError, match=r"zz\.parquet: not a readable Parquet file \(Parquet file size is 0"):
        load_results(tmp_path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1]}), store.parts / "zz.parquet")  # Parquet, not ours
    with pytest.raises(StoreError, match="not a sweep results file \\(no 'key' or 'status' column"):
        store.compact()
    assert (store.parts / "zz.parquet").is_file() and (store.parts / "k1.parquet").is_file()


@pytest.mark.parametrize("text, expected", [
    ("{oops", "not a readable sweep manifest (Expecting property name"),  # was JSONDecodeError
    ('{"sweep": "s", "params": []}', "not a sweep manifest (no 'points' list)"),  # was KeyError
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"points": [{"key": 3}]}', "points[0] is not {key: TEXT, index: INTEGER, ...}"),
])
def test_damaged_manifest_is_named(tmp_path, text, expected):
    store = ResultStore(tmp_path)
    store.write_row(row("k0", 0))
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(StoreError) as info:
        load_results(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'manifest.json'}: ") and expected in message
    assert "re-run the sweep" in message
    assert store.finished() == {"k0": "ok"}  # the runner does not need the manifest


def test_output_directory_is_checked_without_leaving_anything(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "p" / "parts").mkdir(parents=True)
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "parts").write_text("x")
    (tmp_path / "r" / "results.parquet").mkdir(parents=True)
    cases = [(afile, "exists and is not a directory"),
             (afile / "sub", f"{afile} is a file, not a directory"),
             (tmp_path / "q", f"{tmp_path / 'q' / 'parts'} is a file"),
             (tmp_path / "r", "results.parquet is a directory"),
             (Path("/proc/sweepx"), "cannot create")]
    for path, expected in cases:
        with pytest.raises(OutputError) as info:
            ResultStore(path).check_output("--out")
        assert str(info.value).startswith(f"--out {path}: ") and expected in str(info.value)
    ResultStore(tmp_path / "p").check_output()  # an existing store is fine
    ResultStore(tmp_path / "new" / "deeper").check_output()
    assert not (tmp_path / "new").exists()  # the probe directory is removed again


@pytest.mark.parametrize("column, values, expected", [
    ("hw.core.sram.capacity_bytes", ["128MiB", "4MiB", 8388608], [128 << 20, 4 << 20, 8 << 20]),
    ("hw.core.sram", ["32MiB", "1GiB", None], [32 << 20, 1 << 30, None]),  # memory shorthand
    ("hw.noc.freq_hz", ["1GHz", "500MHz", "2GHz"], [10 ** 9, 5 * 10 ** 8, 2 * 10 ** 9]),
    ("hw.dram.trefi_ps", ["3.9us", "7.8us", "1ns"], [3_900_000, 7_800_000, 1000]),
    ("workload.slo.ttft_ms", ["200ms", "1.5s", 100], [200.0, 1500.0, 100.0]),
    # compaction stores a column mixing numbers and text as text: "45" is 45 ms, not ps
    ("workload.slo.ttft_ms", ["45", "50"], [45.0, 50.0]),
    ("hw.core.sram", ["8MiB", "16777216", "32MiB"], [8 << 20, 16 << 20, 32 << 20]),
    ("workload.m", ["64", "128"], ["64", "128"]),  # no unit anywhere: left as stored
    ("hw.preset", ["npu/a", "npu/b", "npu/c"], ["npu/a", "npu/b", "npu/c"]),  # not quantities
    ("hw.core.sram.capacity_bytes", ["8MiB", "lots", "1GiB"], ["8MiB", "lots", "1GiB"]),
])
def test_swept_quantities_written_with_units_read_back_in_base_units(column, values, expected):
    import pandas as pd

    from npusim.sweep.store import _in_base_units

    frame = _in_base_units(pd.DataFrame({column: values}), [column])
    got = [None if pd.isna(v) else v for v in frame[column]]
    assert got == expected


@pytest.mark.unit
def test_a_second_sweep_into_the_same_directory_is_refused_while_the_first_runs(tmp_path):
    import json
    import os
    import socket
    import subprocess
    import sys

    from npusim.sweep.store import ResultStore, StoreError

    store = ResultStore(tmp_path / "sweep")
    with store.lock():
        assert (tmp_path / "sweep" / ".sweep.lock").is_file()
        with pytest.raises(StoreError, match="another sweep .* is writing here"):
            with ResultStore(tmp_path / "sweep").lock():
                pass
    assert not (tmp_path / "sweep" / ".sweep.lock").exists()   # released
    # a lock left by a process that is gone (a killed sweep) is taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    (tmp_path / "sweep" / ".sweep.lock").write_text(
        json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    with store.lock():
        assert json.loads((tmp_path / "sweep" / ".sweep.lock").read_text())["pid"] == os.getpid()


def test_another_sweeps_directory_is_refused_the_same_sweep_may_come_back(tmp_path):
    from types import SimpleNamespace

    store = ResultStore(tmp_path / "sweep")
    store.check_same_sweep("grid")                      # an empty directory takes any sweep
    store.write_manifest("grid", ["workload.m"], [SimpleNamespace(index=0, key="k0", params={})])
    store.check_same_sweep("grid")                      # resuming or extending: fine
    with pytest.raises(OutputError, match=r"--out .*sweep: holds the results of sweep 'grid' "
                                          r"\(1 points\); this spec is 'other'"):
        store.check_same_sweep("other", "--out")
    assert store.manifest()["sweep"] == "grid"          # nothing was replaced


def test_a_single_runs_output_directory_is_refused(tmp_path):
    # npusim run wrote there: the sweep's manifest, parts and results would be mixed
    # in among metrics.json and requests.csv.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text("{}")
    store = ResultStore(tmp_path / "run")
    with pytest.raises(OutputError, match=r"--out .*run: holds the results of a single run "
                                          r"\(metrics.json"):
        store.check_same_sweep("grid", "--out")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["metrics.json"]


def test_whole_number_columns_stay_whole_when_earlier_rows_lack_them(tmp_path):
    # A directory that first held points without a column (a sweep without capacity:)
    # and then the same spec's points with it: once the old rows are filtered out by the
    # manifest, the column is whole numbers again, not floats with NaN.
    from types import SimpleNamespace

    store = ResultStore(tmp_path)
    store.write_row(row("old", 0))
    store.compact()
    store.write_row(row("new", 0, **{"capacity.probes": 10}))
    store.write_manifest("t", ["workload.m"], [SimpleNamespace(index=0, key="new",
                                                               params={"workload.m": 64})])
    frame = load_results(tmp_path)
    assert list(frame["key"]) == ["new"]
    assert frame["capacity.probes"].dtype == "int64" and list(frame["capacity.probes"]) == [10]
    # and after the sweep's final compaction, which keeps the old row with the column empty
    store.compact()
    frame = load_results(tmp_path)
    assert frame["capacity.probes"].dtype == "int64" and list(frame["capacity.probes"]) == [10]
    # a reader that keeps the old row (no manifest filter) sees a nullable integer column
    # with one missing value (it was float64 with NaN, which rounds past 2**53)
    everything = store._read_all(filter_manifest=False)
    assert everything["capacity.probes"].dtype == "Int64"
    assert everything["capacity.probes"].isna().sum() == 1
    # a column that is float somewhere stays float
    store.write_row(row("new2", 1, **{"capacity.probes": 2.5}))
    store.write_manifest("t", ["workload.m"], [
        SimpleNamespace(index=0, key="new", params={"workload.m": 64}),
        SimpleNamespace(index=1, key="new2", params={"workload.m": 128})])
    assert load_results(tmp_path)["capacity.probes"].dtype == "float64"


def test_load_results_refuses_a_directory_without_a_sweep(tmp_path):
    # an empty table came back for a mistyped path, where load_sweep raised
    from npusim.analysis.frames import AnalysisError

    with pytest.raises(AnalysisError, match="not a sweep output directory"):
        load_results(tmp_path / "nowhere")


def test_swept_sram_sizes_share_one_energy_basis_column(tmp_path):
    # the basis was keyed by size: a column per swept size ('...basis.sram.33554432.
    # read_pj_per_bit'), empty on every other point's row
    import json

    from npusim.config.presets import REPO_ROOT
    from npusim.sweep import run_sweep

    spec = {"name": "sizes", "base": str(REPO_ROOT / "workloads/scenarios/quickstart.yaml"),
            "set": {"run.mode": "analytic"},
            "axes": [{"grid": {"hw.core.sram.capacity_bytes": ["32MiB", "64MiB"]}}]}
    assert run_sweep(spec, tmp_path, executor="serial").ok == 2
    frame = load_results(tmp_path)
    assert [c for c in frame.columns if c.startswith("metrics.energy.basis.sram")
            and not c.startswith("metrics.energy.basis.sram_operands")] == [
        "metrics.energy.basis.sram"]
    sizes = [[entry["capacity_bytes"] for entry in json.loads(text)]
             for text in frame["metrics.energy.basis.sram"]]
    assert sizes == [[32 << 20], [64 << 20]]
    dram = [json.loads(text)[0]["standard"] for text in frame["metrics.energy.basis.dram"]]
    assert dram == ["HBM2E 3.2 Gb/s, 64-bit pseudo-channel"] * 2


def test_per_unit_metric_columns_come_in_natural_order(tmp_path):
    # core1, core10, core11, ..., core2 (string order) made per-core columns hard to scan
    store = ResultStore(tmp_path)
    store.write_row(row("k0", 0, **{f"metrics.unit_utilisation.core{i}.sa": 0.5
                                    for i in (10, 2, 1)}))
    columns = [c for c in load_results(tmp_path).columns if "core" in c]
    assert columns == [f"metrics.unit_utilisation.core{i}.sa" for i in (1, 2, 10)]


def test_a_boolean_metric_is_boolean_not_object(tmp_path):
    # metrics.trace_truncated stayed object, even after keeping the points that ran
    store = ResultStore(tmp_path)
    store.write_row(row("k0", 0, **{"metrics.trace_truncated": False}))
    store.write_row(row("k1", 1, status="failed"))
    frame = load_results(tmp_path)
    assert str(frame["metrics.trace_truncated"].dtype) == "boolean"
    ok = frame[frame["status"] == "ok"]
    from npusim.sweep.store import plain_whole_numbers

    assert plain_whole_numbers(ok.copy())["metrics.trace_truncated"].dtype == bool


def test_a_metric_no_point_has_is_missing_numbers_not_object(tmp_path):
    # metrics.tpot_ms_mean with one output token is None for every point: it stayed
    # object, which a plot or a mean refuses
    store = ResultStore(tmp_path)
    store.write_row(row("k0", 0, **{"metrics.tpot_ms_mean": None, "metrics.x": 1.5}))
    store.write_row(row("k1", 1, **{"metrics.tpot_ms_mean": None, "metrics.x": 2.5}))
    frame = load_results(tmp_path)
    assert frame["metrics.tpot_ms_mean"].dtype == "float64"
    assert frame["metrics.tpot_ms_mean"].isna().all() and frame["metrics.x"].mean() == 2.0
    assert frame["error"].dtype == object  # other empty columns keep their type
