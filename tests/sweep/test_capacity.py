"""Capacity search (npusim.sweep.capacity): the search logic against a stand-in
simulator with a known capacity, then real runs through the API and the CLI."""

from __future__ import annotations

import json
import math

import pytest

import npusim.api
from npusim.cli import main
from npusim.config.presets import REPO_ROOT
from npusim.core.errors import ConfigError
from npusim.sweep.capacity import find_capacity

DISAGG = REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_disagg.yaml"
QUICKSTART = REPO_ROOT / "workloads" / "scenarios" / "quickstart.yaml"


class _Result:
    def __init__(self, metrics):
        self.metrics = metrics


def stand_in(capacity_per_s, *, requests=100, base_rate_per_s=10.0, lone_ttft_ms=50.0,
             ttft_slo_ms=1000.0, calls=None, rejected=0, smallest_scale=0.0, e2e_ms=None):
    """A simulate() whose requests all meet the SLO up to ``capacity_per_s`` and half of
    them past it; TTFT grows with the backlog (the work the trace brings beyond what
    its span gives time for) and stops growing once the trace arrives as one burst."""
    def simulate(config, mode=None, overrides=()):
        (override,) = overrides
        scale = float(override.split("=", 1)[1])
        offered = base_rate_per_s * scale
        if calls is not None:
            calls.append(scale)
        if scale < smallest_scale:  # as a generator's span check refuses the stretch
            raise ConfigError("<dict>", [("workload.trace.num_requests", "spans too long")])
        span_s = (requests - 1) / offered
        ttft = lone_ttft_ms + 1e3 * max(0.0, requests / capacity_per_s - span_s)
        share = 1.0 if offered <= capacity_per_s and lone_ttft_ms <= ttft_slo_ms else 0.5
        tbt = 20.0
        if rejected == requests:  # nothing finished: no latency (null)
            share, ttft, tbt = 0.0, None, None
        return _Result({"offered_requests_per_s": offered, "slo_attainment": share,
                        "slo_attainment_ttft": share, "slo_attainment_tbt": 1.0 if share else 0.0,
                        "goodput_requests_per_s": min(offered, capacity_per_s) * share,
                        "ttft_ms_p90": ttft, "tbt_ms_mean": tbt, "e2e_ms_mean": e2e_ms,
                        "requests_rejected": rejected, "requests_total": requests})
    return simulate


@pytest.mark.unit
@pytest.mark.parametrize("capacity", [3.3, 47.0, 1234.0])
def test_the_search_brackets_a_known_capacity_within_the_tolerance(capacity, monkeypatch):
    monkeypatch.setattr(npusim.api, "simulate", stand_in(capacity))
    found = find_capacity(DISAGG, tolerance=0.05, max_probes=30)
    assert found.status == "found" and found.note == ""
    low, high = found.best.offered_requests_per_s, found.first_miss.offered_requests_per_s
    assert found.best.meets_target and not found.first_miss.meets_target
    assert low <= high <= low * 1.05
    assert low <= capacity < high
    assert found.max_requests_per_s == low
    assert list(found.table()["rate_scale"]) == sorted(p.rate_scale for p in found.probes)


@pytest.mark.unit
def test_the_search_is_deterministic_and_keeps_to_its_probe_budget(monkeypatch):
    calls: list[float] = []
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, calls=calls))
    first = find_capacity(DISAGG, tolerance=0.001, max_probes=7)
    assert len(first.probes) == 7 == len(calls)
    assert first.status == "found" and "probes ran out" in first.note
    assert find_capacity(DISAGG, tolerance=0.001, max_probes=7) == first
    # one line with the capacity (the generated repr dumped every probe, 2 kB for 3)
    text = repr(first)
    assert "\n" not in text and len(text) < 300 and ", probes=7)" in text
    assert f"max_requests_per_s={first.max_requests_per_s!r}" in text


@pytest.mark.unit
def test_a_trace_too_short_to_overload_stops_at_the_burst(monkeypatch):
    # 3 requests that never queue: all at once they meet the SLO; doubling is pointless
    monkeypatch.setattr(npusim.api, "simulate", stand_in(math.inf, requests=3))
    found = find_capacity(DISAGG, max_probes=40)
    assert found.status == "all_meet" and found.first_miss is None
    assert "too short to find the capacity" in found.note
    assert found.probes[-1].burst and len(found.probes) < 40


@pytest.mark.unit
def test_an_all_meet_search_on_a_short_trace_does_not_ask_for_more_probes(monkeypatch):
    # the probes ran out with every one meeting the SLO while the 100 requests arrived
    # within a fraction of a request's lifetime: "raise the probe limit" only inflated
    # the bound (helper-39 saw "2551 req/s is a lower bound" for 40 requests)
    monkeypatch.setattr(npusim.api, "simulate", stand_in(1e9, e2e_ms=1000.0))
    found = find_capacity(DISAGG, max_probes=4)
    assert found.status == "all_meet" and found.best.short_trace
    assert found.note.startswith("every probe met the target, but at ")
    assert "the replay ends before the queues settle" in found.note
    assert "raise the probe limit" not in found.note
    assert found.note.endswith("more probes or a higher start would only report a higher "
                               "rate for the same burst")
    # a trace long enough for its rates keeps the old advice
    monkeypatch.setattr(npusim.api, "simulate", stand_in(1e9, e2e_ms=1.0))
    assert "raise the probe limit" in find_capacity(DISAGG, max_probes=4).note


