"""Capacity search: the highest request rate a serving scenario sustains within its SLO.

The question serving studies ask of a configuration (DistServe's "goodput", Vidur's
capacity search): how many requests per second can it take while at least a target share
of them (90% by default) meets ``workload.slo``?  Each probe is one full simulation of
the scenario's own trace with its arrivals compressed or stretched by
``workload.trace.rate_scale`` (so the mix of prompt and output lengths is the trace's);
the search doubles or halves the scale until one probe meets the target and one misses
it, then bisects geometrically until the two are within ``tolerance`` of each other.

The answer is a boundary between a meeting and a missing probe.  SLO attainment usually
falls monotonically with load, but a short trace can make it ragged; sweep
``workload.trace.rate_scale`` (``npusim sweep``) to see the whole curve.

>>> from npusim.sweep.capacity import find_capacity               # doctest: +SKIP
>>> found = find_capacity("workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml")
>>> found.max_requests_per_s, found.table()
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from npusim.core.errors import ConfigError, MappingError, OutputError, TraceError, with_source

__all__ = ["CapacityProbe", "CapacityResult", "find_capacity", "find_steady_capacity",
           "DEFAULTS", "probes_table"]


def __getattr__(name: str) -> Any:
    # find_steady_capacity lives beside (it calls find_capacity); importable from here
    if name == "find_steady_capacity":
        from npusim.sweep.capacity_lengthen import find_steady_capacity

        return find_steady_capacity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: find_capacity's defaults, shared by ``npusim capacity`` and a sweep spec's
#: ``capacity:``: 90% of requests within the SLO (DistServe's attainment target), a
#: bracket 5% wide, and at most 16 simulations (doubling from 1x covers 2^15).
DEFAULTS = {"attainment": 0.9, "tolerance": 0.05, "max_probes": 16, "seeds": 1, "lengthen": 0}
#: Bounds of the search arguments: a bracket narrower than 0.1% is below the run-to-run
#: sensitivity of a saturated replay (docs/serving.md); more than 100 probes is a typo.
TOLERANCE_RANGE = (0.001, 1.0)
MAX_PROBES_RANGE = (2, 100)
#: Replays per probe (each a generated trace drawn with another seed).
SEEDS_RANGE = (1, 64)
#: At most this many doublings of the trace in :func:`find_steady_capacity` (6: 64 times
#: the requests, each probe as many times longer).
MAX_DOUBLINGS = 6
#: Two probes a factor of two apart whose latencies differ by less than this share are
#: taken as unaffected by the load (the search stops there).
UNCHANGED_SHARE = 0.01
#: A capacity found where the trace's arrivals span less than this many mean end-to-end
#: latencies is flagged: by Little's law more than 1/SHORT_TRACE_SPANS of the trace's
#: requests are in the system at once, so the replay is mostly its start-up and drain
#: and a longer trace can find a lower capacity (one helper saw 35.8 req/s with 250
#: requests and 5.0 with 1000 on the same configuration).
SHORT_TRACE_SPANS = 4

Status = Literal["found", "none_meets", "all_meet"]


@dataclass(frozen=True)
class CapacityProbe:
    """One simulation of the search: the load it offered and how the SLO fared."""

    rate_scale: float
    requests: int
    offered_requests_per_s: float
    slo_attainment: float
    slo_attainment_ttft: float  # TTFT alone: which side of the SLO gives way first
    slo_attainment_tbt: float
    goodput_requests_per_s: float
    ttft_ms_p90: float
    tbt_ms_mean: float
    requests_rejected: int
    meets_target: bool
    e2e_ms_mean: float = math.nan  # finished requests, arrival to last token
    replays: int = 1  # traces pooled (seeds): ``requests`` counts all of theirs
    #: rejected on arrival, as at any rate (NEVER_SERVABLE_KINDS): they cap attainment
    requests_never_servable: int = 0

    @property
    def requests_per_replay(self) -> int:
        """Requests in one replayed trace."""
        return self.requests // self.replays

    @property
    def short_trace(self) -> bool:
        """Whether the arrivals span less than :data:`SHORT_TRACE_SPANS` mean end-to-end
        latencies (see there)."""
        return self.arrival_span_ms < SHORT_TRACE_SPANS * self.e2e_ms_mean

    @property
    def arrival_span_ms(self) -> float:
        """From the first arrival to the last, in one replay (the offered rate of
        pooled replays is their mean)."""
        return 1e3 * (self.requests_per_replay - 1) / self.offered_requests_per_s

    @property
    def burst(self) -> bool:
        """Whether the requests all arrive before most of them get their first token."""
        return self.arrival_span_ms < self.ttft_ms_p90


@dataclass(frozen=True, repr=False)  # the generated repr dumped every probe (9 kB)
class CapacityResult:
    """The outcome of :func:`find_capacity`.

    ``best`` is the highest-rate probe that met the target and ``first_miss`` the
    lowest-rate one that missed it.  ``status`` is ``found`` when the two bracket the
    capacity (within ``tolerance`` unless ``note`` says the probes ran out);
    ``none_meets`` when even the lowest rate probed misses the target (the requests miss
    the SLO without load, or the search ran out of probes or of trace span going down);
    ``all_meet`` when the probes ran out before any missed it (``best`` is then a lower
    bound).  ``note`` says why in words.
    """

    scenario: str
    mode: str
    target_attainment: float
    tolerance: float
    slo: dict[str, float]
    seeds: int
    status: Status
    probes: tuple[CapacityProbe, ...]
    best: CapacityProbe | None
    first_miss: CapacityProbe | None
    note: str = ""
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: settings the scenario's runs could not act on (each probe's metrics ``notes``)
    settings_notes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        """One line: the capacity found and how the search ended (``probes`` and the
        rest hold the details)."""
        def rate(probe: CapacityProbe | None) -> str:
            return "None" if probe is None else f"{probe.offered_requests_per_s:.4g} req/s"

        return (f"CapacityResult(scenario={self.scenario!r}, status={self.status!r}, "
                f"max_requests_per_s={self.max_requests_per_s!r}, best={rate(self.best)}, "
                f"first_miss={rate(self.first_miss)}, target_attainment="
                f"{self.target_attainment:g}, probes={len(self.probes)})")

    @property
    def max_requests_per_s(self) -> float | None:
        """The capacity: the highest offered rate that met the target, when a higher
        one missed it (None otherwise: ``best`` is then at most a lower bound)."""
        return self.best.offered_requests_per_s if self.status == "found" else None

    def table(self):
        """The probes as a pandas DataFrame, one row per probe, by rate."""
        return probes_table(self.probes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the probes in the order they ran)."""
        out = asdict(self)
        del out["config"]  # written beside it as config.resolved.yaml
        out["probes"] = [asdict(p) for p in self.probes]
        out["max_requests_per_s"] = self.max_requests_per_s
        return _undefined_as_null(out)

    def write(self, out_dir: str | Path) -> Path:
        """Write ``capacity.json``, ``capacity.csv`` (the probes) and
        ``config.resolved.yaml`` (the scenario probed, before its rate_scale) into
        ``out_dir``; each file appears whole or not at all."""
        import yaml

        from npusim.core.output_paths import check_output_dir

        out = check_output_dir(out_dir, option="")  # (the CLI checked --out already)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "capacity.csv", self.table().to_csv(index=False), "the probes")
        write_text(out / "capacity.json", json.dumps(self.to_dict(), indent=2, sort_keys=True)
                   + "\n", "the capacity summary")
        write_text(out / "config.resolved.yaml", yaml.safe_dump(self.config, sort_keys=False),
                   "the scenario probed")
        return out


