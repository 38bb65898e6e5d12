"""Sweep axes: ``grid``, ``zip`` and ``random`` blocks of a sweep spec, parsed into rows
of ``{config path: value}`` (see :mod:`npusim.sweep.spec` for the YAML form).

Parsers report problems through ``bad(where, message)`` (the spec collects them into
one :class:`~npusim.core.errors.ConfigError`) and return ``None`` for a broken block,
so one pass lists every mistake in the file.

A sweep has at most :data:`MAX_POINTS` points (and a random block at most that many
samples): the rows are built in memory when the spec is read, so a typo such as
``samples: 100000000`` must be an error, not a machine out of memory.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

import yaml

from npusim.config.presets import parse_yaml
from npusim.core.units import parse_bytes
from npusim.sweep.store import INT64_MAX, INT64_MIN

__all__ = ["Axis", "AXIS_KINDS", "MAX_POINTS", "PATH", "check_name", "parse_axes"]

AXIS_KINDS = ("grid", "zip", "random")
#: Most points one sweep may have (the product of its blocks), and most samples per
#: random block.  Documented in docs/sweeps.md.
MAX_POINTS = 1_000_000
#: A config path: dotted keys with optional list indices (``hw.cores[3].sram_bytes``).
PATH = re.compile(r"[A-Za-z_][\w-]*(\[\d+\])*(\.[A-Za-z_][\w-]*(\[\d+\])*)*")


@dataclass
class Axis:
    """One block of axes: its kind and the values of each parameter, row by row."""

    kind: str
    rows: list[dict[str, Any]]


def check_name(path: Any, where: str, bad) -> bool:
    """Whether ``path`` is a well-formed config path; reports it through ``bad`` if not."""
    if not isinstance(path, str) or not PATH.fullmatch(path):
        bad(where, f"malformed config path {path!r}; expected keys separated by dots, "
                   "e.g. hw.core.systolic.rows")
        return False
    return True


def _values(value: Any, where: str, bad) -> list | None:
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = parse_yaml(value)  # "[32, 64]" written as a string
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            bad(where, f"{value!r} is not a valid YAML list ({problem}); expected a "
                       "non-empty list of values, e.g. [32, 64]")
            return None
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        # `workload: {m: [64, 128]}`: a YAML tree where the spec takes dotted paths
        path = where.split(".", 2)[-1]
        key, inner = next(iter(value.items()))
        bad(where, f"expected a non-empty list of values, got the mapping {value!r}; an axis "
                   f"names its field by its dotted path: {path}.{key}: {inner!r}")
        return None
    if not isinstance(value, list) or not value:
        bad(where, f"expected a non-empty list of values, got {value!r}")
        return None
    return value


def parse_axes(value: Any, bad) -> list[Axis]:
    """The ``axes:`` of a spec: a list of blocks, a mapping of blocks, or one bare grid."""
    if value is None:
        return []
    if isinstance(value, Mapping) and not set(value) & set(AXIS_KINDS):
        value = [{"grid": value}]
    elif isinstance(value, Mapping):
        value = [{k: v} for k, v in value.items()]
    if not isinstance(value, list):
        bad("axes", f"expected a list of axis blocks (grid/zip/random), got {value!r}")
        return []
    axes = []
    for i, block in enumerate(value):
        where = f"axes[{i}]"
        if not isinstance(block, Mapping) or len(block) != 1 or next(iter(block)) not in AXIS_KINDS:
            bare = isinstance(block, Mapping) and block and not set(block) & set(AXIS_KINDS)
            bad(where, f"expected one of {{grid: ...}}, {{zip: ...}}, {{random: ...}}, got "
                       f"{block!r}" + ("; in a list of blocks, a grid is written "
                                       "'- grid: {PATH: [values]}'" if bare else ""))
            continue
        kind, body = next(iter(block.items()))
        where = f"{where}.{kind}"
        if kind == "random":
            axis = _parse_random(body, where, bad)
        else:
            axis = _parse_listed(kind, body, where, bad)
        if axis is not None:
            axes.append(axis)
    total = math.prod(len(axis.rows) for axis in axes)
    if total > MAX_POINTS:
        sizes = " x ".join(f"{len(axis.rows):,}" for axis in axes)
        bad("axes", f"the blocks make {sizes} = {total:,} points; at most {MAX_POINTS:,} "
                    "are allowed")
        return []
    return axes


def _per_path(body: Mapping, where: str, parse, bad) -> dict | None:
    """``parse(value, where.path, bad)`` for every config path of ``body``, or ``None``
    if a path or a value was bad (each reported through ``bad``)."""
    out = {}
    for path, raw in body.items():
        if check_name(path, f"{where}.{path}", bad):
            parsed = parse(raw, f"{where}.{path}", bad)
            if parsed is not None:
                out[path] = parsed
    return out if len(out) == len(body) else None


def _parse_listed(kind: str, body: Any, where: str, bad) -> Axis | None:
    if isinstance(body, list) and all(isinstance(s, str) and "=" in s for s in body):
        body = {s.split("=", 1)[0].strip(): s.split("=", 1)[1] for s in body}
    if not isinstance(body, Mapping) or not body:
        bad(where, f"expected a mapping of config path to a list of values, got {body!r}")
        return None
    columns = _per_path(body, where, _values, bad)
    if columns is None:
        return None
    if kind == "zip":
        lengths = {p: len(v) for p, v in columns.items()}
        if len(set(lengths.values())) > 1:
            bad(where, f"zip needs lists of equal length, got {lengths}")
            return None
        rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    else:
        total = math.prod(len(v) for v in columns.values())
        if total > MAX_POINTS:  # checked before the product is built in memory
            sizes = " x ".join(f"{len(v):,}" for v in columns.values())
            bad(where, f"the grid makes {sizes} = {total:,} points; at most {MAX_POINTS:,} "
                       "are allowed")
            return None
        rows = [dict(zip(columns, values)) for values in itertools.product(*columns.values())]
    return Axis(kind, rows)


def _parse_random(body: Any, where: str, bad) -> Axis | None:
    if not isinstance(body, Mapping):
        bad(where, f"expected {{seed: N, samples: N, params: {{...}}}}, got {body!r}")
        return None
    for key in body:
        if key not in ("seed", "samples", "params"):
            bad(f"{where}.{key}", "unknown key; expected seed, samples, params")
    seed, samples, params = body.get("seed", 0), body.get("samples"), body.get("params")
    # random.Random(-1) is random.Random(1): a negative seed would silently repeat another
    # seed's points, so only 0, 1, 2, ... are seeds.
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        bad(f"{where}.seed", f"expected a non-negative integer seed, got {seed!r}")
        return None
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        bad(f"{where}.samples", f"expected a positive number of samples, got {samples!r}")
        return None
    if samples > MAX_POINTS:
        bad(f"{where}.samples", f"at most {MAX_POINTS:,} samples are allowed, got {samples:,}")
        return None
    if not isinstance(params, Mapping) or not params:
        bad(f"{where}.params", f"expected a mapping of config path to a distribution, got {params!r}")
        return None
    samplers = _per_path(params, f"{where}.params", _sampler, bad)
    if samplers is None:
        return None
    rng = random.Random(seed)  # one stream per block: the same seed gives the same points
    try:
        rows = [{p: s(rng) for p, s in samplers.items()} for _ in range(samples)]
    except (OverflowError, ValueError) as exc:  # e.g. exp() of a bound near the float limit
        bad(f"{where}.params", f"cannot draw samples: {exc}")
        return None
    return Axis("random", rows)


def _finite(value: int | float, as_float: bool) -> bool:
    """Whether a bound is a finite number (and, for ``as_float``, fits in a float)."""
    if isinstance(value, int) and not as_float:
        return True
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond the float range
        return False


_EXPONENT = re.compile(r"([-+]?\d+)(?:\.(\d*))?[eE]([-+]?)(\d+)")
_WITH_UNIT = re.compile(r"\s*[-+]?[\d.]+\s*[A-Za-z/]+\s*")


def _bound_problem(value: Any, kind: str) -> str | None:
    """Why ``value`` is not a usable bound of a ``kind`` distribution (a phrase that
    follows "is"/"are"), or None.  A quoted ``'1e308'`` (or one given from Python) and
    ``8MiB`` are text, which a bare "low <= high" message hid."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None
    if not isinstance(value, str):
        return f"{_kind(value)}, not a number"
    if _EXPONENT.fullmatch(value.strip()):
        return f"text, not a number: write it without quotes ({value.strip()})"
    if _WITH_UNIT.fullmatch(value):
        return (f"text: units are not supported in {kind} bounds; write plain numbers in "
                "the field's base unit (bytes, ps, Hz), or list the values to choose from")
    return "text, not a number"


