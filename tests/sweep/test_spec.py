"""Sweep specs: expansion (grid, zip, random, derived, constraints) and located errors."""

from __future__ import annotations

import re
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


def test_integer_uniform_draws_every_integer_equally_often():
    # Rounding a continuous draw gave the two ends half the share of the inner values.
    import collections

    from npusim.sweep.axes import parse_axes

    problems = []
    axis = parse_axes([{"random": {"seed": 1, "samples": 8000, "params": {
        "workload.m": {"uniform": [0, 3], "integer": True},
        "workload.k": {"loguniform": [1, 8], "integer": True}}}}],
        lambda where, message: problems.append(message))[0]
    counts = collections.Counter(row["workload.m"] for row in axis.rows)
    assert not problems and sorted(counts) == [0, 1, 2, 3]
    assert min(counts.values()) > 0.9 * 2000 and max(counts.values()) < 1.1 * 2000
    assert {row["workload.k"] for row in axis.rows} == set(range(1, 9))
    with pytest.raises(ConfigError, match=r"no integer lies in \[0.2, 0.8\]"):
        spec(axes=[{"random": {"samples": 2, "params": {
            "workload.m": {"uniform": [0.2, 0.8], "integer": True}}}}])


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


def test_a_malformed_trace_file_is_a_spec_error_before_any_point_runs(tmp_path, monkeypatch):
    # every point used to run and fail on the same row (exit 1 after the whole sweep)
    import npusim.workload.trace_spec as trace_spec

    bad = tmp_path / "bad.csv"
    bad.write_text("id,arrival_ps,prompt_tokens,output_tokens\na,0,100,10\nb,5,-3,10\n")
    reads = []
    real = trace_spec.read_trace
    monkeypatch.setattr(trace_spec, "read_trace", lambda *a, **k: reads.append(a) or real(*a, **k))
    fusion = str(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml")
    body = {"base": fusion, "set": {"workload.trace.file": str(bad)},
            "axes": {"workload.scheduler.token_budget": [256, 512],
                     "workload.trace.rate_scale": [1.0, 2.0]}}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(body, source="test.yaml").points()
    assert len(info.value.problems) == 4 and len(reads) == 1  # read once, rate_scale aside
    path, message = info.value.problems[0]
    assert path == "point 0 (workload.scheduler.token_budget=256, workload.trace.rate_scale=1.0):" \
                   " workload.trace.file"
    assert message.startswith(f"{bad}:3: column 'prompt_tokens': got '-3'")
    skipped = spec_from_dict({**body, "on_invalid": "skip"}, source="test.yaml").points()
    assert all("invalid config: workload.trace.file" in p.skip_reason for p in skipped)


@pytest.mark.parametrize("scales", [[1e-9, 1.0], [1.0, 1e-9]])
def test_a_rate_scale_that_stretches_a_trace_file_too_far_is_that_points_error(scales):
    # the file was checked once for all rate scales: the first point's outcome held for
    # every point (a valid point refused, or a bad one let through to fail at run time)
    fusion = str(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml")
    body = {"base": fusion, "axes": {"workload.trace.rate_scale": scales}}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(body, source="test.yaml").points()
    (path, message), = info.value.problems
    bad = scales.index(1e-9)
    assert path == f"point {bad} (workload.trace.rate_scale=1e-09): workload.trace.rate_scale"
    assert "rate scale factor: got 1e-09; the last arrival" in message


def test_spec_file_errors_name_file_field_and_value(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(f"""\
        base: {QUICKSTART}
        axis: []
        axes:
          - grid: {{hw.core.systolic.rowz: [32], workload.m: 5}}
          - zip: {{workload.m: [1, 2], workload.k: [1]}}
          - random: {{samples: 0, params: {{workload.m: [1]}}}}
        constraints: ["__import__('os')", {{require: "${{workload.m}} > 1", reason: [1, 2]}}]
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
    # a reason is each skipped point's error text ([1, 2] was stored as "[1, 2]")
    assert problems["constraints[1].reason"] == ("expected text saying why a point is "
                                                 "skipped, got [1, 2]")


def test_unknown_paths_are_caught_before_running():
    with pytest.raises(ConfigError) as info:
        spec(axes={"hw.core.systolic.rowz": [32]}, derived={"workload.n": "${workload.q} + 1"})
    problems = dict(info.value.problems)
    assert "did you mean 'rows'" in problems["axes[0].grid.hw.core.systolic.rowz"]
    assert "workload.q" in problems["derived.workload.n: ${workload.q}"]


def test_a_field_of_a_section_the_base_leaves_null_can_be_swept():
    # pd.decode_core is null in the disaggregation scenario; `--set` creates it, and so
    # does a sweep point, so the spec asks the schema instead of the base's values.
    disagg = str(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_disagg.yaml")
    ok = spec_from_dict({"base": disagg, "axes": [
        {"grid": {"workload.pd.decode_core.systolic_size": [32, 64]}}]}, source="s.yaml")
    assert [p.params["workload.pd.decode_core.systolic_size"] for p in ok.points()] == [32, 64]
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": disagg, "axes": [
            {"grid": {"workload.pd.decode_core.systolic_sise": [32]}}]}, source="s.yaml")
    [(where, message)] = info.value.problems
    assert where == "axes[0].grid.workload.pd.decode_core.systolic_sise"
    assert "did you mean 'systolic_size'" in message


def test_missing_base_file():
    with pytest.raises(ConfigError, match="not found"):
        spec_from_dict({"base": "no/such/scenario.yaml"}, source="s.yaml")


def test_a_base_scenarios_relative_files_are_found_next_to_it(tmp_path, monkeypatch):
    # as `npusim run` finds them; the sweep read the base without its location, so a
    # trace or hardware file next to it was looked for in the working directory only
    study = tmp_path / "study"
    study.mkdir()
    (study / "chip.yaml").write_text("preset: npu/large_core_64\nname: mine\n")
    (study / "t.csv").write_text("arrival_ps,prompt_tokens,output_tokens\n0,4,4\n")
    (study / "s.yaml").write_text("name: s\nhw: {preset: chip.yaml}\n"
                                  "workload: {kind: serving, model: qwen3_1_7b, "
                                  "trace: {file: t.csv}}\n")
    monkeypatch.chdir(tmp_path)
    base = spec_from_dict({"base": "study/s.yaml", "axes": {"run.seed": [1]}},
                          source="sweep.yaml", root=tmp_path).base
    assert base["hw"]["preset"] == str(study / "chip.yaml")
    assert base["workload"]["trace"]["file"] == str(study / "t.csv")
    inline = spec_from_dict({"base": {**base, "hw": {"preset": "study/chip.yaml"}},
                             "axes": {"run.seed": [1]}}, source="sweep.yaml", root=tmp_path)
    assert inline.base["hw"]["preset"] == str(study / "chip.yaml")


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
    with pytest.raises(expr.ExprError, match=r"`a.b / 0` divides by zero"):
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


@pytest.mark.parametrize("bounds, kind, shown", [
    ([float("nan"), 10], "uniform", "[nan, 10]"),
    ([1, float("inf")], "uniform", "[1, inf]"),
    ([1, float("inf")], "loguniform", "[1, inf]"),
    ([float("-inf"), 5], "randint", "[-inf, 5]"),
])
def test_random_bounds_must_be_finite(bounds, kind, shown):
    # NaN passed the low <= high check and inf reached int(round(...)): ValueError and
    # OverflowError tracebacks while the spec was being read.
    with pytest.raises(ConfigError) as info:
        spec(axes=[{"random": {"samples": 2, "params": {"workload.m": {kind: bounds, "integer": True}}}}])
    problems = dict(info.value.problems)
    assert problems[f"axes[0].random.params.workload.m.{kind}"] == f"bounds must be finite, got {shown}"
    with pytest.raises(ConfigError, match="high - low must be finite"):  # the width overflows
        spec(axes=[{"random": {"samples": 2, "params": {"workload.m": {"uniform": [-1e308, 1e308]}}}}])


def test_sweep_size_is_limited():
    from npusim.sweep.axes import MAX_POINTS

    assert MAX_POINTS == 1_000_000  # documented in docs/sweeps.md
    with pytest.raises(ConfigError) as info:  # was a MemoryError after building 10^8 rows
        spec(axes=[{"random": {"samples": 100_000_000, "params": {"workload.m": [64]}}}])
    assert dict(info.value.problems)["axes[0].random.samples"] == \
        "at most 1,000,000 samples are allowed, got 100,000,000"
    with pytest.raises(ConfigError) as info:  # a grid is checked before its product is built
        spec(axes={"workload.m": list(range(1000)), "workload.k": list(range(1000)),
                   "workload.n": list(range(10))})
    assert "1,000 x 1,000 x 10 = 10,000,000 points" in dict(info.value.problems)["axes[0].grid"]
    with pytest.raises(ConfigError) as info:  # and so is the product of the blocks
        spec(axes=[{"grid": {"workload.m": list(range(1000))}},
                   {"random": {"samples": 1001, "params": {"workload.k": [64]}}}])
    assert "1,001,000 points; at most 1,000,000" in dict(info.value.problems)["axes"]


@pytest.mark.parametrize("text, expected", [
    ("-" * 1000 + "1", "more than 100 levels deep"),        # was RecursionError
    ("-" * 5000 + "1", "characters long; at most 2,000"),    # was RecursionError
    ("-" * 200_000 + "1", "characters long; at most 2,000"),  # was MemoryError
    ("not " * 100_000 + "True", "characters long; at most 2,000"),  # was MemoryError
])
def test_pathological_expressions_are_spec_errors(text, expected):
    for body in ({"constraints": [{"require": text}]}, {"derived": {"workload.k": "${workload.m}" + text}}):
        with pytest.raises(ConfigError) as info:
            spec(axes={"workload.m": [64]}, **body)
        (where, message), = info.value.problems
        assert where in ("constraints[0].require", "derived.workload.k") and expected in message
        assert len(message) < 300  # the expression is quoted cut short, not whole


def test_expressions_cannot_exhaust_the_machine():
    lookup = {"m": 64, "s": "32MiB"}.__getitem__
    for text, expected in (("2 ** 9 ** 9", "2 ** 387420489 is too large"),
                           ("m ** 10 ** 6", "64 ** 1000000 is too large"),
                           ("'ab' * 10 ** 9", "at most 100000"),
                           ("[0] * 10 ** 9", "at most 100000"),
                           ("'%0999999999d' % 1", "not arithmetic"),
                           ("s % 2", "not arithmetic"),
                           ("1\x00", "null bytes")):
        with pytest.raises(expr.ExprError, match=re.escape(expected)):
            expr.evaluate(text, lookup)
    # ordinary arithmetic is untouched
    assert expr.evaluate("2 ** 64 + m ** 2 + 2.0 ** -3 + len('ab' * 3) + 7 % 4", lookup) == \
        2 ** 64 + 4096 + 0.125 + 6 + 3
    assert expr.evaluate("-" * 98 + "m", lookup) == 64  # deep, but under the limit


def test_huge_power_in_a_constraint_is_a_spec_error():
    with pytest.raises(ConfigError) as info:  # hung forever computing 9 ** 387420489
        spec(axes={"workload.m": [64]}, constraints=["9 ** 9 ** 9 > 1"]).points()
    (where, message), = info.value.problems
    assert where.startswith("constraints[0].require (point 0") and "too large" in message


def test_set_errors_name_the_spec_field_not_the_base():
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": QUICKSTART, "set": {"run.mode": "fast", "workload.m": -5}},
                       source="s.yaml")
    assert info.value.source == "s.yaml"
    problems = dict(info.value.problems)
    assert "'fast'" in problems["set.run.mode"]  # was "base (.../quickstart.yaml): run.mode"
    assert "-5" in problems["set.workload.m"] and len(problems) == 2
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": QUICKSTART, "set": ["hw.cores[99].x=1"]}, source="s.yaml")
    (where, message), = info.value.problems
    assert where.startswith("set.hw.cores[99].x") and "no list item 99" in message
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": QUICKSTART, "set": {"hw..x": 1}}, source="s.yaml")
    assert "malformed config path 'hw..x'" in dict(info.value.problems)["set.hw..x"]
    # a problem the base has by itself is still the base's
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": {"name": "b", "hw": {"preset": "npu/large_core_64"}},
                        "set": {"run.mode": "fast"}}, source="s.yaml")
    keys = [p for p, _ in info.value.problems]
    # an inline base is the spec's own base: section (was "base (s.yaml (base)): workload")
    assert "set.run.mode" in keys and "base.workload" in keys
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"base": {"name": "b", "hw": {"preset": "npu/large_core_64"},
                                 "workload": {"kind": "gemm", "m": 0, "k": 8, "n": 8}},
                        "axes": {"run.seed": [1]}}, source="s.yaml")
    assert info.value.source == "s.yaml"
    assert [p for p, _ in info.value.problems] == ["base.workload.m"]


def test_a_sweep_name_is_a_plain_name_and_a_scenario_is_not_a_spec():
    with pytest.raises(ConfigError, match=r"name: expected a plain name"):
        spec_from_dict({"name": "../../escape", "base": QUICKSTART, "axes": {"workload.m": [64]}},
                       source="s.yaml")
    with pytest.raises(ConfigError, match="looks like a scenario"):
        spec_from_dict({"name": "q", "hw": {}, "workload": {}}, source="quickstart.yaml")
    # a list as the description was stored as its repr ("['a']"); a scenario refuses it
    with pytest.raises(ConfigError) as info:
        spec_from_dict({"description": ["a"], "base": QUICKSTART, "axes": {"workload.m": [64]}},
                       source="s.yaml")
    assert info.value.problems == [("description", "expected text, got ['a']")]


def test_a_list_written_as_a_malformed_string_is_a_field_error():
    # `workload.m: "[32, 64"` (a list in quotes, unclosed): one problem on its path.
    with pytest.raises(ConfigError) as info:
        spec(axes=[{"grid": {"workload.m": "[32, 64"}}, {"zip": {"workload.k": "[1, 2]]"}}])
    problems = dict(info.value.problems)
    assert "'[32, 64' is not a valid YAML list" in problems["axes[0].grid.workload.m"]
    assert "is not a valid YAML list" in problems["axes[1].zip.workload.k"]
    assert spec(axes={"workload.m": "[32, 64]"}).param_names == ["workload.m"]


def test_axes_written_as_a_yaml_tree_or_a_bare_list_item_say_how_to_write_them():
    # `axes: {workload: {m: [64, 128]}}` (nested, as a scenario is written) and
    # `axes: [{workload.m: [...]}]` (a list item without grid:) gave no hint.
    with pytest.raises(ConfigError) as info:
        spec(axes={"workload": {"m": [64, 128]}})
    assert info.value.problems == [(
        "axes[0].grid.workload", "expected a non-empty list of values, got the mapping "
        "{'m': [64, 128]}; an axis names its field by its dotted path: workload.m: [64, 128]")]
    with pytest.raises(ConfigError) as info:
        spec(axes=[{"workload.m": [64, 128]}])
    [(where, message)] = info.value.problems
    assert where == "axes[0]" and message.endswith(
        "; in a list of blocks, a grid is written '- grid: {PATH: [values]}'")


def test_a_path_is_swept_by_one_block_and_never_also_derived():
    # Two blocks over workload.m (or m swept and derived) would collapse points onto the
    # same configs, keeping only the last block's value.
    with pytest.raises(ConfigError) as info:
        spec(axes=[{"grid": {"workload.m": [1, 2]}}, {"grid": {"workload.m": [3, 4]}},
                   {"zip": {"workload.k": [64, 128]}}],
             derived={"workload.k": "${workload.m} * 2"})
    problems = dict(info.value.problems)
    assert "already swept by axes[0]" in problems["axes[1].grid.workload.m"]
    assert "is swept by axes[2]" in problems["derived.workload.k"]


def test_overlapping_paths_and_set_values_a_sweep_would_replace_are_errors():
    # hw.core.sram holds hw.core.sram.capacity_bytes: the later block's value replaced
    # the other's, so rows labelled 8MiB ran with 32 MiB.  A set: value of a swept path
    # was replaced by every point without a word (also what --set gave).
    with pytest.raises(ConfigError) as info:
        spec(axes=[{"grid": {"hw.core.sram.capacity_bytes": ["8MiB", "16MiB"]}},
                   {"grid": {"hw.core.sram": ["32MiB", "64MiB"]}}],
             set={"workload.m": 512, "hw.noc.link_latency_cycles": 2},
             derived={"workload.m": "64"})
    problems = dict(info.value.problems)
    assert "overlaps hw.core.sram.capacity_bytes swept by axes[0]" in \
        problems["axes[1].grid.hw.core.sram"]
    assert "would be silently replaced" in problems["set.workload.m"]
    assert "set.hw.noc.link_latency_cycles" not in problems
    with pytest.raises(ConfigError, match=r"\n  workload.m: the sweep also sets workload.m .*"
                                          r"\(from the override workload.m=512\)"):
        load_spec(REPO_ROOT / "workloads/sweeps/quickstart_grid.yaml", ["workload.m=512"])
    # a set: parent with a swept field inside it is fine: the field is applied after it
    assert spec(axes={"hw.core.sram.capacity_bytes": ["8MiB"]},
                set={"hw.core.sram": "16MiB"}).param_names == ["hw.core.sram.capacity_bytes"]


def test_cli_overrides_apply_to_every_point_after_the_specs_own_set():
    # npusim sweep SPEC --set ... --mode ...: appended to set:, so a later one wins.
    spec = load_spec(REPO_ROOT / "workloads/sweeps/quickstart_grid.yaml",
                     ["run.mode=tlm", "hw.noc.link_latency_cycles=2"])
    assert spec.set[-2:] == ["run.mode=tlm", "hw.noc.link_latency_cycles=2"]
    config = spec.points()[0].config
    assert config["run"]["mode"] == "tlm" and config["hw"]["noc"]["link_latency_cycles"] == 2
    plain = load_spec(REPO_ROOT / "workloads/sweeps/quickstart_grid.yaml")
    assert spec.points()[0].key != plain.points()[0].key  # not mistaken for stored results
    with pytest.raises(ConfigError, match=r"\n  run.mode: Input should be 'tlm' or 'analytic'.*"
                                          r"\(from the override run.mode=fast, which replaces "
                                          r"the spec's set: run.mode\)"):
        load_spec(REPO_ROOT / "workloads/sweeps/quickstart_grid.yaml", ["run.mode=fast"])


def test_a_point_key_follows_the_contents_of_the_files_it_names(tmp_path):
    # Resuming after editing the trace reused the old results (only the path was hashed).
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\nr0,0,10,2\nr1,5,10,2\n")
    body = {"base": str(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"),
            "set": {"workload.trace.file": str(trace)},
            "axes": {"workload.slo.ttft_ms": [45, 50]}}
    before = [p.key for p in spec_from_dict(body, "s.yaml").points()]
    assert before == [p.key for p in spec_from_dict(body, "s.yaml").points()]  # stable
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens\nr0,0,10,2\n")
    after = [p.key for p in spec_from_dict(body, "s.yaml").points()]
    assert set(before).isdisjoint(after)
    # a spec naming no file keeps the key it always had: config and params only
    plain = spec(axes={"workload.m": [64]}).points()[0]
    assert plain.key == config_hash({"config": plain.config_hash,
                                     "params": {"workload.m": 64}})[:32]
