"""Sweep specs: a base scenario, axes over config paths, derived fields, constraints.

```yaml
name: quickstart_grid                 # default: the file name
base: ../scenarios/quickstart.yaml    # a scenario file (relative to this file) or a mapping
set: {run.mode: analytic}             # fixed overrides for every point
axes:                                 # blocks combine as a cartesian product, in order
  - grid: {workload.m: [64, 128, 256], workload.tile_n: [128, 256, 512]}
  - zip:  {hw.core.systolic.rows: [32, 64], hw.core.sram.capacity_bytes: [16MiB, 32MiB]}
  - random: {seed: 0, samples: 4, params: {workload.k: {randint: [512, 4096]}}}
derived: {hw.core.systolic.cols: "${hw.core.systolic.rows}"}
constraints:
  - {require: "${workload.m} % 64 == 0", reason: "m must be a multiple of 64"}
on_invalid: error                     # or skip: record points whose config is invalid
capacity: {attainment: 0.9}           # serving bases: each point is a capacity search
metrics: [ttft_ms_*, tpot_ms_mean]    # or, without capacity: keep only these metrics (globs)
store: {requests: true}               # also keep each serving point's per-request table
```

``axes`` may also be one mapping (a single grid).  Random parameters are a list (uniform
choice) or ``{choice: [...]}``, ``{uniform: [lo, hi]}``, ``{loguniform: [lo, hi]}`` (both
take ``integer: true``) or ``{randint: [lo, hi]}`` (inclusive).  Every problem is reported
as a :class:`~npusim.core.errors.ConfigError` naming the spec file, the field path in the
spec and the bad value.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from npusim.core.errors import ConfigError
from npusim.sweep import expr
from npusim.sweep.axes import Axis, parse_axes
from npusim.sweep.capacity import DEFAULTS as CAPACITY_DEFAULTS
from npusim.sweep.paths import (MISSING, config_hash, format_override, get_path,
                                input_file_digests)
from npusim.sweep.spec_paths import base_defaults, check_paths
from npusim.sweep.spec_sections import (_check_each_path_set_once, _parse_constraints,
                                        _parse_derived, _parse_set, _parse_store,
                                        unknown_keys)

_TOP_KEYS = ("name", "description", "base", "set", "axes", "derived", "constraints",
             "on_invalid", "capacity", "metrics", "store")
#: ``capacity:`` keys and their defaults (find_capacity's arguments).
_CAPACITY_KEYS = CAPACITY_DEFAULTS


@dataclass(frozen=True)
class Point:
    """One point of a sweep, resolved and ready to run (or skipped with a reason)."""

    index: int
    params: dict[str, Any]          # swept and derived values by config path
    overrides: list[str]            # every ``path=value`` applied to the base scenario
    config: dict[str, Any] | None   # the validated scenario as JSON, None when skipped
    config_hash: str                # hash of ``config`` (of the raw mapping when invalid)
    key: str                        # identity in the results store: config hash + params
    skip_reason: str | None = None


@dataclass
class SweepSpec:
    """A parsed sweep spec (see the module docstring for the YAML form)."""

    name: str
    source: str
    base: dict[str, Any]
    base_source: str
    set: list[str] = field(default_factory=list)
    axes: list[Axis] = field(default_factory=list)
    derived: dict[str, Any] = field(default_factory=dict)
    constraints: list[tuple[str, str]] = field(default_factory=list)
    on_invalid: str = "error"
    description: str = ""
    #: find_capacity's arguments when every point is a capacity search (else None)
    capacity: dict[str, Any] | None = None
    #: glob patterns of the metrics a row keeps (``ttft_ms_*``, ``replicas``); None: all
    metrics: tuple[str, ...] | None = None
    #: ``store: {requests: true}``: keep each serving point's per-request table
    store_requests: bool = False

    @property
    def param_names(self) -> list[str]:
        """Swept paths in axis order, then derived paths."""
        names: list[str] = []
        for axis in self.axes:
            for row in axis.rows[:1]:
                names += [p for p in row if p not in names]
        return names + [p for p in self.derived if p not in names]

    def combinations(self) -> list[dict[str, Any]]:
        """Swept values of every point (the product of the axis blocks, last fastest)."""
        combos = []
        for rows in itertools.product(*[axis.rows for axis in self.axes]):
            merged: dict[str, Any] = {}
            for row in rows:
                merged.update(row)
            combos.append(merged)
        return combos

    def points(self) -> list[Point]:
        """Every point resolved against the base scenario; raises :class:`ConfigError`
        for a point whose config is invalid unless ``on_invalid: skip``."""
        from npusim.config.loader import _resolve_with_overrides, validate
        from npusim.config.schema import scenario_model

        defaults = base_defaults(self)
        problems: list[tuple[str, str]] = []
        points: list[Point] = []
        traces_read: dict[str, Any] = {}  # a trace file's settings -> its trace or error
        for index, swept in enumerate(self.combinations()):
            params = dict(swept)
            label = ", ".join(f"{k}={v!r}" for k, v in swept.items()) or "base"
            try:
                raw = _resolve_with_overrides(copy.deepcopy(self.base), self._overrides(params),
                                              self.base_source, notes=False)  # (said below)
            except ConfigError as exc:
                problems += [(f"point {index} ({label}): {p}", m) for p, m in exc.problems]
                continue

            def lookup(path: str, raw=raw, params=params) -> Any:
                for source in (params, raw, defaults):
                    value = params.get(path, MISSING) if source is params else get_path(source, path)
                    if value is not MISSING:
                        return value
                raise expr.ExprError(f"no field {path!r} in the scenario or the sweep")

            skip, where = None, ""
            try:
                for path, template in self.derived.items():
                    where = f"derived.{path} (point {index}: {label})"
                    params[path] = expr.render(template, lookup) if isinstance(template, str) else template
                for i, (text, reason) in enumerate(self.constraints):
                    where = f"constraints[{i}].require (point {index}: {label})"
                    if not expr.condition(text, lookup):
                        skip = reason
                        break
            except expr.ExprError as exc:
                problems.append((where, str(exc)))
                continue
            overrides = self._overrides(params)
            config = None
            try:
                raw = _resolve_with_overrides(copy.deepcopy(self.base), overrides, self.base_source)
                if skip is None:
                    scenario = validate(scenario_model(), raw, self.base_source)
                    _check_trace_file(scenario, traces_read, self.base_source)
                    config = scenario.model_dump(mode="json")
                    kind = config["workload"].get("kind")
                    if self.capacity is not None and kind != "serving":
                        raise ConfigError(self.base_source, [(
                            "workload.kind", f"got {kind!r}; a capacity sweep (capacity:) "
                                             "needs a serving workload at every point")])
            except ConfigError as exc:
                if self.on_invalid != "skip":
                    problems += [(f"point {index} ({label}): {p}", self._derived_note(p, m))
                                 for p, m in exc.problems]
                    continue
                skip = "invalid config: " + "; ".join(f"{p}: {m}" for p, m in exc.problems)
            digest = config_hash(config if config is not None else raw)
            # A capacity search is another result than one run of the same config.
            identity = {"config": digest, "params": params}
            if self.capacity is not None:
                # lengthen came later: at 0 (no lengthening) stored rows keep their keys
                identity["capacity"] = {name: value for name, value in self.capacity.items()
                                        if not (name == "lengthen" and value == 0)}
            files = input_file_digests(config) if config is not None else {}
            if files:  # configs naming no file keep the keys they always had
                identity["files"] = files
            key = config_hash(identity)[:32]
            points.append(Point(index, params, overrides, config, digest, key, skip))
        if problems:
            raise ConfigError(self.source, problems[:20] + (
                [("", f"... and {len(problems) - 20} more")] if len(problems) > 20 else []))
        return points

    def _derived_note(self, path: str, message: str) -> str:
        """``message`` about a config field, with where a derived value came from: a
        template that does not parse as an expression is substituted as text (for
        ``"${mib}MiB"``), so a typo in an expression surfaces as a bad field value."""
        template = self.derived.get(path)
        if not isinstance(template, str):
            return message
        try:
            expr.parse(template)
        except expr.ExprError as exc:
            if exc.syntax:
                return (f"{message} (derived.{path} = {template!r} did not parse: {exc}; "
                        "so it was substituted as text)")
        return f"{message} (from derived.{path} = {template!r})"

    def _overrides(self, params: Mapping[str, Any]) -> list[str]:
        return list(self.set) + [format_override(p, v) for p, v in params.items()]


# --------------------------------------------------------------------------- parsing

def load_spec(path: str | Path, extra_set: list[str] | tuple[str, ...] = ()) -> SweepSpec:
    """Read and check a sweep spec YAML file; ``extra_set`` (``path=value`` texts, as
    ``npusim sweep --set`` gives them) are appended to its ``set:`` and apply to every
    point (a later one wins, as with ``npusim run --set``)."""
    from npusim.config.presets import locate, read_yaml

    source = str(path)
    path = locate(path)
    data = read_yaml(path)
    return spec_from_dict(data, source=source, root=path.parent, default_name=path.stem,
                          extra_set=extra_set)


def _with_extra_set(data: Any, extra_set: list[str] | tuple[str, ...]) -> Any:
    """``data`` with ``extra_set`` appended to its ``set:`` (a ``set:`` of another type
    stays as written: its own error names it)."""
    from npusim.config.overrides import parse_override

    for text in extra_set:  # a malformed one is the command line's, not set[N] of the spec
        if not isinstance(text, str):
            raise ConfigError("--set", [("", f"expected PATH=VALUE text, got {text!r}")])
        parse_override(text)
    given = data.get("set") if isinstance(data, Mapping) else None
    if not extra_set or not (given is None or isinstance(given, (list, Mapping))):
        return data
    if isinstance(given, Mapping):
        given = [format_override(str(p), v) for p, v in given.items()]
    return {**data, "set": [*(given or []), *extra_set]}


def spec_from_dict(data: Any, source: str = "<sweep>", root: str | Path | None = None,
                   default_name: str = "sweep",
                   extra_set: list[str] | tuple[str, ...] = ()) -> SweepSpec:
    """Check a sweep spec given as a mapping; relative ``base`` paths resolve against
    ``root`` (default: the working directory), then the ``workloads/`` folder.
    ``extra_set`` (``path=value`` texts) are appended to its ``set:``, as
    :func:`load_spec` does."""
    try:
        return _spec_from_dict(_with_extra_set(data, extra_set), source, root, default_name)
    except ConfigError as exc:
        raise _blame_command_line(exc, data, extra_set) from None


def _blame_command_line(exc: ConfigError, data: Any,
                        extra_set: list[str] | tuple[str, ...]) -> ConfigError:
    """``exc`` with a problem of a ``set.PATH`` entry that ``npusim sweep --set`` (or
    ``run_sweep``'s ``overrides``) gave, the last to set PATH, at ``PATH`` and marked as
    from that override: the spec file holds no such entry."""
    from npusim.config.overrides import OVERRIDE_NOTE
    from npusim.sweep.spec_paths import set_path

    given = data.get("set") if isinstance(data, Mapping) else None
    if not extra_set or not (given is None or isinstance(given, (list, Mapping))):
        return exc
    written = {str(p) for p in given} if isinstance(given, Mapping) else \
        {set_path(t) for t in given or [] if isinstance(t, str)}
    command_line = {set_path(text): text for text in extra_set}
    problems = []
    for path, message in exc.problems:
        entry = path[len("set."):].split(" (", 1)[0] if path.startswith("set.") else None
        if entry in command_line:  # (the command line's is the last of that path)
            inner = path.split(" (", 1)[1].rstrip(")") if " (" in path else entry
            text = command_line[entry]
            path, message = inner, message + (
                f" (from the override {text}, which replaces the spec's set: {entry})"
                if entry in written else OVERRIDE_NOTE.format(text))
        problems.append((path, message))
    return ConfigError(exc.source, problems)


def _spec_from_dict(data: Any, source: str, root: str | Path | None,
                    default_name: str) -> SweepSpec:
    problems: list[tuple[str, str]] = []

    def bad(where: str, message: str) -> None:
        problems.append((where, message))

    if data is None:
        raise ConfigError(source, [("", "file is empty; expected a sweep spec mapping (base:, "
                                        "axes:, ...)")])
    if not isinstance(data, Mapping):
        raise ConfigError(source, [("", f"expected a sweep spec mapping (base:, axes:, ...), "
                                        f"got {type(data).__name__}")])
    if {"hw", "workload"} & set(data) and "axes" not in data:  # a scenario, not a spec
        raise ConfigError(source, [("", "this looks like a scenario (it has hw:/workload:), "
                                        "not a sweep spec; run it with `npusim run`, or sweep "
                                        "it from a spec with base: pointing at it")])
    for key in data:
        if key not in _TOP_KEYS:
            close = difflib.get_close_matches(str(key), _TOP_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            bad(str(key), f"unknown key{hint} (known keys: {', '.join(_TOP_KEYS)})")
    name = data.get("name")
    if name is not None and not (isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name)):
        bad("name", f"expected a plain name (letters, digits, '_', '-', '.'; it is the default "
                    f"output directory out/sweeps/<name>), got {name!r}")
    description = data.get("description")
    if description is not None and not isinstance(description, str):  # as a scenario's
        bad("description", f"expected text, got {description!r}")
    if "base" not in data:
        bad("base", "required: a scenario file or mapping to sweep around")
        raise ConfigError(source, problems)
    base, base_source = _load_base(data["base"], source, Path(root) if root else Path.cwd())
    fixed = _parse_set(data.get("set"), bad)
    axes = parse_axes(data.get("axes"), bad)
    derived = _parse_derived(data.get("derived"), bad)
    _check_each_path_set_once(axes, derived, bad, fixed)
    constraints = _parse_constraints(data.get("constraints"), bad)
    on_invalid = data.get("on_invalid", "error")
    if on_invalid not in ("error", "skip"):
        bad("on_invalid", f"expected 'error' or 'skip', got {on_invalid!r}")
    capacity = _parse_capacity(data.get("capacity"), bad)
    metrics = _parse_metrics(data.get("metrics"), bad)
    if metrics is not None and capacity is not None:
        bad("metrics", "a capacity sweep stores its search (capacity.*), not a run's metrics; "
                       "remove metrics: or capacity:")
    store_requests = _parse_store(data.get("store"), bad)
    if store_requests and capacity is not None:
        bad("store.requests", "a capacity sweep stores its search (capacity.*), not one run's "
                              "requests; remove store.requests or capacity:")
    if problems:
        raise ConfigError(source, problems)
    spec = SweepSpec(name=str(data.get("name") or default_name), source=source, base=base,
                     base_source=base_source, set=fixed, axes=axes, derived=derived,
                     constraints=constraints, on_invalid=on_invalid,
                     description=str(data.get("description") or ""), capacity=capacity,
                     metrics=metrics, store_requests=store_requests)
    if capacity is not None:
        kind = base_defaults(spec)["workload"].get("kind")
        if kind != "serving":
            raise ConfigError(source, [("capacity", f"the base scenario's workload is {kind!r}; "
                                        "a capacity search needs a serving workload (kind: "
                                        "serving)")])
    check_paths(spec, data)
    return spec


def _parse_metrics(value: Any, bad) -> tuple[str, ...] | None:
    """``metrics:``, the metrics each row keeps: a list of glob patterns over their
    names as flattened without the ``metrics.`` prefix (``ttft_ms_*``,
    ``bytes_by_level.*``, ``replicas``); absent: every metric.  A large chip's per-unit
    metrics (``unit_utilisation.core17.sa`` ...) are thousands of columns per row."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        bad("metrics", f"expected a list of metric name patterns such as [ttft_ms_*, "
                       f"tpot_ms_mean, slo_attainment], got {value!r}")
        return None
    for index, pattern in enumerate(value):
        if not isinstance(pattern, str) or not pattern.strip():
            bad(f"metrics[{index}]", f"expected a metric name or glob pattern (e.g. "
                                     f"'ttft_ms_*'), got {pattern!r}")
    return tuple(p.strip() for p in value if isinstance(p, str))


def _check_trace_file(scenario: Any, read: dict[str, Any], source: str) -> None:
    """Raise :class:`ConfigError` if the trace file ``scenario`` replays is missing or
    malformed (at ``workload.trace.file``), or its ``rate_scale`` stretches the arrivals
    past what a run holds (at ``workload.trace.rate_scale``): the file is read once per
    file and settings (``read`` remembers the trace or the error), so a bad row stops
    the sweep before any point runs instead of failing every point."""
    from npusim.config.presets import REPO_ROOT
    from npusim.core.errors import TraceError

    trace = getattr(scenario.workload, "trace", None)
    if trace is None or getattr(trace, "file", None) is None:
        return
    # The rows do not depend on rate_scale: read at 1, rescale per point.
    unscaled = trace.model_copy(update={"rate_scale": 1.0})
    settings = unscaled.model_dump_json()
    if settings not in read:
        try:
            read[settings] = unscaled.build(base_dir=REPO_ROOT)  # as the engine finds it
        except TraceError as exc:
            read[settings] = exc
    found = read[settings]
    if isinstance(found, TraceError):
        message = str(found)
        path, _, rest = message.partition(": ")
        raise ConfigError(source, [(path, rest) if path == "workload.trace.file"
                                   else ("workload.trace.file", message)])
    try:  # only the last arrival can overflow: rescale it alone (a point per axis value)
        last = type(found)(found.requests[-1:], found.source, found.hash_block_tokens)
        last.rescale_rate(trace.rate_scale)
    except TraceError as exc:
        raise ConfigError(source, [("workload.trace.rate_scale", str(exc))]) from None


def _parse_capacity(value: Any, bad) -> dict[str, Any] | None:
    """``capacity:`` as find_capacity's arguments (``true`` takes the defaults)."""
    from npusim.sweep.capacity import argument_problems

    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, Mapping):
        bad("capacity", f"expected a mapping such as {{attainment: 0.9, tolerance: 0.05, "
                        f"max_probes: 16, seeds: 1, lengthen: 0}} (or true for those), "
                        f"got {value!r}")
        return None
    unknown_keys(value, _CAPACITY_KEYS, "capacity", bad)
    settings = {key: value.get(key, default) for key, default in _CAPACITY_KEYS.items()}
    names = {"target_attainment": "attainment", "tolerance": "tolerance",
             "max_probes": "max_probes", "seeds": "seeds", "lengthen": "lengthen"}
    for name, message in argument_problems(settings["attainment"], settings["tolerance"],
                                           settings["max_probes"], settings["seeds"],
                                           settings["lengthen"]):
        bad(f"capacity.{names[name]}", message)
    return settings


