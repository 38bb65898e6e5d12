"""``simulate(config) -> Result``: the one entry point every front end uses.

Pure: it reads only its argument (and preset files a scenario names), keeps no state
between calls and writes nothing; the same config and seed give the same Result.
"""

from __future__ import annotations

import gc
import os
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from npusim import __version__
from npusim.config.overrides import override_list
from npusim.core import registry
from npusim.core.errors import (SCENARIO_SOURCE, ConfigError, MappingError, TraceError,
                                 with_source)
from npusim.core.units import PS_PER_S
from npusim.executor.base import OPERAND_STALL
from npusim.executor.memo import SegmentMemo
from npusim.executor.session import Session
from npusim.hw.facts import level, rated_parts
from npusim.metrics.result import Result
from npusim.workload.program import Program


def check_mode(mode: Any, option: str = "mode") -> None:
    """Raise :class:`ConfigError` naming ``option`` unless ``mode`` is None (the scenario's
    ``run.mode``) or one of the fidelities ``run.mode`` accepts.  Checked before any file
    is read, so a bad mode is blamed on the argument that gave it, not on the scenario or
    sweep spec it was applied to; an empty text is an error, never "not given"."""
    from typing import get_args

    from npusim.config.schema import RunConfig

    modes = get_args(RunConfig.model_fields["mode"].annotation)
    if mode is not None and (not isinstance(mode, str) or mode not in modes):
        raise ConfigError(option, [("", f"got {mode!r}; expected "
                                        f"{' or '.join(repr(m) for m in modes)}")])


def _as_scenario(config: Any, overrides: Iterable[str]):
    from npusim.config.loader import load_scenario, scenario_from_dict

    if isinstance(config, str) and "\n" in config:
        raise ConfigError("config", [("", "got YAML text; expected a scenario path (or pass "
                                          "yaml.safe_load(text), a mapping)")])
    if not isinstance(config, (str, Path, Mapping)) and not hasattr(config, "run"):
        raise ConfigError("config", [("", "expected a scenario path, a mapping or a Scenario, "
                                          f"got {type(config).__name__}")])
    try:
        if isinstance(config, (str, Path)):
            return load_scenario(config, overrides)
        if isinstance(config, Mapping):
            return scenario_from_dict(config, overrides=overrides)
        if overrides:
            return scenario_from_dict(config.model_dump(mode="json"), overrides=overrides)
    except ConfigError as exc:
        if exc.source != "--set":
            raise
        # The loader words an override's problem for the command line; here they came
        # from the ``overrides`` argument.
        raise ConfigError("overrides", exc.problems) from None
    return config


def build_device(hw_config: Any):
    """Construct, wire and validate the device a hardware config describes."""
    device = registry.build("device", hw_config, getattr(hw_config, "name", hw_config.kind))
    device.validate()
    return device


def simulate(config: Any, *, mode: str | None = None, overrides: Iterable[str] = (),
             progress: Callable[[int, int], None] | None = None) -> Result:
    """Run one scenario and return its :class:`Result`.

    ``config`` is a scenario path, a mapping, or a validated Scenario; ``mode`` overrides
    ``run.mode``; ``overrides`` are ``path=value`` strings as on the command line;
    ``progress(done, total)`` is called after each segment.
    """
    overrides = override_list(overrides)
    check_mode(mode)
    if progress is not None and not callable(progress):
        raise ConfigError("progress", [("", "expected a function progress(done, total), got "
                                            f"{type(progress).__name__}")])
    with _few_full_collections():
        try:
            return _simulate(config, mode, overrides, progress)
        except (MappingError, TraceError) as exc:
            # A valid scenario that cannot run: name the file, as config errors do.
            if isinstance(config, (str, os.PathLike)):
                raise with_source(exc, str(config)) from None
            raise


