"""Request traces: readers/writers, validation errors, generators, arrival-time limits
(TraceSpec and the presets: test_trace_spec.py)."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npusim.config.loader import validate
from npusim.core.errors import ConfigError, OutputError, TraceError
from npusim.workload.trace_generators import (FixedArrival, FixedLength, GammaArrival,
                                              PoissonArrival, UniformLength, ZipfLength,
                                              generate_trace, sample_arrivals_ps, sample_lengths)
from npusim.workload.trace_spec import TraceSpec
from npusim.workload.traces import Request, RequestTrace, read_trace
from tests.data import AZURE_CODE, AZURE_CONV, missing

pytestmark = pytest.mark.unit

REPO = Path(__file__).parents[2]
PS = 10**12


def _trace() -> RequestTrace:
    return RequestTrace([Request("a", 0, 10, 5, 1), Request("b", 1_500_000, 20, 7),
                         Request("c", 3 * PS + 7, 1, 1, -2)], "test")


# -- Request / RequestTrace --------------------------------------------------------------

def test_trace_helpers():
    trace = _trace()
    assert len(trace) == 3 and [r.request_id for r in trace] == ["a", "b", "c"]
    assert trace.duration_ps == 3 * PS + 7
    assert trace.total_prompt_tokens == 31 and trace.total_output_tokens == 13
    assert trace.head(2).requests == trace.requests[:2]
    frame = trace.to_frame()
    assert list(frame.columns) == ["id", "arrival_ps", "arrival_s", "prompt_tokens",
                                   "output_tokens", "priority"]
    assert frame["arrival_ps"].tolist() == [0, 1_500_000, 3 * PS + 7]
    assert str(frame["arrival_ps"].dtype) == "int64"
    stats = trace.stats()
    assert stats["num_requests"] == 3
    assert stats["mean_prompt_tokens"] == pytest.approx(31 / 3)
    assert stats["prompt_output_ratio"] == pytest.approx(31 / 13)
    assert stats["mean_interarrival_s"] == pytest.approx((3 * PS + 7) / 2 / PS)


def test_request_is_frozen():
    with pytest.raises(AttributeError):
        Request("a", 0, 1, 1).prompt_tokens = 3  # type: ignore[misc]


def test_rescale_halves_interarrival_times():
    trace = generate_trace(200, PoissonArrival(rate_per_s=3.0), 10, 10, seed=4)
    faster = trace.rescale_rate(2.0)
    gaps = np.diff([r.arrival_ps for r in trace])
    fast_gaps = np.diff([r.arrival_ps for r in faster])
    # each arrival is rounded to the nearest ps, so a gap may move by at most 1 ps
    assert np.all(np.abs(fast_gaps * 2 - gaps) <= 2)
    assert faster.duration_ps == round(trace.duration_ps / 2)
    assert [r.prompt_tokens for r in faster] == [r.prompt_tokens for r in trace]
    assert trace.rescale_rate(1) is trace
    with pytest.raises(TraceError, match="expected a finite number > 0"):
        trace.rescale_rate(0)


@pytest.mark.parametrize("requests, fragment", [
    ([Request("a", 5, 1, 1), Request("b", 4, 1, 1)], "arrival order"),
    ([Request("a", 0, 1, 1), Request("a", 1, 1, 1)], "unique ids"),
    ([Request("a", 0, 0, 1)], "prompt_tokens: got 0"),
    ([Request("a", 0, 1, 0)], "output_tokens: got 0"),
    ([Request("a", -1, 1, 1)], "arrival_ps: got -1"),
    ([Request("a", 0, 1.5, 1)], "prompt_tokens: got 1.5"),  # type: ignore[arg-type]
])
def test_trace_invariants(requests, fragment):
    with pytest.raises(TraceError, match=re.escape(fragment)):
        RequestTrace(requests, "mem")


# -- readers: round trips ----------------------------------------------------------------

def test_csv_round_trip(tmp_path):
    trace = _trace()
    assert read_trace(trace.write_csv(tmp_path / "t.csv")) == trace
    assert read_trace(trace.write_csv(tmp_path / "t.txt"), format="csv") == trace


def test_jsonl_round_trip(tmp_path):
    trace = _trace()
    path = trace.write_jsonl(tmp_path / "t.jsonl")
    assert read_trace(path) == trace
    assert read_trace(path, "jsonl", limit=2) == trace.head(2)


def test_writing_a_trace_where_no_file_can_be_is_a_clear_error(tmp_path):
    trace = _trace()
    with pytest.raises(OutputError, match=r"is a directory; expected a file name"):
        trace.write_csv(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match=r"is a file, not a directory"):
        trace.write_jsonl(tmp_path / "file" / "t.jsonl")
    # A rewrite replaces the file whole and leaves no staging file behind.
    path = trace.write_csv(tmp_path / "t.csv")
    trace.head(1).write_csv(path)
    assert read_trace(path) == trace.head(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "t.csv"]


def test_csv_seconds_and_defaults(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,extra\n"
                    "0.1,5,6,x\n\n0.3000000000001,7.0,8,y\n")
    trace = read_trace(path)
    assert [r.arrival_ps for r in trace] == [100_000_000_000, 300_000_000_000]  # 1e-13 s rounds
    assert [r.request_id for r in trace] == ["req-0", "req-1"]
    assert trace[1].prompt_tokens == 7 and trace[0].priority == 0


def test_timestamp_column_relative_to_first(tmp_path):
    path = tmp_path / "ts.jsonl"
    rows = [{"timestamp": "2024-01-01T23:59:59.5Z", "prompt_tokens": 3, "output_tokens": 2},
            {"timestamp": "2024-01-02 00:00:00.25", "prompt_tokens": 3, "output_tokens": 2},
            {"timestamp": "2024-01-02T01:00:01+01:00", "prompt_tokens": 3, "output_tokens": 2}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [r.arrival_ps for r in read_trace(path)] == [0, 750_000_000_000, 1_500_000_000_000]
    numeric = tmp_path / "num.csv"
    numeric.write_text("timestamp,prompt_tokens,output_tokens\n1700000000.5,1,1\n1700000002,1,1\n")
    assert [r.arrival_ps for r in read_trace(numeric)] == [0, 1_500_000_000_000]


def test_rate_scale_and_limit_options(tmp_path):
    path = _trace().write_csv(tmp_path / "t.csv")
    scaled = read_trace(path, rate_scale=4.0, limit=3)
    assert [r.arrival_ps for r in scaled] == [0, 375_000, round((3 * PS + 7) / 4)]


def test_a_byte_that_is_not_utf8_is_named_by_line_and_a_limit_stops_before_it(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"id,arrival_s,prompt_tokens,output_tokens\n"
                     b"a,0,10,2\nb,1,10,2\ncaf\xe9,2,10,2\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value).startswith(f"{path}:4: byte 0xe9 at column 4 is not UTF-8; "
                                      "expected a UTF-8 text file")
    assert len(read_trace(path, limit=2)) == 2   # the file is read only up to the limit


def test_a_utf8_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival_s,prompt_tokens,output_tokens\n0,10,2\n")
    assert [r.prompt_tokens for r in read_trace(path)] == [10]


# -- readers: the real Azure traces ------------------------------------------------------

def _azure_reference(path: Path, n: int):
    """Independent parse with the csv module + datetime (µs precision is enough here)."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle))[:n]
    times = [dt.datetime.fromisoformat(r["TIMESTAMP"][:26]) for r in rows]
    arrivals_s = [(t - times[0]).total_seconds() for t in times]
    return arrivals_s, [int(r["ContextTokens"]) for r in rows], [int(r["GeneratedTokens"]) for r in rows]


