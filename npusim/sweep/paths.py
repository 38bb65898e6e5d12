"""Config paths and a sweep point's identity: dotted-path access into nested mappings
(``hw.cores[3].sram_bytes``), ``path=value`` overrides that parse back exactly, and the
hashes (config and input files) that key a point in the results store."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 of a resolved config as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


#: Content digests of input files by (path, size, mtime): a sweep of thousands of points
#: over one trace file reads it once.
_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def input_file_digests(config: Any) -> dict[str, str]:
    """SHA-256 of every file a config names (a trace, a routing trace, a model given by
    path): part of a point's key, so a file edited between two runs of a sweep is run
    again instead of its stale results being reused.  Keyed by the path as written."""
    from npusim.config.presets import REPO_ROOT

    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and node and len(node) < 4096 and ("/" in node or "." in node):
            for candidate in (Path(node), REPO_ROOT / node):
                try:
                    if not candidate.is_file():
                        continue
                    stat = candidate.stat()
                except (OSError, ValueError):
                    continue
                marker = (str(candidate.resolve()), stat.st_size, stat.st_mtime_ns)
                if marker not in _FILE_DIGESTS:
                    _FILE_DIGESTS[marker] = hashlib.sha256(candidate.read_bytes()).hexdigest()
                found[node] = _FILE_DIGESTS[marker]
                break

    walk(config)
    return found


def format_override(path: str, value: Any) -> str:
    """``path=value`` that the loader parses back to exactly ``value``."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
    return f"{path}={text.removesuffix('...').strip()}"


def split_path(path: str) -> list[str | int]:
    """``hw.cores[3].sram_bytes`` -> ``['hw', 'cores', 3, 'sram_bytes']``."""
    return [m[1] if m[1] is not None else int(m[2]) for m in _PART.finditer(path)]


#: What :func:`get_path` returns for a path that is not there (None may be a value).
MISSING = object()


def get_path(data: Any, path: str) -> Any:
    """The value at dotted ``path`` in nested mappings/lists, or :data:`MISSING`."""
    node = data
    for part in split_path(path):
        if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(part, str) and isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return MISSING
    return node
