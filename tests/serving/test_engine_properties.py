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
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from npusim.api import simulate
from tests.serving.engine_invariants import HASH_BLOCK, check_requests, check_run

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
def traces(draw, max_requests=16, pressure=False, prefixes=False):
    """Rows (id, arrival_ps, prompt, output, priority, hash_ids) in arrival order; with
    ``pressure`` longer requests arriving close together (incremental KV then preempts on
    a tight chip); with ``prefixes`` most requests share one of a few prompt prefixes."""
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
    classes = draw(st.sampled_from([1, 1, 2, 3]))  # priority classes (order: priority)
    priorities = draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n))
    # shared prompt prefixes (blocks of HASH_BLOCK tokens): none, or one of 1-2 groups
    groups = draw(st.sampled_from([1, 2, 3] if prefixes else [0, 1, 2]))
    shared = draw(st.sampled_from([128, 512, 1024] if prefixes else [32, 128, 512]))
    members = draw(st.lists(st.integers(-1 if not prefixes else 0, groups - 1), min_size=n,
                            max_size=n))
    hashes = [" ".join(str(g * 1000 + j) for j in range(min(p, shared) // HASH_BLOCK))
              if g >= 0 else "" for p, g in zip(prompts, members)]
    if prefixes:  # every block named, as Mooncake traces do: each prompt's own blocks
        # after the shared ones are cached too, and fill the KV until evicted
        hashes = [(h + " " + " ".join(str(10**6 * (i + 1) + j) for j in
                                      range(len(h.split()), -(-p // HASH_BLOCK)))).strip()
                  for i, (h, p) in enumerate(zip(hashes, prompts))]
    return [(f"q{i}", t, p, o, c, h)
            for i, (t, p, o, c, h) in enumerate(zip(arrivals, prompts, outputs, priorities,
                                                   hashes))]


@st.composite
def schedulers(draw, pressure=False, keep_chunks=False):
    kind = draw(st.sampled_from(["static", "continuous", "chunked_prefill"]))
    size = st.integers(4, 16) if pressure else st.one_of(st.integers(1, 4), st.integers(1, 16))
    cfg = {"kind": kind, "max_batch_size": draw(size),
           "fill_pipeline": draw(st.booleans()),
           "order": draw(st.sampled_from(["fcfs", "priority"]))}
    if cfg["order"] == "priority":  # outranked running requests may be preempted
        cfg["preempt_lower_priority"] = draw(st.booleans())
    if kind != "static":  # decode micro-batches re-formed or kept (sticky lanes)
        cfg["decode_lanes"] = draw(st.sampled_from(["reform", "sticky"]))
    if kind == "chunked_prefill":
        cfg["token_budget"] = draw(st.integers(8, 512))
        cfg["prefill_chunk"] = draw(st.integers(4, 512))
        cfg["max_batch_tokens"] = draw(st.sampled_from([2048, cfg["token_budget"],
                                                        max(4, cfg["token_budget"] // 2)]))
        cfg["chunk_kv"] = draw(st.sampled_from(["keep"] if keep_chunks else ["keep", "recompute"]))
        if cfg["chunk_kv"] == "keep":  # a prompt's chunks one stage apart (needs kept KV)
            cfg["pipeline_chunks"] = draw(st.booleans())
        units = draw(st.sampled_from([None, None, 1, 4, cfg["token_budget"]]))
        if units is not None:  # a chunk costs fixed budget units (NpuSim §4.3.2)
            cfg["prefill_chunk_units"] = min(units, cfg["token_budget"])
        elif cfg["max_batch_tokens"] < cfg["token_budget"]:  # (a token budget above the
            cfg["prefill_chunk_units"] = 1                   # cap is a config error)
    else:
        # small limits make long prompts inadmissible (rejected on arrival, with a reason)
        cfg["max_batch_tokens"] = draw(st.sampled_from([2048, 1024] if pressure
                                                       else [2048, 700, 256, 64, 8, 4]))
    return cfg


@st.composite
def configs(draw, profiles=tuple(PROFILES), reservations=("max_length", "incremental"),
            pressure=False, prefixes=False):
    return {
        "profile": draw(st.sampled_from(list(profiles))),
        "trace": draw(traces(pressure=pressure, prefixes=prefixes)),
        # (prefix caching keeps no KV with chunk_kv: recompute: a configuration error)
        "scheduler": draw(schedulers(pressure=pressure, keep_chunks=prefixes)),
        "kv_reservation": draw(st.sampled_from(list(reservations))),
        "preemption": draw(st.sampled_from(["recompute", "swap"])),
        # (only profiles with more than one entry replica route at all)
        "router": draw(st.sampled_from(["shared_queue", "round_robin", "least_outstanding"])),
        "prefix_caching": prefixes or draw(st.booleans()),
        "kv_block_tokens": draw(st.sampled_from([1, 1, 4, HASH_BLOCK])),
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
    text = ("id,arrival_ps,prompt_tokens,output_tokens,priority,hash_ids\n"
            + "".join(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4] if len(r) > 4 else 0},"
                      f"{r[5] if len(r) > 5 else ''}\n" for r in rows))
    # prefix caching needs a trace that names blocks, and keeps no KV with chunk_kv: recompute
    hashed = any(len(r) > 5 and r[5] for r in rows)  # (a block size for no hashes is an error)
    caching = (config.get("prefix_caching", False) and hashed
               and config["scheduler"].get("chunk_kv", "keep") == "keep")
    config["prefix_caching"] = caching
    path = trace_dir / f"trace_{hashlib.sha1(text.encode()).hexdigest()[:16]}.csv"
    path.write_text(text)
    scenario, overrides = PROFILES[config["profile"]]
    overrides = [SMALL, *overrides,
                 f"workload.trace={{file: {path}, allow_simultaneous: true"
                 + (f", hash_block_tokens: {HASH_BLOCK}}}" if hashed else "}"),
                 f"workload.prefix_caching={str(caching).lower()}",
                 f"workload.kv_block_tokens={config.get('kv_block_tokens', 1)}",
                 f"workload.scheduler={yaml_map(config['scheduler'])}",
                 f"workload.kv_reservation={config['kv_reservation']}",
                 f"workload.preemption={config['preemption']}",
                 f"workload.router={config.get('router', 'shared_queue')}"]
    if config["preemption"] == "swap":
        overrides.append(HOST)
    with time_limit(RUN_TIMEOUT_S):
        return simulate(scenario, overrides=overrides)


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


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


@settings(max_examples=16, **FAST)
@given(config=configs(profiles=TIGHT_PROFILES, pressure=True, prefixes=True))
def test_prefix_caching_under_kv_pressure_keeps_every_invariant(config, trace_dir):
    # Shared prompt prefixes on a chip with a few thousand KV tokens: cached blocks are
    # shared, kept after their requests leave and evicted when room is needed.
    check_run(run(config, trace_dir), config)


@settings(max_examples=16, **FAST)
@given(config=configs(profiles=TIGHT_PROFILES, pressure=True))
def test_priority_preemption_under_kv_pressure_keeps_every_invariant(config, trace_dir):
    # Three priority classes on a tight chip, and waiting prompts (or, on a decode pool,
    # handed-over requests) that outrank running requests preempt them
    # (scheduler.preempt_lower_priority): victims chosen before the batch is formed must
    # keep every invariant too, under either KV reservation.
    # The later half arrives 0.5 s after the rest and outranks it: the earlier requests
    # then hold the KV those need (classes 2-1-0 in thirds of the arrivals).
    n = len(config["trace"])
    config["trace"] = [(r[0], r[1] + (PS_PER_S // 2 if 2 * i >= n else 0), r[2], r[3],
                        2 - 3 * i // n, *r[5:]) for i, r in enumerate(config["trace"])]
    config["scheduler"].update(order="priority", preempt_lower_priority=True)
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