# each case skips on its own file's absence (both once looked only for the conv trace, so
# the code case failed with "trace file not found" where only the conv trace was kept)
@pytest.mark.parametrize("path", [
    pytest.param(p, id=name, marks=pytest.mark.skipif(not p.is_file(), reason=missing(p)))
    for name, p in (("conv", AZURE_CONV), ("code", AZURE_CODE))])
def test_azure_reader_first_300(path):
    trace = read_trace(path, limit=300)
    assert len(trace) == 300
    arrivals = [r.arrival_ps for r in trace]
    assert arrivals[0] == 0 and all(b > a for a, b in zip(arrivals, arrivals[1:]))
    assert all(r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in trace)
    ref_arrivals_s, ref_prompt, ref_output = _azure_reference(path, 300)
    assert [r.prompt_tokens for r in trace] == ref_prompt
    assert [r.output_tokens for r in trace] == ref_output
    assert trace.total_prompt_tokens == sum(ref_prompt)
    # the reader keeps the file's 100 ns digits; the reference truncates to 1 µs
    assert np.allclose(np.array(arrivals) / PS, ref_arrivals_s, atol=1e-6, rtol=0)
    assert trace.stats()["mean_rate_per_s"] == pytest.approx(299 / ref_arrivals_s[-1])


@pytest.mark.skipif(not AZURE_CONV.is_file(), reason=missing(AZURE_CONV))
def test_azure_exact_sub_microsecond_digits():
    trace = read_trace(AZURE_CONV, "azure", limit=2)
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s exactly
    assert trace[1].arrival_ps == 4_314_579_000_000