@pytest.mark.unit
def test_a_capacity_from_arrivals_shorter_than_a_few_request_lifetimes_is_flagged(monkeypatch):
    # 100 requests found at ~47 req/s arrive within ~2.1 s: flagged when a request lives
    # 1 s on average (2.1 < 4 x 1), not when it lives 0.4 s (2.1 > 4 x 0.4)
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, e2e_ms=1000.0))
    found = find_capacity(DISAGG, max_probes=30)
    span_s = found.best.arrival_span_ms / 1e3
    assert found.status == "found" and found.best.short_trace and span_s < 4 * 1.0
    assert found.note == (f"at {found.best.offered_requests_per_s:.4g} req/s the 100 requests "
                          f"arrive within {span_s:.3g} s, less than 4 times their mean "
                          "end-to-end latency (1 s): the replay ends before the queues settle, "
                          "so a longer trace (more requests) can find a lower capacity "
                          "(every row of the trace file ran: use a longer file)")
    assert found.max_requests_per_s is not None  # still the bracket found, with the warning
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, e2e_ms=0.4e3))
    calm = find_capacity(DISAGG, max_probes=30)
    assert calm.best.arrival_span_ms > 4 * 0.4e3 and not calm.best.short_trace
    assert calm.note == ""
    # without an end-to-end latency (nothing finished) nothing is claimed
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0))
    assert find_capacity(DISAGG, max_probes=30).note == ""


def lengthening_stand_in(true_capacity_per_s, e2e_ms, calls, file_rows=None):
    """A simulate() whose capacity looks higher on a short trace: the requests arriving
    beyond ``true_capacity_per_s`` meet the SLO as long as the trace ends within the
    backlog a request lifetime absorbs (``e2e_ms``), the transient a replay shows.
    With ``file_rows`` the trace is a file of that many rows, cut at its ``limit``."""
    def simulate(config, mode=None, overrides=()):
        (override,) = overrides
        scale = float(override.split("=", 1)[1])
        trace = config.workload.trace
        requests = (trace.num_requests if file_rows is None else
                    min(trace.limit or file_rows, file_rows))
        offered = 10.0 * scale
        calls.append((requests, scale))
        span_s = (requests - 1) / offered
        apparent = true_capacity_per_s * (1 + e2e_ms / 1e3 / span_s)
        share = 1.0 if offered <= apparent else 0.5
        return _Result({"offered_requests_per_s": offered, "slo_attainment": share,
                        "slo_attainment_ttft": share, "slo_attainment_tbt": 1.0,
                        "goodput_requests_per_s": offered * share,
                        "ttft_ms_p90": 50.0 * (1 + offered / apparent),  # grows with load
                        "tbt_ms_mean": 20.0, "e2e_ms_mean": e2e_ms,
                        "requests_rejected": 0, "requests_total": requests})
    return simulate


@pytest.mark.unit
def test_lengthening_doubles_a_generated_trace_until_the_capacity_settles(monkeypatch):
    from npusim.sweep.capacity import find_steady_capacity

    calls: list = []
    monkeypatch.setattr(npusim.api, "simulate", lengthening_stand_in(40.0, 2000.0, calls))
    generated = ["workload.trace={arrival: {kind: poisson, rate_per_s: 10}, prompt: 100, "
                 "output: 100, num_requests: 100}"]
    short = find_capacity(DISAGG, overrides=generated, max_probes=30)
    assert short.best.short_trace and short.max_requests_per_s > 1.2 * 40.0
    assert short.note.endswith("(--lengthen N, capacity.lengthen in a sweep, doubles a "
                               "generator's num_requests or a file's limit)")
    steady = find_steady_capacity(DISAGG, overrides=generated, max_probes=30, doublings=4)
    assert not steady.best.short_trace
    assert 40.0 <= steady.max_requests_per_s < short.max_requests_per_s
    sizes = sorted({requests for requests, _ in calls})
    assert sizes == [100 * 2 ** i for i in range(len(sizes))] and len(sizes) >= 3
    assert steady.best.requests == sizes[-1]
    assert steady.note.startswith("lengthened the trace (100 requests: ")
    assert f"; {sizes[-1]} requests" in steady.note
    # each longer search starts at the rate the shorter one found, not at the trace's own
    first_of_second = next(scale for requests, scale in calls if requests == 200)
    assert first_of_second == pytest.approx(short.best.rate_scale)
    # no doublings: the plain search; at most the doublings asked for
    assert find_steady_capacity(DISAGG, overrides=generated, max_probes=30,
                                doublings=0).best.requests == 100
    once = find_steady_capacity(DISAGG, overrides=generated, max_probes=30, doublings=1)
    assert once.best.requests == 200 and once.best.short_trace


