"""Checks that an output path can be written, made *before* a run so a long simulation
or sweep never ends in a traceback with its results lost, and the one way files are
replaced whole (:func:`atomic_output`)."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator, Mapping

from npusim.core.errors import OutputError
from npusim.core.text import is_encodable, shown

__all__ = ["atomic_output", "check_not_inputs", "check_output_dir", "check_output_file",
           "option_path"]


def option_path(value: str | None, option: str, expected: str) -> Path | None:
    """A command-line path option as a :class:`Path` (``None`` if not given).  An empty
    string is an error: ``Path("")`` is the current directory, where ``--out ''`` would
    scatter the results."""
    if value is None:
        return None
    if not value.strip():
        raise OutputError(f"{option}: got an empty path {value!r}; expected {expected}")
    if not is_encodable(value):  # a byte that is not UTF-8: the result writers cannot name it
        raise OutputError(f"{option}: the path {shown(value)} holds bytes that are not UTF-8; "
                          f"expected {expected} named in UTF-8")
    return Path(value)


def check_not_inputs(out_dir: Path, names: Iterable[str], inputs: Mapping[str, Path | None],
                     option: str = "--out") -> None:
    """Raise :class:`OutputError` if writing ``names`` into ``out_dir`` would replace one
    of the run's ``inputs`` (``{what: path}``; the same file, however it is named: links,
    ``..``): a previous run's ``requests.csv`` reads as a trace, and rerunning from it
    into the same directory would destroy it."""
    targets = [(out_dir / name, name) for name in names]
    for what, path in inputs.items():
        if path is None or not Path(path).is_file():
            continue
        name = next((name for target, name in targets
                     if target.is_file() and os.path.samefile(target, path)), None)
        if name is not None:
            raise OutputError(f"{option} {out_dir}: would replace the {what} {path} (this run "
                              f"writes its {name} there); expected another output directory")


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _check_creatable(path: Path, where: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a writable directory."""
    ancestor = _nearest_existing(path.parent if path.parent != path else path)
    if not ancestor.is_dir():
        raise OutputError(f"{where}: {ancestor} is a file, not a directory; "
                          "expected a path under a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputError(f"{where}: cannot create it, {ancestor} is not writable")


def check_output_dir(path: str | Path, option: str = "--out", purpose: str = "the results"
                     ) -> Path:
    """Raise :class:`OutputError` unless ``path`` is, or can be created as, a writable
    directory; returns it.

    Leaves nothing behind: a missing directory is created as a probe (permissions do not
    tell everything: root may write anywhere yet cannot make ``/proc/x``) and removed
    again, so a run that then fails on its configuration writes no empty directory.
    """
    path = Path(path)
    where = f"{option} {path}" if option else str(path)
    if path.exists():
        if not path.is_dir():
            raise OutputError(f"{where}: exists and is not a directory; expected a directory "
                              f"for {purpose} (or a new path)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputError(f"{where}: directory is not writable")
        return path
    _check_creatable(path, where)
    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(f"{where}: cannot create the directory ({exc.strerror or exc})") from None
    for probe in made:  # deepest first
        try:
            probe.rmdir()
        except OSError:  # someone put something there meanwhile: keep it
            break
    return path


def check_output_file(path: str | Path, option: str) -> Path:
    """``path`` is, or can be created as, a writable regular file; returns it.

    A new file is probed as :func:`check_output_dir` probes a directory: its directory
    is made (and removed again) if missing, else a temporary file is created in it and
    removed, since permissions do not tell everything (root passes ``os.access`` for
    ``/sys`` yet cannot create a file there), and a run must not find out at its end."""
    path = Path(path)
    where = f"{option} {path}"
    if path.exists():
        if path.is_dir():
            raise OutputError(f"{where}: is a directory; expected a file name")
        if not os.access(path, os.W_OK):
            raise OutputError(f"{where}: file is not writable")
        return path
    _check_creatable(path, where)
    parent = path.parent
    if not parent.exists():
        check_output_dir(parent, option=where + ":", purpose="the file")
        return path
    try:
        handle, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
    except OSError as exc:
        raise OutputError(f"{where}: cannot create a file in {parent} "
                          f"({exc.strerror or exc})") from None
    os.close(handle)
    os.unlink(probe)
    return path


@contextmanager
def atomic_output(path: str | Path, what: str, *, binary: bool = False, durable: bool = False,
                  hint: str = "") -> Iterator[IO]:
    """A file to write ``path``'s new content into: a temporary file beside it that
    replaces ``path`` whole when the block ends (``os.replace`` is atomic), so a reader
    or a killed process never sees half a file.  An ``OSError`` (disk full, permission
    changed) removes the temporary file, leaves ``path`` as it was and raises
    :class:`OutputError` naming the path and ``what`` (then ``hint``).  ``durable``
    syncs the data to disk before the rename (sweep parts, which a crash must not lose).

    A symbolic link is followed (its target is replaced, the link stays); a path that
    exists but is not a regular file (``/dev/stdout``, a FIFO) is written in place,
    since renaming over it would replace the device with a file.
    """
    path = Path(os.path.realpath(path))
    mode = "wb" if binary else "w"
    text = {} if binary else {"encoding": "utf-8", "newline": ""}
    if path.exists() and not path.is_file():
        try:
            with open(path, mode, **text) as handle:
                yield handle
        except OSError as exc:
            raise OutputError(f"{path}: cannot write {what} ({exc.strerror or exc}){hint}") from None
        return
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(staging, mode, **text) as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(staging, path)
    except OSError as exc:
        staging.unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write {what} ({exc.strerror or exc}){hint}") from None
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
