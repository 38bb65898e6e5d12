"""A utilisation timeline of many units: one row per kind of unit (the mean of every
``core*.sa``), by choice or past ``AUTO_GROUP_UNITS`` units."""

from __future__ import annotations

import pandas as pd
import pytest

from npusim import analysis
from npusim.analysis.frames import AUTO_GROUP_UNITS, AnalysisError, unit_kind

pytestmark = pytest.mark.unit


def ops_of(cores: int) -> pd.DataFrame:
    """Core ``i``'s array busy for the first half when ``i`` is even, its HBM the whole
    time on core 0 only, and its NoC port (``coreN``) idle but present on core 1."""
    rows = []
    for core in range(cores):
        if core % 2 == 0:
            rows.append((f"core{core}.sa", 0, 50))
        rows.append((f"core{core}.hbm", 0, 100 if core == 0 else 1))
    rows.append(("core1", 99, 100))
    rows.append(("host", 0, 100))
    return pd.DataFrame(rows, columns=["unit", "start_ps", "end_ps"])


def test_unit_kind_is_the_glob_that_matches_the_unit():
    assert [unit_kind(u) for u in ("core12.sa", "core3", "host", "core7.hbm")] == \
        ["core*.sa", "core*", "host", "core*.hbm"]


def test_group_by_kind_averages_each_kind_over_its_units():
    frame, edges = analysis.utilisation_timeline(ops_of(4), bins=2, group="kind")
    assert edges == [0, 50, 100]
    # 2 of 4 arrays busy in the first bin, none in the second
    assert frame.loc["core*.sa (2)"].tolist() == [1.0, 0.0]  # only the arrays that worked
    assert frame.loc["core*.hbm (4)"].tolist() == pytest.approx([(1 + 3 / 50) / 4, 1 / 4])
    assert frame.loc["host"].tolist() == [1.0, 1.0]  # a unit of its own keeps its name
    # a kind of one unit (core 1's NoC port) keeps the unit's name
    assert list(frame.index) == ["core1", "core*.hbm (4)", "core*.sa (2)", "host"]  # by kind
    assert frame.attrs["units"] == 4 + 2 + 1 + 1


def test_many_units_group_by_default_unless_chosen_or_asked_for_one_row_each():
    cores = AUTO_GROUP_UNITS  # 2 units per core (3 on even cores): past the threshold
    frame, _ = analysis.utilisation_timeline(ops_of(cores), bins=2)
    assert frame.attrs.get("grouped") and len(frame) == 4
    each, _ = analysis.utilisation_timeline(ops_of(cores), bins=2, group="unit")
    assert len(each) == frame.attrs["units"] > AUTO_GROUP_UNITS
    chosen, _ = analysis.utilisation_timeline(ops_of(cores), bins=2, units="core*")
    assert not chosen.attrs.get("grouped") and len(chosen) > AUTO_GROUP_UNITS
    few, _ = analysis.utilisation_timeline(ops_of(4), bins=2)
    assert not few.attrs.get("grouped") and len(few) == 8
    figure = analysis.plot_utilisation_timeline(ops_of(cores), bins=2)
    assert "per kind of unit" in figure.axes[0].get_title()


def test_an_unknown_grouping_is_an_error():
    with pytest.raises(AnalysisError, match="group: expected one of unit, kind"):
        analysis.utilisation_timeline(ops_of(2), group="stage")


@pytest.mark.component
def test_plot_cli_groups_and_chooses_units(tmp_path, capsys):
    from npusim.cli import main

    run = tmp_path / "run"
    with pytest.raises(SystemExit) as code:
        main(["run", "workloads/scenarios/qwen3_4b_npu64.yaml", "--mode", "analytic",
              "--set", "workload.prompt_len=64", "--set", "workload.output_len=2",
              "--out", str(run)])
    assert code.value.code == 0
    for extra, rows in ((["--group", "kind"], "per kind of unit"),
                        (["--units", "*.sa", "--units", "core0.*"], "per-unit")):
        figure = tmp_path / f"{len(extra)}.png"
        with pytest.raises(SystemExit) as code:
            main(["plot", str(run), "--kind", "timeline", *extra, "--out", str(figure)])
        assert code.value.code == 0 and figure.is_file(), rows
    capsys.readouterr()
    for extra, message in ((["--kind", "timeline", "--group", "stage"], "--group: expected one of unit, kind"),
                           (["--kind", "cdf", "--units", "*.sa"], "--units applies to --kind timeline only"),
                           # options another kind takes were ignored (a --bins of -3 too)
                           (["--kind", "batches", "--bins", "-3"], "--bins: expected a number "
                                                                   "of time bins from 1 to"),
                           (["--kind", "timeline", "--bins", "50", "-x", "a"],
                            "--x applies to --kind line, heatmap or pareto only (got --kind "
                            "timeline)"),
                           (["--kind", "cdf", "--logx"], "--logx applies to --kind line only"),
                           (["--kind", "batches", "--bins", "50"], "--bins applies to --kind "
                                                                   "timeline only"),
                           (["--kind", "cdf", "--bins", "100"], "--bins applies to --kind "
                                                                "timeline only")):  # (the default)
        with pytest.raises(SystemExit) as code:
            main(["plot", str(run), *extra])
        assert code.value.code != 0 and message in capsys.readouterr().err