# -- readers: every invalid case names file, line, column, value -------------------------

HEADER = "id,arrival_ps,prompt_tokens,output_tokens\n"

INVALID_CSV = [
    ("negative length", HEADER + "a,0,5,3\nb,10,-4,3\n", 3, "'prompt_tokens': got '-4'"),
    ("non-integer length", HEADER + "a,0,5,3\nb,10,4,2.5\n", 3, "'output_tokens': got '2.5'"),
    ("zero output", HEADER + "a,0,5,0\n", 2, "at least one token"),
    ("nan", HEADER + "a,0,nan,3\n", 2, "'prompt_tokens': got 'nan'"),
    # Python's int()/Decimal() read these; a trace cell holding them is a typo or an encoding slip
    ("underscore digits", HEADER + "a,0,1_000,3\n", 2, "'prompt_tokens': got '1_000'"),
    ("full-width digits", HEADER + "a,0,\uff11\uff12,3\n", 2, "'prompt_tokens': got '\uff11\uff12'"),
    ("arabic-indic seconds", "arrival_s,prompt_tokens,output_tokens\n\u0663,1,1\n", 2,
     "'arrival_s': got '\u0663'"),
    ("arabic-indic datetime", "timestamp,prompt_tokens,output_tokens\n"
     "2023-11-16 18:15:4\u0666,1,1\n", 2, "'timestamp': got"),
    # must not build a million-digit integer before the range check (it hung)
    ("huge exponent length", HEADER + "a,0,1e999999,3\n", 2, "'prompt_tokens': got '1e999999'"),
    # these overflowed Decimal's exponent: a decimal.Overflow traceback
    ("huge exponent seconds", "arrival_s,prompt_tokens,output_tokens\n1e999999,1,1\n", 2,
     "'arrival_s': got '1e999999'; expected a number of seconds >= 0 and below 1e15"),
    ("zero with a huge exponent is still zero tokens", HEADER + "a,0e20,1,3\nb,1,0e5000,3\n", 3,
     "'prompt_tokens': got '0e5000'; expected an integer from 1"),
    ("huge exponent timestamp", "timestamp,prompt_tokens,output_tokens\n9e999999,1,1\n", 2,
     "'timestamp': got '9e999999'"),
    ("arrival past int64 ps", HEADER + "a,0,5,3\nb,99999999999999999999,5,3\n", 3,
     "expected at most 9223372036854775807 ps (9223372 s)"),  # in the column's unit
    ("missing value", HEADER + "a,0,5,3\nb,,5,3\n", 3, "'arrival_ps': value is missing"),
    ("unsorted", HEADER + "a,0,5,3\nb,10,5,3\nc,9,5,3\n", 4, "before the arrival at line 3"),
    ("duplicate timestamp", HEADER + "a,0,5,3\nb,0,5,3\n", 3, "equal to the arrival at line 2"),
    ("duplicate id", HEADER + "a,0,5,3\na,1,5,3\n", 3, "'a', already used at line 2"),
    ("missing column", "id,arrival_ps,prompt_tokens\na,0,5\n", 1, "missing column 'output_tokens'"),
    ("no time column", "prompt_tokens,output_tokens\n5,3\n", 1, "missing arrival-time column"),
    ("semicolons", "arrival_s;prompt_tokens;output_tokens\n0;5;3\n", 1,
     "separated by commas (this header has ';' in one column)"),
    ("tabs", "arrival_s\tprompt_tokens\toutput_tokens\n0\t5\t3\n", 1,
     "separated by commas (this header has tabs in one column)"),
    ("capitalised", "Arrival_S,prompt_tokens,output_tokens\n0,5,3\n", 1,
     "column names are case-sensitive: write 'arrival_s', not 'Arrival_S'"),
    ("two time columns", "arrival_s,timestamp,prompt_tokens,output_tokens\n0,0,1,1\n", 1,
     "exactly one arrival-time column"),
    ("seconds that disagree", "arrival_ps,arrival_s,prompt_tokens,output_tokens\n0,0,1,1\n"
     "2000000000000,2.5,1,1\n", 3, "column 'arrival_s': got '2.5', but arrival_ps is "
     "2000000000000 (2 s)"),
    ("header only", HEADER, 1, "no requests"),
    # Not "no requests": an open quote used to swallow the whole file into one header cell.
    ("unclosed quote in the header", '"' + HEADER + "a,0,5,3\n", 1, "never closed"),
    ("unclosed quote in a row", HEADER + 'a,0,5,3\n"b,1,5,3\nc,2,5,3\n', 4, "never closed"),
    ("binary data", "\0\0\0", 1, "NUL byte at column 1"),
    ("NUL in a row", HEADER + "a,0,5,3\nb,1,\x005,3\n", 3, "NUL byte at column 5"),
    ("empty", "", 1, "file is empty"),
    ("wrong field count", HEADER + "a,0,5\n", 2, "got 3 fields; expected 4"),
    ("bad seconds", "arrival_s,prompt_tokens,output_tokens\nsoon,1,1\n", 2, "'arrival_s': got 'soon'"),
    ("negative seconds", "arrival_s,prompt_tokens,output_tokens\n-1,1,1\n", 2, "seconds >= 0"),
    ("bad datetime", "timestamp,prompt_tokens,output_tokens\n2023-13-01 00:00:00,1,1\n", 2,
     "'timestamp': got '2023-13-01 00:00:00'"),
    ("azure zero output", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.0,10,0\n", 3,
     "'GeneratedTokens': got '0'"),
    ("azure unsorted", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:46.6805899,10,3\n", 3,
     "'TIMESTAMP': got '2023-11-16 18:15:46.6805899', before"),
]


