"""Reference cases as data, and how to evaluate one.

A case file (``npusim/validation/cases/*.yaml``) has a ``suite`` name and a list of
cases.  A case names one or more *runs* (a component bench with params, or a scenario
with ``--set`` overrides), how to get a number from them, the reference value from a
paper or ``components.md``, a tolerance and a kind:

* ``absolute`` / ``ratio`` – ``|sim - ref| / |ref| <= tolerance`` (a reference written
  as a range ``"1.32-5.55"`` passes anywhere inside the range widened by the tolerance);
* ``trend`` – the metric over ``series`` (run names in order) must be ``increasing``,
  ``decreasing`` or ``flat`` (relative spread within ``tolerance``).

``role`` says whether the reference was used to set a preset's physical parameters, or
a workload setting the paper does not give (``calibration``), or is a genuine
``prediction``; the report keeps them apart.

Single-run shorthand: ``bench``/``params`` or ``scenario``/``set`` at the top level and
``metric`` naming a key of that run's metrics.  Multi-run: ``runs: {name: {...}}`` and
``value: "a.latency_s / b.latency_s"`` (arithmetic over ``run.metric`` names).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from npusim.config.loader import validate
from npusim.config.presets import REPO_ROOT, read_yaml
from npusim.core.errors import ConfigError
from npusim.core.registry import NumbersNotBooleans

CASES_DIR = Path(__file__).with_name("cases")


class RunSpec(NumbersNotBooleans):
    """One run a case needs: a component bench or a scenario."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bench: str | None = Field(None, description="Registered component bench name.")
    params: dict[str, Any] = Field(default_factory=dict, description="Bench parameters.")
    scenario: str | None = Field(None, description="Scenario path relative to the repository.")
    set: list[str] = Field(default_factory=list, description="Overrides, as with --set; an "
                           "item may itself be a list (a YAML alias to overrides several runs "
                           "share), flattened in place.")

    @field_validator("set", mode="before")
    @classmethod
    def _flatten(cls, value: Any) -> Any:
        # `set: [*shared_load, workload.pd.prefill_cores=49]`: one list of shared
        # overrides instead of copies that could drift apart.
        if isinstance(value, list):
            return [item for entry in value
                    for item in (entry if isinstance(entry, list) else [entry])]
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "RunSpec":
        if (self.bench is None) == (self.scenario is None):
            raise ValueError("a run names exactly one of 'bench' or 'scenario'")
        return self


class Case(NumbersNotBooleans):
    """A reference case (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Stable id, e.g. S004-011 or C-DRAM-01.")
    title: str = Field(description="What is compared, in words.")
    suite: str = Field("", description="Suite (filled from the file when omitted).")
    bench: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    scenario: str | None = None
    set: list[str] = Field(default_factory=list)
    runs: dict[str, RunSpec] = Field(default_factory=dict)
    metric: str | None = Field(None, description="Metric key (single run, or per run for trends).")
    value: str | None = Field(None, description="Expression over run.metric names.")
    series: list[str] = Field(default_factory=list, description="Run names in order (trend).")
    series_values: list[str] = Field(
        default_factory=list, description="Trend over expressions instead of one metric "
                                          "per run (e.g. ratios of two runs per point).")
    expect: Literal["increasing", "decreasing", "flat"] | None = None
    reference: float | str = Field(description="Reference value or range 'lo-hi'.")
    unit: str = Field("", description="Unit of the reference, for the report.")
    tolerance: float = Field(0.10, ge=0, description="Allowed relative error.")
    kind: Literal["absolute", "ratio", "trend"] = "absolute"
    role: Literal["calibration", "prediction"] = "prediction"
    source: str = Field(description="Paper (short name, arXiv id) + section, or the row of "
                                    "the component reference sheet.")
    slow: bool = Field(False, description="Excluded from the default test run.")
    notes: str = ""
    known_gap: str = Field(
        "", description="Why the model is known to miss this reference (shown in the "
                        "report; the test suite then expects the failure and flags the "
                        "case when it starts passing).")

    @model_validator(mode="after")
    def _shape(self) -> "Case":
        single = self.bench is not None or self.scenario is not None
        if single and self.runs:
            raise ValueError("give either a single bench/scenario or 'runs', not both")
        if not single and not self.runs:
            raise ValueError("a case needs a bench, a scenario or runs")
        if self.kind == "trend" and self.series_values:
            if self.expect is None:
                raise ValueError("a trend case needs 'expect'")
        elif self.kind == "trend":
            if not self.series or self.expect is None or self.metric is None:
                raise ValueError("a trend case needs 'series', 'expect' and 'metric' "
                                 "(or 'series_values' and 'expect')")
            missing = [name for name in self.series if name not in self.runs]
            if missing:
                raise ValueError(f"series names unknown runs: {missing}")
        elif self.value is None and self.metric is None:
            raise ValueError("a case needs 'metric' or 'value'")
        return self

    def all_runs(self) -> dict[str, RunSpec]:
        if self.runs:
            return dict(self.runs)
        return {"run": RunSpec(bench=self.bench, params=self.params,
                               scenario=self.scenario, set=self.set)}

    def reference_range(self) -> tuple[float, float]:
        if isinstance(self.reference, (int, float)):
            return float(self.reference), float(self.reference)
        match = re.fullmatch(r"\s*([-+\d.eE]+)\s*-\s*([-+\d.eE]+)\s*", self.reference)
        if not match:
            raise ValueError(f"reference {self.reference!r} is neither a number nor 'lo-hi'")
        return float(match[1]), float(match[2])


@dataclass
class Outcome:
    """A case's evaluation."""

    case: Case
    simulated: float | list[float] | None
    error: float | None
    passed: bool
    message: str = ""


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    """Every case in ``directory``, validated (errors name file and case index)."""
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        data = read_yaml(path) or {}
        if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
            raise ConfigError(str(path), [("cases", "expected a list of cases")])
        unknown = [key for key in data if key not in ("suite", "cases")
                   and not str(key).startswith("x-")]
        if unknown:  # x-* keys only hold YAML anchors shared by several cases
            raise ConfigError(str(path), [(str(unknown[0]), "unknown top-level key; expected "
                                           "'suite', 'cases' or an 'x-' anchor block")])
        suite = data.get("suite", path.stem)
        for index, raw in enumerate(data["cases"]):
            raw = {"suite": suite, **raw} if isinstance(raw, dict) else raw
            case = validate(Case, raw, f"{path}: cases[{index}]")
            if case.id in seen:
                raise ConfigError(str(path), [(f"cases[{index}].id",
                                               f"duplicate id {case.id!r} (also in {seen[case.id]})")])
            seen[case.id] = path.name
            cases.append(case)
    return cases


