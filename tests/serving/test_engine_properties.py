"""Property tests of the serving engine: random small serving configurations, and the
invariants every run must keep whatever the trace, scheduler, PD mode, KV reservation,
preemption and chunk policy (docs/serving.md, npusim/serving/engine.py).

Each example writes a small trace (2-16 requests; bursts, bursty and sparse arrivals;
one-token prompts and outputs among them), runs it with Qwen3-1.7B in analytic mode on
one of a few chip layouts (four of them with so little KV room that incremental
reservation preempts) and checks the request table, the iteration table, the timed
segments and the metrics against each other.

What is *not* asserted, because the design does not promise it:

- that a replica's micro-batches overlap in time at most ``stages`` times: a batch may
  finish stage k-1 and wait for stage k (a longer batch ahead of it), so more than
  ``stages`` batches can be launched and unfinished at once; what the engine promises is
  that each stage runs one micro-batch at a time, checked on the segments instead;
- that the iteration table's ``prefill_tokens`` add up to the prompts under chunked
  prefill: a prompt's last chunk of one token after kept KV is a decode step
  (``Entry.is_decode``), so only the sum of new tokens is exact;
- which decode a full replica preempts across micro-batches (only the one being formed
  can give KV back).

The engine bugs these properties found are pinned by the regression tests at the end.
"""

from __future__ import annotations

import hashlib
import re
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from npusim.api import simulate

pytestmark = pytest.mark.component

FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"
SMALL = "workload.model=qwen3_1_7b"
# 8-byte KV in 256 MiB of HBM per core, none in SRAM: a few thousand KV tokens per replica.
TIGHT = ["workload.kv_sram_fraction=0", "workload.kv_dtype_bytes=8", "hw.hbm.rows=4096"]
HOST = ("hw.host={link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200, "
        "channels: 4}}")
RING4 = ["workload.pd.tp=4", "workload.placement=ring"]

# Chip layouts (each a scenario and overrides), chosen to be fast.  Under TIGHT a replica
# holds about 2,300-3,200 KV tokens (the activation buffers, sized by the scheduler's
# token limits, take the rest), so incremental reservation preempts there.
PROFILES = {
    "fusion 1x8 stages, tight KV": (FUSION, ["workload.pd.cores=32", *TIGHT]),
    "fusion 2x8 stages, tight KV": (FUSION, ["workload.pd.dp=2", *TIGHT]),
    "fusion 1x2 stages": (FUSION, ["workload.pd.cores=8"]),
    "fusion 1x4 stages": (FUSION, ["workload.pd.cores=16"]),
    "disagg P32/D32, tight KV": (
        DISAGG, [*RING4, "workload.pd.prefill_cores=32", "workload.pd.decode_cores=32", *TIGHT]),
    # the decode pool holds more KV than the prefill pool (e.g. 2,440 against 2,139)
    "disagg P28/D36, tight KV": (
        DISAGG, [*RING4, "workload.pd.prefill_cores=28", "workload.pd.decode_cores=36", *TIGHT]),
    "disagg P16/D32x2": (DISAGG, [*RING4, "workload.pd.prefill_cores=16",
                                  "workload.pd.decode_cores=32", "workload.pd.decode_dp=2"]),
    "disagg P32x2/D16": (DISAGG, [*RING4, "workload.pd.prefill_cores=32", "workload.pd.prefill_dp=2",
                                  "workload.pd.decode_cores=16"]),
}
TIGHT_PROFILES = [name for name, (_, ov) in PROFILES.items() if "hw.hbm.rows=4096" in ov]

PS_PER_S = 10**12
RUN_TIMEOUT_S = 120  # a run that loops forever is a failure, not a hung suite


# -- strategies ---------------------------------------------------------------------------