@pytest.mark.parametrize("name, text, line, fragment", INVALID_CSV, ids=[c[0] for c in INVALID_CSV])
def test_invalid_csv(tmp_path, name, text, line, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert fragment in message, message
    assert "expected" in message


def test_a_runs_requests_table_read_back_as_a_trace_keeps_its_ids(tmp_path):
    # requests.csv names the ids request_id; read back, they were req-0, req-1, ...
    path = tmp_path / "requests.csv"
    path.write_text("request_id,arrival_ps,prompt_tokens,output_tokens,status\n"
                    "alpha,0,50,5,finished\nbeta,1000,50,5,finished\n")
    assert [r.request_id for r in read_trace(path)] == ["alpha", "beta"]
    path.write_text("request_id,arrival_ps,prompt_tokens,output_tokens\nalpha,0,50,5\n"
                    "alpha,1,50,5\n")
    with pytest.raises(TraceError, match=r":3: column 'request_id': got 'alpha', already used"):
        read_trace(path)


INVALID_JSONL = [
    ("not json", '{"arrival_ps": 0, "prompt_tokens": 1, "output_tokens": 1}\n{oops\n', 2, "invalid JSON"),
    ("not an object", '[1, 2]\n', 1, "got a JSON list"),
    ("null length", '{"arrival_ps": 0, "prompt_tokens": null, "output_tokens": 1}\n', 1,
     "'prompt_tokens': value is missing"),
    ("NaN length", '{"arrival_ps": 0, "prompt_tokens": NaN, "output_tokens": 1}\n', 1,
     "'prompt_tokens': got nan"),
    ("bool length", '{"arrival_ps": 0, "prompt_tokens": true, "output_tokens": 1}\n', 1,
     "'prompt_tokens': got True"),
    ("float ps", '{"arrival_ps": 0.5, "prompt_tokens": 1, "output_tokens": 1}\n', 1,
     "'arrival_ps': got 0.5"),
    ("duplicate id", '{"id": 7, "arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n\n'
     '{"id": "7", "arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1}\n', 3, "already used at line 1"),
    ("missing key", '{"arrival_s": 0, "output_tokens": 1}\n', 1, "missing column 'prompt_tokens'"),
    ("duplicate key", '{"arrival_s": 0, "prompt_tokens": 9, "output_tokens": 1, "prompt_tokens": 1}\n',
     1, "key 'prompt_tokens' appears twice in one object"),
]


@pytest.mark.parametrize("name, text, line, fragment", INVALID_JSONL, ids=[c[0] for c in INVALID_JSONL])
def test_invalid_jsonl(tmp_path, name, text, line, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value).startswith(f"{path}:{line}:"), str(info.value)
    assert fragment in str(info.value), str(info.value)


def test_simultaneous_arrivals_option(tmp_path):
    path = tmp_path / "sim.csv"
    path.write_text(HEADER + "a,0,5,3\nb,0,5,3\nc,1,5,3\n")
    with pytest.raises(TraceError, match="allow_simultaneous"):
        read_trace(path)
    assert [r.arrival_ps for r in read_trace(path, allow_simultaneous=True)] == [0, 0, 1]
    path.write_text(HEADER + "a,0,5,3\nb,2,5,3\nc,1,5,3\n")
    with pytest.raises(TraceError, match=r":4: .*non-decreasing"):
        read_trace(path, allow_simultaneous=True)  # decreasing is never allowed


def test_reader_argument_errors(tmp_path):
    path = _trace().write_csv(tmp_path / "t.csv")
    with pytest.raises(TraceError, match="unknown trace format 'xml'"):
        read_trace(path, format="xml")
    with pytest.raises(TraceError, match="limit: got 0"):
        read_trace(path, limit=0)
    with pytest.raises(TraceError, match="trace file not found"):
        read_trace(tmp_path / "absent.csv")
    with pytest.raises(TraceError, match="missing column 'TIMESTAMP'; the Azure format expects"):
        read_trace(path, format="azure")


# -- generators --------------------------------------------------------------------------

def test_generators_deterministic_per_seed():
    args = (50, {"kind": "gamma", "rate_per_s": 4.0, "cv": 2.0},
            {"kind": "zipf", "a": 1.1, "low": 10, "high": 500}, {"kind": "uniform", "low": 1, "high": 64})
    assert generate_trace(*args, seed=3) == generate_trace(*args, seed=3)
    assert generate_trace(*args, seed=3) != generate_trace(*args, seed=4)
    # independent streams: changing the arrival process leaves the lengths alone
    other = generate_trace(50, PoissonArrival(rate_per_s=1.0), *args[2:], seed=3)
    assert [r.prompt_tokens for r in other] == [r.prompt_tokens for r in generate_trace(*args, seed=3)]


def test_poisson_mean_rate():
    arrivals = sample_arrivals_ps(PoissonArrival(rate_per_s=5.0), 10_001, np.random.default_rng(1))
    gaps_s = np.diff(arrivals) / PS
    assert arrivals[0] == 0
    assert gaps_s.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps_s.std() / gaps_s.mean() == pytest.approx(1.0, rel=0.05)  # exponential gaps


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv_realised(cv):
    arrivals = sample_arrivals_ps(GammaArrival(rate_per_s=10.0, cv=cv), 40_001,
                                  np.random.default_rng(7))
    gaps = np.diff(arrivals) / PS
    assert np.all(gaps > 0)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_fixed_arrivals():
    assert sample_arrivals_ps(FixedArrival(rate_per_s=4.0), 4).tolist() == [0, PS // 4, PS // 2, 3 * PS // 4]
    assert sample_arrivals_ps({"kind": "fixed", "interval_s": 0}, 3).tolist() == [0, 0, 0]


def test_length_distributions():
    rng = np.random.default_rng(0)
    zipf = sample_lengths(ZipfLength(a=1.5, low=20, high=80), 20_000, rng)
    assert zipf.min() >= 20 and zipf.max() <= 80
    counts = np.bincount(zipf - 20, minlength=61)
    assert counts[0] > counts[1] > counts[5] > counts[60]  # decreasing with rank
    assert counts[0] / counts[1] == pytest.approx(2 ** 1.5, rel=0.1)
    uniform = sample_lengths(UniformLength(low=3, high=5), 3000, rng)
    assert set(uniform.tolist()) == {3, 4, 5}
    normal = sample_lengths({"kind": "normal", "mean": 100, "std": 80, "low": 50, "high": 120}, 5000, rng)
    assert normal.min() == 50 and normal.max() == 120
    assert set(sample_lengths({"kind": "empirical", "values": [7, 9]}, 100, rng).tolist()) == {7, 9}
    assert sample_lengths(FixedLength(tokens=12), 3).tolist() == [12, 12, 12]


def test_empirical_from_file(tmp_path):
    source = RequestTrace([Request("a", 0, 11, 5), Request("b", 1, 22, 6)])
    path = source.write_csv(tmp_path / "src.csv")
    trace = generate_trace(40, {"kind": "fixed", "interval_s": 1},
                           {"kind": "empirical", "file": str(path)},
                           {"kind": "empirical", "file": str(path)}, seed=1)
    assert {r.prompt_tokens for r in trace} == {11, 22}
    assert {r.output_tokens for r in trace} == {5, 6}


def test_generator_spec_errors():
    with pytest.raises(TraceError, match="high .* must be >= low"):
        generate_trace(3, FixedArrival(interval_s=1), {"kind": "uniform", "low": 9, "high": 2}, 1)
    with pytest.raises(TraceError, match="arrival"):
        generate_trace(3, {"kind": "poison", "rate_per_s": 1}, 1, 1)
    with pytest.raises(TraceError, match="num_requests: got 0"):
        generate_trace(0, FixedArrival(interval_s=1), 1, 1)


arrival_specs = st.one_of(
    st.builds(lambda r: PoissonArrival(rate_per_s=r), st.floats(0.01, 1e6)),
    st.builds(lambda r, cv: GammaArrival(rate_per_s=r, cv=cv), st.floats(0.01, 1e6), st.floats(0.1, 20)),
    # (a gap is at least 1 ps, or 0: all at once)
    st.builds(lambda i: FixedArrival(interval_s=i), st.just(0.0) | st.floats(1e-12, 100)),
)
length_specs = st.one_of(
    st.integers(1, 100_000),
    st.builds(lambda lo, d: UniformLength(low=lo, high=lo + d), st.integers(1, 5000), st.integers(0, 5000)),
    st.builds(lambda a, lo, d: ZipfLength(a=a, low=lo, high=lo + d),
              st.floats(0, 3), st.integers(1, 5000), st.integers(0, 2000)),
)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), arrival=arrival_specs, prompt=length_specs, output=length_specs,
       seed=st.integers(0, 2**32))
