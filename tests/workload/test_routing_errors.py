"""MoE routing errors name the field, the bad value and what was expected; fields the
chosen routing kind does not use are rejected; a huge Zipf exponent neither overflows
nor warns."""

import warnings

import numpy as np
import pytest

from npusim.cli import main
from npusim.config.presets import REPO_ROOT
from npusim.workload.routing_generators import (MAX_ZIPF_EXPONENT, TraceShape, balanced_trace,
                                                imbalanced_trace, zipf_popularity, zipf_trace)

pytestmark = pytest.mark.unit

MOE = REPO_ROOT / "workloads" / "scenarios" / "qwen3_30b_a3b_npu64.yaml"
SMALL = TraceShape("toy", num_layers=2, num_experts=128, top_k=8)


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    return info.value.code, captured.err


def run_moe(routing, tmp_path, capsys):
    return run_cli(["run", str(MOE), "--prompt-len", "16", "--output-len", "2",
                    "--mode", "analytic", "--set", f"workload.routing={routing}",
                    "--out", str(tmp_path / "out")], capsys)


@pytest.mark.parametrize("routing, expected", [
    # a field the chosen kind does not use is an error, not silently ignored
    ("{kind: balanced, ratio: 16}", ("workload.routing", "ratio", "16", "balanced")),
    ("{kind: zipf, exponent: 1.0, ratio: 2}", ("workload.routing", "ratio", "2", "zipf")),
    # the seed is named with its value
    ("{kind: balanced, seed: -1}", ("workload.routing.seed", "-1")),
    # the exponent is bounded, and the message gives the value and the range
    ("{kind: zipf, exponent: 1001}",
     ("workload.routing.exponent", "less than or equal to 1000", "got 1001")),
])
def test_bad_routing_is_one_clear_error(routing, expected, tmp_path, capsys):
    code, err = run_moe(routing, tmp_path, capsys)
    assert code == 2
    assert err.startswith("error: ") and "Traceback" not in err
    for text in expected:
        assert text in err, err
    assert "RuntimeWarning" not in err


@pytest.mark.parametrize("make", [
    lambda: balanced_trace(SMALL, 10, seed=-1),
    lambda: imbalanced_trace(SMALL, 10, 2.0, seed=-1),
    lambda: zipf_trace(SMALL, 10, 1.0, seed=-1),
])
def test_generators_name_a_negative_seed(make):
    with pytest.raises(ValueError, match=r"seed: expected a non-negative integer, got -1"):
        make()


@pytest.mark.parametrize("exponent", [MAX_ZIPF_EXPONENT + 1, 1e300, float("inf"), float("nan"), -1.0])
def test_zipf_exponent_out_of_range_is_named(exponent):
    with pytest.raises(ValueError, match=r"exponent: expected a Zipf exponent in \[0, 1000\] "
                                         r"\(0 = uniform, about 1 for real routers\), got "):
        zipf_trace(SMALL, 10, exponent)


def test_a_huge_zipf_exponent_is_computed_without_overflow():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old code warned "overflow encountered in power"
        popularity = zipf_popularity(128, MAX_ZIPF_EXPONENT)
        trace = zipf_trace(SMALL, 50, MAX_ZIPF_EXPONENT, seed=1, shuffle_experts=False)
    assert np.isfinite(popularity).all() and popularity[0] == pytest.approx(1.0)
    # all the mass sits on the top-ranked experts: every token picks experts 0..top_k-1
    assert (np.sort(trace.experts, axis=-1) == np.arange(SMALL.top_k)).all()


def test_ordinary_zipf_popularity_is_unchanged():
    assert zipf_popularity(4, 1.0) == pytest.approx(np.array([12, 6, 4, 3]) / 25)
    assert zipf_popularity(4, 0.0) == pytest.approx(np.full(4, 0.25))
