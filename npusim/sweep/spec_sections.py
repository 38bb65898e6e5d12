"""Parsing of a sweep spec's ``set:``, ``derived:``, ``constraints:`` and ``store:``
sections, and the check that no path is set twice (:func:`npusim.sweep.spec.spec_from_dict`
calls them, each reporting problems through its ``bad(where, message)``)."""

from __future__ import annotations

from typing import Any, Mapping

from npusim.sweep import expr
from npusim.sweep.axes import Axis, check_name
from npusim.sweep.paths import format_override
from npusim.sweep.spec_paths import set_path


def _parse_set(value: Any, bad) -> list[str]:
    """``set:`` as ``path=value`` overrides; each path is checked here so a malformed one
    is reported as ``set.PATH`` of the spec, not as a problem of the base scenario."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [format_override(str(p), v) for p, v in value.items()
                if check_name(p, f"set.{p}", bad)]
    if isinstance(value, list) and all(isinstance(v, str) and "=" in v for v in value):
        return [text for i, text in enumerate(value)
                if check_name(set_path(text), f"set[{i}]", bad)]
    bad("set", f"expected a mapping path: value or a list of 'path=value', got {value!r}")
    return []


def _shown(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut short: an expression rejected for its length must not be
    echoed whole (the fuzzed ones were 200,000 characters)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def _within(path: str, other: str) -> bool:
    """Whether ``path`` is ``other`` or a field inside it (``a.b`` and ``a[0]`` are in ``a``)."""
    return path == other or path.startswith(other + ".") or path.startswith(other + "[")


def _check_each_path_set_once(axes: list[Axis], derived: Mapping[str, Any], bad,
                              fixed: list[str] = ()) -> None:
    """A path swept by two blocks, or swept and derived, would keep only the last value
    of each point: the other block's points collapse onto the same configs.  The same
    holds for a path inside another (``hw.core.sram.capacity_bytes`` and
    ``hw.core.sram``: whichever is applied last wins, so the rows would be mislabelled),
    and for a ``set:`` path that a swept or derived one replaces (points apply ``set:``
    first)."""
    owner: dict[str, int] = {}
    for index, axis in enumerate(axes):
        for path in (axis.rows[0] if axis.rows else {}):
            clash = next(((other, block) for other, block in owner.items()
                          if _within(path, other) or _within(other, path)), None)
            if path in owner:
                bad(f"axes[{index}].{axis.kind}.{path}",
                    f"already swept by axes[{owner[path]}]; sweep a path in one block "
                    "(all its values in one list)")
            elif clash is not None:
                bad(f"axes[{index}].{axis.kind}.{path}",
                    f"overlaps {clash[0]} swept by axes[{clash[1]}] (one holds the other): "
                    "the later would override the earlier and mislabel the rows; sweep "
                    "them in one block or sweep only one")
            else:
                owner[path] = index
    for path in derived:
        clash = next(((other, block) for other, block in owner.items()
                      if _within(path, other) or _within(other, path)), None)
        if clash is not None:
            relation = "is" if clash[0] == path else f"overlaps {clash[0]},"
            bad(f"derived.{path}", f"{relation} swept by axes[{clash[1]}]; a path is either "
                                   "swept or derived, not both")
    for index, text in enumerate(fixed):
        path = text.split("=", 1)[0].strip()
        replaced = [f"{other} (axes[{block}])" for other, block in owner.items()
                    if _within(path, other)]
        replaced += [f"{other} (derived)" for other in derived if _within(path, other)]
        if replaced:
            bad(f"set.{path}", f"the sweep also sets {replaced[0]}, which every point applies "
                               "after set:, so this value would be silently replaced; "
                               "remove it from set: (or from --set) or stop sweeping that path")


def _parse_derived(value: Any, bad) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        bad("derived", f"expected a mapping of config path to a template, got {value!r}")
        return {}
    derived: dict[str, Any] = {}
    for path, template in value.items():
        where = f"derived.{path}"
        if not check_name(path, where, bad):
            continue
        if isinstance(template, str) and expr.REF.search(template):
            try:
                expr.parse(template)
            except expr.ExprError as exc:
                if not exc.syntax:  # text templates ("${n}MiB") are fine, banned code is not
                    bad(where, f"{exc} (got {_shown(template)})")
                    continue
        derived[str(path)] = template
    return derived


def _parse_constraints(value: Any, bad) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        bad("constraints", f"expected a list of {{require: EXPR, reason: TEXT}}, got {value!r}")
        return []
    constraints = []
    for i, item in enumerate(value):
        where = f"constraints[{i}]"
        if isinstance(item, str):
            item = {"require": item}
        if not isinstance(item, Mapping) or not isinstance(item.get("require"), str) \
                or set(item) - {"require", "reason"}:
            bad(where, f"expected {{require: EXPR, reason: TEXT}}, got {item!r}")
            continue
        reason = item.get("reason")
        if reason is not None and not isinstance(reason, str):  # it is each skip's error text
            bad(f"{where}.reason", f"expected text saying why a point is skipped, got "
                                   f"{reason!r}")
            continue
        try:
            expr.parse_condition(item["require"])
        except expr.ExprError as exc:
            bad(f"{where}.require", f"{exc} (got {_shown(item['require'])})")
            continue
        constraints.append((item["require"], reason or f"constraint failed: {item['require']}"))
    return constraints


#: ``store:`` keys: what a sweep keeps beside each point's row (all off by default).
STORE_KEYS = ("requests",)


def unknown_keys(value: Mapping, known, section: str, bad) -> None:
    """Report each key of a ``section:`` mapping that is not in ``known``, with the
    closest known one."""
    import difflib

    for key in value:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            bad(f"{section}.{key}", f"unknown key{hint} (known keys: {', '.join(known)})")


def _parse_store(value: Any, bad) -> bool:
    """``store:``, what the results store keeps beside each point's row: ``requests:
    true`` keeps a serving point's per-request table (``DIR/requests/<key>.parquet``).
    Returns whether it keeps them."""
    example = "{requests: true} (keep each serving point's per-request table)"
    if value is None:
        return False
    if not isinstance(value, Mapping):
        bad("store", f"expected a mapping such as {example}, got {value!r}")
        return False
    unknown_keys(value, STORE_KEYS, "store", bad)
    requests = value.get("requests", False)
    if not isinstance(requests, bool):
        bad("store.requests", f"expected true or false, got {requests!r}")
        return False
    return requests