def rows_file(tmp_path, rows):
    """A 100:100 trace file of ``rows`` requests, 10 ms apart."""
    path = tmp_path / f"rows_{rows}.csv"
    path.write_text("id,arrival_ps,prompt_tokens,output_tokens\n" + "".join(
        f"r{i},{i * 10 ** 10},100,100\n" for i in range(rows)))
    return str(path)


@pytest.mark.unit
@pytest.mark.parametrize("rows, sizes", [(300, [100, 200, 300]), (400, [100, 200, 400])])
def test_lengthening_a_trace_file_doubles_its_limit_until_the_rows_run_out(
        rows, sizes, monkeypatch, tmp_path):
    from npusim.sweep import find_steady_capacity

    calls: list = []
    monkeypatch.setattr(npusim.api, "simulate",
                        lengthening_stand_in(40.0, 5000.0, calls, file_rows=rows))
    in_file = [f"workload.trace.file={rows_file(tmp_path, rows)}", "workload.trace.limit=100"]
    steady = find_steady_capacity(DISAGG, overrides=in_file, max_probes=30, doublings=4)
    # 100 rows, then 200, then all of the file (asked for 400); another search would
    # replay the same rows, so it stops there and says why (with 400 rows too: no search
    # of the same 400 rows again)
    assert sorted({requests for requests, _ in calls}) == sizes
    assert steady.best.requests == rows and steady.best.short_trace
    assert steady.note.startswith("lengthened the trace (100 requests: ")
    assert "; 200 requests: " in steady.note
    assert f"no more rows than the {rows} replayed" in steady.note
    assert "(every row of the trace file ran: use a longer file)" in steady.note
    assert "--lengthen N" not in steady.note  # no hint that cannot help
    # the whole file from the start: nothing to lengthen, one search, the note says so
    calls.clear()
    whole = find_steady_capacity(DISAGG, overrides=in_file[:1], max_probes=30, doublings=4)
    assert {requests for requests, _ in calls} == {rows}
    assert whole.note.endswith("cannot be lengthened; use a longer file")
    assert "replay ends before the queues settle" in whole.note


@pytest.mark.unit
def test_lengthening_a_generator_with_a_limit_lifts_the_limit(monkeypatch):
    from npusim.sweep import find_steady_capacity

    calls: list = []
    stand_in_run = lengthening_stand_in(40.0, 2000.0, calls)

    def simulate(config, mode=None, overrides=()):  # the limit cuts the generated trace
        trace = config.workload.trace
        limited = config.model_copy(update={"workload": config.workload.model_copy(update={
            "trace": trace.model_copy(update={"num_requests": min(
                trace.num_requests, trace.limit or trace.num_requests)})})})
        return stand_in_run(limited, mode, overrides)
    monkeypatch.setattr(npusim.api, "simulate", simulate)
    generated = ["workload.trace={arrival: {kind: poisson, rate_per_s: 10}, prompt: 100, "
                 "output: 100, num_requests: 400, limit: 100}"]
    steady = find_steady_capacity(DISAGG, overrides=generated, max_probes=30, doublings=2)
    assert sorted({requests for requests, _ in calls}) == [100, 200, 400]


@pytest.mark.unit
def test_lengthening_also_follows_a_trace_that_meets_the_slo_as_one_burst(monkeypatch):
    from npusim.sweep.capacity import find_steady_capacity

    def simulate(config, mode=None, overrides=()):
        # Below 400 requests the latencies stop growing with the rate once the trace is
        # one burst, and every burst meets the SLO; 400 requests miss it past 50 req/s.
        scale = float(overrides[0].split("=", 1)[1])
        requests = config.workload.trace.num_requests
        offered = 10.0 * scale
        share = 1.0 if requests < 400 or offered < 50.0 else 0.5
        ttft = 50.0 * (min(offered, 80.0) if requests < 400 else offered)
        return _Result({"offered_requests_per_s": offered, "slo_attainment": share,
                        "slo_attainment_ttft": share, "slo_attainment_tbt": 1.0,
                        "goodput_requests_per_s": offered * share, "ttft_ms_p90": ttft,
                        "tbt_ms_mean": 20.0, "e2e_ms_mean": ttft + 100.0,
                        "requests_rejected": 0, "requests_total": requests})
    monkeypatch.setattr(npusim.api, "simulate", simulate)
    generated = ["workload.trace={arrival: {kind: poisson, rate_per_s: 10}, prompt: 100, "
                 "output: 100, num_requests: 100}"]
    assert find_capacity(DISAGG, overrides=generated, max_probes=30).status == "all_meet"
    steady = find_steady_capacity(DISAGG, overrides=generated, max_probes=30, doublings=2)
    assert steady.status == "found" and steady.best.requests == 400
    assert 45.0 < steady.max_requests_per_s < 50.0
    assert steady.note.startswith("lengthened the trace (100 requests: all met up to ")
    assert "one burst; 200 requests: all met" in steady.note