@contextmanager
def _few_full_collections():
    """Run with a larger generation-0 threshold, restored afterwards.

    A timing miss allocates ~10^5 short-lived task objects, and the memo caches keep
    growing, so with CPython's default thresholds a long serving run spends a quarter of
    its time in full collections that find almost nothing (the task graphs are freed by
    reference counting).  Measured on the 300-request Azure replay: 51 s -> 38 s.
    """
    previous = gc.get_threshold()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def _simulate(config: Any, mode: str | None, overrides: Iterable[str],
              progress: Callable[[int, int], None] | None) -> Result:
    started = time.perf_counter()
    overrides = list(overrides) + ([f"run.mode={mode}"] if mode is not None else [])
    scenario = _as_scenario(config, overrides)
    run_cfg = scenario.run
    device = build_device(scenario.hw)
    from npusim.metrics.energy import unmatched_dram_families  # lazy, as in _result
    problems = unmatched_dram_families(run_cfg.energy, device)
    if problems:
        raise ConfigError(str(config) if isinstance(config, (str, os.PathLike))
                          else SCENARIO_SOURCE, problems)
    lower = registry.lookup("workload", scenario.workload.kind).impl
    program = lower(device, config=scenario.workload, seed=run_cfg.seed)

    session = Session(device, run_cfg.mode, run_cfg.seed, run_cfg.memoize, run_cfg.trace,
                      run_cfg.trace_max_tasks)
    if not isinstance(program, Program):
        # A driver (the serving engine) decides itself when each segment runs.
        outcome = program.drive(session, progress)
        wall = time.perf_counter() - started
        return _result(scenario, session, outcome.latency_ps, outcome.info, outcome.segments,
                       outcome.metrics, wall, outcome.tables)
    clock = 0
    ends: list[int] = []
    for index, (segment, label) in enumerate(zip(program.segments, program.labels)):
        clock += session.run(segment, label, clock).makespan_ps
        ends.append(clock)
        if progress is not None:
            progress(index + 1, len(program.segments))

    wall = time.perf_counter() - started
    return _result(scenario, session, clock, program.info, len(program.segments),
                   program.finish(ends) if program.finish is not None else {}, wall)


def _result(scenario, session: Session, latency_ps: int, info: dict[str, Any], segments: int,
            extra: dict[str, Any], wall: float, tables: dict[str, list[dict]] | None = None
            ) -> Result:
    """Assemble a Result from a finished session (shared by every workload driver)."""
    unit_stats = session.unit_stats()
    metrics = _metrics(latency_ps, unit_stats, info, session.memo, session.events,
                       session.transactions, segments, session.mode, scenario.name,
                       levels=sorted({level(name) for name in session.device.parts}))
    metrics.update(peak_utilisation(session.device, unit_stats, latency_ps))
    metrics["busy_by_op_ps"] = dict(sorted(session.busy_by_op.items()))
    metrics["trace_segments"] = len(set(session.columns["segment"]))
    # whether run.trace_max_tasks cut the per-task rows short (the timeline ends early)
    metrics["trace_truncated"] = session.trace_truncated
    metrics.update(extra)
    from npusim.metrics.energy import energy_metrics, generated_tokens  # lazy: optional roll-up
    metrics["energy"] = energy_metrics(unit_stats, session.device, latency_ps, scenario.run.energy,
                                       session.segment_rows, tokens=generated_tokens(metrics, tables))
    events = session.events
    return Result(metrics=metrics, op_columns=session.columns, unit_stats=unit_stats,
                  segment_rows=session.segment_rows, tables=tables or {},
                  config=scenario.model_dump(mode="json"),
                  host={"wall_time_s": wall, "npusim_version": __version__,
                        "events_per_s": events / wall if wall > 0 else 0.0})


