"""``--set PATH=VALUE`` overrides: parsed (values as YAML), applied to a raw scenario
mapping, and the notes that tie a validation problem back to the override that caused
it (``(from the override ...)``, the ``--set`` that replaces a section whose kind
changed)."""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import yaml

from npusim.config.presets import parse_yaml
from npusim.core.errors import ConfigError
from npusim.core.text import UNENCODABLE, is_encodable, shown, unencodable_path


def override_list(overrides: Any) -> list[str]:
    """``overrides`` as given to the Python API: a list of ``PATH=VALUE`` strings, or one
    string (one override, not a sequence of characters); anything else is a
    :class:`ConfigError`."""
    if isinstance(overrides, str):
        overrides = [overrides]
    if overrides is None or isinstance(overrides, Mapping):
        raise ConfigError("overrides", [("", "expected a list of 'PATH=VALUE' strings, got "
                                             f"{type(overrides).__name__}")])
    overrides = list(overrides)
    if not all(isinstance(o, str) for o in overrides):
        raise ConfigError("overrides", [("", "expected a list of 'PATH=VALUE' strings, got "
                                             f"{overrides!r}")])
    return overrides


def join_path(path: str, key: Any) -> str:
    """``path`` and one more key (``a.b``) or list index (``a[2]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """Split ``a.b[2].c=value`` into its path and its YAML-parsed value."""
    if not is_encodable(text):
        raise ConfigError("--set", [(shown(text), UNENCODABLE)])
    if "=" not in text:
        raise ConfigError("--set", [(text, "expected PATH=VALUE, e.g. hw.core.sram.capacity_bytes=32MiB")])
    raw_path, raw_value = text.split("=", 1)
    parts: list[str | int] = []
    position = 0
    for match in _PATH_PART.finditer(raw_path.strip()):
        if match.start() != position and raw_path.strip()[position:match.start()] != ".":
            break
        parts.append(match[1] if match[1] is not None else int(match[2]))
        position = match.end()
    if not parts or position != len(raw_path.strip()):
        raise ConfigError("--set", [(raw_path, "malformed path; expected keys separated by dots, "
                                               "list items as [N], e.g. hw.noc.width")])
    try:
        value = parse_yaml(raw_value) if raw_value.strip() else ""
    except yaml.constructor.ConstructorError as exc:  # e.g. a key given twice
        raise ConfigError("--set", [(raw_path, f"{exc.problem} (got {describe_input(raw_value)})")]) from None
    except yaml.YAMLError as exc:
        text = raw_value.strip()
        start = text[:1]
        mark = getattr(exc, "problem_mark", None)
        before = raw_value[:mark.index].rstrip() if mark is not None else ""
        after = raw_value[mark.index:].strip() if mark is not None else ""
        closed_then_text = before[-1:] in ("]", "}") and after[:1] not in ("", "]", "}", ",", ":")
        if start in ("{", "[") and not closed_then_text:
            # A flow mapping or list that does not parse (left open, a missing comma, a
            # bracket too many): meant as a section or a list, and the text would only be
            # "not a valid dictionary" at the field, far from the typo.  Text whose parse
            # stopped right after a closed bracket ('[2024]-trace.csv') stays text.
            what = "mapping, e.g. {kind: continuous}" if start == "{" else "list, e.g. [4, 4]"
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError("--set", [(raw_path.strip(), f"got {describe_input(raw_value)}, "
                                         f"which is not a YAML flow {what.split(',')[0]} "
                                         f"({problem}); expected a flow {what}")]) from None
        value = raw_value  # not YAML: the text itself (a path, a name)
    if unencodable_path(value) is not None:  # a "\ud800" escape inside the value
        raise ConfigError("--set", [(raw_path, UNENCODABLE)])
    return parts, value


def apply_override(data: dict, parts: list[str | int], value: Any, text: str) -> None:
    """Set ``value`` at ``parts`` inside ``data`` (creating mappings as needed)."""
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        where = format_path(parts[: depth + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                raise ConfigError("--set", [(where, f"no list item {part} here (in {text!r})")])
            node = node[part]
        else:
            if not isinstance(node, dict):
                raise ConfigError("--set", [(where, _not_a_mapping(parts[:depth], node, text))])
            node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or not 0 <= last < len(node):
            raise ConfigError("--set", [(format_path(parts), f"no list item {last} here (in {text!r})")])
        node[last] = value
    elif isinstance(node, dict):
        current = node.get(last)
        if (isinstance(current, dict) and "capacity_bytes" in current
                and not isinstance(value, (dict, list))):
            # Shorthand: a size assigned to a memory sets its capacity and keeps the rest
            # of the preset (``--set hw.core.sram=32MiB``).
            current["capacity_bytes"] = value
        else:
            node[last] = value
    else:
        raise ConfigError("--set", [(format_path(parts), _not_a_mapping(parts[:-1], node, text))])


def _not_a_mapping(parent: list[str | int], node: Any, text: str) -> str:
    """Why an override cannot set a key under ``parent``: the scenario holds a value there."""
    where = format_path(parent) or "the top level"
    return (f"cannot set {text!r}: {where} is {describe_input(node)} in the scenario, not a "
            f"mapping; expected {where} to be a section (a mapping of keys)")


def format_path(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        path = join_path(path, part)
    return path


def describe_input(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: Appended to a problem at a field an override set (``--set``, ``--trace``, ...).
OVERRIDE_NOTE = " (from the override {})"
#: What every override note starts with (a problem's message that has it came from one).
OVERRIDE_MARK = OVERRIDE_NOTE.split("{")[0]


def _field_does_not_apply(message: str) -> bool:
    """Whether a problem says a field is not one the section's kind or mode takes."""
    return (message.startswith("unknown key") or "would ignore" in message
            or "does not use" in message)


