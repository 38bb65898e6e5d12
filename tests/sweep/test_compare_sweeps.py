"""Sweeps compared point by point (``npusim compare SWEEP_DIR...``,
``analysis.compare_sweeps``): points matched on the parameters the sweeps share."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from npusim import analysis
from npusim.config.presets import REPO_ROOT
from npusim.sweep import run_sweep, spec_from_dict
from tests.sweep.test_cli_analysis import cli

pytestmark = pytest.mark.unit
QUICKSTART = str(REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml")


def _sweep(root, name, axes, **settings):
    body = {"base": QUICKSTART, "set": {"run.mode": "analytic", **settings}, "axes": axes}
    run_sweep(spec_from_dict(body, source=f"{name}.yaml"), root / name, executor="serial")
    return root / name


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """One grid on the quickstart chip and on one with half the NoC bandwidth (which
    also ran one point the first did not); a third sweep that also varies tile_n."""
    root = tmp_path_factory.mktemp("sweeps")
    base = _sweep(root, "base", {"workload.m": [64, 128]})
    slow = _sweep(root, "slow", {"workload.m": [64, 128, 256]},
                  **{"hw.noc.link_bandwidth_bps": "8GB/s"})
    tiles = _sweep(root, "tiles", {"grid": {"workload.m": [64], "workload.tile_n": [128, 256]}})
    return base, slow, tiles


def test_points_are_matched_on_the_shared_parameters_with_each_change(sweeps):
    base, slow, _ = sweeps
    table = analysis.compare_sweeps(base, slow, metrics=["latency_ps"])
    assert table.index.names == ["metric", "workload.m"]
    assert list(table.columns) == ["base", "slow", "slow change %"]
    assert table.attrs["matched_on"] == ["workload.m"]
    assert table.attrs["points"] == {"base": 2, "slow": 3}
    frames = {name: analysis.load_sweep(path).set_index("workload.m")["metrics.latency_ps"]
              for name, path in (("base", base), ("slow", slow))}
    for m in (64, 128):
        row = table.loc[("latency_ps", m)]
        assert row["base"] == frames["base"][m] and row["slow"] == frames["slow"][m]
        assert row["slow change %"] == pytest.approx(
            100 * (frames["slow"][m] / frames["base"][m] - 1))
        assert row["slow change %"] > 0  # half the NoC bandwidth is slower
    # a point only the second ran has no value in the first and no change
    row = table.loc[("latency_ps", 256)]
    assert math.isnan(row["base"]) and math.isnan(row["slow change %"])
    # frames from load_sweep work as directories do, and names name the columns
    again = analysis.compare_sweeps(analysis.load_sweep(base), slow, metrics=["latency_ps"],
                                    names=["a", "b"])
    pd.testing.assert_series_equal(again["b change %"], table["slow change %"],
                                   check_names=False)


def test_the_default_metrics_are_the_headline_ones_the_sweeps_have(sweeps):
    base, slow, _ = sweeps
    table = analysis.compare_sweeps(base, slow)
    metrics = list(dict.fromkeys(table.index.get_level_values("metric")))
    assert metrics[0] == "latency_s" and "energy.energy_j" in metrics
    assert not any(m.startswith("metrics.") for m in metrics)


def test_a_parameter_only_one_sweep_varies_is_named(sweeps):
    base, _, tiles = sweeps
    with pytest.raises(analysis.AnalysisError,
                       match=r"sweep tiles: points repeat when matched on workload.m: it "
                             r"also varies workload.tile_n, which the others do not"):
        analysis.compare_sweeps(base, tiles)
    with pytest.raises(analysis.AnalysisError, match="metric 'latncy_ps': no sweep has it; "
                                                     "did you mean 'latency_ps'"):
        analysis.compare_sweeps(base, base, metrics=["latncy_ps"])
    with pytest.raises(analysis.AnalysisError, match="at least two sweeps, got 1"):
        analysis.compare_sweeps(base)


def test_compare_command_takes_sweeps_prints_per_point_and_writes_csv(sweeps, tmp_path,
                                                                      capsys):
    base, slow, _ = sweeps
    code, out, _ = cli(["compare", base, slow, "-m", "latency_ps", "--csv",
                        tmp_path / "c.csv"], capsys)
    assert code == 0
    assert "points matched on: workload.m (points that ran: base 2, slow 3)" in out
    assert "latency_ps" in out and "slow vs base" in out and "%" in out
    written = pd.read_csv(tmp_path / "c.csv")
    assert list(written.columns) == ["metric", "workload.m", "base", "slow", "slow change %"]
    assert len(written) == 3
    # a sweep beside a run directory is refused, naming both
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text("{}")
    code, _, err = cli(["compare", base, run], capsys)
    assert code != 0 and "is a sweep directory and" in err and "run directories only or " \
        "sweep directories only" in err


def test_a_capacity_sweep_defaults_to_its_answer_and_no_shared_point_is_said(sweeps, tmp_path,
                                                                            capsys):
    from npusim.analysis.compare import choose_metrics

    capacity = ["capacity.attainment", "capacity.best.tbt_ms_mean", "capacity.requests_per_s",
                "capacity.status"]
    assert choose_metrics(capacity, None, "sweep") == [
        "capacity.requests_per_s", "capacity.status", "capacity.best.tbt_ms_mean"]
    with pytest.raises(analysis.AnalysisError, match="none of the headline metrics is in "
                                                     "these sweeps; name some"):
        choose_metrics(["odd.metric"], None, "sweep")
    base, slow, _ = sweeps
    other = _sweep(tmp_path, "other", {"workload.m": [512]})
    code, out, _ = cli(["compare", base, other, "-m", "latency_ps"], capsys)
    assert code == 0 and "no point is in more than one sweep" in " ".join(out.split())
    code, _, err = cli(["compare", base, tmp_path / "typo"], capsys)
    assert code != 0 and "typo: no such directory; expected a sweep directory" in err
    with pytest.raises(analysis.AnalysisError, match=r"1 given for 2 sweeps; expected one "
                                                     r"per sweep"):
        analysis.compare_sweeps(base, slow, names=["a"])


def test_a_sweep_where_no_point_ran_is_refused_with_its_counts(sweeps, tmp_path, capsys):
    # it looked like two sweeps sharing no point (exit 0, a table of dashes)
    base, _, _ = sweeps
    body = {"base": QUICKSTART, "set": {"run.mode": "analytic"},
            "axes": {"workload.m": [64, 128]},
            "constraints": [{"require": "${workload.m} > 100000"}]}
    run_sweep(spec_from_dict(body, source="none.yaml"), tmp_path / "none", executor="serial")
    with pytest.raises(analysis.AnalysisError,
                       match=r"sweep .*none has no point that ran \(2 skipped\)"):
        analysis.compare_sweeps(base, tmp_path / "none")
    code, _, err = cli(["compare", base, tmp_path / "none"], capsys)
    assert code != 0 and "has no point that ran (2 skipped)" in err


def test_parameter_values_that_round_alike_are_shown_raw(tmp_path, capsys):
    # 16 GB/s and 16.001 GB/s were two rows both labelled "16 GB/s"
    axes = {"hw.noc.link_bandwidth_bps": ["16GB/s", "16.001GB/s"]}
    one, two = _sweep(tmp_path, "one", axes), _sweep(tmp_path, "two", axes, **{"workload.m": 128})
    code, out, _ = cli(["compare", one, two, "-m", "latency_ps"], capsys)
    assert code == 0 and "16000000000" in out and "16001000000" in out
    assert "16 GB/s" not in out
    axes = {"hw.noc.link_bandwidth_bps": ["16GB/s", "32GB/s"]}
    code, out, _ = cli(["compare", _sweep(tmp_path, "three", axes),
                        _sweep(tmp_path, "four", axes, **{"workload.m": 128}),
                        "-m", "latency_ps"], capsys)
    assert "16 GB/s" in out and "32 GB/s" in out