@pytest.mark.unit
def test_lengthening_takes_a_bounded_doubling_count():
    from npusim.sweep.capacity import find_steady_capacity

    with pytest.raises(ConfigError, match="doublings: got 7; expected 0 to 6 doublings of the trace"):
        find_steady_capacity(DISAGG, doublings=7)


def refusing(simulate, by_kind):
    """``simulate`` whose runs also reject ``by_kind`` (kind: count) of the requests,
    every one of them a request that cannot meet the SLO."""
    def run(config, mode=None, overrides=()):
        metrics = dict(simulate(config, mode, overrides).metrics)
        refused = sum(by_kind.values())
        total = metrics["requests_total"]
        for key in ("slo_attainment", "slo_attainment_ttft", "slo_attainment_tbt"):
            metrics[key] = min(metrics[key], 1 - refused / total)
        metrics.update(requests_rejected=refused, requests_rejected_by_kind=dict(by_kind))
        return _Result(metrics)
    return run


def search_refusing(monkeypatch, by_kind, capacity_per_s=47.0, **search):
    """find_capacity against a stand-in that rejects ``by_kind``; the result and the
    rate scales probed."""
    calls: list = []
    monkeypatch.setattr(npusim.api, "simulate",
                        refusing(stand_in(capacity_per_s, calls=calls), by_kind))
    return find_capacity(DISAGG, **search), calls


@pytest.mark.unit
def test_requests_refused_at_any_rate_below_the_target_stop_the_search_at_once(monkeypatch):
    found, calls = search_refusing(monkeypatch, {"batch_tokens": 35}, max_probes=16)
    # one probe: no rate can admit a prompt longer than the batch (the search halved
    # 15 times, to 1e-4 req/s, before saying so)
    assert len(calls) == 1 and found.status == "none_meets" and found.best is None
    assert found.first_miss.requests_never_servable == 35
    assert found.note.startswith("35 of 100 requests are rejected at any rate, so at most "
                                 "65.0% can meet the SLO, below the 90% target: no rate meets it")
    assert "workload.scheduler.kind=chunked_prefill" in found.note


@pytest.mark.unit
def test_requests_refused_at_any_rate_above_the_target_are_named_with_the_capacity(monkeypatch):
    monkeypatch.setattr(npusim.api, "simulate",
                        refusing(stand_in(47.0), {"batch_tokens": 3, "context_window": 2}))
    found = find_capacity(DISAGG, max_probes=30)
    assert found.status == "found" and 40 < found.max_requests_per_s <= 47.0
    assert found.best.requests_never_servable == 5
    assert found.note == ("5 of 100 requests are rejected at any rate, so at most 95.0% can "
                          "meet the SLO, which leaves 5.0% of the requests to miss it under "
                          "load within the 90% target: 3: prompt longer than "
                          "scheduler.max_batch_tokens (whole prompts only) (raise "
                          "workload.scheduler.max_batch_tokens or use "
                          "workload.scheduler.kind=chunked_prefill); 2: prompt + output exceed "
                          "the model's context window (a trace property: the model cannot "
                          "serve them)")


@pytest.mark.unit
def test_rejections_that_depend_on_the_load_do_not_stop_the_search(monkeypatch):
    found, calls = search_refusing(monkeypatch, {"never_scheduled": 35}, max_probes=8)
    assert len(calls) == 8 and found.first_miss.requests_never_servable == 0
    assert "at any rate" not in found.note


@pytest.mark.unit
def test_requests_that_miss_the_slo_unloaded_stop_the_search_going_down(monkeypatch):
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, lone_ttft_ms=1500.0))
    found = find_capacity(DISAGG, max_probes=40)
    assert found.status == "none_meets" and found.best is None
    assert "miss the SLO without any load" in found.note and len(found.probes) < 10
    assert found.max_requests_per_s is None


@pytest.mark.unit
def test_a_stretch_the_trace_refuses_ends_the_search_going_down_with_what_ran(monkeypatch):
    # a generated trace refuses a rate_scale that spans past int64 ps with a ConfigError
    monkeypatch.setattr(npusim.api, "simulate",
                        stand_in(47.0, lone_ttft_ms=900.0, ttft_slo_ms=100.0, smallest_scale=0.6))
    found = find_capacity(DISAGG, max_probes=40)
    assert found.status == "none_meets" and len(found.probes) == 1
    assert found.note.startswith("stopped going down at rate_scale 0.5: ")
    assert "workload.trace.num_requests" in found.note


@pytest.mark.unit
def test_a_search_where_every_request_is_rejected_says_so(monkeypatch):
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, rejected=100))
    found = find_capacity(DISAGG, max_probes=5)
    assert found.status == "none_meets" and len(found.probes) == 5  # zeros are not "unchanged"
    assert found.note.startswith("100 of 100 requests were rejected")


