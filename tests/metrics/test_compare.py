"""Comparing runs (``npusim compare``, ``analysis.compare_runs`` / ``config_diff``): the
settings that differ, the metrics' change, and the errors for what is not a run."""

from __future__ import annotations

import math

import pytest

from npusim import analysis
from npusim.analysis import AnalysisError
from npusim.analysis.compare import flatten
from npusim.api import simulate
from npusim.config.presets import REPO_ROOT
from npusim.core.errors import OutputError
from tests.sweep.test_cli_analysis import cli

QUICKSTART = REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The quickstart GEMM written twice, the second with less SRAM and more rows."""
    root = tmp_path_factory.mktemp("compare")
    base = simulate(QUICKSTART, mode="analytic")
    small = simulate(QUICKSTART, mode="analytic",
                     overrides=["hw.core.sram.capacity_bytes=4MiB", "workload.m=512"])
    base.write(root / "base")
    small.write(root / "small")
    return root, base, small


@pytest.mark.unit
def test_flatten_names_leaves_by_the_configuration_errors_path_style():
    tree = {"hw": {"cores": [{"sram_bytes": 1}, {"sram_bytes": 2}], "dims": [4, 4]},
            "empty": {}, "x": None}
    assert flatten(tree) == {"hw.cores[0].sram_bytes": 1, "hw.cores[1].sram_bytes": 2,
                             "hw.dims": [4, 4], "empty": {}, "x": None}


@pytest.mark.component
def test_config_diff_lists_exactly_the_settings_that_differ(runs):
    root, base, small = runs
    diff = analysis.config_diff(root / "base", root / "small")
    assert list(diff.columns) == ["base", "small"]
    assert list(diff.index) == ["hw.core.sram.capacity_bytes", "workload.m"]
    assert diff.loc["workload.m"].tolist() == [base.config["workload"]["m"], 512]
    # the same run against itself: nothing differs; Results are named run1, run2
    same = analysis.config_diff(base, base)
    assert same.empty and list(same.columns) == ["run1", "run2"]


@pytest.mark.component
def test_compare_runs_puts_the_metrics_side_by_side_with_their_change(runs):
    root, base, small = runs
    frame = analysis.compare_runs(root / "base", root / "small")
    assert list(frame.columns) == ["base", "small", "small change %"]
    assert frame.index[0] == "latency_s"  # the headline metrics, in their order
    latency = frame.loc["latency_s"]
    assert latency["base"] == pytest.approx(base.metrics["latency_s"])
    expected = 100 * (small.metrics["latency_s"] / base.metrics["latency_s"] - 1)
    assert latency["small change %"] == pytest.approx(expected)
    assert expected != 0  # the second run really is different
    # globs pick metrics by their metrics.json path; a Result and a directory mix
    energy = analysis.compare_runs(base, root / "small", metrics=["energy.*_j"],
                                   names=["a", "b"])
    assert all(path.startswith("energy.") and path.endswith("_j") for path in energy.index)
    assert "energy.energy_j" in energy.index and list(energy.columns) == ["a", "b", "b change %"]


@pytest.mark.unit
def test_a_change_from_zero_or_of_text_is_not_a_number():
    from npusim.analysis.compare import change_percent

    assert change_percent(0, 0) == 0.0 and math.isnan(change_percent(0, 5))
    assert math.isnan(change_percent("ring", "mesh2d")) and math.isnan(change_percent(None, 3))
    assert change_percent(-2, -1) == pytest.approx(50.0)  # relative to the magnitude


@pytest.mark.component
def test_bad_comparisons_are_named(runs, tmp_path):
    root, base, _ = runs
    with pytest.raises(AnalysisError, match="at least two runs, got 1"):
        analysis.compare_runs(base)
    with pytest.raises(AnalysisError, match=r"metric 'latency_z': no run has it; did you "
                                            r"mean 'latency_s'"):
        analysis.compare_runs(base, base, metrics="latency_z")
    with pytest.raises(AnalysisError, match=r"names \(--name\): 1 given for 2 runs"):
        analysis.compare_runs(base, base, names=["a"])
    with pytest.raises(OutputError, match="no such directory; expected a run directory"):
        analysis.config_diff(base, tmp_path / "nope")
    with pytest.raises(OutputError, match="is a file, not a directory"):
        analysis.config_diff(base, root / "base" / "metrics.json")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "metrics.json").write_text("{}")
    with pytest.raises(OutputError, match="no config.resolved.yaml; expected a run directory"):
        analysis.config_diff(base, tmp_path / "half")
    with pytest.raises(AnalysisError, match="expected a Result or a run directory"):
        analysis.compare_runs(base, 3)


@pytest.mark.component
def test_compare_command_prints_both_tables_and_writes_the_csv(runs, tmp_path, capsys,
                                                                monkeypatch):
    import pandas as pd

    monkeypatch.setenv("COLUMNS", "200")  # headers on one line each
    root, _, _ = runs
    target = tmp_path / "new" / "cmp.csv"
    code, out, err = cli(["compare", root / "base", root / "small", "--csv", target], capsys)
    assert code == 0, err
    assert "settings that differ" in out and "hw.core.sram.capacity_bytes" in out
    assert "small vs base" in out and f"wrote {target}" in out
    written = pd.read_csv(target, index_col="metric")
    assert list(written.columns) == ["base", "small", "small change %"]
    # a user error: one message, exit 2, and the CSV already written is left as it was
    before = target.read_bytes()
    code, _, err = cli(["compare", root / "base", root / "small", "-m", "nope*",
                        "--csv", target], capsys)
    assert code == 2 and "error: metric 'nope*': no run has it" in err
    assert "Traceback" not in err and target.read_bytes() == before
    code, out, _ = cli(["compare", root / "base", root / "base"], capsys)
    assert code == 0 and "the resolved configurations are the same" in out
    assert "base (1)" in out and "base (2)" in out  # the same directory twice


@pytest.mark.unit
def test_values_print_in_readable_units():
    from npusim.cli_compare import _percent, _value

    assert _value(33932656476160, "bytes_by_level.hbm") == "30.9 TiB"
    assert _value(35811.83, "e2e_ms_mean") == "35,811.8"
    assert _value(47.75, "ttft_ms_mean") == "47.75" and _value(0.0050371) == "0.005037"
    assert _value(32.0, "requests_finished") == "32" and _value(float("nan")) == "-"
    assert _value("ring") == "ring" and _value(True) == "True"
    assert _percent(0.0) == "0%" and _percent(1e-5) == "+0.00%" and _percent(-4.37) == "-4.37%"
    assert _percent(float("nan")) == ""


def test_settings_print_in_the_unit_their_name_carries_unless_that_hides_a_difference():
    import pandas as pd

    from npusim.cli_compare import _setting, _settings_table

    assert _setting("hw.core.sram.capacity_bytes", 2**25) == "32 MiB"
    assert _setting("hw.noc.link_bandwidth_bps", 16 * 10**9) == "16 GB/s"
    assert _setting("hw.core.systolic.freq_hz", 5 * 10**8) == "500 MHz"
    assert _setting("hw.hbm.trefi_ps", 3_900_000) == "3.9 us"
    assert _setting("hw.noc.width", 8) == "8" and _setting("x_bytes", True) == "True"
    settings = pd.DataFrame({"a": [16 * 10**9, 2**26], "b": [16 * 10**9 + 1, 2**25]},
                            index=["hw.noc.link_bandwidth_bps", "hw.core.sram.capacity_bytes"],
                            dtype=object)
    rows = [list(column.cells) for column in _settings_table(settings).columns]
    assert rows[1] == ["16000000000", "64 MiB"] and rows[2] == ["16000000001", "32 MiB"]


@pytest.mark.component
def test_settings_read_as_yaml_and_one_directory_is_one_run_however_spelt(runs, capsys,
                                                                         monkeypatch):
    from npusim.analysis.compare import _text

    root, _, _ = runs
    # a null among numbers printed as nan, a boolean as True
    assert [_text(v) for v in (None, True, False, 3, "x", [1])] == ["null", "true", "false",
                                                                    3, "x", "[1]"]
    monkeypatch.chdir(root)
    assert list(analysis.config_diff("base", str(root / "base")).columns) == ["base (1)",
                                                                              "base (2)"]
    served = simulate(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml",
                      mode="analytic", overrides=["workload.trace.limit=2"])
    served.write(root / "served")
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = cli(["compare", root / "base", root / "served"], capsys)
    assert code == 0, err
    assert "workload.trace.hash_block_tokens" in out  # a path is never cut short
    assert "nan" not in out and "None" not in out and "null" in out
    assert "workloads are of different kinds (gemm, serving)" in out
    code, _, err = cli(["compare", "", root / "base"], capsys)
    assert code == 2 and "got an empty path ''" in err