_RUN_CACHE: dict[str, dict[str, Any]] = {}


def execute_run(spec: RunSpec) -> dict[str, Any]:
    """The metrics of one run (bench result dict or scenario metrics).

    Runs are pure functions of their spec, so several cases naming the same run (the
    same scenario and overrides) share one simulation within a process.
    """
    key = spec.model_dump_json()
    if key not in _RUN_CACHE:
        _RUN_CACHE[key] = _execute_run(spec)
    return _RUN_CACHE[key]


def _execute_run(spec: RunSpec) -> dict[str, Any]:
    if spec.bench is not None:
        from npusim.validation.bench_registry import get_bench

        return dict(get_bench(spec.bench)(**spec.params))
    from npusim.api import simulate

    path = Path(spec.scenario)
    if not path.is_absolute():
        path = REPO_ROOT / path
    result = simulate(path, overrides=spec.set)
    # ``host`` (wall time of the run) is a measurement of the simulator itself, not a
    # simulated quantity: only cases about simulation cost (S004-004) read it.
    return {**result.metrics, "host": result.host}


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg, ast.Pow: operator.pow}
_FUNCTIONS = {"abs": abs, "min": min, "max": max}


def evaluate_expression(text: str, values: dict[str, dict[str, Any]]) -> float:
    """Arithmetic over ``run.metric`` names plus ``abs``, ``min`` and ``max`` (nothing else)."""

    def lookup(node: ast.AST) -> float:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            raise ValueError(f"unsupported expression in {text!r}")
        parts.append(node.id)
        run, *path = reversed(parts)
        current: Any = values[run]
        for key in path:
            current = current[key]
        return float(current)

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.operand))
        if isinstance(node, (ast.Attribute, ast.Name)):
            return lookup(node)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _FUNCTIONS and not node.keywords):
            return float(_FUNCTIONS[node.func.id](*(walk(arg) for arg in node.args)))
        raise ValueError(f"unsupported expression in {text!r}")

    return walk(ast.parse(text, mode="eval"))


def _metric(values: dict[str, Any], key: str) -> float:
    current: Any = values
    for part in key.split("."):
        current = current[part]
    return float(current)


def evaluate(case: Case) -> Outcome:
    """Run a case and compare with its reference."""
    values = {name: execute_run(spec) for name, spec in case.all_runs().items()}
    if case.kind == "trend":
        if case.series_values:
            series = [evaluate_expression(text, values) for text in case.series_values]
        else:
            series = [_metric(values[name], case.metric) for name in case.series]
        passed, message = _check_trend(series, case.expect, case.tolerance)
        return Outcome(case, series, None, passed, message)
    if case.value is not None:
        simulated = evaluate_expression(case.value, values)
    else:
        simulated = _metric(next(iter(values.values())), case.metric)
    low, high = case.reference_range()
    if low <= simulated <= high:
        error = 0.0
    else:
        nearest = low if simulated < low else high
        error = abs(simulated - nearest) / abs(nearest) if nearest else abs(simulated)
    return Outcome(case, simulated, error, error <= case.tolerance)


def _check_trend(series: list[float], expect: str, tolerance: float) -> tuple[bool, str]:
    pairs = list(zip(series, series[1:]))
    if expect == "increasing":
        ok = all(b > a for a, b in pairs)
    elif expect == "decreasing":
        ok = all(b < a for a, b in pairs)
    else:
        mean = sum(series) / len(series)
        spread = (max(series) - min(series)) / abs(mean) if mean else 0.0
        return spread <= tolerance, f"relative spread {spread:.3f} (allowed {tolerance})"
    return ok, f"{expect}: {'holds' if ok else 'does not hold'}"
