"""The trace: section of a serving scenario (TraceSpec): files, generators, priority
classes, the NpuSim presets and their shipped files."""

import math
import re
from pathlib import Path

import pytest

from npusim.config.loader import validate
from npusim.core.errors import ConfigError, TraceError
from npusim.workload.trace_generators import FixedLength, generate_trace
from npusim.workload.trace_presets import PRESET_FILES, decode_dominated, prefill_dominated, ratio
from npusim.workload.trace_spec import TraceSpec
from npusim.workload.traces import read_trace

pytestmark = pytest.mark.unit

REPO = Path(__file__).parents[2]


def test_presets_shape():
    prefill, decode = prefill_dominated(), decode_dominated()
    assert len(prefill) == len(decode) == 64
    assert prefill.total_prompt_tokens > 5 * prefill.total_output_tokens
    assert decode.total_output_tokens > 5 * decode.total_prompt_tokens
    offline = ratio(1000, 100, 8, rate_per_s=None)
    assert {(r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in offline} == {(0, 1000, 100)}


@pytest.mark.parametrize("name", sorted(PRESET_FILES))
def test_shipped_preset_files_match_generators(name):
    """The files in traces/ are exactly what the preset functions produce (not stale)."""
    assert read_trace(REPO / "traces" / name) == PRESET_FILES[name]()


def test_tracespec_generator_and_file(tmp_path):
    spec = TraceSpec.model_validate({
        "arrival": {"kind": "poisson", "rate_per_s": 2.0},
        "prompt": {"kind": "uniform", "low": 100, "high": 1000},
        "output": {"kind": "fixed", "tokens": 64}, "num_requests": 300, "seed": 0})
    trace = spec.build()
    assert len(trace) == 300 and trace == spec.build()
    assert trace == generate_trace(300, spec.arrival, spec.prompt, spec.output, seed=0)
    assert spec.model_copy(update={"seed": None}).build(default_seed=5) != trace
    trace.write_csv(tmp_path / "t.csv")
    from_file = TraceSpec(file="t.csv", limit=10, rate_scale=2.0).build(base_dir=tmp_path)
    assert from_file == trace.head(10).rescale_rate(2.0)
    shipped = TraceSpec(file="traces/ratio_1_1_32.csv").build()  # found via the checkout
    assert len(shipped) == 32


@pytest.mark.parametrize("data, path, fragment", [
    ({"file": "x.csv", "num_requests": 3}, "", "not both"),
    # one generator field added to a file trace: said before the generator's own
    # problems ("arrival: missing 'kind:' key" hid it)
    ({"file": "x.csv", "arrival": {"rate_per_s": -1}}, "",
     "not both (file is set and so is arrival); to generate requests instead, replace"),
    ({"arrival": {"kind": "poisson", "rate_per_s": 1}}, "", "missing prompt, output, num_requests"),
    ({"arrival": {"kind": "poisson", "rate_per_s": -1}, "prompt": 1, "output": 1, "num_requests": 1},
     "arrival.rate_per_s", "greater than 0"),
    ({"arrival": {"kind": "burst"}, "prompt": {"kind": "fixed", "tokens": 1},
      "output": {"kind": "fixed", "tokens": 1}, "num_requests": 1}, "arrival", "unknown kind 'burst'"),
    ({"arrival": {"kind": "fixed", "interval_s": 1}, "prompt": {"kind": "uniform", "low": 5, "high": 2},
      "output": {"kind": "fixed", "tokens": 1}, "num_requests": 1}, "prompt", "high (2) must be >= low (5)"),
    ({"file": "x.csv", "rate_scle": 2}, "rate_scle", "did you mean 'rate_scale'"),
    # a gap under half a picosecond rounded to 0: every request at t = 0, silently
    ({"arrival": {"kind": "fixed", "interval_s": 1e-13}, "prompt": 1, "output": 1,
      "num_requests": 2}, "arrival.interval_s", "1e-13 makes the gap between requests 1e-13 s, "
                                                "below the simulator's 1 ps time step"),
    ({"arrival": {"kind": "fixed", "rate_per_s": 3e12}, "prompt": 1, "output": 1,
      "num_requests": 2}, "arrival.rate_per_s", "expected a gap of at least 1 ps"),
    # (0.67 ps rounded to 1 ps: half the rate asked for)
    ({"arrival": {"kind": "fixed", "rate_per_s": 1.5e12}, "prompt": 1, "output": 1,
      "num_requests": 2}, "arrival.rate_per_s", "rate_per_s up to 1e12"),
])
def test_tracespec_errors_are_located(data, path, fragment):
    with pytest.raises(ConfigError) as info:
        validate(TraceSpec, data, "scenario.yaml")
    problems = info.value.problems
    assert any(p == path and fragment in m for p, m in problems), problems


def test_tracespec_missing_file():
    with pytest.raises(TraceError, match="nope.csv: trace file not found"):
        TraceSpec(file="nope.csv").build()


def test_tracespec_file_errors_name_the_field_and_a_directory(tmp_path):
    with pytest.raises(TraceError, match=r"^workload.trace.file: nope.csv: trace file not found"):
        TraceSpec(file="nope.csv").build()
    with pytest.raises(TraceError, match=r"is a directory; expected a trace file"):
        TraceSpec(file=str(tmp_path)).build()
    with pytest.raises(TraceError, match=r"/dev/null is not a regular file; expected a trace"):
        TraceSpec(file="/dev/null").build()
    with pytest.raises(TraceError, match=r"^workload.trace.file: got an empty path ''"):
        TraceSpec(file="").build()  # not the current directory


def test_every_tracespec_field_described():
    from npusim.workload import trace_generators as g

    for model in (TraceSpec, g.PoissonArrival, g.GammaArrival, g.FixedArrival, g.FixedLength,
                  g.UniformLength, g.ZipfLength, g.NormalLength, g.EmpiricalLength):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_tracespec_integer_length_shorthand():
    spec = TraceSpec.model_validate({"arrival": {"kind": "fixed", "interval_s": 0.5},
                                     "prompt": 100, "output": 1000, "num_requests": 4})
    assert spec.prompt == FixedLength(tokens=100) and spec.output == FixedLength(tokens=1000)
    assert [(r.prompt_tokens, r.output_tokens) for r in spec.build()] == [(100, 1000)] * 4
    with pytest.raises(ConfigError, match="greater than or equal to 1"):
        validate(TraceSpec, {"arrival": {"kind": "fixed", "interval_s": 1}, "prompt": 0,
                             "output": 1, "num_requests": 1}, "s.yaml")




GENERATOR = {"arrival": {"kind": "poisson", "rate_per_s": 5.0}, "prompt": {"kind": "uniform",
             "low": 10, "high": 500}, "output": 20, "num_requests": 2000, "seed": 3}


def test_generated_priority_classes_keep_arrivals_and_lengths_and_follow_the_weights():
    plain = TraceSpec.model_validate(GENERATOR).build()
    ranked = TraceSpec.model_validate({**GENERATOR, "priorities": {0: 1, 1: 4}}).build()
    key = [(r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in plain]
    assert [(r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in ranked] == key
    assert {r.priority for r in plain} == {0}
    urgent = sum(r.priority == 0 for r in ranked) / len(ranked)
    assert math.isclose(urgent, 0.2, abs_tol=0.03) and {r.priority for r in ranked} == {0, 1}
    again = TraceSpec.model_validate({**GENERATOR, "priorities": {1: 4, 0: 1}}).build()
    assert again == ranked  # the same classes whatever the order they are written in
    assert "priorities={0: 1, 1: 4}" in ranked.source
    direct = generate_trace(10, {"kind": "fixed", "interval_s": 1}, 5, 5, priorities={7: 1})
    assert {r.priority for r in direct} == {7}


@pytest.mark.parametrize("priorities, fragment", [
    ({}, "expected at least one priority: weight pair"),
    ({0: 0}, "priority 0: weight 0; expected a finite number > 0"),
    ({0: float("nan")}, "priority 0: weight nan"),
    ({2**40: 1}, "is out of range; expected a 32-bit integer"),
    ({"urgent": 1}, "priorities.urgent: Input should be a valid integer"),
    ({0: True, 1: 4}, "priority 0: weight True; expected an integer priority and a number"),
    ({True: 1, 0: 2}, "priority True: weight 1"),
])
def test_bad_priority_classes_are_located(priorities, fragment):
    with pytest.raises(ConfigError) as info:
        validate(TraceSpec, {**GENERATOR, "priorities": priorities}, "scenario.yaml")
    assert fragment in str(info.value)


def test_priorities_belong_to_a_generator_not_a_file():
    with pytest.raises(ConfigError, match="file is set and so is priorities"):
        validate(TraceSpec, {"file": "traces/ratio_1_1_32.csv", "priorities": {0: 1}},
                 "scenario.yaml")


def test_huge_weights_are_normalised_not_overflowed():
    def build(priorities):
        return TraceSpec.model_validate({**GENERATOR, "num_requests": 200,
                                         "priorities": priorities}).build()
    trace = build({0: 1e308, 1: 1e308})
    assert {r.priority for r in trace} == {0, 1}
    # Weights are relative: 1e308 each (whose sum overflows) draws exactly the classes
    # that 1 each does, and 1.5e308 : 0.5e308 those of 3 : 1 (about 3/4 urgent).
    assert trace == build({0: 1, 1: 1})
    skewed = build({0: 1.5e308, 1: 0.5e308})
    assert skewed == build({0: 3, 1: 1})
    assert math.isclose(sum(r.priority == 0 for r in skewed) / len(skewed), 0.75, abs_tol=0.1)


@pytest.mark.parametrize("priorities, fragment", [
    ({0: -1}, "priorities: priority 0: weight -1; expected a finite number > 0"),
    ({0.5: 1}, "priorities: priority 0.5: expected an integer"),
    ({}, "priorities: expected at least one priority"),
    ({0: 0.0}, "priorities: priority 0: weight 0; expected"),
    ([0, 1], "priorities: expected a mapping priority: weight"),
])
def test_generate_trace_checks_its_priorities(priorities, fragment):
    with pytest.raises(TraceError, match=re.escape(fragment)):
        generate_trace(5, {"kind": "fixed", "interval_s": 1}, 5, 5, priorities=priorities,
                       where="trace.")
