"""Configuration reference, generated from the pydantic schemas of the registered parts.

Every part registered with :func:`npusim.core.registry.register` has a config class; this
module walks them all (after :func:`~npusim.core.registry.discover`), follows nested
models (an NPU's ``core``, ``dma``, a task graph's task specs) and renders one markdown
table per class: field, type (with its unit and constraints), default, description.  The
scenario's top level (``name``, ``hw``, ``workload``, ``run``) comes first.

Regenerate the checked-in copy with::

    python -m npusim.config.reference > docs/config-reference.md

The output is deterministic (no dates), so a stale copy shows up as a diff.

The ``kind`` field of a registered part (and the ``type`` of a task spec) is the
discriminator that selects the class; it is documented by the section heading, so the
reference supplies its description instead of each class repeating it.
"""

from __future__ import annotations

import enum
import json
import sys
import types
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from npusim.core import registry
from npusim.core.units import (BandwidthBps, Bytes, FreqHz, TimePs, format_bytes,
                               format_time_ps)

#: Unit-parsing validators (the metadata of the ``Annotated`` unit types) → label.
_UNIT_TYPES = {id(get_args(TimePs)[1]): "duration", id(get_args(Bytes)[1]): "size",
               id(get_args(FreqHz)[1]): "frequency", id(get_args(BandwidthBps)[1]): "bandwidth"}
_UNIT_HINTS = {"duration": "integer ps; accepts '15ns'", "size": "integer bytes; accepts '64MiB'",
               "frequency": "integer Hz; accepts '500MHz'",
               "bandwidth": "integer B/s; accepts '460GB/s'"}


@dataclass
class ModelDoc:
    """One config class to document and where it is reached from."""

    model: type[BaseModel]
    title: str                       #: heading text
    anchor: str                      #: HTML anchor id
    category: str = ""               #: registry category ('' for nested / scenario models)
    kind: str = ""                   #: registry kind name
    help: str = ""                   #: registry help line or class docstring
    path: str = ""                   #: YAML path prefix of nested blocks ('npu.core')
    discriminators: set[str] = field(default_factory=set)  #: fields that select the class
    #: some field reaches the class through a union that its discriminator selects from
    #: (then the discriminator must be written; elsewhere its one value is the default)
    selected_from_union: bool = True


def _anchor(*parts: str) -> str:
    return "-".join(p.lower().replace("_", "-").replace(".", "-") for p in parts if p)


def _first_line(text: str | None) -> str:
    """First line of a docstring, with reST literals turned into markdown ones."""
    lines = (text or "").strip().splitlines()
    return lines[0].strip().replace("``", "`") if lines else ""


def _submodels(annotation: Any) -> list[tuple[type[BaseModel], str | None]]:
    """Model classes inside ``annotation`` with the discriminator of the union holding them."""
    found: list[tuple[type[BaseModel], str | None]] = []

    def walk(tp: Any, discriminator: str | None) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            found.append((tp, discriminator))
            return
        if get_origin(tp) is Annotated:
            base, *meta = get_args(tp)
            disc = next((m.discriminator for m in meta
                         if isinstance(m, FieldInfo) and isinstance(m.discriminator, str)),
                        discriminator)
            walk(base, disc)
            return
        for arg in get_args(tp):
            walk(arg, discriminator if get_origin(tp) in (Union, types.UnionType) else None)

    walk(annotation, None)
    return found


def _literal(model: type[BaseModel], name: str) -> str:
    info = model.model_fields.get(name)
    args = get_args(info.annotation) if info is not None else ()
    return str(args[0]) if len(args) == 1 else "?"


def _field_discriminator(info: FieldInfo) -> str | None:
    return info.discriminator if isinstance(info.discriminator, str) else None