def test_generated_traces_valid_and_round_trip(n, arrival, prompt, output, seed):
    trace = generate_trace(n, arrival, prompt, output, seed=seed)
    arrivals = [r.arrival_ps for r in trace]
    assert len(trace) == n and arrivals[0] == 0 and arrivals == sorted(arrivals)
    simultaneous = isinstance(arrival, FixedArrival) and arrival.interval_ps == 0
    if not simultaneous:
        assert all(b > a for a, b in zip(arrivals, arrivals[1:]))
    for spec, values in ((prompt, [r.prompt_tokens for r in trace]),
                         (output, [r.output_tokens for r in trace])):
        low, high = (spec, spec) if isinstance(spec, int) else (spec.low, spec.high)
        assert low <= min(values) and max(values) <= high
    with tempfile.TemporaryDirectory() as tmp:
        path = trace.write_csv(Path(tmp) / "g.csv")
        assert read_trace(path, allow_simultaneous=simultaneous) == trace


# -- arrival times must fit int64 picoseconds --------------------------------------------

def _generator(arrival, num_requests=4, **extra):
    return {"arrival": arrival, "prompt": 10, "output": 5, "num_requests": num_requests,
            **extra}


@pytest.mark.parametrize("arrival, path, got", [
    ({"kind": "fixed", "interval_s": 1e7}, "arrival.interval_s", "(got 10000000.0)"),
    ({"kind": "fixed", "interval_s": 1e300}, "arrival.interval_s", "(got 1e+300)"),
    ({"kind": "fixed", "rate_per_s": 1e-7}, "arrival.rate_per_s", "(got 1e-07)"),
    ({"kind": "poisson", "rate_per_s": 1e-7}, "arrival.rate_per_s", "(got 1e-07)"),
    ({"kind": "gamma", "rate_per_s": 1e-7, "cv": 2}, "arrival.rate_per_s", "(got 1e-07)"),
])
def test_arrival_gap_beyond_int64_ps_is_a_located_schema_error(arrival, path, got):
    # Used to escape as OverflowError / "cannot convert float infinity to integer", or
    # as a RuntimeWarning and a wrapped arrival_ps of -9223372036854775808.
    with pytest.raises(ConfigError) as info:
        validate(TraceSpec, _generator(arrival), "scenario.yaml")
    (where, message), = info.value.problems
    assert where == path and got in message, message
    assert "9223372 s" in message and ("at most" in message or "at least 1.085e-07" in message)


