"""Routing traces: file format, validation, generators and statistics.

References: NPUMoE (paper 000) §4.1 imbalance ratio r = max load / mean load and the
capacity example of S000-013 (B=256, E=8, r=2 -> 64 tokens); §5.8 Overlap@K.
"""

import dataclasses
import json

import numpy as np
import pytest

from npusim.core.errors import TraceError
from npusim.workload.models import load_model
from npusim.workload.routing import (RoutingHeader, RoutingTrace, capacity_tokens,
                                     consecutive_overlap, expert_loads, expert_token_counts,
                                     hot_expert_overlap, imbalance_ratio, imbalance_ratios,
                                     overlap_at_k, read_routing_trace, validate_routing_trace,
                                     write_routing_trace)
from npusim.workload.routing_generators import (TraceShape, balanced_trace, imbalanced_loads,
                                                imbalanced_trace, trace_from_loads,
                                                zipf_popularity, zipf_trace)

pytestmark = pytest.mark.unit

SMALL = TraceShape("toy", num_layers=3, num_experts=8, top_k=2)


@pytest.fixture(scope="module")
def mixtral():
    return load_model("mixtral_8x7b_v0_1")


@pytest.fixture(scope="module")
def deepseek():
    return load_model("deepseek_moe_16b_base")


def _replace(trace, **arrays):
    return RoutingTrace(trace.header, arrays.get("experts", trace.experts.copy()),
                        arrays.get("weights", trace.weights.copy()), "bad.npz")


# ------------------------------------------------------------------- capacity
def test_capacity_estimate_npumoe_example():
    assert capacity_tokens(256, 8, 2.0) == 64                 # S000-013
    assert capacity_tokens(256, 8, 1.0) == 32                 # C_base = B/E
    assert capacity_tokens(256, 16, 2.0, top_k=2) == 64       # r * B * k / E
    assert capacity_tokens(100, 8, 1.0) == 13                 # rounded up: 12.5 -> 13
    assert capacity_tokens(10, 8, 8.0) == 10                  # at most every token
    for bad in ((0, 8, 2.0), (256, 8, 0.5), (256, 2, 1.0, 4)):
        with pytest.raises(ValueError):
            capacity_tokens(*bad)


# ----------------------------------------------------------------- round trip
def test_round_trip_keeps_arrays_and_header(tmp_path, deepseek):
    trace = imbalanced_trace(deepseek, 40, 1.5, seed=7, notes="unit test")
    path = write_routing_trace(tmp_path / "trace.npz", trace)
    back = read_routing_trace(path, deepseek)
    assert back.experts.dtype == np.int16 and back.weights.dtype == np.float32
    np.testing.assert_array_equal(back.experts, trace.experts)
    np.testing.assert_array_equal(back.weights, trace.weights)
    assert back.header == trace.header
    assert back.header.moe_layers == tuple(range(1, 28)) and back.num_layers == 27
    assert (back.header.generator, back.header.seed, back.header.notes) == \
        ("imbalanced", 7, "unit test")
    assert back.layer_of(1) == 0 and back.layer_of(27) == 26
    with pytest.raises(TraceError, match="decoder layer 0 is not a MoE layer"):
        back.layer_of(0)


def test_file_without_npz_suffix_is_written_as_named(tmp_path):
    path = write_routing_trace(tmp_path / "trace.routing", balanced_trace(SMALL, 8))
    assert path.name == "trace.routing" and read_routing_trace(path).tokens == 8


# ------------------------------------------------------------- invalid traces
def test_unknown_expert_id(mixtral):
    trace = balanced_trace(mixtral, 16)
    experts = trace.experts.copy()
    experts[3, 5, 1] = 8
    with pytest.raises(TraceError) as err:
        validate_routing_trace(_replace(trace, experts=experts), mixtral)
    message = str(err.value)
    assert "bad.npz" in message and "layer 3" in message and "token 5" in message
    assert "expert id 8 does not exist" in message and "0..7" in message


