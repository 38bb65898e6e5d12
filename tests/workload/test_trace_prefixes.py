"""Prompt block hashes in traces: the Mooncake format, hash_ids in npusim's CSV/JSONL,
shared-prefix generation, and the prefix keys a cache matches on."""

from __future__ import annotations

import json
import re

import pytest

from npusim.core.errors import TraceError
from npusim.workload.trace_generators import generate_trace
from npusim.workload.trace_spec import TraceSpec
from npusim.workload.traces import Request, RequestTrace, read_trace

pytestmark = pytest.mark.unit

PS_PER_MS = 10**9


def _mooncake(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_mooncake_trace_is_detected_and_its_millisecond_timestamps_kept(tmp_path):
    path = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]},
        {"timestamp": 27482, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]},
        {"timestamp": 30534.5, "input_length": 1100, "output_length": 9, "hash_ids": [46, 9, 10]}])
    trace = read_trace(path)  # equal timestamps: part of the format, no flag needed
    assert [r.arrival_ps for r in trace] == [0, 0, 3052_500_000_000]
    assert [r.prompt_tokens for r in trace] == [655, 672, 1100]
    assert trace[0].block_hashes == (46, 47) and trace.hash_block_tokens == 512
    # one full block each: 46 for all three; 47 follows 46 in the first two only
    keys = trace.prefix_keys()
    assert keys[0] == keys[1] and keys[2][0] == keys[0][0] and len(keys[2]) == 2
    assert keys[2][1] not in keys[0]
    assert trace.stats()["reusable_prompt_share"] == pytest.approx(2 * 512 / (655 + 672 + 1100))


def test_equal_hashes_after_different_blocks_are_not_the_same_prefix():
    trace = RequestTrace([Request("a", 0, 32, 1, block_hashes=(1, 2)),
                          Request("b", 1, 32, 1, block_hashes=(3, 2))], hash_block_tokens=16)
    a, b = trace.prefix_keys()
    assert a[1] != b[1]
    assert trace.reusable_prompt_share() == 0


def test_only_full_blocks_get_keys():
    trace = RequestTrace([Request("a", 0, 40, 1, block_hashes=(1, 2, 3))], hash_block_tokens=16)
    assert len(trace.prefix_keys()[0]) == 2   # the third block holds 8 of 16 tokens


@pytest.mark.parametrize("row, message", [
    ({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 3]},
     "got 3 hashes; a prompt of 600 tokens has 2 block(s) of 512 tokens"),
    ({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, -2]},
     "got -2"),
    ({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": "7 x"},
     "got 'x'"),
    ({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": {"a": 1}},
     "expected integers from 0"),
    ({"timestamp": 0, "output_length": 1}, "missing column 'input_length'"),
    ({"timestamp": -1, "input_length": 6, "output_length": 1}, "number of milliseconds >= 0"),
])
def test_bad_mooncake_rows_are_named_by_line_and_column(tmp_path, row, message):
    ok = {"timestamp": 0, "input_length": 5, "output_length": 1}
    path = _mooncake(tmp_path / "m.jsonl", [ok, row] if "input_length" in row else [row])
    with pytest.raises(TraceError, match=re.escape(message)) as info:
        read_trace(path, format="mooncake")
    assert str(info.value).startswith(f"{path}:")


def test_hash_ids_round_trip_through_csv_and_jsonl(tmp_path):
    trace = generate_trace(40, {"kind": "poisson", "rate_per_s": 5}, {"kind": "uniform",
                           "low": 10, "high": 300}, 4, seed=3,
                           shared_prefix={"groups": 3, "tokens": 128, "share": 0.5})
    assert trace.has_block_hashes and trace.hash_block_tokens == 16
    assert read_trace(trace.write_csv(tmp_path / "t.csv"), hash_block_tokens=16) == trace
    assert read_trace(trace.write_jsonl(tmp_path / "t.jsonl"), hash_block_tokens=16) == trace
    header = (tmp_path / "t.csv").read_text().splitlines()[0]
    assert header.endswith(",hash_ids")
    # the default block (512) cannot cover 16-token hashes: said, not misread
    with pytest.raises(TraceError, match="set the trace's hash_block_tokens"):
        read_trace(tmp_path / "t.csv")


