"""Pydantic validation errors as configuration problems: each names the field's full
path (``hw.cores[3].sram_bytes``), the bad value and what was expected, with the
closest known key or ``kind:`` for a misspelling (:func:`format_validation_error`,
:func:`validate`)."""

from __future__ import annotations

import difflib
import re
from typing import Any, Mapping, get_args, get_origin

from pydantic import BaseModel, ValidationError

from npusim.config.overrides import describe_input, format_path, join_path
from npusim.core.errors import ConfigError


def _nested_homes(owner: type[BaseModel], key: str) -> list[str]:
    """``block.key`` for each field of ``owner`` that is a block with a field ``key``."""
    homes = []
    for name, info in owner.model_fields.items():
        for arg in (info.annotation, *get_args(info.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and key in arg.model_fields:
                homes.append(f"{name}.{key}")
                break
    return homes


def _model_at(model: Any, loc: tuple) -> type[BaseModel] | None:
    """Best-effort: the pydantic model class reached by following ``loc`` from ``model``."""

    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = field.annotation
        # unwrap Optional / list / Annotated / discriminated unions with a single model
        for _ in range(4):
            origin = get_origin(current)
            if origin is None:
                break
            models = [a for a in get_args(current) if isinstance(a, type) and issubclass(a, BaseModel)]
            if len(models) == 1:
                current = models[0]
                break
            nested = [a for a in get_args(current) if get_origin(a) is not None]
            if not nested:
                return None
            current = nested[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def format_validation_error(exc: ValidationError, data: Any, model: Any) -> list[tuple[str, str]]:
    """Turn pydantic errors into ``(field path, message)`` pairs a user can act on.

    Discriminated-union tags that pydantic inserts into locations are dropped, so the
    path matches the YAML the user wrote.
    """
    problems = []
    wrong_kinds: list[str] = []  # blocks holding a part of another kind
    for error in exc.errors(include_url=False):
        parts: list[Any] = []
        node = data
        for part in error["loc"]:
            if node is not None and not isinstance(node, (Mapping, list)):
                break  # the user wrote a scalar here (a shorthand): the rest is internal
            if isinstance(node, Mapping) and isinstance(part, str) and part not in node \
                    and part in (node.get("kind"), node.get("type")):
                continue  # union tag, not a key the user wrote
            if isinstance(part, str) and (part.startswith("function-") or "[" in part):
                continue  # validator wrapper names
            parts.append(part)
            if isinstance(node, Mapping):
                node = node.get(part)
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                node = None
        path = format_path(parts)
        kind = error["type"]
        if kind == "extra_forbidden":
            owner = _owner_model(model, data, parts[:-1])
            known = sorted(owner.model_fields) if owner else []
            key = str(parts[-1])
            name, colon, value = key.partition(":")
            dotted = key.split(".")
            if colon and name.strip() in known:  # flow YAML `{size:32}` is one key
                close = [name.strip()]
                hint = (f"; YAML needs a space after the colon: "
                        f"{{{name.strip()}: {value.strip()}}}")
            elif len(dotted) > 1 and dotted[0] in known:  # `noc.width: 4`, as --set writes it
                close = [dotted[0]]
                shown = node if isinstance(node, (str, int, float)) else "..."
                hint = (f"; a key with dots is not a path in a YAML file: nest it, "
                        f"{': {'.join(dotted)}: {shown}{'}' * (len(dotted) - 1)} (dotted "
                        "paths are for --set and a sweep's set: and axes:)")
            else:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
            listing = f" (known keys: {', '.join(known)})" if known else ""
            siblings = _kinds_with_field(owner, str(parts[-1])) if owner and not close else None
            if siblings and siblings[1]:  # a key of a sibling part: say which kinds take it
                kind_name, others = siblings
                hint = (f" for kind: {kind_name}; {', '.join(others)} "
                        f"{'takes' if len(others) == 1 else 'take'} it")
                homes = _nested_homes(owner, key)
                if homes:  # serving's tp is pd.tp: name where this kind has it
                    prefix = format_path(parts[:-1])
                    hint += (f"; kind: {kind_name} has it as "
                             f"{' or '.join(f'{prefix}.{home}' for home in homes)}")
            message = f"unknown key{hint}{listing}"
        elif kind == "invalid_key":  # `1: 2` or `~: x`: was "hw[1]", a list item's path
            path, key = format_path(parts[:-1]), error.get("input")
            what = "null" if key is None else "boolean" if isinstance(key, bool) else "number"
            spelt = "null" if key is None else str(key).lower() if isinstance(key, bool) else key
            message = f"key {spelt} is read as a {what}; expected a field name (quote it if text)"
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "union_tag_invalid":
            ctx = error.get("ctx", {})
            message = f"unknown kind {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
        elif kind == "union_tag_not_found":
            tag = str(error.get("ctx", {}).get("discriminator", "kind")).strip("'\"")
            message = f"missing '{tag}:' key naming which part this is"
        elif kind == "value_error" and isinstance(error.get("input"), Mapping):
            # A check across a whole block names its fields itself; echoing the block
            # would only bury the message.  One that starts with "KEY: " is about that
            # key of the block (or "KEY.SUBKEY: ", of a block inside it), so it is
            # reported there.
            message = error["msg"].removeprefix("Value error, ")
            key, _, rest = message.partition(": ")
            keys, inner, found = [key], error["input"], key in error["input"]
            if not found:  # "KEY.SUBKEY: ", a key of a block inside this one
                keys, found = key.split("."), True
                for name in keys:
                    found = found and isinstance(inner, Mapping) and name in inner
                    inner = inner[name] if found else None
            if rest and found:
                path, message = format_path([*parts, *keys]), rest
        elif (kind == "literal_error" and parts and parts[-1] == "kind"
              and isinstance(error.get("input"), str)):
            block = format_path(parts[:-1])
            message = _wrong_kind(error["input"], str(error.get("ctx", {}).get("expected")))
            wrong_kinds.append(block)
        else:
            message = error["msg"].removeprefix("Value error, ")
            shown = error.get("input")
            # Quoted, so a value that is part of an allowed one ('disagg' in
            # "Input should be 'fusion' or 'disaggregation'") is still shown.
            said = (f"got {shown!r}" in message or f"got {shown}" in message
                    or (isinstance(shown, str) and len(shown) > 3
                        and (repr(shown) in message or f'"{shown}"' in message
                             or message.startswith(f"{shown}:"))))  # a file's own error
            if not said:  # the message does not quote the value already
                message += f" (got {describe_input(shown)})"
        problems.append((path, message))
    return _hide_kind_consequences(problems, wrong_kinds)


def _wrong_kind(given: str, expected: str) -> str:
    """The message for a block whose ``kind:`` is not the one its field holds: what the
    given kind is, and the presets of the expected one (``expected`` is pydantic's
    ``'dram'``, or ``'a', 'b' or 'c'``)."""
    from npusim.config.presets import presets_of_kind

    wanted = re.findall(r"'([^']*)'", expected) or [expected]
    got_category = kind_category(given)
    want_category = kind_category(wanted[0]) if len(wanted) == 1 else None
    hint = ""
    if got_category is None or want_category is None:
        what = f"unexpected kind {given!r}"
    elif got_category == want_category:
        what = f"{given!r} is another {got_category} part"
    else:  # most likely a preset of the wrong category: name the right ones
        what = f"{given!r} is {a_part(got_category)}, not {a_part(want_category)}"
        shipped = presets_of_kind(wanted[0])
        hint = f", or a preset of that kind ({', '.join(shipped)})" if shipped else ""
    return f"{what}; expected kind: {' or '.join(wanted)}{hint}"


def _hide_kind_consequences(problems: list[tuple[str, str]],
                            wrong_kinds: list[str]) -> list[tuple[str, str]]:
    """Drop the problems inside a block of the wrong kind (a link's keys unknown to a
    DRAM, the DRAM's fields missing): they follow from the kind, and thirty of them
    would bury the one line that says so; the kind's line counts them."""
    def owner(path: str) -> str | None:
        """The wrong-kind block ``path`` lies inside (its kind line excluded)."""
        return next((block for block in wrong_kinds
                     if path != join_path(block, "kind")
                     and (not block or path.startswith((f"{block}.", f"{block}[")))), None)

    hidden: dict[str, int] = {}
    kept = []
    for path, message in problems:
        block = owner(path)
        if block is None:
            kept.append((path, message))
        else:
            hidden[block] = hidden.get(block, 0) + 1
    said = {join_path(block, "kind"): count for block, count in hidden.items()}
    return [(path, f"{message}; the block's {said[path]} other "
                   f"problem{'s are' if said[path] > 1 else ' is'} not shown (fix its kind "
                   "first: most follow from it)" if path in said else message)
            for path, message in kept]


def kind_category(kind: Any) -> str | None:
    """The registry category ``kind`` belongs to (``dram``: memory), or None."""
    from npusim.core import registry

    if not isinstance(kind, str):
        return None
    return next((category for category in registry.categories()
                 if kind in registry.entries(category)), None)


def a_part(category: str, noun: str = "part") -> str:
    """``a memory part``, ``an interconnect part``, ``a device``: how a message names
    what a kind of ``category`` is."""
    if category == "device":
        return "a device" if noun == "part" else f"a device {noun}"
    return f"{'an' if category[:1] in 'aeiou' else 'a'} {category} {noun}"


def _kinds_with_field(config: type[BaseModel], key: str) -> tuple[str, list[str]] | None:
    """``config``'s registered kind and the other kinds of its category that have a
    field ``key``; None if ``config`` is no registered part."""
    from npusim.core import registry

    for category in registry.categories():
        table = registry.entries(category)
        mine = next((name for name, entry in table.items() if entry.config is config), None)
        if mine is not None:
            return mine, [name for name, entry in table.items()
                          if entry.config is not config and key in entry.config.model_fields]
    return None


def _owner_model(model: Any, data: Any, parts: list[Any]) -> type[BaseModel] | None:
    """The model class owning the mapping at ``parts`` (resolving ``kind`` tags from data)."""
    from npusim.core import registry

    current = model
    node = data
    for part in parts:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            continue
        node = node.get(part) if isinstance(node, Mapping) else None
        nxt = _model_at(current, (part,))
        if nxt is None and isinstance(node, Mapping):
            nxt = _tagged_member(current, part, node)
        if nxt is None and isinstance(node, Mapping) and "kind" in node:
            for category in registry.categories():
                entry = registry.entries(category).get(node["kind"])
                if entry is not None:
                    nxt = entry.config
                    break
        if nxt is None:
            return None
        current = nxt
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _tagged_member(owner: Any, field: str, node: Mapping) -> type[BaseModel] | None:
    """The member of the union at ``owner.field`` whose ``kind``/``type`` tag ``node`` names."""
    fields = getattr(owner, "model_fields", {})
    if field not in fields:
        return None
    pending, members = [fields[field].annotation], []
    while pending:  # flatten Optional / Annotated / Union / list nesting
        current = pending.pop()
        if isinstance(current, type) and issubclass(current, BaseModel):
            members.append(current)
        else:
            pending.extend(get_args(current))
    for member in members:
        for tag in ("kind", "type"):
            info = member.model_fields.get(tag)
            if info is not None and tag in node and info.default == node[tag]:
                return member
    return None


def validate(model: Any, data: Any, source: str) -> Any:
    """Validate ``data`` against ``model``; raise :class:`ConfigError` with all problems."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, format_validation_error(exc, data, model)) from None
