"""Checks of a sweep spec against its base scenario: the base with ``set:`` validated
(each problem put on the entry that caused it) and every swept, derived or referenced
path named by a field of the scenario.  Split from :mod:`npusim.sweep.spec`."""

from __future__ import annotations

import copy
import difflib
from typing import TYPE_CHECKING, Any, Mapping

from npusim.config.overrides import join_path
from npusim.core.errors import ConfigError
from npusim.sweep import expr
from npusim.sweep.paths import MISSING, format_override, get_path, split_path

if TYPE_CHECKING:
    from npusim.sweep.spec import SweepSpec


def set_path(text: str) -> str:
    return text.split("=", 1)[0].strip()


def base_defaults(spec: "SweepSpec") -> dict[str, Any]:
    """The validated base scenario (fixed overrides applied) with every default filled."""
    from npusim.config.loader import scenario_from_dict

    # (no notes: each point says its own, with its swept values applied)
    return scenario_from_dict(spec.base, spec.base_source, spec.set,
                              notes=False).model_dump(mode="json")


def blame(spec: "SweepSpec", exc: ConfigError) -> list[tuple[str, str]]:
    """Problems of the base scenario with ``set:`` applied, each put on the ``set.PATH``
    entry that caused it or on the base file.

    A problem the base has on its own is the base's; one at (or inside, or above) a path
    that ``set:`` assigns is that entry's; anything else appeared only with ``set:``
    applied (a cross-field rule) and names both.
    """
    from npusim.config.loader import scenario_from_dict

    own: set[tuple[str, str]] = set()
    if exc.source != "--set":  # "--set" problems come from applying an entry, never the base
        try:
            scenario_from_dict(spec.base, spec.base_source, notes=False)
        except ConfigError as base_exc:
            own = {(p, m) for p, m in base_exc.problems}
    paths = [set_path(text) for text in spec.set]

    def related(assigned: str, path: str) -> bool:
        return any(a == b or b.startswith(a + ".") or b.startswith(a + "[")
                   for a, b in ((assigned, path), (path, assigned)))

    # an inline base is the spec's own base: section ("base.workload.m"), not another file
    inline = spec.base_source == f"{spec.source} (base)"
    in_base = (lambda path: join_path("base", path)) if inline else (
        lambda path: f"base ({spec.base_source}): {path}")
    blamed = []
    for path, message in exc.problems:
        owner = next((a for a in paths if related(a, path)), None)
        if (path, message) in own or not paths:
            blamed.append((in_base(path), message))
        elif owner is not None:
            blamed.append((f"set.{owner}" + ("" if owner == path else f" ({path})"), message))
        elif inline:
            blamed.append((f"{in_base(path)} (with set:)", message))
        else:
            blamed.append((f"base ({spec.base_source}) with set: {path}", message))
    return blamed


def check_paths(spec: "SweepSpec", data: Mapping) -> None:
    """Every swept, derived or referenced path must name a field of the base scenario."""
    from npusim.config.loader import _resolve_with_overrides, scenario_from_dict

    try:
        defaults = base_defaults(spec)
    except ConfigError as exc:
        raise ConfigError(spec.source, blame(spec, exc)) from None
    raw = _resolve_with_overrides(copy.deepcopy(spec.base), spec.set, spec.base_source,
                                  notes=False)
    swept = set(spec.param_names)
    problems = []

    def known(path: str, swept_ok: bool) -> bool:
        return (path.endswith("preset") or (swept_ok and path in swept)
                or get_path(defaults, path) is not MISSING or get_path(raw, path) is not MISSING)

    def null_ancestor(path: str) -> str | None:
        """The nearest ancestor of ``path`` that the base scenario leaves null (an
        optional section such as ``workload.pd.decode_core``), if that is what hides it."""
        parts = split_path(path)
        for depth in range(len(parts) - 1, 0, -1):
            ancestor = ".".join(str(p) for p in parts[:depth])
            value = get_path(defaults, ancestor)
            if value is not MISSING:
                return ancestor if value is None else None
        return None

    def check(path: str, where: str, swept_ok: bool = True, value: Any = MISSING) -> None:
        if known(path, swept_ok):
            return
        section = null_ancestor(path)
        if section is not None and value is not MISSING:
            # A field of a section the base leaves out: a point sets it as `--set` would
            # (creating the section), so ask the schema with the first value.
            try:
                scenario_from_dict(spec.base, spec.base_source,
                                   [*spec.set, format_override(path, value)], notes=False)
                return
            except ConfigError as exc:
                problems.extend((where, f"with {path}={value!r}: "
                                 + (f"{field}: {message}" if field else message))
                                for field, message in exc.problems)
                return
        parts = split_path(path)
        parent = get_path(defaults, ".".join(str(p) for p in parts[:-1])) if len(parts) > 1 else defaults
        options = sorted(parent) if isinstance(parent, Mapping) else []
        close = difflib.get_close_matches(str(parts[-1]), options, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if section is not None:
            hint += (f" ({section!r} is null in the base scenario: give it a mapping under "
                     f"set:, e.g. {section}: {{}})")
        problems.append((where, f"no field {path!r} in the base scenario{hint}"))

    for i, axis in enumerate(spec.axes):
        for path, value in (axis.rows[0] if axis.rows else {}).items():
            check(path, f"axes[{i}].{axis.kind}.{path}", swept_ok=False, value=value)
    for path, template in spec.derived.items():
        check(path, f"derived.{path}", swept_ok=False)
        for ref in expr.references(template) if isinstance(template, str) else []:
            check(ref, f"derived.{path}: ${{{ref}}}")
    for i, (text, _) in enumerate(spec.constraints):
        node, names = expr.parse(text)
        for ref in expr.field_paths(node, names):
            check(ref, f"constraints[{i}].require: {ref}")
    if problems:
        raise ConfigError(spec.source, problems)