def with_override_notes(exc: ConfigError, overrides: list[str]) -> ConfigError:
    """``exc`` with each problem at a field an override set marked ``(from the override
    PATH=VALUE)``: the file is named as the scenario validated, but the bad value is not
    in it."""
    set_paths = []
    for text in overrides:
        try:
            set_paths.append((format_path(parse_override(text)[0]), text))
        except ConfigError:  # pragma: no cover - already applied, so it parsed
            continue
    if not set_paths:
        return exc
    # An override of a section's kind: or mode: keeps the section's other fields, which
    # the new kind may not take; a --set cannot remove them, so name the one that can.
    switches = []
    for set_path, text in set_paths:
        section, _, field = set_path.rpartition(".")
        if field in ("kind", "mode") and section:
            value = text.split("=", 1)[1].strip()
            switches.append((section, text, f"; the override {text} keeps {section}'s other "
                             f"fields: --set '{section}={{{field}: {value}, ...}}' replaces the "
                             "whole section"))
    problems = []
    for problem_path, message in exc.problems:
        # (a block's kind: comes from the preset an override gave it)
        origin = [text for set_path, text in set_paths if problem_path == set_path
                  or problem_path.startswith((f"{set_path}.", f"{set_path}["))
                  or (set_path.endswith(".preset") and problem_path
                      == f"{set_path[:-len('preset')]}kind")]
        if origin:
            message += OVERRIDE_NOTE.format(origin[-1])
        else:  # a check of a whole section: name the overrides that changed its fields
            switched = {text for _, text, _ in switches}  # said below, with the fix
            inside = [text for set_path, text in set_paths
                      if set_path.startswith((f"{problem_path}.", f"{problem_path}["))
                      and problem_path and text not in switched]
            if inside:
                message += f" (overrides inside it: {', '.join(inside)})"
        for section, text, hint in switches:
            # only where the new kind refuses a field the section kept
            if (problem_path == section or problem_path.startswith(f"{section}.")) \
                    and text not in origin and _field_does_not_apply(message):
                message += hint
        problems.append((problem_path, message))
    return ConfigError(exc.source, problems)
