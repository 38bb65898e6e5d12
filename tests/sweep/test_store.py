"""Results store: atomic parts, compaction, merge and de-duplication on read."""

from __future__ import annotations

import pytest

from npusim.sweep.store import ResultStore, flatten_metrics, load_results

pytestmark = pytest.mark.unit


def row(key, point, status="ok", **extra):
    return {"point": point, "status": status, "workload.m": 64 * (point + 1),
            "metrics.latency_ps": 1000 * point, "error": None, "wall_time_s": 0.1,
            "config_hash": f"h{key}", "key": key, "npusim_version": "0", "sweep": "t", **extra}


def test_flatten_metrics_nests_with_dots():
    flat = flatten_metrics({"latency_ps": 5, "memo": {"hits": 1, "deep": {"x": 2}}, "ids": [1, 2]})
    assert flat == {"metrics.latency_ps": 5, "metrics.memo.hits": 1, "metrics.memo.deep.x": 2,
                    "metrics.ids": "[1, 2]"}


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