def test_negative_expert_id(mixtral):
    trace = balanced_trace(mixtral, 16)
    experts = trace.experts.copy()
    experts[0, 0, 0] = -1
    with pytest.raises(TraceError, match="expert id -1"):
        validate_routing_trace(_replace(trace, experts=experts))


def test_wrong_number_of_layers(deepseek):
    # 28 decoder layers but only 27 are MoE: a trace over all 28 is rejected
    shape = TraceShape("deepseek_moe_16b_base", 28, 64, 6, False)
    with pytest.raises(TraceError, match="has 27 MoE layers, the trace has 28"):
        validate_routing_trace(balanced_trace(shape, 8), deepseek)


def test_wrong_expert_count_and_top_k(mixtral):
    with pytest.raises(TraceError, match="header.num_experts: model mixtral_8x7b_v0_1 has 8"):
        validate_routing_trace(balanced_trace(TraceShape("x", 32, 16, 2), 8), mixtral)
    with pytest.raises(TraceError, match="header.top_k"):
        validate_routing_trace(balanced_trace(TraceShape("x", 32, 8, 1), 8), mixtral)


def test_weights_not_normalised(mixtral):
    trace = balanced_trace(mixtral, 16)
    weights = trace.weights.copy()
    weights[2, 7] = [0.5, 0.4]
    with pytest.raises(TraceError) as err:
        validate_routing_trace(_replace(trace, weights=weights), mixtral)
    assert "layer 2" in str(err.value) and "token 7" in str(err.value)
    assert "sum to 0.900000; expected 1 within 0.001" in str(err.value)
    # within tolerance passes
    weights[2, 7] = [0.5, 0.4995]
    validate_routing_trace(_replace(trace, weights=weights), mixtral)


def test_normalisation_decided_by_model(deepseek):
    # DeepSeek-MoE does not renormalise: top-6 weights summing to 0.6 are valid ...
    trace = balanced_trace(deepseek, 12)
    assert not trace.header.weights_normalized
    validate_routing_trace(trace, deepseek)
    assert trace.weights.sum(axis=-1).max() < 1 + 1e-6
    # ... but a weight outside [0, 1] never is
    weights = trace.weights.copy()
    weights[0, 0, 0] = 1.5
    with pytest.raises(TraceError, match=r"weight 1.5 of expert .* expected a gate value"):
        validate_routing_trace(_replace(trace, weights=weights), deepseek)
    weights[0, 0, 0] = np.nan
    with pytest.raises(TraceError, match="weight nan"):
        validate_routing_trace(_replace(trace, weights=weights))


def test_duplicate_expert_in_one_token(mixtral):
    trace = balanced_trace(mixtral, 16)
    experts = trace.experts.copy()
    experts[1, 4] = [6, 6]
    with pytest.raises(TraceError, match=r"layer 1 \(decoder layer 1\), token 4: duplicate "
                                         r"expert in top-k \[6, 6\]"):
        validate_routing_trace(_replace(trace, experts=experts), mixtral)


def test_shape_mismatch(mixtral):
    trace = balanced_trace(mixtral, 16)
    with pytest.raises(TraceError, match=r"weights: expected shape .* \[32, 16, 2\]"):
        validate_routing_trace(_replace(trace, weights=trace.weights[:, :15]))
    with pytest.raises(TraceError, match="experts: expected shape"):
        validate_routing_trace(_replace(trace, experts=trace.experts[..., :1]))
    with pytest.raises(TraceError, match="expected integer expert ids"):
        validate_routing_trace(_replace(trace, experts=trace.experts.astype(np.float32)))