def _load_base(value: Any, source: str, root: Path) -> tuple[dict, str]:
    from npusim.config.loader import anchor_files
    from npusim.config.presets import read_yaml, workloads_root

    if isinstance(value, Mapping):  # its relative files are next to the spec
        base = copy.deepcopy(dict(value))
        anchor_files(base, root.resolve())
        return base, f"{source} (base)"
    if not isinstance(value, str) or not value:
        raise ConfigError(source, [("base", f"expected a scenario path or mapping, got {value!r}")])
    candidates = [root / value, Path.cwd() / value, workloads_root() / value,
                  workloads_root().parent / value]
    for candidate in candidates:
        if candidate.is_file():
            data = read_yaml(candidate)
            if not isinstance(data, Mapping):
                raise ConfigError(str(candidate), [("", "expected a scenario mapping")])
            if "axes" in data and "hw" not in data and "workload" not in data:
                raise ConfigError(source, [("base", f"got {value!r}: {candidate} is a sweep "
                                            "spec (it has axes:); expected a scenario (hw:, "
                                            "workload:), such as that spec's own base")])
            data = dict(data)
            anchor_files(data, candidate.resolve().parent)  # as `npusim run` would
            return data, str(candidate)
    folders = [c for c in candidates if c.is_dir()]
    if folders:
        raise ConfigError(source, [("base", f"got {value!r}: {folders[0]} is a directory; "
                                    "expected a scenario YAML file")])
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise ConfigError(source, [("base", f"scenario file {value!r} not found (looked in {looked})")])
