"""Serving benchmark: replay the first 300 requests of the Azure LLM inference 2023
conversation trace on large_core_64 with Qwen3-4B and PD fusion (issue 4).

Reports per fidelity the wall time of ``simulate()``, requests finished / rejected,
segments, memo hits, misses and hit rate, and the simulated TTFT / TBT / throughput,
next to bare SimPy's timeout rate measured in the same process.

Usage::

    python benchmarks/bench_serving.py [--trace PATH] [--limit 300] [--modes analytic tlm]
        [--granularities stage part] [--set PATH=VALUE ...] [--json FILE|-]

The trace is not in the repository: download AzureLLMInferenceTrace_conv.csv (see
traces/README.md); the default path is $NPUSIM_DATA_DIR, else shared/data beside the
checkout.
Each mode runs with each ``workload.segment_granularity`` (``part``: the default, stages
timed as chains of parts cut at attention blocks; ``stage``: every pipeline stage timed
as one graph, the reference; see docs/serving.md).  Targets: tlm under 60 s, analytic
under 5 s on one core.  Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_executor import bare_simpy, check_json_target, guarded  # noqa: E402

from npusim.api import simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml"
# NPUSIM_DATA_DIR: the folder holding the Azure traces (default: shared/data beside the
# checkout, as the tests look for it: tests/data.py)
DEFAULT_TRACE = (Path(os.environ.get("NPUSIM_DATA_DIR") or ROOT.parent / "shared" / "data")
                 / "AzureLLMInferenceTrace_conv.csv")


@guarded
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--modes", nargs="+", default=["analytic", "tlm"])
    parser.add_argument("--granularities", nargs="+", default=["part", "stage"],
                        choices=["stage", "part"])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    bad = [m for m in args.modes if m not in ("analytic", "tlm")]
    if bad:
        parser.error(f"--modes: {', '.join(bad)}: expected analytic and/or tlm")
    if args.limit < 1:
        parser.error(f"--limit must be >= 1, got {args.limit}")
    if not args.trace.is_file():
        where = ("--trace" if args.trace != DEFAULT_TRACE else
                 "the default trace ($NPUSIM_DATA_DIR)" if os.environ.get("NPUSIM_DATA_DIR")
                 else "the default trace (shared/data beside the checkout)")
        parser.error(f"{where} {args.trace}: no such file (download "
                     "AzureLLMInferenceTrace_conv.csv, see docs/traces.md 'Real traces', "
                     "then pass --trace FILE or set NPUSIM_DATA_DIR to its folder)")
    check_json_target(args.json)
    report = {"trace": str(args.trace), "limit": args.limit, "overrides": args.overrides,
              "bare_simpy_timeouts_per_s": round(bare_simpy()), "runs": []}
    for mode, granularity in [(m, g) for m in args.modes for g in args.granularities]:
        started = time.perf_counter()
        result = simulate(SCENARIO, mode=mode, overrides=[
            f"workload.trace={{file: {json.dumps(str(args.trace))}, limit: {args.limit}}}",
            "run.trace=false",
            f"workload.segment_granularity={granularity}", *args.overrides])
        wall = time.perf_counter() - started
        m = result.metrics
        run = {"mode": mode, "granularity": granularity, "wall_s": round(wall, 2), "requests_finished": m["requests_finished"],
               "requests_rejected": m["requests_rejected"], "segments": m["segments"],
               "memo": m["memo"], "events": m["events"], "ttft_ms_mean": m["ttft_ms_mean"],
               "tbt_ms_mean": m["tbt_ms_mean"], "throughput_tokens_per_s": m["throughput_tokens_per_s"]}
        report["runs"].append(run)
        print(f"{mode:>8} {granularity:>5}: {wall:7.1f} s wall | {m['requests_finished']}/{m['requests_total']} finished, "
              f"{m['requests_rejected']} rejected | {m['segments']:,} segments, memo hit rate "
              f"{m['memo']['hit_rate']:.3f} ({m['memo']['misses']} misses) | TTFT {m['ttft_ms_mean']:.1f} ms, "
              f"TBT {m['tbt_ms_mean']:.1f} ms, {m['throughput_tokens_per_s']:.1f} tokens/s")
    print(f"bare SimPy: {report['bare_simpy_timeouts_per_s']:,} timeouts/s")
    if args.json:
        text = json.dumps(report, indent=2, sort_keys=True)
        print(text) if args.json == "-" else Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