def test_longest_gap_that_fits_still_generates():
    trace = TraceSpec.model_validate(_generator({"kind": "fixed", "interval_s": 9223372.0},
                                                num_requests=2)).build()
    assert [r.arrival_ps for r in trace] == [0, 9223372 * PS]


@pytest.mark.parametrize("data, fragment", [
    (_generator({"kind": "fixed", "interval_s": 1e6}, 20),
     "20 requests 1e+06 s apart span 1.9e+07 s; expected at most 10 requests"),
    (_generator({"kind": "poisson", "rate_per_s": 1e-6}, 20),
     "20 requests at arrival.rate_per_s 1e-06 span 1.9e+07 s on average; expected at most 10"),
    (_generator({"kind": "fixed", "interval_s": 1e6}, 6, rate_scale=0.5),
     "1e+07 s after rate_scale 0.5; expected rate_scale >= 0.5422"),
])
def test_trace_span_beyond_int64_ps_is_a_located_schema_error(data, fragment):
    with pytest.raises(ConfigError) as info:
        validate(TraceSpec, data, "scenario.yaml")
    (where, message), = info.value.problems
    assert where == "num_requests" and fragment in message, message
    # limit keeps only the first requests, so the stretched span fits again.
    validate(TraceSpec, {**_generator({"kind": "fixed", "interval_s": 1e6}, 6),
                         "rate_scale": 0.5, "limit": 3}, "scenario.yaml")