def _undefined_as_null(value: Any) -> Any:
    """``value`` with NaN (the latency of a probe where no request finished) as None:
    JSON has no NaN, and metrics.json writes null for the same case."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _undefined_as_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_undefined_as_null(item) for item in value]
    return value


def probes_table(probes: Iterable[CapacityProbe]):
    """Probes as a pandas DataFrame (capacity.csv): one row per probe, by rate."""
    import pandas as pd

    return pd.DataFrame([asdict(p) for p in sorted(probes, key=lambda p: p.rate_scale)],
                        columns=list(CapacityProbe.__dataclass_fields__))


def write_text(path: Path, text: str, what: str) -> None:
    """``text`` into ``path``, whole or not at all (OutputError naming it otherwise)."""
    from npusim.core.output_paths import atomic_output

    if path.is_dir():
        raise OutputError(f"{path}: is a directory; expected to write {what} there")
    with atomic_output(path, what) as handle:
        handle.write(text)


def _unchanged(lower: CapacityProbe, higher: CapacityProbe) -> bool:
    """Whether the latencies of two probes a factor of two apart are within 1%: the load
    no longer matters (going down with arrivals spread out: requests no longer wait for
    each other; going up in a burst: the trace cannot arrive any faster).  Probes that
    rejected requests under load are never alike: their latencies leave the rejected
    out (requests refused on arrival are the same at every rate)."""
    if _load_rejections(lower) or _load_rejections(higher):
        return False
    return (abs(lower.ttft_ms_p90 - higher.ttft_ms_p90) <= UNCHANGED_SHARE * higher.ttft_ms_p90
            and abs(lower.tbt_ms_mean - higher.tbt_ms_mean) <= UNCHANGED_SHARE * higher.tbt_ms_mean)


def argument_problems(target_attainment: Any, tolerance: Any, max_probes: Any,
                      seeds: Any = 1, lengthen: Any = 0) -> list[tuple[str, str]]:
    """``(argument, message)`` for each search argument out of range (none: all fine)."""
    problems = []
    if isinstance(target_attainment, bool) or not isinstance(target_attainment, (int, float)) \
            or not 0 < target_attainment <= 1:
        problems.append(("target_attainment", f"got {target_attainment!r}; expected a share "
                                              "in (0, 1], e.g. 0.9"))
    low, high = TOLERANCE_RANGE
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
            or not low <= tolerance <= high:
        problems.append(("tolerance", f"got {tolerance!r}; expected a relative bracket width "
                                      f"from {low:g} to {high:g}, e.g. 0.05"))
    low, high = MAX_PROBES_RANGE
    if isinstance(max_probes, bool) or not isinstance(max_probes, int) \
            or not low <= max_probes <= high:
        problems.append(("max_probes", f"got {max_probes!r}; expected an integer from {low} "
                                       f"to {high}"))
    low, high = SEEDS_RANGE
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not low <= seeds <= high:
        problems.append(("seeds", f"got {seeds!r}; expected an integer from {low} to {high} "
                                  "(replays per probe)"))
    if isinstance(lengthen, bool) or not isinstance(lengthen, int) \
            or not 0 <= lengthen <= MAX_DOUBLINGS:
        problems.append(("lengthen", f"got {lengthen!r}; expected 0 to {MAX_DOUBLINGS} "
                                     "doublings of the trace"))
    return problems


def find_capacity(config: Any, *, target_attainment: float = DEFAULTS["attainment"],
                  tolerance: float = DEFAULTS["tolerance"],
                  max_probes: int = DEFAULTS["max_probes"], seeds: int = DEFAULTS["seeds"],
                  mode: str | None = None,
                  overrides: Iterable[str] = (),
                  progress: Callable[[CapacityProbe], None] | None = None,
                  source: str | None = None) -> CapacityResult:
    """Search the highest request rate at which ``config`` (a serving scenario: path,
    mapping or Scenario, with ``overrides`` as on the command line) meets its SLO for at
    least ``target_attainment`` of the requests.

    The search starts at the trace's own ``rate_scale``, doubles or halves it until the
    target is bracketed, then bisects until the meeting and missing scales differ by at
    most ``tolerance`` (relative), spending at most ``max_probes`` probes.  With
    ``seeds`` > 1 each probe replays a generated trace that many times, drawn with
    consecutive seeds (``workload.trace.seed``, else ``run.seed``, and the next ones),
    and pools them: attainment is the share of all their requests, TTFT p90 and mean
    TBT are over all their requests, rates are means; one replay of a short trace can
    be a few percent off another's.  ``progress(probe)`` is called after each;
    ``source`` names the scenario in error messages (default: its path, else its name).
    Deterministic: the same scenario gives the same probes.
    """
    from npusim.api import _as_scenario, override_list, simulate
    from npusim.serving.state import NEVER_SERVABLE_KINDS
    from npusim.sweep.capacity_probes import file_rows, pooled

    problems = argument_problems(target_attainment, tolerance, max_probes, seeds)
    if progress is not None and not callable(progress):  # before a probe has run
        problems.append(("progress", f"expected a function progress(probe), got "
                                     f"{type(progress).__name__}"))
    if problems:
        raise ConfigError("find_capacity", problems)
    scenario = _as_scenario(config, override_list(overrides))
    if source is None:
        source = str(config) if isinstance(config, (str, os.PathLike)) else scenario.name
    workload = scenario.workload
    if getattr(workload, "kind", None) != "serving":
        raise ConfigError(source, [("workload.kind", f"got {getattr(workload, 'kind', None)!r}; "
                                    "a capacity search needs a serving workload (kind: serving)")])
    if seeds > 1 and workload.trace.file is not None:
        raise ConfigError(source, [("workload.trace.file", f"seeds = {seeds} replays a generated "
                                    "trace with other seeds, and a trace file replays the same "
                                    "requests every time; expected a generator (arrival, "
                                    "prompt, output, num_requests) or seeds = 1")])
    if workload.trace.seed is not None:
        seed_path, first_seed = "workload.trace.seed", workload.trace.seed
    else:
        seed_path, first_seed = "run.seed", scenario.run.seed
    probes: list[CapacityProbe] = []
    never_kinds: dict[str, int] = {}  # the last probe's never-servable rejections, by kind
    settings_notes: list[str] = []  # in the order first seen over the probes

    def probe(scale: float) -> CapacityProbe:
        try:
            if seeds == 1:
                metrics = simulate(scenario, mode=mode,
                                   overrides=[f"workload.trace.rate_scale={scale!r}"]).metrics
            else:
                metrics = pooled([simulate(scenario, mode=mode,
                                            overrides=[f"workload.trace.rate_scale={scale!r}",
                                                       f"{seed_path}={first_seed + i}"])
                                   for i in range(seeds)])
        except (MappingError, TraceError) as exc:  # the scenario object knows no file name
            raise with_source(exc, source) from None
        settings_notes.extend(n for n in metrics.get("notes", ()) if n not in settings_notes)
        never = {kind: count for kind, count in metrics.get("requests_rejected_by_kind", {}).items()
                 if kind in NEVER_SERVABLE_KINDS}
        never_kinds.clear()  # the same at every rate: the last probe's stand for all
        never_kinds.update(never)
        if metrics["requests_total"] < 2 or not metrics["offered_requests_per_s"]:
            what = ("the trace has one request" if metrics["requests_total"] < 2 else
                    "every request of the trace arrives at the same time")
            raise ConfigError(source, [("workload.trace", f"{what}, so rate_scale cannot change "
                                        "the load; expected a trace of requests arriving over "
                                        "time (more rows, a higher limit, or a generator)")])
        result = CapacityProbe(
            rate_scale=scale, requests=metrics["requests_total"],
            offered_requests_per_s=metrics["offered_requests_per_s"],
            slo_attainment=metrics["slo_attainment"],
            slo_attainment_ttft=metrics["slo_attainment_ttft"],
            slo_attainment_tbt=metrics["slo_attainment_tbt"],
            goodput_requests_per_s=metrics["goodput_requests_per_s"],
            # None when no request finished (NaN: no latency), or none had a second
            # token (no gap to wait for: 0)
            ttft_ms_p90=_or(metrics["ttft_ms_p90"], math.nan),
            tbt_ms_mean=_or(metrics["tbt_ms_mean"], math.nan
                            if metrics["requests_rejected"] == metrics["requests_total"] else 0.0),
            requests_rejected=metrics["requests_rejected"],
            meets_target=metrics["slo_attainment"] >= target_attainment,
            e2e_ms_mean=_or(metrics.get("e2e_ms_mean"), math.nan), replays=seeds,
            requests_never_servable=sum(never.values()))
        probes.append(result)
        if progress is not None:
            progress(result)
        return result

    meet: CapacityProbe | None = None  # the highest-rate probe meeting the target so far
    miss: CapacityProbe | None = None  # the lowest-rate probe missing it
    scale, note = float(workload.trace.rate_scale), ""
    # Bracket: double while the target holds, halve while it does not.
    while len(probes) < max_probes and (meet is None or miss is None):
        try:
            found = probe(scale)
        except (TraceError, ConfigError) as exc:
            if not probes:  # the scenario as given: not the search's doing
                raise
            # The rate_scale took the trace past what a run holds (halving stretched a
            # file trace's arrivals: TraceError; a generator's: ConfigError): stop
            # there, keep what ran.
            direction = "up" if miss is None else "down"
            note = f"stopped going {direction} at rate_scale {scale!r}: {exc}"
            break
        if _servable_share(found) < target_attainment:
            # No rate can help: the same requests are refused at every load.
            miss, note = found, _never_servable_note(found, never_kinds, target_attainment)
            break
        if found.meets_target:
            if meet is not None and miss is None and found.burst and _unchanged(meet, found):
                meet = found
                note = (f"doubling the rate no longer changes the latencies (TTFT p90 "
                        f"{found.ttft_ms_p90:.4g} ms, TBT {found.tbt_ms_mean:.4g} ms): the "
                        f"{found.requests_per_replay} requests arrive as one burst and still meet the "
                        "SLO, so the trace is too short to find the capacity; use a trace "
                        "with more requests (a longer file, or a generator's num_requests)")
                break
            meet, scale = found, scale * 2
            continue
        if miss is not None and meet is None and not found.burst and _unchanged(found, miss):
            miss = found
            note = (f"halving the rate no longer changes the latencies (TTFT p90 "
                    f"{found.ttft_ms_p90:.4g} ms, TBT {found.tbt_ms_mean:.4g} ms at "
                    f"{found.offered_requests_per_s:.4g} req/s): the requests miss the SLO "
                    "without any load; compare them with workload.slo")
            break
        miss, scale = found, scale / 2
    # Bisect (geometrically: rates span orders of magnitude) until the bracket is narrow.
    while meet is not None and miss is not None and len(probes) < max_probes \
            and miss.rate_scale / meet.rate_scale > 1 + tolerance:
        found = probe(math.sqrt(meet.rate_scale * miss.rate_scale))
        if found.meets_target:
            meet = found
        else:
            miss = found
    # A file replayed whole has no rows to add: do not point at --lengthen then.
    rows = (file_rows(workload.trace, meet.requests_per_replay)
            if meet is not None and meet.short_trace else None)
    lengthenable = rows is None or meet.requests_per_replay < rows
    status, note = _outcome(meet, miss, tolerance, note, lengthenable)
    if meet is not None and meet.requests_never_servable:
        capped = _never_servable_note(meet, never_kinds, target_attainment)
        note = f"{note}; {capped}" if note else capped
    slo = {"ttft_ms": workload.slo.ttft_ms, "tbt_ms": workload.slo.tbt_ms}
    return CapacityResult(scenario=scenario.name, mode=mode or scenario.run.mode,
                          target_attainment=target_attainment, tolerance=tolerance, slo=slo,
                          seeds=seeds,
                          status=status, probes=tuple(probes), best=meet, first_miss=miss,
                          note=note, config=scenario.model_dump(mode="json"),
                          settings_notes=tuple(settings_notes))


def _load_rejections(probe: CapacityProbe) -> int:
    """Requests ``probe`` rejected because of the load (not on arrival)."""
    return probe.requests_rejected - probe.requests_never_servable


def _servable_share(probe: CapacityProbe) -> float:
    """The most SLO attainment ``probe``'s trace allows at any rate."""
    return 1.0 - probe.requests_never_servable / probe.requests if probe.requests else 1.0


