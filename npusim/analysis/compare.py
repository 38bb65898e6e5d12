"""Two or more runs side by side: what their configurations set differently and what
that did to the metrics (:func:`compare_runs`, :func:`config_diff`; ``npusim compare``).

A what-if question is a pair of runs: the baseline and the one with a change.  Reading
two ``metrics.json`` files by eye hides both which of the hundreds of resolved settings
differ (a ``--set`` on the command line, a preset switched) and how much each headline
metric moved; these tables show exactly that.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from npusim.analysis.frames import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

#: The metrics a comparison shows unless asked for others, in this order (those a run
#: has): latency, serving latencies and throughput, utilisation, bytes, energy, area.
HEADLINE_METRICS = (
    "latency_s",
    "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
    "tbt_ms_mean", "tbt_ms_p90", "tbt_ms_p99", "tpot_ms_mean",
    "e2e_ms_mean", "e2e_ms_p90", "e2e_ms_p99", "queue_ms_mean",
    "requests_finished", "requests_rejected", "preemptions",
    "throughput_tokens_per_s", "tokens_per_s", "throughput_requests_per_s",
    "goodput_requests_per_s", "slo_attainment", "throughput_tokens_per_s_per_mm2",
    "throughput_flops_per_s", "flops_utilisation",
    "bandwidth_utilisation_by_level.*", "bytes_by_level.*",
    "energy.energy_j", "energy.average_power_w", "energy.energy_per_token_j",
    "area_mm2.total", "memo.hit_rate",
)


#: The headline of a capacity sweep's points (``capacity.*``), for the same use.
CAPACITY_HEADLINE = (
    "capacity.requests_per_s", "capacity.status", "capacity.best.goodput_requests_per_s",
    "capacity.best.ttft_ms_p90", "capacity.best.tbt_ms_mean", "capacity.best.e2e_ms_mean",
    "capacity.probes",
)


def _load(run: Any) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """``(metrics, config, directory)`` of a Result or of a run directory."""
    from npusim.metrics.result import Result
    from npusim.metrics.result_reader import read_metrics_and_config

    if isinstance(run, Result):
        return run.metrics, run.config, None
    if isinstance(run, (str, Path)):
        metrics, config = read_metrics_and_config(run)
        return metrics, config, str(run)
    raise AnalysisError(f"expected a Result or a run directory (npusim run --out DIR), got "
                        f"{type(run).__name__}")


def column_names(runs: Sequence[tuple[Any, Any, str | None]], names: Sequence[str] | None,
                 what: str = "run") -> list[str]:
    """Column names: ``names`` if given, else each directory's name (its whole path where
    two share a name), else ``run1``, ``run2`` ... (``what`` and a number) for those
    without a directory (Results, frames)."""
    if names is not None:
        names = [str(name) for name in names]
        if len(names) != len(runs):
            raise AnalysisError(f"names (--name): {len(names)} given for {len(runs)} "
                                f"{what}s; expected one per {what}, in order")
        if len(set(names)) != len(names):
            raise AnalysisError(f"names (--name): each {what} needs its own name, got {names}")
        return names
    short = [Path(where).name or where if where else f"{what}{i + 1}"
             for i, (_, _, where) in enumerate(runs)]
    typed = [where for _, _, where in runs]
    # a directory is itself however it is spelt (runs/a, ./runs/a, its absolute path)
    real = [os.path.realpath(where) if where else None for where in typed]
    # two directories with one name: their paths as given (the same one twice: numbered)
    out = [where if where and len({r for n, r in zip(short, real) if n == name}) > 1
           else name for name, where in zip(short, typed)]
    # the same directory twice, or a Result named like a directory: number them
    return [f"{name} ({i + 1})" if out.count(name) > 1 else name for i, name in enumerate(out)]


def _loaded(runs: Iterable[Any], names: Sequence[str] | None):
    loaded = [_load(run) for run in runs]
    if len(loaded) < 2:
        raise AnalysisError(f"comparing needs at least two runs, got {len(loaded)}")
    return loaded, column_names(loaded, names)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested mappings and lists by path: ``hw.core.sram.capacity_bytes``,
    ``hw.cores[3].sram_bytes`` (the path style of the configuration errors)."""
    flat: dict[str, Any] = {}
    if isinstance(tree, dict):
        if not tree and prefix:
            flat[prefix] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(tree, list) and tree and any(isinstance(v, (dict, list)) for v in tree):
        for index, value in enumerate(tree):
            flat.update(flatten(value, f"{prefix}[{index}]"))
    else:
        flat[prefix] = tree
    return flat


_ABSENT = "(not set)"


