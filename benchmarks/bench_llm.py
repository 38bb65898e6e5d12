"""LLM benchmark: one Qwen3-4B request (prompt 1024, output 128) on large_core_64.

Reports, per fidelity, the wall time of ``simulate()`` (config loading included), the
simulated TTFT / TBT / end-to-end latency, segments, memo hits and misses, and SimPy
events, next to bare SimPy's timeout rate measured in the same process (so the ratio
means something on a loaded machine).  Per-task rows are off (``run.trace=false``), as
in a sweep; ``--trace`` turns them on.

Usage::

    python benchmarks/bench_llm.py [--modes analytic tlm] [--set PATH=VALUE ...] [--json FILE|-]

Targets (issue 3): tlm under 10 s and analytic under 0.5 s on one core.  Not a timed
test: record the figures in docs/performance.md with the machine and commit.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_executor import bare_simpy, check_json_target, guarded  # noqa: E402

from npusim.api import simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64.yaml"


def measure(mode: str, overrides: list[str], trace: bool) -> dict:
    simulate(SCENARIO, mode="analytic", overrides=["workload.output_len=1",
                                                   "workload.prompt_len=16"])  # warm imports
    started = time.perf_counter()
    result = simulate(SCENARIO, mode=mode,
                      overrides=[f"run.trace={'true' if trace else 'false'}", *overrides])
    wall = time.perf_counter() - started
    m = result.metrics
    return {"mode": mode, "wall_s": round(wall, 3), "ttft_ms": m["ttft_ps"] / 1e9,
            "tbt_ms": m["tbt_ps"] / 1e9, "e2e_ms": m["e2e_latency_ps"] / 1e9,
            "segments": m["segments"], "memo": m["memo"], "events": m["events"],
            "transactions": m["transactions"],
            "events_per_s": round(m["events"] / wall) if wall else 0}


@guarded
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["analytic", "tlm"])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    bad = [m for m in args.modes if m not in ("analytic", "tlm")]
    if bad:
        parser.error(f"--modes: {', '.join(bad)}: expected analytic and/or tlm")
    check_json_target(args.json)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    report = {"scenario": str(SCENARIO.relative_to(ROOT)), "overrides": args.overrides,
              "python": platform.python_version(), "machine": platform.machine(),
              "commit": commit, "bare_simpy_timeouts_per_s": round(bare_simpy()),
              "runs": [measure(mode, args.overrides, args.trace) for mode in args.modes]}
    for run in report["runs"]:
        run["events_vs_bare_simpy"] = round(run["events_per_s"] / report["bare_simpy_timeouts_per_s"], 4)
        print(f"{run['mode']:>8}: {run['wall_s']:7.2f} s wall | TTFT {run['ttft_ms']:.2f} ms, "
              f"TBT {run['tbt_ms']:.3f} ms, e2e {run['e2e_ms']:.1f} ms | "
              f"{run['segments']} segments, memo {run['memo']['hits']}/{run['memo']['misses']} "
              f"hits/misses | {run['events']:,} events ({run['events_vs_bare_simpy']:.1%} of bare SimPy rate)")
    print(f"bare SimPy: {report['bare_simpy_timeouts_per_s']:,} timeouts/s; commit {commit}")
    if args.json:
        text = json.dumps(report, indent=2, sort_keys=True)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
