"""Executor benchmark: npusim's event rate next to bare SimPy, in the same process.

Reports (one run, same machine, so ratios are meaningful on a noisy host):
* bare SimPy: timeouts per second of a minimal process loop;
* tlm executor: SimPy events and memory/NoC transactions per second on a
  memory-and-network-heavy graph, and its ratio to bare SimPy;
* wall time per simulated op in tlm and analytic modes.

Usage: ``python benchmarks/bench_executor.py [--json FILE]``.  Not a timed test: the
figures go to docs/performance.md by hand, with the machine they came from.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import simpy

from npusim.api import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "workloads" / "scenarios" / "quickstart.yaml"


def bare_simpy(timeouts: int = 300_000) -> float:
    """Timeouts per second of 10 processes each yielding timeouts in a loop."""
    env = simpy.Environment()
    per_process = timeouts // 10

    def proc(env):
        for _ in range(per_process):
            yield env.timeout(1)

    for _ in range(10):
        env.process(proc(env))
    start = time.perf_counter()
    env.run()
    return timeouts / (time.perf_counter() - start)


def npusim_run(mode: str, overrides: list[str]) -> dict:
    start = time.perf_counter()
    result = simulate(SCENARIO, mode=mode, overrides=overrides)
    wall = time.perf_counter() - start
    ops = len(result.op_columns["task"])
    return {"mode": mode, "wall_s": wall, "ops": ops, "events": result.metrics["events"],
            "transactions": result.metrics["transactions"],
            "events_per_s": result.metrics["events"] / wall,
            "transactions_per_s": result.metrics["transactions"] / wall,
            "wall_per_op_us": 1e6 * wall / max(1, ops),
            "memo": result.metrics["memo"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    # No memoisation so every segment is really simulated.
    overrides = ["run.memoize=false", "run.trace=true"]
    baseline = bare_simpy()
    tlm = npusim_run("tlm", overrides)
    analytic = npusim_run("analytic", overrides)
    report = {
        "machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
        "bare_simpy_timeouts_per_s": baseline,
        "tlm": tlm,
        "analytic": analytic,
        "tlm_events_vs_bare_simpy": tlm["events_per_s"] / baseline,
        "analytic_speedup_vs_tlm": tlm["wall_s"] / analytic["wall_s"],
    }
    print(f"machine: {report['machine']}")
    print(f"bare SimPy:      {baseline:12,.0f} timeouts/s")
    print(f"tlm executor:    {tlm['events_per_s']:12,.0f} events/s  "
          f"({report['tlm_events_vs_bare_simpy']:.2f} x bare SimPy), "
          f"{tlm['transactions_per_s']:,.0f} transactions/s")
    for run in (tlm, analytic):
        print(f"{run['mode']:9s} wall {run['wall_s']:.3f} s for {run['ops']:,} ops "
              f"= {run['wall_per_op_us']:.1f} us/op")
    print(f"analytic is {report['analytic_speedup_vs_tlm']:.1f}x faster than tlm")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