@pytest.mark.unit
def test_a_search_where_nothing_finished_writes_null_latencies_and_plots(tmp_path, monkeypatch):
    from npusim import analysis

    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, rejected=100))
    find_capacity(DISAGG, max_probes=3).write(tmp_path)
    def no_nan(text):
        raise AssertionError(f"capacity.json holds {text}, which is not JSON")
    summary = json.loads((tmp_path / "capacity.json").read_text(), parse_constant=no_nan)
    assert [probe["ttft_ms_p90"] for probe in summary["probes"]] == [None] * 3
    figure = analysis.plot_capacity(tmp_path)  # empty latency cells are probes, not damage
    assert figure.axes


@pytest.mark.unit
def test_only_a_bracketed_search_reports_a_capacity(monkeypatch):
    monkeypatch.setattr(npusim.api, "simulate", stand_in(1e9))
    found = find_capacity(DISAGG, max_probes=3)
    assert found.status == "all_meet" and found.best is not None
    assert found.max_requests_per_s is None and found.to_dict()["max_requests_per_s"] is None
    assert "lower bound" in found.note and "--max-probes" in found.note
    assert found.mode == "analytic" and found.config["name"] == "qwen3_4b_npu64_pd_disagg"


@pytest.mark.unit
@pytest.mark.parametrize("kwargs, fragment", [
    ({"target_attainment": 0}, "target_attainment: got 0; expected a share in (0, 1]"),
    ({"target_attainment": True}, "target_attainment: got True"),
    ({"tolerance": 0.0}, "tolerance: got 0.0"),
    ({"max_probes": 1}, "max_probes: got 1; expected an integer from 2 to 100"),
    ({"max_probes": 2.5}, "max_probes: got 2.5"),
    ({"seeds": 0}, "seeds: got 0; expected an integer from 1 to 64"),
])
def test_bad_search_arguments_are_named(kwargs, fragment):
    with pytest.raises(ConfigError) as info:
        find_capacity(DISAGG, **kwargs)
    assert fragment in str(info.value)


@pytest.mark.component
def test_the_capacity_command_finds_and_writes_a_real_capacity(tmp_path, capsys):
    # the shipped 32 requests and a 38 ms TTFT budget (a lone prompt takes ~35 ms):
    # 8 quick probes bracket it within 25%
    out = tmp_path / "cap"
    with pytest.raises(SystemExit) as info:
        main(["capacity", str(DISAGG), "--set", "workload.slo.ttft_ms=38", "--tolerance", "0.25",
              "--max-probes", "8", "--out", str(out)])
    captured = capsys.readouterr()
    assert (info.value.code or 0) == 0, captured.err
    assert "capacity: " in captured.out and "rate_scale 1 " in captured.out
    # the SLO searched against, defaults included (it went unsaid)
    assert "SLO: TTFT <= 38 ms and TPOT <= 200 ms (workload.slo), for 90% of the requests" \
        in captured.out
    found = json.loads((out / "capacity.json").read_text())
    table = (out / "capacity.csv").read_text().splitlines()
    assert len(table) == 1 + len(found["probes"]) <= 9
    assert found["mode"] == "analytic" and "config" not in found
    assert "ttft_ms: 38.0" in (out / "config.resolved.yaml").read_text()
    assert found["status"] == "found" and found["slo"] == {"ttft_ms": 38.0, "tbt_ms": 200.0}
    best, miss = found["best"], found["first_miss"]
    assert best["slo_attainment"] >= 0.9 > miss["slo_attainment"]
    assert best["rate_scale"] < miss["rate_scale"] <= 1.25 * best["rate_scale"]
    assert all(p["requests"] == 32 for p in found["probes"])
    # the offered rate is the trace's own, scaled
    base = found["probes"][0]
    assert base["rate_scale"] == 1.0
    assert math.isclose(best["offered_requests_per_s"],
                        base["offered_requests_per_s"] * best["rate_scale"], rel_tol=1e-9)
    # a probe is exactly a run at its rate_scale (no state carried between probes)
    direct = npusim.api.simulate(DISAGG, overrides=["workload.slo.ttft_ms=38",
                                                    f"workload.trace.rate_scale={best['rate_scale']!r}"])
    assert direct.metrics["ttft_ms_p90"] == best["ttft_ms_p90"]
    assert direct.metrics["slo_attainment"] == best["slo_attainment"]
    # and it plots
    with pytest.raises(SystemExit) as info:
        main(["plot", str(out), "--kind", "capacity"])
    assert (info.value.code or 0) == 0, capsys.readouterr().err
    assert (out / "plot-capacity.png").stat().st_size > 10_000
    # another kind says what this directory is (it said "not a sweep output directory")
    with pytest.raises(SystemExit) as info:
        main(["plot", str(out), "--kind", "cdf"])
    assert info.value.code == 2
    assert "a capacity search's directory (capacity.csv); it plots with --kind capacity" \
        in capsys.readouterr().err