def collect() -> list[ModelDoc]:
    """Every documented class, in output order: scenario, then each category's parts
    followed by the nested models they use (each class once)."""
    from npusim.config.schema import scenario_model

    docs: list[ModelDoc] = []
    by_model: dict[type[BaseModel], ModelDoc] = {}
    anchors: set[str] = set()
    registered: dict[type[BaseModel], tuple[str, str]] = {}
    from_union: set[type[BaseModel]] = set()
    for category in registry.categories():
        for kind, entry in registry.entries(category).items():
            registered[entry.config] = (category, kind)

    def add(doc: ModelDoc) -> None:
        docs.append(doc)
        by_model[doc.model] = doc
        nested(doc)

    def nested(doc: ModelDoc) -> None:
        for name, info in doc.model.model_fields.items():
            models = _submodels(info.annotation)
            for model, disc in models:
                disc = disc or _field_discriminator(info)
                if disc:
                    from_union.add(model)
                if model in by_model:
                    if disc:
                        by_model[model].discriminators.add(disc)
                    continue
                if model in registered:
                    continue  # documented in its own category section
                path = f"{doc.path}.{name}" if doc.path else name
                anchor = _anchor(doc.anchor, name)
                if len(models) > 1 or anchor in anchors:  # several classes in one field
                    anchor = _anchor(doc.anchor, name, model.__name__)
                anchors.add(anchor)
                title = f"{path} ({disc}: {_literal(model, disc)})" if disc else path
                child = ModelDoc(model, title, anchor, help=_first_line(model.__doc__),
                                 path=path)
                if disc:
                    child.discriminators.add(disc)
                add(child)

    scenario = scenario_model()
    add(ModelDoc(scenario, "scenario", "scenario", help=_first_line(scenario.__doc__)))
    for category in registry.categories():
        for kind, entry in registry.entries(category).items():
            if entry.config in by_model:
                continue
            add(ModelDoc(entry.config, f"{category}: {kind}", _anchor(category, kind),
                         category, kind, _first_line(entry.config.__doc__) or entry.help,
                         path=kind, discriminators={"kind"}))
    for doc in docs:
        # a part only ever used as a plain field type (the NPU's noc) has its kind as a
        # default; one chosen from several (a workload) must name it
        doc.selected_from_union = doc.model in from_union
    return docs


def _is_discriminator(doc: ModelDoc, name: str, info: FieldInfo) -> bool:
    return (name in doc.discriminators and get_origin(info.annotation) is Literal
            and len(get_args(info.annotation)) == 1)


def missing_descriptions() -> list[str]:
    """``Class.field (where)`` for every documented field without a description.

    Discriminator fields (``kind`` of a registered part, ``type`` of a task spec) are
    described by the reference itself and are not listed.
    """
    missing = []
    for doc in collect():
        for name, info in doc.model.model_fields.items():
            if _is_discriminator(doc, name, info):
                continue
            if not (info.description or "").strip():
                missing.append(f"{doc.model.__module__}.{doc.model.__qualname__}.{name} "
                               f"({doc.title})")
    return missing


# -- rendering ---------------------------------------------------------------------------

def format_type(annotation: Any, metadata: list[Any], links: dict[type[BaseModel], ModelDoc]) -> str:
    """Human-readable type with units and constraints (markdown)."""
    text = _type_text(annotation, links)
    unit = next((_UNIT_TYPES[id(m)] for m in metadata if id(m) in _UNIT_TYPES), None)
    if unit:
        text = f"{unit} ({_UNIT_HINTS[unit]})"
    constraints = []
    for meta in metadata:
        for attr, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="),
                             ("min_length", "min length"), ("max_length", "max length")):
            value = getattr(meta, attr, None)
            if value is not None and not isinstance(meta, FieldInfo):
                constraints.append(f"{symbol} {value}")
    return text + (f"; {', '.join(constraints)}" if constraints else "")