def test_a_trace_without_hashes_writes_the_columns_it_always_had(tmp_path):
    trace = RequestTrace([Request("a", 0, 10, 2)])
    assert (trace.write_csv(tmp_path / "t.csv").read_text().splitlines()[0]
            == "id,arrival_ps,prompt_tokens,output_tokens,priority")
    assert "hash_ids" not in trace.to_frame().columns


def test_shared_prefixes_leave_the_rest_of_the_trace_as_it_was():
    spec = dict(num_requests=300, arrival={"kind": "poisson", "rate_per_s": 10},
                prompt={"kind": "uniform", "low": 200, "high": 2000}, output=32, seed=7)
    plain = generate_trace(spec["num_requests"], spec["arrival"], spec["prompt"], spec["output"],
                           seed=7)
    shared = generate_trace(spec["num_requests"], spec["arrival"], spec["prompt"], spec["output"],
                            seed=7, shared_prefix={"groups": 2, "tokens": 1024, "share": 0.75})
    assert [(r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in plain] == \
        [(r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in shared]
    joined = [r for r in shared if r.block_hashes]
    assert 0.65 < len(joined) / 300 < 0.85
    # a group's blocks are the same, and a prompt shares at most the prefix's whole blocks
    assert len({r.block_hashes[0] for r in joined}) == 2
    assert all(len(r.block_hashes) == min(r.prompt_tokens, 1024) // 16 for r in joined)
    # two groups of 1024 tokens: after the first request of each, their blocks are reused
    assert 0.3 < shared.reusable_prompt_share() < 0.6


def test_the_trace_section_generates_shared_prefixes_and_rejects_them_with_a_file():
    spec = TraceSpec(arrival={"kind": "fixed", "rate_per_s": 1}, prompt=64, output=2,
                     num_requests=4, shared_prefix={"groups": 1, "tokens": 32, "block_tokens": 8})
    trace = spec.build()
    assert trace.hash_block_tokens == 8 and all(len(r.block_hashes) == 4 for r in trace)
    assert trace.reusable_prompt_share() == pytest.approx(3 * 32 / (4 * 64))
    with pytest.raises(ValueError, match="not both"):
        TraceSpec(file="x.csv", shared_prefix={"groups": 1, "tokens": 32})
    with pytest.raises(ValueError, match="only apply to a trace file"):
        TraceSpec(arrival={"kind": "fixed", "rate_per_s": 1}, prompt=64, output=2,
                  num_requests=4, hash_block_tokens=16)


def test_optional_jsonl_keys_count_in_every_object_not_only_when_the_first_has_them(tmp_path):
    # The first object's keys decided the columns: a later object's priority (or hash_ids)
    # was silently dropped when the first object left it out.
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_ps": 0, "prompt_tokens": 4, "output_tokens": 1}\n'
                    '{"arrival_ps": 5, "prompt_tokens": 40, "output_tokens": 1, "priority": 3, '
                    '"id": "x", "hash_ids": [7, 8]}\n')
    second = read_trace(path, hash_block_tokens=16)[1]
    assert (second.priority, second.request_id, second.block_hashes) == (3, "x", (7, 8))


def test_a_hash_block_size_for_a_file_without_hashes_is_an_error(tmp_path):
    path = RequestTrace([Request("a", 0, 10, 2)]).write_csv(tmp_path / "t.csv")
    with pytest.raises(TraceError, match="hash_block_tokens = 16, but no request of the file "
                                         "has hash_ids"):
        read_trace(path, hash_block_tokens=16)
