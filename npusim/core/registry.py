"""Registry of replaceable parts, keyed by category and ``kind:`` name.

A part (DRAM channel, NoC, systolic array, device, workload, strategy, scheduler…)
is one file that defines a pydantic config class whose ``kind`` field is a ``Literal``
and decorates its implementation with :func:`register`.  The config schema of a
category is then the discriminated union of every registered config class, so YAML
picks a part by name and unknown kinds are rejected with the list of known ones.

The registry holds classes, never run state: it is filled once at import time (as
gem5's SimObject and Ramulator 2's factory registries are) and :func:`discover`
imports every built-in module so that dropping a new file into a package is enough.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Callable, Union, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

#: Packages whose modules register parts; imported by :func:`discover`.
_PART_PACKAGES = ("npusim.hw", "npusim.workload", "npusim.mapping", "npusim.strategies",
                  "npusim.serving")


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"got {value}, a boolean; expected a number")
    return value


#: An integer item of a list field that refuses ``true``/``false`` (pydantic reads them as
#: 1 and 0): :class:`NumbersNotBooleans` covers plain fields, not list items.
IntNotBool = Annotated[int, BeforeValidator(_not_a_boolean)]


class NumbersNotBooleans(BaseModel):
    """Mixin for configuration models: a boolean given for a number field is an error,
    and so is anything but ``true``/``false`` for a boolean field.

    pydantic reads ``true`` as 1 for a number field, so ``tp: true`` (a typo) would run as
    tp = 1.  The check is model-level: a field-level one would break the ``kind``
    discriminator of the registry unions.  Items of a list of numbers need
    :data:`IntNotBool` instead.
    """

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                if field is None:
                    continue
                allowed = {field.annotation, *get_args(field.annotation)}
                if isinstance(value, bool):
                    if bool not in allowed and allowed & {int, float}:
                        raise ValueError(f"{name}: expected a number, got the boolean {value}")
                elif value is not None and allowed - {type(None)} == {bool}:
                    # pydantic would read "yes", "on", "y", 1 as true; the docs promise
                    # that only true/false are booleans (YAML 1.2)
                    raise ValueError(f"{name}: expected true or false, got {value!r}")
        return data


class PartConfig(NumbersNotBooleans):
    """Base of every typed configuration block.

    Frozen (a resolved config cannot change under a running simulation), strict about
    keys (a typo is an error, not a silently ignored field), about numbers (an ``inf`` or
    ``nan`` parameter is an error where it is given, not an overflow deep in a run or an
    invalid metrics.json) and about booleans given for numbers.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True,
                              allow_inf_nan=False)


@dataclass(frozen=True)
class Entry:
    """One registered part: its config class, its implementation and a help line."""

    category: str
    kind: str
    config: type[PartConfig]
    impl: Any
    help: str


_ENTRIES: dict[str, dict[str, Entry]] = {}


def _kind_of(config: type[PartConfig]) -> str:
    field = config.model_fields.get("kind")
    if field is None:
        raise TypeError(f"{config.__name__} has no 'kind' field")
    args = get_args(field.annotation)
    if len(args) != 1 or not isinstance(args[0], str):
        raise TypeError(f"{config.__name__}.kind must be Literal['name']")
    return args[0]


def register(category: str, config: type[PartConfig]) -> Callable[[Any], Any]:
    """Class or function decorator: register ``impl`` as the part named by ``config.kind``.

    Registering two parts with the same category and kind is an error, so a plug-in
    cannot silently replace a built-in part.
    """

    def decorate(impl: Any) -> Any:
        kind = _kind_of(config)
        table = _ENTRIES.setdefault(category, {})
        if kind in table and table[kind].impl is not impl:
            raise TypeError(f"{category} kind {kind!r} registered twice "
                            f"({table[kind].impl!r} and {impl!r})")
        table[kind] = Entry(category, kind, config, impl, _summary(impl, config))
        return impl

    return decorate


#: Longest one-line summary `npusim list` shows; a longer docstring paragraph gives way
#: to the config's.
_SUMMARY_CHARS = 120


def _summary(impl: Any, config: type) -> str:
    """The first paragraph of the implementation's docstring on one line, or the config
    class's own when that one is missing, too long or cross-references Sphinx roles."""
    candidates = [impl.__doc__, config.__dict__.get("__doc__")]
    paragraphs = [" ".join((doc or "").strip().split("\n\n")[0].split()) for doc in candidates]
    for text in paragraphs:
        if text and len(text) <= _SUMMARY_CHARS and ":class:" not in text:
            return text.replace("``", "")
    return next((text.replace("``", "") for text in paragraphs if text), "")


@cache
def discover() -> None:
    """Import every built-in part module once, so that all registrations have run."""
    for package_name in _PART_PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, package_name + "."):
            importlib.import_module(info.name)


def entries(category: str) -> dict[str, Entry]:
    """All parts registered under ``category`` (after :func:`discover`)."""
    discover()
    return dict(sorted(_ENTRIES.get(category, {}).items()))


def categories() -> list[str]:
    discover()
    return sorted(_ENTRIES)


def lookup(category: str, kind: str) -> Entry:
    """The entry for ``kind``; raises ``KeyError`` naming the known kinds."""
    table = entries(category)
    if kind not in table:
        raise KeyError(f"unknown {category} kind {kind!r}; known: {', '.join(table) or 'none'}")
    return table[kind]


def config_union(category: str) -> Any:
    """Pydantic type accepting the config of any part registered under ``category``."""
    configs = tuple(entry.config for entry in entries(category).values())
    if not configs:
        raise TypeError(f"no parts registered under {category!r}")
    if len(configs) == 1:
        return configs[0]
    return Annotated[Union[configs], Field(discriminator="kind")]  # noqa: UP007


def build(category: str, config: PartConfig, *args: Any, **kwargs: Any) -> Any:
    """Construct the implementation registered for ``config.kind``."""
    return lookup(category, config.kind).impl(*args, config=config, **kwargs)  # type: ignore[attr-defined]