@pytest.mark.unit
def test_the_capacity_plot_draws_a_result_and_names_a_damaged_summary(tmp_path, monkeypatch):
    from npusim import analysis

    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0))
    found = find_capacity(DISAGG, max_probes=8)
    figure = analysis.plot_capacity(found)
    top = figure.axes[0]
    assert "TTFT <= 2000 ms, TPOT <= 200 ms" in top.get_title()  # the scenario's SLO
    assert any("capacity" in text.get_text() for text in top.texts)
    found.write(tmp_path)
    (tmp_path / "capacity.json").write_text('{"target_attainment": "high"}')
    with pytest.raises(analysis.AnalysisError, match="capacity.json: not the summary"):
        analysis.plot_capacity(tmp_path)
    with pytest.raises(analysis.AnalysisError, match="no capacity.json"):
        analysis.plot_capacity(tmp_path / "elsewhere")
    found.write(tmp_path)
    (tmp_path / "capacity.csv").write_text("rate_scale\n1\n")
    with pytest.raises(analysis.AnalysisError, match="that `npusim capacity SCENARIO --out DIR` "
                                                     "writes"):
        analysis.plot_capacity(tmp_path)


@pytest.mark.component
@pytest.mark.parametrize("args, fragment", [
    (["--attainment", "1.5"], "error: --attainment: got 1.5; expected a share in (0, 1]"),
    (["--attainment", "nan"], "error: --attainment: got nan"),
    (["--max-probes", "1"], "error: --max-probes: got 1"),
    (["--tolerance", "2"], "error: --tolerance: got 2.0"),
    (["--attainment", "2", "--max-probes", "1"], "--attainment: got 2.0; expected a share in "
                                                 "(0, 1], e.g. 0.9; --max-probes: got 1"),
    (["--set", "workload.trace.limit=1"], "workload.trace: the trace has one request"),
    (["--set", "workload.slo.ttft_ms=-1"], "workload.slo.ttft_ms"),
    (["--lengthen", "9"], "error: --lengthen: got 9; expected 0 to 6 doublings of the trace"),
])
def test_capacity_command_errors_name_the_option_and_write_nothing(args, fragment, tmp_path, capsys):
    out = tmp_path / "cap"
    with pytest.raises(SystemExit) as info:
        main(["capacity", str(DISAGG), "--out", str(out), *args])
    err = capsys.readouterr().err
    assert info.value.code != 0 and err.startswith("error: ") and fragment in err, err
    assert not out.exists()


@pytest.mark.component
def test_a_workload_that_is_not_serving_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["capacity", str(QUICKSTART), "--out", str(tmp_path / "cap")])
    err = capsys.readouterr().err
    assert info.value.code != 0 and "needs a serving workload (kind: serving)" in err, err


@pytest.mark.unit
def test_ctrl_c_keeps_the_probes_that_finished(tmp_path, capsys, monkeypatch):
    finished = stand_in(47.0)
    calls = []

    def interrupted(config, mode=None, overrides=()):
        calls.append(overrides)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return finished(config, mode, overrides)
    monkeypatch.setattr(npusim.api, "simulate", interrupted)
    out = tmp_path / "cap"
    out.mkdir()
    (out / "capacity.json").write_text("{}")  # an earlier search's summary: not these probes'
    with pytest.raises((SystemExit, KeyboardInterrupt)):
        main(["capacity", str(DISAGG), "--out", str(out), "-q"])
    assert "the 2 finished probes are in" in capsys.readouterr().err
    rows = (out / "capacity.csv").read_text().splitlines()
    assert rows[0].startswith("rate_scale,requests,offered_requests_per_s") and len(rows) == 3
    assert not (out / "capacity.json").exists()


def _capacity_spec(capacity, base=DISAGG):
    from npusim.sweep import spec_from_dict

    return spec_from_dict({"name": "cap", "base": str(base), "capacity": capacity,
                           "axes": {"workload.pd.prefill_cores": [49, 42],
                                    "workload.pd.decode_cores": [14]}}, source="cap.yaml")


@pytest.mark.unit
@pytest.mark.parametrize("capacity, where, fragment", [
    ({"attainment": 2}, "capacity.attainment", "got 2; expected a share in (0, 1]"),
    ({"max_probes": 1.5}, "capacity.max_probes", "got 1.5; expected an integer"),
    ({"attainments": 0.9}, "capacity.attainments", "unknown key; did you mean 'attainment'?"),
    ({"seeds": 100}, "capacity.seeds", "got 100; expected an integer from 1 to 64"),
    ({"lengthen": 7}, "capacity.lengthen", "got 7; expected 0 to 6 doublings of the trace"),
    ({"lengthen": True}, "capacity.lengthen", "got True; expected 0 to 6"),
    ("yes", "capacity", "expected a mapping such as"),
])
def test_a_sweep_spec_capacity_section_is_checked(capacity, where, fragment):
    with pytest.raises(ConfigError) as info:
        _capacity_spec(capacity)
    assert (where, next(m for p, m in info.value.problems if p == where)) in info.value.problems
    assert fragment in str(info.value) and str(info.value).startswith("cap.yaml: ")