def test_writer_refuses_invalid_trace(tmp_path, mixtral):
    trace = balanced_trace(mixtral, 4)
    experts = trace.experts.copy()
    experts[0, 0] = [1, 1]
    with pytest.raises(TraceError, match="duplicate"):
        write_routing_trace(tmp_path / "t.npz", _replace(trace, experts=experts))
    assert not (tmp_path / "t.npz").exists()


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(TraceError, match="missing.npz: file not found"):
        read_routing_trace(tmp_path / "missing.npz")
    text = tmp_path / "text.npz"
    text.write_text("not a trace")
    with pytest.raises(TraceError, match="text.npz: not a routing trace"):
        read_routing_trace(text)
    partial = tmp_path / "partial.npz"
    np.savez(partial, experts=np.zeros((1, 1, 1), np.int16))
    with pytest.raises(TraceError, match="partial.npz: missing array.*weights, header"):
        read_routing_trace(partial)
    header = json.loads(balanced_trace(SMALL, 4).header.to_json())
    for key, value, expect in (("top_k", 0, "header.top_k: expected an integer >= 1"),
                               ("tokens", None, "header.tokens: required field is missing"),
                               ("version", 9, "header.version: expected 1")):
        bad = dict(header, **{key: value})
        path = tmp_path / f"bad_{key}.npz"
        np.savez(path, experts=np.zeros((3, 4, 2), np.int16),
                 weights=np.zeros((3, 4, 2), np.float32),
                 header=np.frombuffer(json.dumps(bad).encode(), np.uint8))
        with pytest.raises(TraceError, match=expect):
            read_routing_trace(path)


def test_error_is_one_line_per_problem_without_traceback_noise(mixtral):
    trace = balanced_trace(mixtral, 16)
    experts = trace.experts.copy()
    experts[:, :, 0] = 99
    with pytest.raises(TraceError) as err:
        validate_routing_trace(_replace(trace, experts=experts))
    assert "(and 511 more)" in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ generators
@pytest.mark.parametrize("ratio", [1.0, 1.3, 2.0, 3.7])
def test_imbalanced_trace_reproduces_r(ratio):
    shape = TraceShape("qwen-like", 4, 60, 4)
    trace = imbalanced_trace(shape, 300, ratio, seed=3)
    np.testing.assert_allclose(imbalance_ratios(trace), ratio, rtol=0.05)
    assert (expert_loads(trace).sum(axis=1) == 300 * 4).all()


def test_imbalance_is_limited_by_whole_tokens():
    # 256 x 4 pairs over 60 experts: mean 17.07, so the busiest expert has >= 18 tokens
    trace = imbalanced_trace(TraceShape("qwen-like", 1, 60, 4), 256, 1.0)
    assert imbalance_ratios(trace)[0] == pytest.approx(18 / (1024 / 60))


def test_per_layer_ratios_and_locality_keep_r():
    shape = TraceShape("toy", 3, 16, 2)
    ratios = [1.0, 2.0, 4.0]
    trace = imbalanced_trace(shape, 512, ratios, seed=1, locality=0.7)
    np.testing.assert_allclose(imbalance_ratios(trace), ratios, rtol=0.05)
    assert trace.header.params["ratio"] == ratios


def test_imbalanced_loads_limits():
    loads = imbalanced_loads(256, 8, 1, 2.0)
    assert loads.sum() == 256 and loads.max() == 64 and imbalance_ratio(loads) == 2.0
    assert imbalanced_loads(10, 8, 2, 4.0).max() == 10  # r = E/k: the hot expert takes all
    with pytest.raises(ValueError, match=r"imbalance ratio must be in \[1, E/k = 4\]"):
        imbalanced_loads(10, 8, 2, 4.5)


def test_balanced_trace_is_balanced(mixtral):
    trace = balanced_trace(mixtral, 100, seed=5)
    assert np.allclose(imbalance_ratios(trace), 1.0)
    uneven = balanced_trace(SMALL, 13)          # 26 pairs over 8 experts: loads 3 or 4
    assert set(np.unique(expert_loads(uneven))) <= {3, 4}
    assert imbalance_ratios(uneven).max() == pytest.approx(4 / 3.25)