def _bound_problems(args: list, kind: str) -> list[str]:
    """One sentence per distinct reason, naming every bound it applies to."""
    by_reason: dict[str, list] = {}
    for value in args:
        reason = _bound_problem(value, kind)
        if reason is not None:
            by_reason.setdefault(reason, []).append(value)
    return [f"{' and '.join(map(repr, values))} {'is' if len(values) == 1 else 'are'} {reason}"
            + (_size_example(values) if "units" in reason else "")
            for reason, values in by_reason.items()]


def _size_example(values: list) -> str:
    """`` (8MiB is 8388608)`` for the first value that reads as a size, else ''."""
    for value in values:
        try:
            return f" ({value} is {parse_bytes(value)})"
        except (ValueError, TypeError):
            continue
    return ""


def _kind(value: Any) -> str:
    return {bool: "a boolean", type(None): "an empty value", list: "a list", dict: "a mapping"}.get(
        type(value), type(value).__name__)


def _bounds(kind: str, args: Any, where: str, bad) -> bool:
    """Whether ``args`` is ``[low, high]`` of finite numbers with low <= high."""
    if not isinstance(args, list) or len(args) != 2:
        bad(f"{where}.{kind}", f"expected [low, high], got {args!r}")
        return False
    problems = _bound_problems(args, kind)
    if problems:
        bad(f"{where}.{kind}", f"expected [low, high] of numbers, got {args!r}: "
                               + "; ".join(problems))
        return False
    # .nan and .inf are YAML floats: NaN slips through the low <= high check (every
    # comparison with it is false) and both crash the sampler (int(round(nan)),
    # int(round(inf))), so refuse them here, with the field path.
    if not all(_finite(a, kind != "randint") for a in args):
        bad(f"{where}.{kind}", f"bounds must be finite, got {args!r}")
        return False
    if args[0] > args[1]:
        bad(f"{where}.{kind}", f"expected [low, high] with low <= high, got {args!r}")
        return False
    return True