def _never_servable_note(probe: CapacityProbe, kinds: dict[str, int], target: float) -> str:
    """Why ``probe``'s attainment is capped: the requests refused at any rate, by kind,
    and what would admit them (the target out of reach, or the headroom left)."""
    from npusim.serving.state import REFUSAL_KINDS

    share = _servable_share(probe)
    reasons = "; ".join(f"{count}: {REFUSAL_KINDS[kind][0]} ({REFUSAL_KINDS[kind][1]})"
                        for kind, count in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    head = (f"{probe.requests_never_servable} of {probe.requests} requests are rejected at any "
            f"rate, so at most {100 * share:.1f}% can meet the SLO")
    tail = (f", below the {100 * target:g}% target: no rate meets it" if share < target else
            f", which leaves {100 * (share - target):.1f}% of the requests to miss it under "
            f"load within the {100 * target:g}% target")
    return f"{head}{tail}: {reasons}"


def _short_trace(meet: CapacityProbe, lengthenable: bool) -> str:
    """Why a probe whose requests arrive within a few end-to-end latencies says little
    about sustained load, and what to do instead."""
    return (f"at {meet.offered_requests_per_s:.4g} req/s the {meet.requests_per_replay} "
            f"requests{' of each replay' if meet.replays > 1 else ''} "
            f"arrive within {meet.arrival_span_ms / 1e3:.3g} s, less than "
            f"{SHORT_TRACE_SPANS} times their mean end-to-end latency "
            f"({meet.e2e_ms_mean / 1e3:.3g} s): the replay ends before the queues settle, "
            "so a longer trace (more requests) can find a lower capacity"
            + (" (--lengthen N, capacity.lengthen in a sweep, doubles a generator's "
               "num_requests or a file's limit)" if lengthenable else
               " (every row of the trace file ran: use a longer file)"))


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _outcome(meet: CapacityProbe | None, miss: CapacityProbe | None, tolerance: float,
             note: str, lengthenable: bool = True) -> tuple[Status, str]:
    """The search's status and, unless the search already said why it stopped, a note
    (``lengthenable``: whether a longer replay of the same trace exists, to point at)."""
    if meet is None:
        assert miss is not None  # the first probe either meets or misses; errors propagate
        if miss.requests_rejected and not note:
            note = (f"{miss.requests_rejected} of {miss.requests} requests were rejected even at "
                    f"{miss.offered_requests_per_s:.4g} req/s (npusim run SCENARIO --out DIR "
                    "gives each one's reason in requests.csv)")
        return "none_meets", note or (
            f"even {miss.offered_requests_per_s:.4g} req/s (rate_scale {miss.rate_scale:.4g}) "
            f"meets the SLO for only {100 * miss.slo_attainment:.1f}% of the requests; compare "
            "a lone request's TTFT and TBT with workload.slo")
    if miss is None:
        if meet.short_trace and not note:
            # A burst: every rate above this squeezes the same requests into an even
            # shorter window, so more probes would only raise a meaningless bound.
            short = _short_trace(meet, lengthenable)
            return "all_meet", (f"every probe met the target, but {short}; more probes or a "
                                "higher start would only report a higher rate for the same "
                                "burst")
        return "all_meet", note or (
            f"every probe met the target; {meet.offered_requests_per_s:.4g} req/s is a lower "
            "bound: raise the probe limit (--max-probes, max_probes) or start higher "
            "(workload.trace.rate_scale)")
    if miss.rate_scale / meet.rate_scale > 1 + tolerance:
        note = (f"the probes ran out with the bracket {miss.rate_scale / meet.rate_scale:.3g}x "
                "wide: raise the probe limit (--max-probes, max_probes)")
    if meet.short_trace:
        short = _short_trace(meet, lengthenable)
        note = f"{note}; {short}" if note else short
    return "found", note