@pytest.mark.unit
def test_a_capacity_sweep_needs_a_serving_base_and_is_its_own_result():
    with pytest.raises(ConfigError, match="capacity: the base scenario's workload is 'gemm'"):
        _capacity_spec(True, base=QUICKSTART)
    searched = _capacity_spec(True)
    assert searched.capacity == {"attainment": 0.9, "tolerance": 0.05, "max_probes": 16,
                                 "seeds": 1, "lengthen": 0}
    plain = _capacity_spec(None)
    assert plain.capacity is None
    # the same configs, but a search is not a run: resuming one never reuses the other
    assert [p.config_hash for p in searched.points()] == [p.config_hash for p in plain.points()]
    assert not {p.key for p in searched.points()} & {p.key for p in plain.points()}


@pytest.mark.unit
def test_a_capacity_sweep_stores_one_search_per_point(tmp_path, monkeypatch):
    from npusim.sweep import load_results, run_sweep

    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0))
    spec = _capacity_spec({"tolerance": 0.1, "max_probes": 12})
    summary = run_sweep(spec, tmp_path / "sweep", executor="serial")
    assert summary.ok == 2 and summary.complete
    frame = load_results(tmp_path / "sweep")
    assert list(frame["capacity.status"]) == ["found", "found"]
    assert all(40 < rate <= 47.0 for rate in frame["capacity.requests_per_s"])
    assert (frame["capacity.first_miss.offered_requests_per_s"] > 47.0).all()
    assert not any(c.startswith("metrics.") for c in frame.columns)
    again = run_sweep(spec, tmp_path / "sweep", executor="serial")  # resumes: nothing to run
    assert again.skipped_done == 2 and again.ok == 0


@pytest.mark.unit
def test_a_capacity_sweep_can_lengthen_each_points_trace(tmp_path, monkeypatch):
    from npusim.sweep import load_results, run_sweep
    from npusim.sweep.paths import config_hash

    calls: list = []
    monkeypatch.setattr(npusim.api, "simulate", lengthening_stand_in(40.0, 2000.0, calls))
    generated = {"arrival": {"kind": "poisson", "rate_per_s": 10}, "prompt": 100,
                 "output": 100, "num_requests": 100}

    def spec(capacity):
        from npusim.sweep import spec_from_dict

        return spec_from_dict({"name": "cap", "base": str(DISAGG), "capacity": capacity,
                               "set": {"workload.trace": generated},
                               "axes": {"workload.pd.prefill_cores": [42]}}, source="cap.yaml")
    lengthened, plain = spec({"max_probes": 30, "lengthen": 2}), spec({"max_probes": 30})
    run_sweep(lengthened, tmp_path / "sweep", executor="serial")
    row = load_results(tmp_path / "sweep").iloc[0]
    assert row["capacity.lengthen"] == 2 and row["capacity.best.requests"] == 400
    assert row["capacity.note"].startswith("lengthened the trace (100 requests: ")
    assert sorted({requests for requests, _ in calls}) == [100, 200, 400]
    # another result than the search without lengthening; that one keeps the key it had
    # before lengthen existed (resumed stores stay valid)
    (point,), (unlengthened,) = lengthened.points(), plain.points()
    assert point.key != unlengthened.key
    settings = {k: v for k, v in plain.capacity.items() if k != "lengthen"}
    assert unlengthened.key == config_hash({"config": unlengthened.config_hash,
                                            "params": unlengthened.params,
                                            "capacity": settings})[:32]


@pytest.mark.unit
def test_a_point_whose_axis_leaves_serving_is_a_spec_error():
    from npusim.sweep import spec_from_dict

    spec = spec_from_dict({"name": "cap", "base": str(DISAGG), "capacity": True,
                           "axes": {"workload": [{"kind": "gemm", "m": 64, "k": 64, "n": 64}]}},
                          source="cap.yaml")
    with pytest.raises(ConfigError) as info:
        spec.points()
    assert "point 0" in str(info.value) and "needs a serving workload at every point" in str(info.value)


@pytest.mark.unit
def test_the_capacity_command_takes_a_trace_like_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0))
    out = tmp_path / "cap"
    with pytest.raises(SystemExit) as info:
        main(["capacity", str(DISAGG), "--trace", "traces/ratio_10_1_32.csv", "--out", str(out),
              "-q", "--max-probes", "3"])
    assert (info.value.code or 0) == 0, capsys.readouterr().err
    assert "ratio_10_1_32.csv" in (out / "config.resolved.yaml").read_text()
    monkeypatch.undo()  # the real simulator reads the trace (and finds it missing)
    with pytest.raises(SystemExit) as info:
        main(["capacity", str(DISAGG), "--trace", str(tmp_path / "missing.csv"), "--out", str(out)])
    assert info.value.code == 2 and "missing.csv" in capsys.readouterr().err


