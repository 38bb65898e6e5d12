"""Executor benchmark: npusim's event rate next to bare SimPy, in the same process.

Measures, on the quickstart scenario (a partitioned GEMM: HBM->SRAM DMA, systolic tiles,
vector epilogue, NoC all-gather) repeated ``--segments`` times:

* bare SimPy: timeouts per second of a minimal process loop (the ceiling any SimPy
  model can reach on this machine);
* tlm executor without memoisation: wall time, SimPy events and memory/NoC
  transactions per second, and the event rate relative to bare SimPy;
* analytic executor without memoisation: wall time and its speed-up over tlm;
* tlm with memoisation (the default): wall time, hits/misses and the speed-up that
  segment reuse gives;
* config loading (YAML, presets, validation), timed separately and excluded above.

Every figure is the median of ``--runs`` repetitions (min and max are kept in the JSON)
after one untimed warm-up run, so import and schema-building costs are not counted.

Usage::

    python benchmarks/bench_executor.py [--segments 8] [--runs 5] [--json FILE|-]

Not a timed test: the figures go to docs/performance.md by hand, with the machine and
commit they came from (both printed).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import simpy

from npusim.api import simulate
from npusim.config.loader import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "workloads" / "scenarios" / "quickstart.yaml"


def guarded(main):
    """Run a benchmark's ``main`` so a user error (a bad --set, --json path, trace) prints
    one ``error:`` line and exits 2, as the npusim CLI does, instead of a traceback."""
    from functools import wraps

    from npusim.core.errors import NpusimError

    @wraps(main)
    def run(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except NpusimError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
    return run


def check_json_target(value: str | None) -> None:
    """``--json FILE`` must be writable before minutes of measuring, not after."""
    if value and value != "-":
        from npusim.core.output_paths import check_output_file

        check_output_file(value, "--json")


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


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    """Wall times of ``runs`` calls of ``fn`` and the last result."""
    walls, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - start)
    return walls, result


def npusim_run(mode: str, memoize: bool, segments: int, runs: int) -> dict[str, Any]:
    """Median wall time of ``simulate`` on the pre-loaded scenario, plus its counters."""
    overrides = [f"run.mode={mode}", f"run.memoize={str(memoize).lower()}", "run.trace=true",
                 f"workload.repeat={segments}"]
    scenario = load_scenario(SCENARIO, overrides)
    walls, result = timed(lambda: simulate(scenario), runs)
    wall = statistics.median(walls)
    metrics = result.metrics
    ops = len(result.op_columns["task"])
    return {"mode": mode, "memoize": memoize, "segments": segments, "ops": ops,
            "wall_s": _spread(walls), "events": metrics["events"],
            "transactions": metrics["transactions"],
            "events_per_s": metrics["events"] / wall,
            "transactions_per_s": metrics["transactions"] / wall,
            "wall_per_op_us": 1e6 * wall / max(1, ops),
            "simulated_latency_ps": metrics["latency_ps"], "memo": metrics["memo"]}


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    return out.stdout.strip() + (" (modified tree)" if dirty.stdout.strip() else "")


def machine() -> dict[str, Any]:
    return {"date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "simpy": simpy.__version__, "commit": _commit(),
            "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def measure(segments: int, runs: int) -> dict[str, Any]:
    # Warm-up: imports, registry discovery, schema construction, first-call caches.
    simulate(load_scenario(SCENARIO, ["run.mode=analytic"]))
    load_walls, _ = timed(lambda: load_scenario(SCENARIO), runs)
    baseline = _spread([bare_simpy() for _ in range(runs)])
    tlm = npusim_run("tlm", False, segments, runs)
    analytic = npusim_run("analytic", False, segments, runs)
    memo = npusim_run("tlm", True, segments, runs)
    assert memo["simulated_latency_ps"] == tlm["simulated_latency_ps"], \
        "memoisation changed the simulated latency"
    return {
        "machine": machine(),
        "scenario": str(SCENARIO.relative_to(ROOT)), "runs": runs,
        "config_load_s": _spread(load_walls),
        "bare_simpy_timeouts_per_s": baseline,
        "tlm": tlm, "analytic": analytic, "tlm_memo": memo,
        "tlm_events_vs_bare_simpy": tlm["events_per_s"] / baseline["median"],
        "analytic_speedup_vs_tlm": tlm["wall_s"]["median"] / analytic["wall_s"]["median"],
        "memo_speedup_vs_tlm": tlm["wall_s"]["median"] / memo["wall_s"]["median"],
        "analytic_vs_tlm_latency": analytic["simulated_latency_ps"] / tlm["simulated_latency_ps"],
    }


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(f"date {m['date_utc']} UTC | {m['python']} | simpy {m['simpy']} | "
          f"{m['cpus']} CPUs | {m['machine']} | commit {m['commit']} | "
          f"load avg {m['load_average_1m']}")
    print(f"scenario {report['scenario']}, {report['tlm']['segments']} segments, "
          f"{report['tlm']['ops']} ops; median of {report['runs']} runs after a warm-up")
    print(f"config load (YAML + presets + validation): "
          f"{1e3 * report['config_load_s']['median']:.1f} ms (excluded below)")
    print(f"bare SimPy: {report['bare_simpy_timeouts_per_s']['median']:,.0f} timeouts/s")
    print()
    header = f"{'run':<18}{'wall s':>9}{'us/op':>10}{'events':>10}{'events/s':>12}" \
             f"{'txns/s':>10}{'memo h/m':>10}"
    print(header)
    print("-" * len(header))
    for label, key in (("tlm, no memo", "tlm"), ("analytic, no memo", "analytic"),
                       ("tlm, memo", "tlm_memo")):
        run = report[key]
        memo = f"{run['memo']['hits']}/{run['memo']['misses']}"
        print(f"{label:<18}{run['wall_s']['median']:>9.3f}{run['wall_per_op_us']:>10.1f}"
              f"{run['events']:>10,}{run['events_per_s']:>12,.0f}"
              f"{run['transactions_per_s']:>10,.0f}{memo:>10}")
    print()
    print(f"tlm event rate = {report['tlm_events_vs_bare_simpy']:.3f} x bare SimPy")
    print(f"analytic is {report['analytic_speedup_vs_tlm']:.1f}x faster than tlm "
          f"(simulated latency analytic/tlm = {report['analytic_vs_tlm_latency']:.4f})")
    print(f"memoisation makes tlm {report['memo_speedup_vs_tlm']:.1f}x faster "
          f"(same simulated latency)")


@guarded
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=8,
                        help="identical GEMM segments (workload.repeat); default 8")
    parser.add_argument("--runs", type=int, default=5,
                        help="timed repetitions per measurement (median reported); default 5")
    parser.add_argument("--json", metavar="FILE",
                        help="also write the figures as JSON to FILE ('-' for stdout only)")
    args = parser.parse_args(argv)
    if args.segments < 1 or args.runs < 1:
        parser.error("--segments and --runs must be >= 1")
    check_json_target(args.json)
    report = measure(args.segments, args.runs)
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
        print()
        return
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
