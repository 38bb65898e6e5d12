"""Presets: YAML files under ``hwconfigs/`` (hardware) and ``workloads/`` (models, scenarios).

A preset is named by its path below the preset root without the extension, for example
``memory/ddr4_3200`` for ``hwconfigs/memory/ddr4_3200.yaml``.  Every value in a preset
file carries a comment with its source (datasheet, paper section, or ``assumption: …``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from npusim.core.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


def hwconfig_root() -> Path:
    """Directory holding hardware presets (``$NPUSIM_HWCONFIGS`` overrides it)."""
    return Path(os.environ.get("NPUSIM_HWCONFIGS", REPO_ROOT / "hwconfigs"))


def workloads_root() -> Path:
    return Path(os.environ.get("NPUSIM_WORKLOADS", REPO_ROOT / "workloads"))


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error or missing file becomes a :class:`ConfigError`."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError(str(path), [("", "file not found")]) from None
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read file: {exc.strerror}")]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), [(where, f"YAML syntax error: {problem}")]) from None


def list_presets(root: Path | None = None) -> list[str]:
    """Names of every preset below ``root`` (default: the hardware preset root)."""
    root = root or hwconfig_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def load_preset(name: str, root: Path | None = None) -> dict[str, Any]:
    """The mapping stored in preset ``name`` (e.g. ``memory/hbm2``).

    Raises :class:`ConfigError` naming the preset and the closest known names.
    """
    root = root or hwconfig_root()
    path = root / f"{name}.yaml"
    if not path.is_file():
        known = list_presets(root)
        stem = name.rsplit("/", 1)[-1]
        close = [k for k in known if stem in k or k.rsplit("/", 1)[-1] in stem][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known presets: {', '.join(known)}"
        raise ConfigError(str(path), [("preset", f"no preset named {name!r}{hint}")])
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), [("", f"expected a mapping, got {type(data).__name__}")])
    return data