GENERATED = ["workload.model=qwen3_1_7b", "run.mode=analytic",
             "workload.trace={arrival: {kind: poisson, rate_per_s: 20}, prompt: {kind: uniform, "
             "low: 50, high: 400}, output: 8, num_requests: 12}", "workload.slo.ttft_ms=60"]


@pytest.mark.component
def test_seeds_pool_replays_of_a_generated_trace_drawn_with_the_next_seeds():
    found = find_capacity(DISAGG, overrides=GENERATED, seeds=3, max_probes=2)
    first = found.probes[0]
    assert found.seeds == 3 and first.requests == 36 and found.to_dict()["seeds"] == 3
    runs = [npusim.api.simulate(DISAGG, overrides=[*GENERATED, f"run.seed={seed}"])
            for seed in (0, 1, 2)]
    assert len({r.metrics["ttft_ms_p90"] for r in runs}) == 3   # three different draws
    assert first.slo_attainment == pytest.approx(
        sum(r.metrics["slo_attainment"] for r in runs) / 3)
    assert first.offered_requests_per_s == pytest.approx(
        sum(r.metrics["offered_requests_per_s"] for r in runs) / 3)
    import numpy as np
    ttft = np.concatenate([r.requests["ttft_ps"].to_numpy() for r in runs])
    assert first.ttft_ms_p90 == pytest.approx(np.percentile(ttft, 90) * 1e-9)
    e2e = np.concatenate([r.requests["e2e_ps"].to_numpy() for r in runs])
    assert first.e2e_ms_mean == pytest.approx(e2e.mean() * 1e-9)
    # the span is one replay's (12 requests at the mean offered rate), not 36 requests'
    assert (first.replays, first.requests_per_replay) == (3, 12)
    assert first.arrival_span_ms == pytest.approx(1e3 * 11 / first.offered_requests_per_s)
    # a trace seed of its own is what the replays step
    pinned = find_capacity(DISAGG, overrides=[*GENERATED, "workload.trace.seed=7"], seeds=2,
                           max_probes=2)
    seven = npusim.api.simulate(DISAGG, overrides=[*GENERATED, "workload.trace.seed=7"])
    eight = npusim.api.simulate(DISAGG, overrides=[*GENERATED, "workload.trace.seed=8"])
    assert pinned.probes[0].slo_attainment == pytest.approx(
        (seven.metrics["slo_attainment"] + eight.metrics["slo_attainment"]) / 2)


@pytest.mark.unit
def test_seeds_need_a_generated_trace():
    with pytest.raises(ConfigError, match="a trace file replays the same requests every time"):
        find_capacity(DISAGG, seeds=2)


@pytest.mark.unit
def test_the_python_api_takes_one_override_string_and_checks_progress_first(monkeypatch):
    calls: list = []
    monkeypatch.setattr(npusim.api, "simulate", stand_in(47.0, calls=calls))
    # a string was taken as a list of characters ('w: expected PATH=VALUE')
    found = find_capacity(DISAGG, overrides="workload.slo.ttft_ms=500", max_probes=4)
    assert found.config["workload"]["slo"]["ttft_ms"] == 500
    calls.clear()
    with pytest.raises(ConfigError, match="progress: expected a function progress"):
        find_capacity(DISAGG, progress=3)
    assert calls == []  # refused before any probe ran (it raised TypeError after one)


@pytest.mark.unit
def test_a_bad_row_past_the_replayed_ones_does_not_fail_the_row_count(tmp_path):
    # the whole file was read to count its rows: a bad row past the limit broke a
    # search that never replays it
    from npusim.sweep.capacity_probes import file_rows
    from npusim.workload.trace_spec import TraceSpec

    path = tmp_path / "t.csv"
    path.write_text(rows_file(tmp_path, 50) and (tmp_path / "rows_50.csv").read_text()
                    + "late,1,100,100\n")  # out of order: row 52
    spec = TraceSpec(file=str(path), limit=20)
    assert file_rows(spec, 20) == 21 and file_rows(spec, 49) == 50
    # reaching the bad row: more rows exist (a replay of them names it)
    assert file_rows(spec, 50) == 51 and file_rows(spec, 60) == 61
    assert file_rows(TraceSpec(num_requests=10, arrival={"kind": "poisson", "rate_per_s": 1},
                               prompt=10, output=10), 5) is None


@pytest.mark.unit
def test_requests_refused_on_arrival_do_not_hide_a_burst(monkeypatch):
    # any rejection made two probes "never alike", so a burst that meets the SLO with a
    # few prompts refused at every rate doubled on until the probes ran out
    found, calls = search_refusing(monkeypatch, {"batch_tokens": 2}, 1e9, max_probes=40)
    assert found.status == "all_meet" and len(calls) < 40
    assert "doubling the rate no longer changes the latencies" in found.note
    assert "2 of 100 requests are rejected at any rate" in found.note
