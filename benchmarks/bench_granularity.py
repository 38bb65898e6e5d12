"""How far ``segment_granularity: part`` (a stage timed as a chain of parts cut at its
attention blocks) is from ``stage`` (the stage timed as one graph, the reference), per
stage, on the shipped serving scenarios' replicas.

For each replica and kind of batch it draws ``--batches`` random batches (seeded), times
every stage of each both ways through a fresh :class:`~npusim.executor.session.Session`
and prints one Markdown row: the mean and range of ``part / stage - 1``.  ``--set``
overrides apply to both scenarios (``hw.core.sram.capacity_bytes=24MiB`` streams the
weights and spills long contexts' KV to HBM).  Regenerates the table in
docs/serving.md ("Stage or part granularity").

Usage::

    python benchmarks/bench_granularity.py [--batches 6] [--mode analytic|tlm]
        [--set PATH=VALUE ...]

An accuracy measurement of the simulator's own approximation, not a timed test.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from npusim.api import _as_scenario, build_device
from npusim.core import registry
from npusim.executor.session import Session
from npusim.serving.state import Entry, RequestState
from npusim.workload.traces import Request

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {"fusion": ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml",
             "disaggregation": ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_disagg.yaml"}
CONTEXTS = (64, 4700)      # decode contexts drawn from this range (tokens)
DECODES = (1, 48)          # sequences in a decode batch
CHUNKS = (128, 256, 512)   # prefill chunk sizes (tokens)


def _entry(index: int, new_tokens: int, context: int) -> Entry:
    return Entry(RequestState(Request(f"b{index}", 0, 8192, 8)), new_tokens, context, True)


def batches(kind: str, rng: random.Random):
    """One random batch of ``kind``: a prefill chunk, decodes, or a chunk beside decodes."""
    decodes = [_entry(i + 1, 1, rng.randint(*CONTEXTS)) for i in range(rng.randint(*DECODES))]
    chunk = _entry(0, rng.choice(CHUNKS), rng.choice((0, 1024)))
    return {"prefill": [chunk], "decode": decodes, "mixed": [chunk] + decodes[:7]}[kind]


def measure(scenario_path: Path, overrides: list[str], mode: str, count: int, seed: int):
    """``(replica label, batch kind, errors)`` rows: ``part / stage - 1`` per stage."""
    scenario = _as_scenario(scenario_path, ["run.trace=false", *overrides])
    device = build_device(scenario.hw)
    driver = registry.lookup("workload", "serving").impl(device, config=scenario.workload)
    session = Session(device, mode, 0, True, False)
    seen_roles = set()
    rows = []
    for replica in driver.replicas:
        if replica.role in seen_roles:  # replicas of one pool share their stage shapes
            continue
        seen_roles.add(replica.role)
        kinds = {"fused": ("prefill", "mixed", "decode"), "prefill": ("prefill",),
                 "decode": ("decode",)}[replica.role]
        for kind in kinds:
            rng = random.Random(seed)
            errors = []
            for _ in range(count):
                entries = batches(kind, rng)
                stages = replica.segments(entries, 64, "stage")
                chains = replica.segments(entries, 64, "part")
                for (_, label, stage), (_, _, chain) in zip(stages, chains):
                    if "lm_head" in label:  # one graph both ways
                        continue
                    errors.append(session.time(chain)[0].makespan_ps
                                  / session.time(stage)[0].makespan_ps - 1)
            rows.append((replica.role, kind, errors))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=6, help="random batches per row")
    parser.add_argument("--mode", default="analytic", choices=("analytic", "tlm"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="PATH=VALUE", help="a scenario override (repeatable)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"part / stage - 1 per stage ({args.mode}, {args.batches} batches per row, seed "
          f"{args.seed}{', ' + ', '.join(args.overrides) if args.overrides else ''})\n")
    print("| scenario | replica | batch | stages | mean | range |")
    print("|---|---|---|---|---|---|")
    for name, path in SCENARIOS.items():
        for role, kind, errors in measure(path, args.overrides, args.mode, args.batches, args.seed):
            print(f"| {name} | {role} | {kind} | {len(errors)} | {sum(errors) / len(errors):+.2%} "
                  f"| {min(errors):+.2%} .. {max(errors):+.2%} |", flush=True)
    print(f"\nwall {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
