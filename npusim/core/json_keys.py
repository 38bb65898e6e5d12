"""JSON keys: ``json.loads`` that refuses a key given twice in one object, and the
natural key order results are written in.

json keeps the last of two equal keys silently, so a doubled ``"prompt_tokens"`` in a
trace line or ``"num_hidden_layers"`` in a model config would drop the first value; the
YAML loader refuses the same mistake (``config.presets``), and so do the JSON readers::

    json.loads(text, object_pairs_hook=unique_keys)   # raises DuplicateKeyError
"""

from __future__ import annotations

import re
from typing import Any


class DuplicateKeyError(ValueError):
    """A JSON object names ``key`` twice (caught by the reader, which says where)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object, or DuplicateKeyError."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def natural_key(name: str) -> tuple:
    """Sort key ordering the numbers inside a name by value: ``core2`` before ``core10``,
    priority class ``"2"`` before ``"10"``.  (``re.split`` with a group alternates text
    and digits, so two keys never compare a number with text at the same position.)"""
    return tuple(int(part) if index % 2 else part
                 for index, part in enumerate(re.split(r"(\d+)", name)))


def naturally_ordered(value: Any) -> Any:
    """``value`` with every dict's keys in :func:`natural_key` order, recursively: written
    with ``json.dumps`` (no ``sort_keys``) it is as deterministic as sorted output and
    reads ``decode2`` before ``decode10``."""
    if isinstance(value, dict):
        return {key: naturally_ordered(value[key])
                for key in sorted(value, key=lambda k: natural_key(str(k)))}
    if isinstance(value, (list, tuple)):
        return [naturally_ordered(item) for item in value]
    return value