def config_diff(*runs: Any, names: Sequence[str] | None = None) -> "pd.DataFrame":
    """The settings of the runs' resolved configurations that differ, one row per
    setting (index: its path, ``hw.core.sram.capacity_bytes``), one column per run;
    a setting one run does not have reads ``(not set)``.  ``runs`` are Results or run
    directories; ``names`` name the columns (default: the directories' names)."""
    import pandas as pd

    loaded, columns = _loaded(runs, names)
    flats = [flatten(config) for _, config, _ in loaded]
    paths = list(dict.fromkeys(path for flat in flats for path in flat))
    rows = {}
    for path in paths:
        values = [flat.get(path, _ABSENT) for flat in flats]
        if any(_differ(values[0], value) for value in values[1:]):
            rows[path] = [_text(value) for value in values]
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=columns, dtype=object)
    frame.index.name = "setting"
    return frame


def compare_runs(*runs: Any, metrics: Iterable[str] | None = None,
                 names: Sequence[str] | None = None) -> "pd.DataFrame":
    """The runs' metrics side by side: one row per metric (index: its path in
    ``metrics.json``, ``energy.energy_j``), one column per run, then one ``<name>
    change %`` column per run after the first: its change relative to the first run
    (NaN where a value is missing, not a number, or the first is 0).

    ``metrics``: names or glob patterns over the flattened metric paths (``ttft_ms_*``,
    ``energy.*``, ``*`` for all); default :data:`HEADLINE_METRICS`, those the runs have.
    A pattern that matches no run's metric is an :class:`AnalysisError` naming close
    matches.  ``runs`` are Results or run directories (``npusim run --out DIR``)."""
    import pandas as pd

    loaded, columns = _loaded(runs, names)
    flats = [_metric_leaves(m) for m, _, _ in loaded]
    available = list(dict.fromkeys(path for flat in flats for path in flat))
    chosen = choose_metrics(available, metrics)
    data: dict[str, list] = {name: [flat.get(path) for path in chosen]
                             for name, flat in zip(columns, flats)}
    first = data[columns[0]]
    for name in columns[1:]:
        data[f"{name} change %"] = [change_percent(a, b) for a, b in zip(first, data[name])]
    frame = pd.DataFrame(data, index=pd.Index(chosen, name="metric"))
    for name in columns:  # numbers stay numbers; a column mixing in text is object
        if all(is_number(v) or v is None for v in data[name]):
            frame[name] = pd.to_numeric(frame[name])
    return frame


def _metric_leaves(metrics: dict[str, Any]) -> dict[str, Any]:
    """Scalar metrics by path (lists, the energy basis records, left out)."""
    return {path: value for path, value in flatten(metrics).items()
            if not isinstance(value, (list, dict))}


def choose_metrics(available: list[str], metrics: Iterable[str] | None, what: str = "run"
            ) -> list[str]:
    if metrics is None:
        chosen = [path for pattern in HEADLINE_METRICS
                  for path in _matches(available, pattern)]
        if not chosen:  # a capacity sweep has capacity.* only: its answer and best probe
            chosen = [path for pattern in CAPACITY_HEADLINE
                      for path in _matches(available, pattern)]
        if not chosen and available:
            raise AnalysisError(f"none of the headline metrics is in these {what}s; name "
                                f"some with metrics= (-m): they have {len(available)}, "
                                f"such as {', '.join(available[:5])}")
        return chosen
    if isinstance(metrics, str):  # one pattern, not its letters
        metrics = [metrics]
    chosen: list[str] = []
    for pattern in metrics:
        if not isinstance(pattern, str):
            raise AnalysisError(f"metrics: expected names or glob patterns, got {pattern!r}")
        found = _matches(available, pattern)
        if not found:
            import difflib

            close = difflib.get_close_matches(pattern, available, n=3, cutoff=0.5)
            hint = (f"; did you mean {', '.join(map(repr, close))}?" if close else
                    " (patterns are globs over metrics.json paths: ttft_ms_*, energy.*)")
            raise AnalysisError(f"metric {pattern!r}: no {what} has it{hint}")
        chosen.extend(path for path in found if path not in chosen)
    return chosen


def _matches(available: list[str], pattern: str) -> list[str]:
    if any(c in pattern for c in "*?["):
        return [path for path in available if fnmatch.fnmatchcase(path, pattern)]
    return [pattern] if pattern in available else []


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def change_percent(first: Any, other: Any) -> float:
    """``other`` relative to ``first`` in percent; NaN where that means nothing."""
    if not (is_number(first) and is_number(other)) or not math.isfinite(first) \
            or not math.isfinite(other):
        return math.nan
    if first == 0:
        return 0.0 if other == 0 else math.nan
    return 100.0 * (other - first) / abs(first)


def _differ(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
        return a != b and not (isinstance(a, float) and isinstance(b, float)
                               and math.isnan(a) and math.isnan(b))
    return a != b


def _text(value: Any) -> Any:
    """A setting as its table shows it, spelt as in the YAML: ``null``, ``true``,
    containers as JSON text, the rest as is."""
    if value is None or isinstance(value, (bool, dict, list)):
        return json.dumps(value, sort_keys=True)
    return value