def peak_utilisation(device, unit_stats: dict[str, dict[str, int]], latency_ps: int
                     ) -> dict[str, Any]:
    """Achieved rates as shares of the whole device's peaks over ``latency_ps``.

    ``flops_utilisation`` is the FLOPs executed on units rated in FLOP/s (systolic arrays,
    roofline engines) over ``latency_ps`` times the sum of every such unit's peak, idle
    ones included: PaLM's hardware FLOPs utilisation (recomputed prefill counts, since
    the hardware did it) against the chip.  ``flops_utilisation_of_used_units`` counts
    only the peaks of the units that did any work (the cores a mapping used): its gap to
    their ``unit_utilisation`` (busy time) is what array folds and fill/drain waste.
    ``bandwidth_utilisation_by_level`` is the same for the bytes moved at each memory
    level against the summed peak bandwidth of that level's parts (MBU for ``hbm``).
    Units without a rated peak (vector units, the NoC) are left out.
    """
    peak_flops = 0.0
    used_peak_flops = 0.0
    rated_flops = 0
    peak_bps: dict[str, int] = defaultdict(int)
    moved: dict[str, int] = defaultdict(int)
    for name, part, is_compute in rated_parts(device):
        stats = unit_stats.get(name, {})
        if is_compute:
            peak_flops += part.peak_flops_per_s
            rated_flops += stats.get("flops", 0)
            if stats.get("busy_ps"):
                used_peak_flops += part.peak_flops_per_s
        elif part.peak_bandwidth_bps:
            peak_bps[level(name)] += part.peak_bandwidth_bps
            moved[level(name)] += stats.get("bytes_read", 0) + stats.get("bytes_written", 0)
    seconds = latency_ps / PS_PER_S
    return {
        "peak_flops_per_s": peak_flops,
        "flops_utilisation": rated_flops / (peak_flops * seconds) if peak_flops and seconds else 0.0,
        "flops_utilisation_of_used_units": (rated_flops / (used_peak_flops * seconds)
                                            if used_peak_flops and seconds else 0.0),
        "peak_bandwidth_bps_by_level": dict(sorted(peak_bps.items())),
        "bandwidth_utilisation_by_level": {
            name: (moved[name] / (peak * seconds) if seconds else 0.0)
            for name, peak in sorted(peak_bps.items())},
    }


def _metrics(latency_ps: int, unit_stats: dict[str, dict[str, int]], info: dict[str, Any],
             memo: SegmentMemo, events: int, transactions: int, segments: int, mode: str,
             name: str, levels: Iterable[str] = ()) -> dict[str, Any]:
    # every level of the device, 0 where nothing moved (a serving run that rejected
    # every request ran no segment: its sweep row keeps the columns)
    bytes_by_level: dict[str, int] = defaultdict(int, {known: 0 for known in levels})
    busy: dict[str, int] = {}
    for unit, stats in unit_stats.items():
        if ".link" in unit:
            continue
        bytes_by_level[level(unit)] += stats.get("bytes_read", 0) + stats.get("bytes_written", 0)
        busy[unit] = stats.get("busy_ps", 0)
    flops = sum(stats.get("flops", 0) for stats in unit_stats.values())
    seconds = latency_ps / 1e12
    metrics: dict[str, Any] = {
        "scenario": name,
        "mode": mode,
        "latency_ps": latency_ps,
        "latency_s": seconds,
        "flops": flops,
        "throughput_flops_per_s": flops / seconds if seconds else 0.0,
        "bytes_by_level": dict(sorted(bytes_by_level.items())),
        "unit_busy_ps": dict(sorted(busy.items())),
        "unit_utilisation": {u: (b / latency_ps if latency_ps else 0.0) for u, b in sorted(busy.items())},
        "events": events,
        "transactions": transactions,
        "segments": segments,
        "memo": {"hits": memo.hits, "misses": memo.misses, "hit_rate": memo.hit_rate,
                 **({"blends": memo.blends} if memo.blends else {})},
    }
    # On a shared scratchpad port, compute units wait for operands behind transfers: how
    # long in all, and as a share of the time those units were held (compute + stall).
    stall = sum(stats.get(OPERAND_STALL, 0) for stats in unit_stats.values())
    if stall:
        held = stall + sum(stats.get("busy_ps", 0) for stats in unit_stats.values()
                           if stats.get("ops"))
        metrics["operand_stall_ps"] = stall
        metrics["operand_stall_share"] = stall / held
    metrics.update({key: value for key, value in info.items() if key not in metrics})
    return metrics