def _type_text(tp: Any, links: dict[type[BaseModel], ModelDoc]) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        doc = links.get(tp)
        return f"[{tp.__name__}](#{doc.anchor})" if doc else tp.__name__
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " or ".join(repr(m.value) for m in tp)
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        unit = next((_UNIT_TYPES[id(m)] for m in meta if id(m) in _UNIT_TYPES), None)
        return f"{unit} ({_UNIT_HINTS[unit]})" if unit else _type_text(base, links)
    if origin is Literal:
        return " or ".join(f"`{json.dumps(v)}`" for v in get_args(tp))
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(models) > 2 and len(models) == len(args):
            return "one of " + ", ".join(_type_text(a, links) for a in args)
        return " or ".join(_type_text(a, links) for a in args)
    if origin in (list, tuple, dict, set, frozenset):
        args = get_args(tp)
        inner = ", ".join("..." if a is Ellipsis else _type_text(a, links) for a in args)
        return f"{origin.__name__}[{inner}]" if inner else origin.__name__
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def format_default(info: FieldInfo, metadata: list[Any]) -> str:
    """The default as YAML would spell it, with units for unit fields; 'required' if none."""
    if info.default_factory is not None:
        value = info.default_factory()
    elif info.default is PydanticUndefined:
        return "**required**"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "(defaults)"
    if value is None:
        return "`null`"
    unit = next((_UNIT_TYPES[id(m)] for m in metadata if id(m) in _UNIT_TYPES), None)
    if unit is None and get_origin(info.annotation) in (Union, types.UnionType):
        for arg in get_args(info.annotation):
            if get_origin(arg) is Annotated:
                unit = next((_UNIT_TYPES[id(m)] for m in get_args(arg)[1:] if id(m) in _UNIT_TYPES), None)
    text = f"`{json.dumps(value, default=str)}`"
    if isinstance(value, int) and not isinstance(value, bool) and value:
        if unit == "duration":
            text += f" ({format_time_ps(value)})"
        elif unit == "size":
            text += f" ({format_bytes(value)})"
        elif unit == "frequency":
            text += f" ({value / 1e6:g} MHz)"
        elif unit == "bandwidth":
            text += f" ({value / 1e9:g} GB/s)"
    return text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_model(doc: ModelDoc, links: dict[type[BaseModel], ModelDoc], level: int = 3) -> str:
    """One class: heading, help line and the field table."""
    model = doc.model
    lines = [f'<a id="{doc.anchor}"></a>', "",
             f"{'#' * level} `{doc.title}` ({model.__name__})", ""]
    summary = doc.help or _first_line(model.__doc__)
    lines += [f"{summary} Defined in `{model.__module__}`.".strip(), ""]
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if _is_discriminator(doc, name, info):
            value = get_args(info.annotation)[0]
            type_text = f"`{json.dumps(value)}`"
            if doc.selected_from_union:
                # The union reads this key to pick the class, so it must be written (a
                # preset supplies it for its own block); the model's default never applies.
                description = f"Selects this class: always `{value}` (`{name}: {value}`)."
                default = "**required**"
            else:
                description = (f"Always `{value}`; may be omitted (nothing else can stand "
                               "here).")
                default = f"`{json.dumps(value)}`"
        else:
            description = info.description or ""
            type_text = format_type(info.annotation, info.metadata, links)
            default = format_default(info, info.metadata)
        lines.append(f"| `{name}` | {_cell(type_text)} | {_cell(default)} | {_cell(description)} |")
    lines.append("")
    return "\n".join(lines)


def render() -> str:
    """The whole reference as markdown."""
    docs = collect()
    links = {doc.model: doc for doc in docs}
    lines = [
        "# Configuration reference", "",
        "Generated from the pydantic schemas by `python -m npusim.config.reference > "
        "docs/config-reference.md`; do not edit by hand. One table per registered part "
        "(`kind:`) and per nested block; a new part file appears here when the reference is "
        "regenerated.", "",
        "Conventions: unit strings are parsed once at load (sizes `64MiB`, times `15ns`, "
        "frequencies `500MHz`, bandwidths `460GB/s` or `16Gb/s`); inside, fields hold integer "
        "picoseconds, bytes, hertz and bytes per second, and field names carry their unit. "
        "Plain values are typed as in YAML 1.2 and JSON, not PyYAML's YAML 1.1: `1e9` is a "
        "number (not only `1.0e+9`), `010` is 10 (not octal 8; write `0o10`), and `1:30`, "
        "`0b11`, `yes`/`no`/`on`/`off` and dates (`2024-05-01`) stay text (booleans are "
        "`true`/`false`); "
        "an integer field takes `4e0` but not `2.5`. Unknown keys are rejected. Any mapping "
        "may start from `preset: NAME` (a file under `hwconfigs/`) and override keys. See [cli.md](cli.md) for `--set` overrides.", "",
        "## Contents", "",
    ]
    lines.append(f"- [scenario (top level)](#{docs[0].anchor})")
    for category in registry.categories():
        parts = [d for d in docs if d.category == category]
        lines.append(f"- {category}: " + ", ".join(f"[{d.kind}](#{d.anchor})" for d in parts))
    lines.append("")
    lines += ["## Scenario", "",
              "A scenario file holds `hw` (a device), `workload` and `run`; `hw` takes any "
              "registered `device` part and `workload` any registered `workload` part.", ""]
    current = None
    for doc in docs:
        if doc.category and doc.category != current:
            current = doc.category
            lines += [f"## {current}", ""]
        lines.append(render_model(doc, links, 3 if doc.category or doc is docs[0] else 4))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the reference to stdout (``python -m npusim.config.reference``)."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