@st.composite
def traces(draw, max_requests=16, pressure=False):
    """Rows (id, arrival_ps, prompt, output) in arrival order; with ``pressure`` longer
    requests arriving close together (incremental KV then preempts on a tight chip)."""
    n = draw(st.integers(8 if pressure else 2, max_requests))
    pattern = draw(st.sampled_from(["burst", "bursty"] if pressure else ["burst", "bursty", "sparse"]))
    if pattern == "burst":        # an offline batch: everyone at t = 0
        gaps = [0] * (n - 1)
    elif pattern == "bursty":     # clumps of simultaneous arrivals with pauses between
        gaps = draw(st.lists(st.sampled_from([0, 0, 1, 10**6, 5 * 10**9, 5 * 10**10]),
                             min_size=n - 1, max_size=n - 1))
    else:                         # sparse: the system mostly drains between arrivals
        gaps = draw(st.lists(st.integers(PS_PER_S // 5, 2 * PS_PER_S),
                             min_size=n - 1, max_size=n - 1))
    arrivals = np.concatenate([[0], np.cumsum(gaps)]).astype(int).tolist()
    if pressure:
        prompt = st.one_of(st.integers(1, 128), st.integers(300, 1000), st.integers(300, 1000))
        output = st.one_of(st.just(1), *[st.integers(150, 400)] * 3)
    else:
        prompt = st.one_of(st.integers(1, 8), st.integers(9, 128), st.integers(129, 700))
        output = st.one_of(st.just(1), st.integers(2, 8), st.integers(9, 80), st.integers(9, 80))
    prompts = draw(st.lists(prompt, min_size=n, max_size=n))
    outputs = draw(st.lists(output, min_size=n, max_size=n))
    return [(f"q{i}", t, p, o) for i, (t, p, o) in enumerate(zip(arrivals, prompts, outputs))]


@st.composite
def schedulers(draw, pressure=False):
    kind = draw(st.sampled_from(["static", "continuous", "chunked_prefill"]))
    size = st.integers(4, 16) if pressure else st.one_of(st.integers(1, 4), st.integers(1, 16))
    cfg = {"kind": kind, "max_batch_size": draw(size),
           "fill_pipeline": draw(st.booleans())}
    if kind == "chunked_prefill":
        cfg["token_budget"] = draw(st.integers(8, 512))
        cfg["prefill_chunk"] = draw(st.integers(4, 512))
        cfg["max_batch_tokens"] = draw(st.sampled_from([2048, cfg["token_budget"],
                                                        max(4, cfg["token_budget"] // 2)]))
        cfg["chunk_kv"] = draw(st.sampled_from(["keep", "recompute"]))
    else:
        # small limits make long prompts inadmissible (rejected on arrival, with a reason)
        cfg["max_batch_tokens"] = draw(st.sampled_from([2048, 1024] if pressure
                                                       else [2048, 700, 256, 64, 8, 4]))
    return cfg


@st.composite
def configs(draw, profiles=tuple(PROFILES), reservations=("max_length", "incremental"),
            pressure=False):
    return {
        "profile": draw(st.sampled_from(list(profiles))),
        "trace": draw(traces(pressure=pressure)),
        "scheduler": draw(schedulers(pressure=pressure)),
        "kv_reservation": draw(st.sampled_from(list(reservations))),
        "preemption": draw(st.sampled_from(["recompute", "swap"])),
    }


# -- running ------------------------------------------------------------------------------

def yaml_map(cfg: dict) -> str:
    return "{" + ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}"
                           for k, v in cfg.items()) + "}"


@contextmanager
def time_limit(seconds: int):
    def fail(signum, frame):
        raise TimeoutError(f"serving run did not finish within {seconds} s (engine loop?)")
    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run(config: dict, trace_dir: Path):
    rows = config["trace"]
    text = ("id,arrival_ps,prompt_tokens,output_tokens\n"
            + "".join(f"{i},{t},{p},{o}\n" for i, t, p, o in rows))
    path = trace_dir / f"trace_{hashlib.sha1(text.encode()).hexdigest()[:16]}.csv"
    path.write_text(text)
    scenario, overrides = PROFILES[config["profile"]]
    overrides = [SMALL, *overrides,
                 f"workload.trace={{file: {path}, allow_simultaneous: true}}",
                 f"workload.scheduler={yaml_map(config['scheduler'])}",
                 f"workload.kv_reservation={config['kv_reservation']}",
                 f"workload.preemption={config['preemption']}"]
    if config["preemption"] == "swap":
        overrides.append(HOST)
    with time_limit(RUN_TIMEOUT_S):
        return simulate(scenario, overrides=overrides)


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


# -- the invariants -----------------------------------------------------------------------

def token_times(cell) -> list[int]:
    return [int(x) for x in str(cell).split()] if isinstance(cell, str) and cell.strip() else []


def admissible(req, config: dict, replicas: list[dict]) -> bool:
    """docs/serving.md: a request that can never fit is rejected on arrival: its whole
    length must fit a replica (in disaggregation its prompt a prefill replica and its
    whole length a decode one), and a whole-prompt scheduler must take its prompt."""
    caps = {}
    for r in replicas:
        caps.setdefault(r["role"], []).append(r["kv_capacity_tokens"])
    total = req.prompt_tokens + req.output_tokens
    if "decode" in caps:
        fits = req.prompt_tokens <= max(caps["prefill"]) and total <= max(caps["decode"])
    else:
        fits = total <= max(caps["fused"])
    sched = config["scheduler"]
    if sched["kind"] != "chunked_prefill" and req.prompt_tokens > sched["max_batch_tokens"]:
        fits = False
    return fits


def check_requests(result, config: dict) -> None:
    m, req = result.metrics, result.requests
    n = len(config["trace"])
    # conservation
    assert len(req) == m["requests_total"] == n
    assert set(req["status"]) <= {"finished", "rejected"}
    finished, rejected = req[req["status"] == "finished"], req[req["status"] == "rejected"]
    assert m["requests_finished"] == len(finished) and m["requests_rejected"] == len(rejected)
    assert m["requests_finished"] + m["requests_rejected"] == n
    assert (rejected["reason"].str.len() > 0).all(), rejected
    assert (finished["reason"] == "").all()
    assert rejected["finish_ps"].isna().all()
    assert (finished["generated"] == finished["output_tokens"]).all()
    assert (req["generated"] <= req["output_tokens"]).all()
    # the trace went in unchanged
    assert req["request_id"].tolist() == [r[0] for r in config["trace"]]
    assert req["arrival_ps"].tolist() == [r[1] for r in config["trace"]]

    reserve_max = config["kv_reservation"] == "max_length"
    swap = config["preemption"] == "swap"
    chunked = config["scheduler"]["kind"] == "chunked_prefill"
    prefill_kv = [r["kv_capacity_tokens"] for r in m["replicas"] if r["role"] == "prefill"]
    for r in req.itertuples():
        times = token_times(r.token_times_ps)
        assert len(times) == r.generated, r
        assert all(a < b for a, b in zip(times, times[1:])), r        # strictly increasing
        if times:
            assert times[0] == r.first_token_ps, r
            assert r.ttft_ps == r.first_token_ps - r.arrival_ps
        if r.status == "finished":
            scheduled = r.arrival_ps + r.queue_ps
            assert r.arrival_ps <= scheduled <= r.first_token_ps <= r.finish_ps, r
            assert times[-1] == r.finish_ps and r.e2e_ps == r.finish_ps - r.arrival_ps
            if len(times) > 1:
                assert r.mean_tbt_ps == pytest.approx((times[-1] - times[0]) / (len(times) - 1))
            else:
                assert pd.isna(r.mean_tbt_ps)
        # preemption bookkeeping
        assert r.swapped_out == (r.preempted if swap else 0), r
        if reserve_max:
            assert r.preempted == 0, r                   # max_length never preempts
        # liveness: an admissible request finishes, unless a recompute victim's prompt +
        # generated tokens became too long to prefill again (rejected at once, saying so):
        # longer than a whole-prompt scheduler's max_batch_tokens, or than a prefill
        # replica's KV in disaggregation
        if not admissible(r, config, m["replicas"]):
            assert r.status == "rejected" and r.generated == 0 and pd.isna(r.queue_ps), r
            assert re.search(r"needs KV for|max_batch_tokens", r.reason), r.reason
        elif r.status == "rejected":
            assert not (reserve_max or swap), r
            assert r.preempted >= 1 and r.reason.startswith("preempted after"), r
            again = r.prompt_tokens + r.generated
            too_long = [again > max(prefill_kv)] if prefill_kv else []
            if not chunked:
                too_long.append(again > config["scheduler"]["max_batch_tokens"])
            assert any(too_long), r


def check_iterations(result, config: dict) -> None:
    m, it, req = result.metrics, result.table("iterations"), result.requests
    sched = config["scheduler"]
    replicas = m["replicas"]
    if len(it):
        assert it["iteration"].tolist() == list(range(len(it)))
        # a row of no requests is a batch the preemptions making room for it emptied
        empty = it[it["requests"] == 0]
        assert (empty["preempted"] > 0).all() and (empty["start_ps"] == empty["end_ps"]).all()
        assert (empty[["prefill_tokens", "decode_requests", "context_tokens"]] == 0).all().all()
        it = it[it["requests"] > 0]
    assert m["iterations"] == len(it)
    if len(it) == 0:
        assert (req["status"] == "rejected").all()
        return
    # launch order: start times never go back; every micro-batch takes time
    assert (it["start_ps"].diff().dropna() >= 0).all()
    assert (it["end_ps"] > it["start_ps"]).all()
    # batch composition and limits
    assert (it["requests"] >= 1).all() and (it["requests"] <= sched["max_batch_size"]).all()
    assert (it["prefill_requests"] + it["decode_requests"] == it["requests"]).all()
    new_tokens = it["prefill_tokens"] + it["decode_requests"]
    assert (it["prefill_tokens"] >= it["prefill_requests"]).all()   # a chunk has >= 1 token
    # max_batch_tokens: 'most new tokens in one iteration (prefill tokens + one per decode)'
    assert (new_tokens <= sched["max_batch_tokens"]).all()
    if sched["kind"] == "chunked_prefill":
        assert (new_tokens <= min(sched["token_budget"], sched["max_batch_tokens"])).all()
        assert (it["prefill_tokens"] <= it["prefill_requests"] * sched["prefill_chunk"]).all()
    else:
        # whole prompts only: an iteration prefills or decodes, never both
        assert ((it["prefill_requests"] == 0) | (it["decode_requests"] == 0)).all()
        assert (it["prefill_tokens"] <= sched["max_batch_tokens"]).all()
    if sched["kind"] == "static":
        # static batching keeps one batch in flight per replica
        for _, rows in it.groupby("replica"):
            assert (rows["start_ps"].to_numpy()[1:] >= rows["end_ps"].to_numpy()[:-1]).all()
    # chunk_kv: only 'recompute' runs a prompt prefix again, and never more than the context
    if sched.get("chunk_kv", "keep") == "keep":
        assert (it["recomputed_tokens"] == 0).all()
    assert (it["recomputed_tokens"] <= it["context_tokens"]).all()
    assert m["prefill_tokens_recomputed"] == it["recomputed_tokens"].sum()
    # KV: never beyond capacity, and what is reserved covers the batch's own tokens
    assert (it["kv_used_tokens"] <= it["kv_capacity_tokens"]).all()
    assert (it["kv_used_tokens"] >= it["context_tokens"] + new_tokens).all()
    for index, rows in it.groupby("replica"):
        rep = replicas[index]
        assert (rows["role"] == rep["role"]).all()
        assert (rows["kv_capacity_tokens"] == rep["kv_capacity_tokens"]).all()
        # a pipeline is FIFO: tokens leave in launch order
        assert (np.diff(rows["end_ps"].to_numpy()) > 0).all()
        summary = m["iterations_by_replica"][f"{rep['role']}{index}"]
        assert summary["iterations"] == len(rows)
        if config["kv_reservation"] == "max_length":
            assert (rows["preempted"] == 0).all()
    if config["profile"].startswith("fusion"):
        assert set(it["role"]) <= {"fused"}
    else:
        assert set(it["role"]) <= {"prefill", "decode"}
        # a prefill replica decodes nothing; only a prompt's last chunk of one token
        # after kept KV counts as a decode step (Entry.is_decode)
        if not (sched["kind"] == "chunked_prefill" and sched.get("chunk_kv", "keep") == "keep"):
            assert (it.loc[it["role"] == "prefill", "decode_requests"] == 0).all()
    # every token leaves at the end of a micro-batch; every request's queueing ends at a
    # launch
    ends, starts = set(it["end_ps"]), set(it["start_ps"])
    for r in req.itertuples():
        assert set(token_times(r.token_times_ps)) <= ends, r
        if not pd.isna(r.queue_ps):
            assert r.arrival_ps + int(r.queue_ps) in starts, r
    # token accounting: every launched token belongs to a request.  Without recompute
    # preemption (swap preemption prefills nothing twice) the new tokens are exactly the
    # finished requests' prompts plus all but their first output token (that one comes
    # from the prefill)
    finished = req[req["status"] == "finished"]
    exact = int((finished["prompt_tokens"] + finished["output_tokens"] - 1).sum())
    recompute_preempted = config["preemption"] == "recompute" and m["preemptions"] > 0
    if not recompute_preempted and (req.loc[req["status"] == "rejected", "generated"] == 0).all():
        assert new_tokens.sum() == exact
        if sched["kind"] != "chunked_prefill":
            assert it["prefill_tokens"].sum() == finished["prompt_tokens"].sum()
            assert it["decode_requests"].sum() == (finished["output_tokens"] - 1).sum()
    else:
        assert new_tokens.sum() >= exact
    # tokens out == decode steps + the sampling prefill chunks
    assert it["decode_requests"].sum() <= req["generated"].sum() \
        <= it["decode_requests"].sum() + it["prefill_requests"].sum()


def check_segments(result, config: dict) -> None:
    """Each stage of a replica runs one micro-batch at a time (its timeline also holds
    the LM head's share after each batch), a batch's stages run in order, and the
    iteration table's start / end are its first stage's start and its token's time."""
    it, seg, m = result.table("iterations"), result.segments, result.metrics
    if len(it):  # a batch preemption emptied launched nothing: no segments
        it = it[it["requests"] > 0]
    if len(it) == 0:   # every request rejected on arrival
        assert not seg["label"].str.startswith("it").any()
        return check_transfers(result, config)
    label = re.compile(r"^it(\d+)/r(\d+)\.(?:stage(\d+)|(lm_head))$")
    batches: dict[tuple[int, int], dict] = {}
    for text, start, end in zip(seg["label"], seg["start_ps"], seg["end_ps"]):
        match = label.match(text)
        if text.startswith("it"):
            assert match, text
        if match:
            n, replica, stage, head = match.groups()
            parts = batches.setdefault((int(replica), int(n)), {})
            key = "head" if head else int(stage)
            assert key not in parts, text
            parts[key] = (int(start), int(end))
    for index, rows in it.groupby("replica"):
        stages = m["replicas"][index]["stages"]
        assert sum(1 for (r, _) in batches if r == index) == len(rows)
        busy: dict[int, list[tuple[int, int]]] = {k: [] for k in range(stages)}
        for n, row in enumerate(rows.itertuples()):
            parts = batches[(index, n)]
            layers = [parts[k] for k in range(stages)]
            assert set(parts) <= {*range(stages), "head"}
            assert layers[0][0] == row.start_ps
            assert all(b[0] >= a[1] for a, b in zip(layers, layers[1:]))  # stages in order
            head_ps = 0
            if "head" in parts:
                head = parts["head"]
                assert head[0] == layers[-1][1] and head[1] == row.end_ps
                head_ps = head[1] - head[0]
            else:
                assert layers[-1][1] == row.end_ps
            for k, (start, end) in enumerate(layers):
                busy[k].append((start, end + head_ps))
        for k, spans in busy.items():   # one micro-batch per stage at a time
            assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:])), (index, k)
    check_transfers(result, config)