def test_zipf_ordering():
    shape = TraceShape("toy", 2, 16, 2)
    trace = zipf_trace(shape, 4000, 1.0, seed=2, shuffle_experts=False)
    loads = expert_loads(trace)
    # expected loads fall with rank; sampled ones keep the order of well-separated ranks
    assert (loads[:, 0] > loads[:, 1]).all() and (loads[:, 1] > loads[:, 3]).all()
    assert (loads[:, 3] > loads[:, 15]).all()
    assert (imbalance_ratios(trace) > 2).all()
    flat = zipf_trace(shape, 4000, 0.0, seed=2)
    assert imbalance_ratios(flat).max() < 1.2      # exponent 0 is uniform
    assert zipf_popularity(4, 1.0) == pytest.approx(np.array([12, 6, 4, 3]) / 25)


def test_shuffled_zipf_moves_the_hot_expert():
    trace = zipf_trace(TraceShape("toy", 6, 16, 2), 2000, 1.5, seed=4)
    hottest = expert_loads(trace).argmax(axis=1)
    assert len(set(hottest.tolist())) > 1


@pytest.mark.parametrize("make", [
    lambda p: balanced_trace(SMALL, 400, seed=9, locality=p),
    lambda p: imbalanced_trace(SMALL, 400, 2.0, seed=9, locality=p),
    lambda p: zipf_trace(SMALL, 400, 1.0, seed=9, locality=p),
])
def test_locality_raises_consecutive_overlap(make):
    none, some, most = (consecutive_overlap(make(p)) for p in (0.0, 0.5, 0.9))
    assert none < 0.45 and none < some < most
    assert most > 0.75


@pytest.mark.parametrize("make", [
    lambda seed: balanced_trace(SMALL, 50, seed=seed, locality=0.3),
    lambda seed: imbalanced_trace(SMALL, 50, 2.5, seed=seed),
    lambda seed: zipf_trace(SMALL, 50, 1.2, seed=seed, locality=0.3),
])
def test_deterministic_per_seed(make):
    a, b, c = make(11), make(11), make(12)
    np.testing.assert_array_equal(a.experts, b.experts)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert not np.array_equal(a.experts, c.experts)


def test_layer_does_not_depend_on_layer_count():
    short = zipf_trace(TraceShape("toy", 2, 8, 2), 30, 1.0, seed=1)
    long = zipf_trace(TraceShape("toy", 5, 8, 2), 30, 1.0, seed=1)
    np.testing.assert_array_equal(short.experts, long.experts[:2])


def test_generated_weights_follow_the_model(mixtral, deepseek):
    mix = balanced_trace(mixtral, 20)
    assert np.allclose(mix.weights.sum(axis=-1), 1, atol=1e-6)
    assert (np.diff(mix.weights, axis=-1) <= 0).all()          # top-1 first
    deep = balanced_trace(deepseek, 20)
    sums = deep.weights.sum(axis=-1)
    assert (sums < 1).all() and (sums >= 6 / 64 - 1e-6).all()


def test_trace_from_loads_is_exact_and_checked():
    loads = np.array([[5, 3, 2, 0], [4, 4, 1, 1]])
    trace = trace_from_loads(TraceShape("toy", 2, 4, 2), loads, shuffle_experts=False)
    np.testing.assert_array_equal(expert_loads(trace), loads)
    with pytest.raises(ValueError, match="sum to tokens x top_k"):
        trace_from_loads(TraceShape("toy", 2, 4, 2), np.array([[5, 3, 2, 1], [4, 4, 1, 1]]))
    with pytest.raises(ValueError, match="each of the 5 tokens once"):
        trace_from_loads(TraceShape("toy", 1, 4, 2), np.array([6, 2, 1, 1]))


def test_dense_model_has_no_routing():
    with pytest.raises(ValueError, match="no MoE layers"):
        balanced_trace(load_model("qwen3_4b"), 4)