def test_sampled_arrivals_that_overflow_are_reported_without_numpy_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no "invalid value encountered in cast"
        # The mean span fits, but these seeds draw a gap longer than ~106.8 days.
        spec = TraceSpec.model_validate(_generator({"kind": "poisson", "rate_per_s": 1.1e-7},
                                                   2, seed=0))
        with pytest.raises(TraceError, match=r"^workload\.trace\.arrival\.rate_per_s: got "
                                             r"1\.1e-07; .* request 1 of 2 at 2\.994e\+07 s"):
            spec.build()
        with pytest.raises(TraceError, match=r"^arrival\.rate_per_s: got 1\.1e-07; .*within "
                                             r"9223372 s"):
            generate_trace(2, {"kind": "gamma", "rate_per_s": 1.1e-7, "cv": 3}, 1, 1, seed=0)
        with pytest.raises(TraceError, match=r"^arrival\.interval_s: got 1000000\.0; 20 requests"):
            generate_trace(20, FixedArrival(interval_s=1e6), 1, 1)
        # The sampled span fits, but rate_scale 0.5 doubles it past the limit.
        stretched = TraceSpec.model_validate(_generator({"kind": "poisson", "rate_per_s": 2.2e-7},
                                                        2, seed=7, rate_scale=0.5))
        with pytest.raises(TraceError, match=r"^workload\.trace\.rate_scale: got 0\.5; .* "
                                             r"expected rate_scale >= 0\.5901"):
            stretched.build()


