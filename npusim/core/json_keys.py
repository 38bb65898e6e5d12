"""``json.loads`` that refuses a key given twice in one object.

json keeps the last of two equal keys silently, so a doubled ``"prompt_tokens"`` in a
trace line or ``"num_hidden_layers"`` in a model config would drop the first value; the
YAML loader refuses the same mistake (``config.presets``), and so do the JSON readers::

    json.loads(text, object_pairs_hook=unique_keys)   # raises DuplicateKeyError
"""

from __future__ import annotations

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