# ------------------------------------------------------------------ statistics
def test_expert_token_counts_for_a_batch():
    experts = np.array([[[0, 1], [1, 2], [2, 0], [3, 1]]], dtype=np.int16)
    header = RoutingHeader("toy", 1, 4, 2, 4, weights_normalized=True)
    trace = RoutingTrace(header, experts, np.full((1, 4, 2), 0.5, np.float32))
    validate_routing_trace(trace)
    assert expert_token_counts(trace, 0).tolist() == [2, 3, 2, 1]
    assert expert_token_counts(trace, 0, slice(0, 2)).tolist() == [1, 2, 1, 0]
    assert expert_token_counts(trace, 0, slice(2, 4)).dtype == np.int64
    assert imbalance_ratio([2, 3, 2, 1]) == 1.5
    with pytest.raises(IndexError):
        expert_token_counts(trace, 1)


def test_overlap_at_k():
    header = RoutingHeader("toy", 1, 8, 4, 2)
    a = RoutingTrace(header, np.array([[[0, 1, 2, 3], [4, 5, 6, 7]]], np.int16),
                     np.full((1, 2, 4), 0.1, np.float32))
    b = RoutingTrace(header, np.array([[[1, 0, 7, 6], [4, 6, 5, 7]]], np.int16),
                     np.full((1, 2, 4), 0.1, np.float32))
    assert overlap_at_k(a, a) == 1.0
    assert overlap_at_k(a, b, k=4) == pytest.approx((2 / 4 + 4 / 4) / 2)
    assert overlap_at_k(a, b, k=2) == pytest.approx((2 / 2 + 1 / 2) / 2)
    assert overlap_at_k(a, b, k=1) == pytest.approx(0.5)
    assert consecutive_overlap(a) == 0.0 and consecutive_overlap(b, k=2) == 0.0
    with pytest.raises(ValueError, match="K must be in 1..top_k 4"):
        overlap_at_k(a, b, k=5)


def test_random_traces_overlap_near_k_over_e():
    shape = TraceShape("toy", 4, 64, 6)
    a, b = balanced_trace(shape, 2000, seed=1), balanced_trace(shape, 2000, seed=2)
    assert overlap_at_k(a, b) == pytest.approx(6 / 64, rel=0.15)


def test_hot_expert_overlap_npumoe_style():
    calib = np.array([[10, 9, 1, 1], [1, 2, 3, 4]])
    runtime = np.array([[9, 10, 1, 0], [4, 3, 2, 1]])
    np.testing.assert_allclose(hot_expert_overlap(calib, runtime, 2), [1.0, 0.0])
    np.testing.assert_allclose(hot_expert_overlap(calib, runtime, 4), [1.0, 1.0])


def test_header_is_plain_json():
    header = dataclasses.replace(balanced_trace(SMALL, 4).header, notes="é")
    data = json.loads(header.to_json())
    assert data["format"] == "npusim-routing-trace" and data["notes"] == "é"
    assert RoutingHeader.from_mapping(data, "x") == header


# ------------------------------------------------------- malformed files and headers
def _with_header(path, header):
    """A trace file whose header is ``header`` (any JSON value) and arrays are SMALL's."""
    np.savez(path, experts=np.zeros((3, 4, 2), np.int16), weights=np.zeros((3, 4, 2), np.float32),
             header=np.frombuffer(json.dumps(header).encode(), np.uint8))
    return path