def check_transfers(result, config: dict) -> None:
    """KV hand-overs (disaggregation) and swaps (swap preemption) as timed segments: one
    hand-over per request that decodes after its prefill, a swap-in only after its
    swap-out has finished, and no token of a request while its KV is on the way."""
    seg, m, req = result.segments, result.metrics, result.requests
    tokens = {r.request_id: token_times(r.token_times_ps) for r in req.itertuples()}
    moves: dict[str, list[tuple[str, int, int]]] = {}
    for text, start, end in zip(seg["label"], seg["start_ps"], seg["end_ps"]):
        match = re.match(r"^(kv|swap-out|swap-in) (\S+) r\d+(?:->r\d+)?$", text)
        if match:
            moves.setdefault(match.group(2), []).append((match.group(1), int(start), int(end)))
    kinds = [kind for events in moves.values() for kind, _, _ in events]
    assert kinds.count("swap-out") == m["swap_outs"] >= kinds.count("swap-in")
    if config["preemption"] != "swap" or config["kv_reservation"] == "max_length":
        assert "swap-out" not in kinds
    handovers = kinds.count("kv")
    if config["profile"].startswith("disagg"):
        # one KV hand-over per request that decodes after its prefill (after a recompute
        # preemption on the decode pool, one more per re-prefill)
        decoders = int(((req["status"] == "finished") & (req["output_tokens"] > 1)).sum())
        assert handovers == decoders if m["preemptions"] == 0 else handovers >= decoders
    else:
        assert handovers == 0
    for rid, events in moves.items():
        times = tokens[rid]
        swaps = [e for e in events if e[0] != "kv"]
        # swap-out, swap-in, swap-out, ...: in only once out has finished
        assert [e[0] for e in swaps] == ["swap-out", "swap-in"] * (len(swaps) // 2) \
            + ["swap-out"] * (len(swaps) % 2), (rid, swaps)
        for out, back in zip(swaps[::2], swaps[1::2]):
            assert back[1] >= out[2], (rid, out, back)
            assert not [t for t in times if out[1] < t <= back[2]], (rid, out, back)
        if len(swaps) % 2:   # never came back: no token after it left
            assert req.set_index("request_id").loc[rid, "status"] == "rejected"
            assert not [t for t in times if t > swaps[-1][1]], rid
        for kind, start, end in events:
            if kind == "kv":   # sent when its prefill sampled a token; decodes after arrival
                assert start in times, (rid, start)
                assert not [t for t in times if start < t <= end], (rid, start, end)
    if config["profile"].startswith("fusion 1x"):
        # one fused replica: no new request starts while another's KV is on the host
        firsts = [r.arrival_ps + int(r.queue_ps) for r in req.itertuples()
                  if not pd.isna(r.queue_ps)]
        for rid, events in moves.items():
            swaps = [e for e in events if e[0] != "kv"]
            for out, back in zip(swaps[::2], swaps[1::2]):
                assert not [t for t in firsts if out[1] < t < back[1]], (rid, out, back)


def check_metrics(result, config: dict) -> None:
    m, req, it = result.metrics, result.requests, result.table("iterations")
    assert m["preemptions"] == req["preempted"].sum()
    assert m["swap_outs"] == req["swapped_out"].sum()
    # every preemption is in the iteration table (a batch it emptied as a row of none)
    assert (it["preempted"].sum() if len(it) else 0) == m["preemptions"]
    finished = req[req["status"] == "finished"]
    if len(finished):
        assert m["ttft_ms_mean"] == pytest.approx(finished["ttft_ps"].mean() * 1e-9)
        assert m["e2e_ms_mean"] == pytest.approx(finished["e2e_ps"].mean() * 1e-9)
        assert m["queue_ms_mean"] == pytest.approx(finished["queue_ps"].mean() * 1e-9)
        assert m["ttft_ms_p50"] <= m["ttft_ms_p99"] and m["e2e_ms_p50"] <= m["e2e_ms_p99"]
        assert m["throughput_tokens_per_s"] > 0
    assert 0 <= m["slo_attainment"] <= len(finished) / len(req)


def check_run(result, config: dict) -> None:
    check_requests(result, config)
    check_iterations(result, config)
    check_segments(result, config)
    check_metrics(result, config)


# No shrinking: each example is a whole simulation (~0.5 s), and shrinking one failure
# takes minutes; derandomize makes a failing example come back on every run anyway.
FAST = dict(deadline=None, derandomize=True, database=None, print_blob=True,
            phases=(Phase.explicit, Phase.generate),
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the properties -----------------------------------------------------------------------

@settings(max_examples=60, **FAST)
@given(config=configs())
def test_every_run_keeps_the_engine_invariants(config, trace_dir):
    check_run(run(config, trace_dir), config)


@settings(max_examples=16, **FAST)
@given(config=configs(profiles=TIGHT_PROFILES, reservations=("incremental",), pressure=True))
def test_kv_pressure_preempts_and_still_keeps_every_invariant(config, trace_dir):
    # Long prompts on a chip with a few thousand KV tokens: incremental reservation
    # preempts (recompute or swap) and every invariant above must still hold.
    check_run(run(config, trace_dir), config)


@settings(max_examples=3, **FAST)
@given(config=configs())
def test_the_same_configuration_twice_gives_identical_tables(config, trace_dir):
    a, b = run(config, trace_dir), run(config, trace_dir)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.table("iterations"), b.table("iterations"))
    pd.testing.assert_frame_equal(a.segments, b.segments)
    assert a.metrics == b.metrics


def test_the_pressure_profiles_do_preempt(trace_dir):
    # The KV-pressure property is only worth its time if its chip layouts preempt: one
    # burst of long requests on each, both preemption kinds.
    trace = [(f"q{i}", 0, 400, 400) for i in range(8)]
    for profile in TIGHT_PROFILES:
        for preemption in ("recompute", "swap"):
            config = {"profile": profile, "trace": trace, "kv_reservation": "incremental",
                      "preemption": preemption,
                      "scheduler": {"kind": "chunked_prefill", "token_budget": 512,
                                    "prefill_chunk": 256, "max_batch_tokens": 2048,
                                    "max_batch_size": 16}}
            result = run(config, trace_dir)
            check_run(result, config)
            assert result.metrics["preemptions"] > 0, (profile, preemption)
            assert result.metrics["requests_finished"] == len(trace)


# -- regressions found by these properties -------------------------------------------------

def test_continuous_decode_batches_keep_max_batch_tokens(trace_dir):
    # max_batch_tokens is 'Most new tokens in one iteration (prefill tokens + one per
    # decode)' and sizes the activation buffers.  Whole-prompt iterations of 2 x 4 tokens
    # accumulate 12 running requests; they once decoded 10 at a time (up to
    # max_batch_size), 10 new tokens against 8.
    config = {"profile": "fusion 1x2 stages", "kv_reservation": "max_length",
              "preemption": "recompute", "trace": [(f"q{i}", 0, 4, 6) for i in range(12)],
              "scheduler": {"kind": "continuous", "max_batch_size": 16, "max_batch_tokens": 8}}
    it = run(config, trace_dir).table("iterations")
    assert (it["prefill_tokens"] + it["decode_requests"] <= 8).all(), it["decode_requests"].max()


def test_every_preemption_is_in_the_iteration_table(trace_dir):
    # A preemption that emptied the micro-batch being formed launched nothing and was
    # never logged.
    result = simulate(DISAGG, overrides=[
        SMALL, *PROFILES["disagg P32/D32, tight KV"][1],
        "workload.kv_reservation=incremental",
        "workload.trace={arrival: {kind: gamma, rate_per_s: 100, cv: 4}, prompt: {kind: "
        "uniform, low: 1, high: 600}, output: {kind: uniform, low: 1, high: 100}, "
        "num_requests: 16, seed: 3}"])
    assert result.metrics["preemptions"] > 0
    assert result.table("iterations")["preempted"].sum() == result.metrics["preemptions"]


def test_a_recompute_victim_does_not_deadlock_the_prompts_admitted_behind_it(trace_dir):
    # One fused replica with 3,077 KV tokens: x (600 + 2000) decodes; y and z (1200 + 2)
    # arrive at 0.5 s, are admitted and prefill 7 tokens an iteration; x fills the KV
    # after 78 tokens and is preempted, needing 678 tokens again while y and z hold the
    # rest.  Each request alone fits, so each must finish.
    half = PS_PER_S // 2
    config = {"profile": "fusion 1x8 stages, tight KV", "kv_reservation": "incremental",
              "preemption": "recompute",
              "trace": [("x", 0, 600, 2000), ("y", half, 1200, 2), ("z", half + 1, 1200, 2)],
              "scheduler": {"kind": "chunked_prefill", "token_budget": 8, "prefill_chunk": 512,
                            "max_batch_tokens": 2048, "max_batch_size": 16}}
    result = run(config, trace_dir)
    assert result.metrics["preemptions"] > 0
    check_requests(result, config)   # liveness: every admissible request finishes