def test_a_rate_scale_that_pushes_arrivals_past_int64_says_the_smallest_factor():
    trace = RequestTrace([Request("a", 0, 4, 4), Request("b", 10 * 10**12, 4, 4)])  # 10 s
    with pytest.raises(TraceError, match=r"rate scale factor: got 1e-300.*expected at least 1.08"):
        trace.rescale_rate(1e-300)
    assert trace.rescale_rate(1.1e-6)[1].arrival_ps > 9 * 10**18  # just fits


def test_generate_trace_bounds_the_number_of_requests():
    with pytest.raises(TraceError, match="num_requests: got 1000000000; expected an integer from 1 to 10,000,000"):
        generate_trace(10**9, {"kind": "poisson", "rate_per_s": 1e6}, 16, 8)


def test_a_trace_frame_written_by_pandas_reads_back(tmp_path):
    # to_frame() has arrival_ps and arrival_s (and to_csv adds the index): both time
    # columns were refused, so the pandas round trip failed
    trace = read_trace(REPO / "traces" / "ratio_1_1_512.csv")
    trace.to_frame().to_csv(tmp_path / "t.csv")
    again = read_trace(tmp_path / "t.csv")
    assert [(r.request_id, r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in again] == \
        [(r.request_id, r.arrival_ps, r.prompt_tokens, r.output_tokens) for r in trace]
    # block hashes too: pandas writes the tuples as "(1, 2)"
    hashed = RequestTrace([Request("a", 0, 1100, 3, 0, (1, 2)), Request("b", 5, 1100, 3, 0, (1, 3))],
                          hash_block_tokens=512)
    hashed.to_frame().to_csv(tmp_path / "h.csv")
    assert read_trace(tmp_path / "h.csv", hash_block_tokens=512) == hashed


def test_numpy_integers_from_a_dataframe_are_plain_token_counts():
    # np.int64 cells were refused ("expected an integer >= 1, got np.int64(5)") and as a
    # generator's fixed length gave a pydantic discriminator error
    trace = RequestTrace([Request("a", np.int64(0), np.int64(5), np.int32(3), np.int64(1))])
    assert trace == RequestTrace([Request("a", 0, 5, 3, 1)])
    assert all(type(v) is int for v in (trace[0].arrival_ps, trace[0].prompt_tokens))
    assert repr(trace) == "RequestTrace(1 request from <memory>)"
    generated = generate_trace(np.int64(3), PoissonArrival(rate_per_s=2.0), np.int64(5),
                               np.int64(4))
    assert [(r.prompt_tokens, r.output_tokens) for r in generated] == [(5, 4)] * 3
    with pytest.raises(TraceError, match="prompt_tokens: got 0; expected an integer >= 1"):
        RequestTrace([Request("a", 0, np.int64(0), 3)])
    hashed = RequestTrace([Request("a", 0, 50, 3, 0, (np.int64(3), 4))], hash_block_tokens=16)
    assert hashed[0].block_hashes == (3, 4) and type(hashed[0].block_hashes[0]) is int
    with pytest.raises(TraceError, match="priority: got np.True_; expected an integer"):
        RequestTrace([Request("a", 0, 5, 3, np.bool_(True))])


def test_preset_traces_name_a_bad_argument_in_a_trace_error():
    # pydantic's ValidationError came out raw (a PoissonArrival built in the preset)
    from npusim.workload import trace_presets

    with pytest.raises(TraceError, match=r"arrival\.poisson\.rate_per_s: .*greater than 0 \(got -1\)"):
        trace_presets.decode_dominated(rate_per_s=-1)
    with pytest.raises(TraceError, match=r"prompt\.fixed\.tokens: .* \(got 0\)"):
        trace_presets.ratio(0, 10)
