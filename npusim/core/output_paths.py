"""Checks that an output path can be written, made *before* a run so a long simulation
never ends in a traceback with its results lost."""

from __future__ import annotations

import os
from pathlib import Path

from npusim.core.errors import OutputError

__all__ = ["check_output_dir", "check_output_file"]


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _check_creatable(path: Path, option: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a writable directory."""
    ancestor = _nearest_existing(path.parent if path.parent != path else path)
    if not ancestor.is_dir():
        raise OutputError(f"{option} {path}: {ancestor} is a file, not a directory; "
                          "expected a path under a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: cannot create it, {ancestor} is not writable")


def check_output_dir(path: str | Path, option: str = "--out") -> Path:
    """Create ``path`` as a directory if needed and check it is writable; returns it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: exists and is not a directory; expected a "
                          "directory for the results (or a new path)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot create the directory "
                          f"({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {path}: directory is not writable")
    return path


def check_output_file(path: str | Path, option: str) -> Path:
    """``path`` is, or can be created as, a writable regular file; returns it."""
    path = Path(path)
    if path.exists():
        if path.is_dir():
            raise OutputError(f"{option} {path}: is a directory; expected a file name")
        if not os.access(path, os.W_OK):
            raise OutputError(f"{option} {path}: file is not writable")
        return path
    _check_creatable(path, option)
    return path
