"""Sweep inputs past the limits (integers beyond int64 or 10,000 bits, malformed scheduler
addresses, absurd worker counts, bounds and expressions of the wrong type): each is a
clear error, or stored and the sweep goes on, where it was a traceback or an aborted
sweep."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from npusim.cli import main
from npusim.config.presets import REPO_ROOT
from npusim.core.errors import ConfigError, NpusimError
from npusim.sweep import expr, load_results, run_sweep, runner, spec_from_dict
from npusim.sweep.store import ResultStore

pytestmark = pytest.mark.unit
QUICKSTART = str(REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml")
GRID = REPO_ROOT / "workloads" / "sweeps" / "quickstart_grid.yaml"


def spec(**body):
    return spec_from_dict({"base": QUICKSTART, "set": {"run.mode": "analytic"}, **body},
                          source="test.yaml")


def problems(**body) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        spec(**body).points()
    return dict(info.value.problems)


def random_axis(dist, **block):
    return {"axes": [{"random": {"seed": 1, "samples": 2, "params": {"workload.m": dist},
                                 **block}}]}


def cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    return info.value.code or 0, capsys.readouterr().err


# ---------------------------------------------------------------- 1: values beyond int64

@pytest.mark.component
def test_a_metric_beyond_int64_is_stored_and_the_sweep_goes_on(tmp_path):
    # m = 10^12 gives 4.98e19 FLOPs: pyarrow's OverflowError aborted the sweep before
    # m = 128 ran, and every rerun crashed at the same point.
    grid = spec(axes={"workload.m": [64, 1_000_000_000_000, 128]})
    summary = run_sweep(grid, tmp_path, executor="serial")
    assert (summary.ok, summary.failed) == (3, 0)
    frame = load_results(tmp_path)
    assert list(frame["workload.m"]) == [64, 1_000_000_000_000, 128]
    assert frame["metrics.flops"][1] == 49_817_088_000_000_000_000  # float64, exact here
    assert run_sweep(grid, tmp_path, executor="serial").skipped_done == 3


def test_the_store_keeps_integers_past_int64_and_past_float64(tmp_path):
    store = ResultStore(tmp_path)
    path = store.write_row({"key": "k", "point": 0, "status": "ok", "big": 2 ** 70 + 1,
                            "huge": 10 ** 400})
    row = pq.read_table(path).to_pylist()[0]
    assert row["big"] == float(2 ** 70 + 1)  # the nearest float64
    assert row["huge"] == str(10 ** 400)     # beyond float64: its exact decimal text


def test_random_integer_bounds_beyond_int64_are_a_spec_error():
    found = problems(**random_axis({"randint": [1, 10 ** 23]}))
    message = found["axes[0].random.params.workload.m.randint"]
    assert "64-bit integer" in message and "100000000000000000000000" in message
    found = problems(**random_axis({"uniform": [1, 1.0e23], "integer": True}))
    assert "64-bit integer" in found["axes[0].random.params.workload.m.uniform"]


def test_integer_on_a_choice_is_named_rather_than_ignored():
    # integer: true rounded uniform draws only; on a choice it did nothing, silently.
    found = problems(**random_axis({"choice": [1.5, 2.5], "integer": True}))
    assert "a choice draws the listed values" in found["axes[0].random.params.workload.m.integer"]


# ---------------------------------------------------------------- 2: integer size cap

def test_every_intermediate_integer_is_capped():
    # Each ** was under the cap but the product was not: Python's 4300-digit ValueError
    # escaped from format_override.
    text = "${workload.m} ** 1000 * ${workload.m} ** 1000 * ${workload.m} ** 1000"
    (where, message), = problems(axes={"workload.m": [64]},
                                 derived={"workload.k": text}).items()
    assert where == "derived.workload.k (point 0: workload.m=64)"
    assert message.startswith("`${workload.m} ** 1000 * ${workload.m} ** 1000` is too large")
    assert "at most 10,000 are allowed" in message
    with pytest.raises(expr.ExprError, match="is too large"):
        expr.evaluate("(m ** 900 + 1) * m ** 900", {"m": 2 ** 9}.__getitem__)
    assert expr.evaluate("m ** 500 * m ** 500", {"m": 2 ** 9}.__getitem__) == 2 ** 9000


# ---------------------------------------------------------------- 3: --scheduler

@pytest.mark.parametrize("address", ["garbage", "tcp://", "tcp://h:notaport", "tcp://[::1",
                                     "tcp://h:99999", ""])
def test_a_malformed_scheduler_address_is_one_error(address, tmp_path, capsys):
    code, err = cli(["sweep", GRID, "--out", tmp_path / "o", "--executor", "dask",
                     "--scheduler", address, "-q"], capsys)
    assert code == 2 and err.startswith("error: --scheduler: ") and "Traceback" not in err
    assert "tcp://HOST:PORT" in err and (repr(address) in err if address else "empty" in err)
    assert not (tmp_path / "o").exists()  # refused before anything ran


@pytest.mark.parametrize("mode", ["fast", ""])
def test_a_bad_sweep_mode_is_blamed_on_the_option(mode, tmp_path, capsys):
    # before: "GRID.yaml: invalid configuration ... set.run.mode", blaming the spec file
    code, err = cli(["sweep", GRID, "--out", tmp_path / "o", "--mode", mode, "-q"], capsys)
    assert code == 2 and err == f"error: --mode: got {mode!r}; expected 'tlm' or 'analytic'\n"
    assert not (tmp_path / "o").exists()


def test_an_empty_scheduler_is_not_ignored_by_other_executors(tmp_path, capsys):
    code, err = cli(["sweep", GRID, "--out", tmp_path / "o", "--scheduler", ""], capsys)
    assert code == 2 and "--scheduler needs --executor dask" in err


@pytest.mark.parametrize("address", ["tcp://10.0.0.5:8786", "127.0.0.1:8786",
                                     "tls://sched.example.org:8786", "tcp://[::1]:8786"])
def test_well_formed_scheduler_addresses_are_accepted(address):
    runner.check_scheduler(address)


# ---------------------------------------------------------------- 4: --workers

@pytest.fixture
def started(monkeypatch):
    """The worker counts the local executor is started with; it runs the points serially,
    so no test here can start a process per --workers (before the fix, 100,000 did)."""
    counts = []

    def recording(tasks, workers, scheduler):
        counts.append(workers)
        return runner._serial(tasks, workers, scheduler)

    monkeypatch.setitem(runner._RUNNERS, "local", recording)
    return counts


def test_workers_beyond_four_per_cpu_are_refused(monkeypatch, started, tmp_path):
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    with pytest.raises(NpusimError, match=r"^workers=: 100,000 is more than 8 \(4 per CPU, 2 CPUs\)"):
        run_sweep(spec(axes={"workload.m": [64]}), tmp_path, workers=100_000)
    assert started == [] and not tmp_path.joinpath("parts").exists()


@pytest.mark.component
def test_workers_are_capped_at_the_points_to_run(monkeypatch, started, tmp_path):
    # --workers 100000 started ~1900 processes for 9 points.
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 4)
    run_sweep(spec(axes={"workload.m": [64, 128, 256]}), tmp_path, workers=16)
    run_sweep(spec(axes={"workload.m": [64, 128, 256, 512]}), tmp_path / "b")
    assert started == [3, 4]  # 16 asked, 3 points; default one per CPU, 4 points


# ---------------------------------------------------------------- 5: clear messages

@pytest.mark.parametrize("bounds, expected", [
    ([1, "1e308"], "'1e308' is text, not a number: write it without quotes (1e308)"),
    (["8MiB", "64MiB"], "'8MiB' and '64MiB' are text: units are not supported in uniform "
                        "bounds"),
    ([1, None], "None is an empty value, not a number"),
])
def test_a_bound_that_is_not_a_number_says_why(bounds, expected):
    message = problems(**random_axis({"uniform": bounds}))["axes[0].random.params.workload.m.uniform"]
    assert expected in message and "low <= high" not in message


@pytest.mark.parametrize("text, expected", [
    ("${workload.m} < 'abc'", "`${workload.m} < 'abc'`: '<' cannot be applied to 64 "
                              "(an integer) and 'abc' (text); convert text first"),
    ("10.0 ** 400 > 1", "`10.0 ** 400` is out of range: a float holds at most about 1.8e308"),
    ("'abc'[0] == 'a'", "`'abc'[0]`: '.' and '[...]' may only spell a field path"),
    ("${workload.m}.__class__ == 1", "`${workload.m}.__class__`: write the whole field path "
                                     "inside the braces"),
    ("int('abc') > 1", "`int('abc')`: int() takes a number or numeric text, got 'abc' (text)"),
    ("${workload.m} / 0 > 1", "`${workload.m} / 0` divides by zero"),
])
def test_expression_errors_are_sentences_naming_the_expression(text, expected):
    (where, message), = problems(axes={"workload.m": [64]}, constraints=[text]).items()
    assert where.startswith("constraints[0].require") and expected in message
    for leak in ("Error:", "__ref", "Constant(", "not supported between", "(34,"):
        assert leak not in message


@pytest.mark.parametrize("require, shown", [("5", "`5` gives 5 (an integer)"),
                                            ("'abc'", "`'abc'` gives 'abc' (text)"),
                                            ("${workload.m}", "`${workload.m}` gives 64")])
def test_a_constraint_must_be_true_or_false(require, shown):
    (where, message), = problems(axes={"workload.m": [64]}, constraints=[require]).items()
    assert where.startswith("constraints[0].require") and shown in message
    assert "not true or false" in message


def test_integer_flag_and_seed_have_their_types():
    found = problems(**random_axis({"uniform": [16, 64], "integer": "maybe"}))
    assert found["axes[0].random.params.workload.m.integer"] == "expected true or false, got 'maybe'"
    found = problems(**random_axis({"randint": [16, 64]}, seed=-1))
    assert found["axes[0].random.seed"] == "expected a non-negative integer seed, got -1"


def test_an_empty_spec_or_a_sweep_as_base_says_what_was_expected(tmp_path):
    from npusim.sweep.spec import load_spec

    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="empty.yaml: file is empty; expected a sweep spec"):
        load_spec(empty)
    grid = REPO_ROOT / "workloads" / "sweeps" / "quickstart_grid.yaml"
    nested = tmp_path / "nested.yaml"
    nested.write_text(f"base: {grid}\naxes:\n  - grid: {{workload.m: [64]}}\n")
    with pytest.raises(ConfigError) as info:
        load_spec(nested)
    assert info.value.problems == [("base", f"got '{grid}': {grid} is a sweep spec (it has "
                                            "axes:); expected a scenario (hw:, workload:), such "
                                            "as that spec's own base")]


def test_a_derived_typo_is_traced_back_to_its_template():
    spec = spec_from_dict({
        "base": "scenarios/qwen3_4b_npu64_pd_disagg.yaml",
        "axes": [{"grid": {"workload.pd.prefill_cores": [42]}}],
        "derived": {"workload.pd.decode_cores": "${workload.pd.prefill_cores} // "}},
        root=REPO_ROOT / "workloads")
    with pytest.raises(ConfigError) as info:
        spec.points()
    (where, message), = info.value.problems
    assert where == "point 0 (workload.pd.prefill_cores=42): workload.pd.decode_cores"
    assert message.endswith("(got '42 // ') (derived.workload.pd.decode_cores = "
                            "'${workload.pd.prefill_cores} // ' did not parse: not a valid "
                            "expression: invalid syntax; so it was substituted as text)")