def _fits_int64(kind: str, args: list, where: str, bad) -> bool:
    """Integer draws must fit the results store's 64-bit integers: a bound beyond them
    is a typo, not a design point (and its metrics would overflow too)."""
    if all(INT64_MIN <= a < INT64_MAX + 1 for a in args):
        return True
    bad(f"{where}.{kind}", f"integer bounds must lie within a 64-bit integer "
                           f"({INT64_MIN:,} to {INT64_MAX:,}), got {args!r}")
    return False


def _sampler(dist: Any, where: str, bad):
    if isinstance(dist, list) and dist:
        dist = {"choice": dist}
    if not isinstance(dist, Mapping):
        bad(where, f"expected a list or {{choice|uniform|loguniform|randint: ...}}, got {dist!r}")
        return None
    kinds = [k for k in dist if k in ("choice", "uniform", "loguniform", "randint")]
    extra = [k for k in dist if k not in kinds and k != "integer"]
    if len(kinds) != 1 or extra:
        bad(where, f"expected exactly one of choice, uniform, loguniform, randint "
                   f"(plus integer: true), got {dict(dist)!r}")
        return None
    kind, args, integer = kinds[0], dist[kinds[0]], dist.get("integer", False)
    if not isinstance(integer, bool):  # bool("maybe") is True: say so instead
        bad(f"{where}.integer", f"expected true or false, got {integer!r}")
        return None
    if kind == "choice":
        if "integer" in dist:  # a choice draws its listed values as written
            bad(f"{where}.integer", "applies to uniform and loguniform draws; a choice "
                                    "draws the listed values as written (list integers)")
            return None
        if not isinstance(args, list) or not args:
            bad(f"{where}.choice", f"expected a non-empty list, got {args!r}")
            return None
        return lambda rng: rng.choice(args)
    if not _bounds(kind, args, where, bad):
        return None
    if (kind == "randint" or integer) and not _fits_int64(kind, args, where, bad):
        return None
    low, high = args
    if kind == "uniform" and not math.isfinite(float(high) - float(low)):
        bad(f"{where}.uniform", f"the range high - low must be finite, got {args!r}")
        return None
    if kind == "randint":
        if not all(isinstance(a, int) for a in args):
            bad(f"{where}.randint", f"expected integer bounds, got {args!r}")
            return None
        return lambda rng: rng.randint(low, high)
    if kind == "loguniform" and low <= 0:
        bad(f"{where}.loguniform", f"bounds must be positive, got {args!r}")
        return None
    if integer:
        first, last = math.ceil(low), math.floor(high)
        if first > last:
            bad(f"{where}.{kind}", f"no integer lies in [{low}, {high}]; widen the bounds "
                                   "or drop integer: true")
            return None
        if kind == "uniform":  # every integer equally often (rounding halved the ends)
            return lambda rng: rng.randint(first, last)
        # Log-uniform over [first - 0.5, last + 0.5), rounded: each integer gets the
        # share of log-space around it, the ends included.
        lo, hi = math.log(first - 0.5), math.log(last + 0.5)  # first >= 1: low > 0
        return lambda rng: min(last, max(first, int(round(math.exp(rng.uniform(lo, hi))))))
    if kind == "loguniform":
        return lambda rng: math.exp(rng.uniform(math.log(low), math.log(high)))
    return lambda rng: rng.uniform(low, high)
