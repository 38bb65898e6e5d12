"""Sweep specs: expansion (grid, zip, random, derived, constraints) and located errors."""

from __future__ import annotations

import textwrap

import pytest

from npusim.config.presets import REPO_ROOT
from npusim.core.errors import ConfigError
from npusim.sweep import expr
from npusim.sweep.spec import config_hash, format_override, load_spec, spec_from_dict

pytestmark = pytest.mark.unit
QUICKSTART = str(REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml")


def spec(**body):
    return spec_from_dict({"base": QUICKSTART, "set": {"run.mode": "analytic"}, **body},
                          source="test.yaml")


def test_grid_is_a_product_with_the_last_axis_fastest():
    points = spec(axes=[{"grid": {"workload.m": [64, 128], "workload.tile_n": [128, 256, 512]}}]).points()
    assert [(p.params["workload.m"], p.params["workload.tile_n"]) for p in points] == [
        (64, 128), (64, 256), (64, 512), (128, 128), (128, 256), (128, 512)]
    assert [p.index for p in points] == list(range(6))
    assert points[4].config["workload"]["m"] == 128 and points[4].config["workload"]["tile_n"] == 256
    assert points[0].config["run"]["mode"] == "analytic"
    assert len({p.key for p in points}) == len({p.config_hash for p in points}) == 6


def test_zip_and_derived_keep_a_square_array():
    points = spec(axes=[{"zip": {"hw.core.systolic.rows": [32, 64, 128],
                                 "hw.core.sram.capacity_bytes": ["16MiB", "32MiB", "64MiB"]}}],
                  derived={"hw.core.systolic.cols": "${hw.core.systolic.rows}",
                           "workload.tile_n": "${hw.core.systolic.rows} * 2"}).points()
    assert len(points) == 3
    for point, rows, mib in zip(points, (32, 64, 128), (16, 32, 64)):
        systolic = point.config["hw"]["core"]["systolic"]
        assert systolic["rows"] == systolic["cols"] == rows
        assert point.config["hw"]["core"]["sram"]["capacity_bytes"] == mib << 20
        assert point.config["workload"]["tile_n"] == 2 * rows
        assert point.params["hw.core.systolic.cols"] == rows  # derived fields are columns


def test_derived_text_template_and_base_values():
    points = spec(axes={"workload.m": [64]},
                  derived={"hw.core.sram.capacity_bytes": "${workload.m}MiB",
                           "workload.tile_n": "${workload.k} // 10"}).points()
    assert points[0].config["hw"]["core"]["sram"]["capacity_bytes"] == 64 << 20
    assert points[0].config["workload"]["tile_n"] == 256  # k = 2560 from the base scenario


def test_random_axis_is_seeded():
    body = {"random": {"seed": 7, "samples": 5,
                       "params": {"workload.m": {"randint": [16, 512]},
                                  "workload.tile_n": [128, 256],
                                  "workload.k": {"loguniform": [256, 4096], "integer": True}}}}
    first = [p.params for p in spec(axes=[body]).points()]
    again = [p.params for p in spec(axes=[body]).points()]
    other = [p.params for p in spec(axes=[{"random": {**body["random"], "seed": 8}}]).points()]
    assert first == again and first != other and len(first) == 5
    assert all(16 <= p["workload.m"] <= 512 and 256 <= p["workload.k"] <= 4096 for p in first)
    assert all(isinstance(p["workload.k"], int) for p in first)


def test_constraints_skip_points_with_their_reason():
    points = spec(axes={"workload.m": [64, 96, 128]},
                  constraints=[{"require": "${workload.m} % 64 == 0", "reason": "m not a multiple of 64"},
                               "size(hw.core.sram.capacity_bytes) >= size('32MiB')"]).points()
    assert [p.skip_reason for p in points] == [None, "m not a multiple of 64", None]
    assert points[1].config is None and points[1].config_hash  # still identifiable


def test_invalid_points_error_or_skip():
    body = {"axes": {"hw.core.sram.capacity_bytes": ["32MiB", "12XB"]}}
    with pytest.raises(ConfigError) as info:
        spec(**body).points()
    text = str(info.value)
    assert "test.yaml" in text and "hw.core.sram.capacity_bytes" in text and "12XB" in text
    points = spec(**body, on_invalid="skip").points()
    assert points[0].skip_reason is None
    assert "invalid config" in points[1].skip_reason and "12XB" in points[1].skip_reason


def test_spec_file_errors_name_file_field_and_value(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(f"""\
        base: {QUICKSTART}
        axis: []
        axes:
          - grid: {{hw.core.systolic.rowz: [32], workload.m: 5}}
          - zip: {{workload.m: [1, 2], workload.k: [1]}}
          - random: {{samples: 0, params: {{workload.m: [1]}}}}
        constraints: ["__import__('os')"]
        """))
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    problems = dict(info.value.problems)
    assert info.value.source == str(path)
    assert "did you mean 'axes'" in problems["axis"]
    assert "got 5" in problems["axes[0].grid.workload.m"]
    assert "equal length" in problems["axes[1].zip"]
    assert "got 0" in problems["axes[2].random.samples"]
    assert "only these functions" in problems["constraints[0].require"]


def test_unknown_paths_are_caught_before_running():
    with pytest.raises(ConfigError) as info:
        spec(axes={"hw.core.systolic.rowz": [32]}, derived={"workload.n": "${workload.q} + 1"})
    problems = dict(info.value.problems)
    assert "did you mean 'rows'" in problems["axes[0].grid.hw.core.systolic.rowz"]
    assert "workload.q" in problems["derived.workload.n: ${workload.q}"]


def test_missing_base_file():
    with pytest.raises(ConfigError, match="not found"):
        spec_from_dict({"base": "no/such/scenario.yaml"}, source="s.yaml")


@pytest.mark.parametrize("value", [64, 1.0e-05, "32MiB", "64", True, None, [0, 1, 9, 8], "a: b"])
def test_override_round_trips(value):
    from npusim.config.loader import parse_override

    assert parse_override(format_override("a.b", value)) == (["a", "b"], value)


def test_expressions_are_safe_and_located():
    lookup = {"a.b": 6, "c": 4}.__getitem__
    assert expr.evaluate("${a.b} * c + max(1, 2) if a.b > 1 else 0", lookup) == 26
    assert expr.render("${a.b}", lookup) == 6 and expr.render("${c}MiB", lookup) == "4MiB"
    for bad in ("open('x')", "().__class__", "[x for x in c]", "lambda: 1"):
        with pytest.raises(expr.ExprError):
            expr.evaluate(bad, lookup)
    with pytest.raises(expr.ExprError, match="ZeroDivisionError"):
        expr.evaluate("a.b / 0", lookup)


def test_config_hash_is_canonical():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "workloads" / "sweeps").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_shipped_specs_expand(path):
    points = load_spec(path).points()
    assert points and len({p.key for p in points}) == len(points)
    assert any(p.skip_reason is None for p in points)