@pytest.mark.parametrize("key, value, expect", [
    ("params", 5, "header.params: expected a JSON object, got 5"),
    ("params", [1, 2], "header.params: expected a JSON object, got [1, 2]"),
    ("params", "abc", 'header.params: expected a JSON object, got "abc"'),
    ("generator", 3, "header.generator: expected a string, got 3"),
    ("notes", None, "header.notes: expected a string, got null"),
    ("seed", "7", 'header.seed: expected an integer or null, got "7"'),
    ("weights_normalized", "false", 'header.weights_normalized: expected true or false, got "false"'),
    ("moe_layers", 0, "header.moe_layers: expected a list of decoder-layer indices (integers >= 0), got 0"),
    ("moe_layers", [True], "header.moe_layers: expected a list of decoder-layer indices (integers >= 0), got [true]"),
    ("tokens", True, "header.tokens: expected an integer >= 1, got true"),
    ("version", True, "header.version: expected the integer 1, got true"),
    ("model", 5, "header.model: expected the model name (a non-empty string), got 5"),
])
def test_every_header_field_is_type_checked(tmp_path, key, value, expect):
    # params: 5 used to escape as "TypeError: 'int' object is not iterable".
    header = dict(json.loads(balanced_trace(SMALL, 4).header.to_json()), **{key: value})
    path = _with_header(tmp_path / "h.npz", header)
    with pytest.raises(TraceError) as err:
        read_routing_trace(path)
    assert str(err.value) == f"{path}: {expect}"


def test_header_that_is_not_an_object_or_not_bytes(tmp_path):
    with pytest.raises(TraceError, match=r"h\.npz: header: expected a JSON object, got a JSON "
                                         r"array \(\[1\]\)"):
        read_routing_trace(_with_header(tmp_path / "h.npz", [1]))
    text = json.dumps(json.loads(balanced_trace(SMALL, 4).header.to_json()))
    np.savez(tmp_path / "u.npz", experts=np.zeros((3, 4, 2), np.int16),
             weights=np.zeros((3, 4, 2), np.float32), header=np.array(text))
    with pytest.raises(TraceError, match=r"u\.npz: header: expected a 1-D uint8 array"):
        read_routing_trace(tmp_path / "u.npz")


@pytest.mark.parametrize("text, expect", [
    ('{"seed": 1, "seed": 2}', "header: key 'seed' appears twice in one object"),
    ('{"seed": ' + "9" * 5000 + "}", "header: an integer of more than 4300 digits"),
])
def test_a_header_with_a_doubled_key_or_a_huge_integer_names_it(tmp_path, text, expect):
    # json kept the last of two keys silently; the huge integer escaped as a ValueError.
    np.savez(tmp_path / "h.npz", experts=np.zeros((3, 4, 2), np.int16),
             weights=np.zeros((3, 4, 2), np.float32),
             header=np.frombuffer(text.encode(), np.uint8))
    with pytest.raises(TraceError, match=expect):
        read_routing_trace(tmp_path / "h.npz")


@pytest.mark.parametrize("name, content, expect", [
    ("text.npz", b"experts,weights\n1,2\n", "the file is not a zip archive"),
    ("elf.npz", b"\x7fELF\x02\x01\x01" + bytes(200), "the file is not a zip archive"),
    ("empty.npz", b"", "the file is empty"),
    ("truncated.npz", b"PK\x03\x04" + bytes(30), "damaged archive"),
])
def test_a_file_that_is_not_an_npz_gets_no_pickle_advice(tmp_path, name, content, expect):
    # numpy's own message ("contains pickled (object) data ... allow_pickle=") is wrong
    # here and unsafe advice; npusim never unpickles a trace.
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceError) as err:
        read_routing_trace(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not a routing trace (an .npz written by npusim's "
                              "write_routing_trace): ") and expect in message
    assert "pickle" not in message


def test_npy_arrays_and_object_arrays_are_refused_without_unpickling(tmp_path):
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(TraceError, match=r"one\.npy: not a routing trace .*a single \.npy array"):
        read_routing_trace(tmp_path / "one.npy")
    header = np.frombuffer(balanced_trace(SMALL, 4).header.to_json().encode(), np.uint8)
    np.savez(tmp_path / "obj.npz", experts=np.array([{}], dtype=object),
             weights=np.zeros((3, 4, 2), np.float32), header=header)
    with pytest.raises(TraceError, match=r"obj\.npz: experts: holds Python objects; expected a "
                                         r"numeric array"):
        read_routing_trace(tmp_path / "obj.npz")
    with pytest.raises(TraceError, match="is a directory"):
        read_routing_trace(tmp_path)
