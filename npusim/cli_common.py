"""What every ``npusim`` command shares: user errors as one message and an exit code,
and options that take one value given at most once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import typer
from typer.core import TyperCommand

from npusim.core.errors import NpusimError

__all__ = ["guard", "OnceOptionsCommand", "hw_option", "set_option", "mode_option",
           "trace_option", "trace_override", "whole_number", "real_number", "path_argument",
           "option_origins", "name_option_origins"]


def whole_number(text: Any) -> int:
    """Parser for an integer option whose error shows the value given (typer's own
    message, "unable to parse string as an integer", does not)."""
    if isinstance(text, int):
        return text
    try:
        return int(str(text).strip())
    except ValueError:
        raise typer.BadParameter(f"got {text!r}; expected a whole number, e.g. 4") from None


def path_argument(expected: str) -> Callable[[Any], Path]:
    """Parser for a path argument: an empty one (an unset shell variable) is a usage error
    saying so; ``Path("")`` is the working directory, which the command would then
    report as a directory that is not ``expected``."""
    def parse(text: Any) -> Path:
        if isinstance(text, Path):
            return text
        if not str(text).strip():
            raise typer.BadParameter(f"got an empty path {str(text)!r}; expected {expected}")
        return Path(text)
    return parse


def real_number(text: Any) -> float:
    """Parser for a number option whose error shows the value given; range checks stay
    with the command, which names what the number means."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(str(text).strip())
    except ValueError:
        raise typer.BadParameter(f"got {text!r}; expected a number, e.g. 0.9") from None


def hw_option() -> Any:
    """``--hw FILE``, as ``run`` and ``capacity`` take it."""
    return typer.Option(None, "--hw", metavar="FILE",
                        help="Replace the scenario's hardware with this YAML file (or a "
                             "shipped preset: npu/small_core_256).")


def set_option() -> Any:
    """``--set PATH=VALUE`` (repeatable)."""
    return typer.Option([], "--set", metavar="PATH=VALUE",
                        help="Override a field: PATH=VALUE (repeatable).")


def mode_option() -> Any:
    """``--mode tlm|analytic``."""
    # (an empty --mode is checked like any other value, not taken as "not given")
    return typer.Option(None, "--mode", metavar="tlm|analytic", help="Fidelity: tlm or analytic.")


def mode_problem(mode: str | None) -> str | None:
    """What is wrong with a ``--mode`` value, worded as ``npusim run`` reports it (the
    schema's message), or ``None``."""
    if mode is None or mode in ("tlm", "analytic"):
        return None
    return f"--mode: Input should be 'tlm' or 'analytic' (got {mode!r})"


def trace_option() -> Any:
    """``--trace FILE`` for serving workloads."""
    return typer.Option(None, "--trace", metavar="FILE",
                        help="Serving workloads: request trace (CSV, JSONL, Azure CSV or Mooncake JSONL) "
                        "in place of the scenario's; --set workload.trace.limit=N keeps "
                        "its first N rows.")


def trace_override(trace: str | None) -> list[str]:
    """``--trace FILE`` as the override that replaces the scenario's trace section (the
    file name goes in as a JSON string, a valid YAML double-quoted scalar, so quotes,
    ': ' or ' #' in it are not read as YAML syntax); none without the option."""
    import json
    from pathlib import Path

    from npusim.core.output_paths import option_path

    path = option_path(trace, "--trace", "a trace file (CSV, JSONL, Azure CSV or Mooncake JSONL)")
    if path is None:
        return []
    from npusim.config.presets import locate

    # as the scenario argument: the working directory, then the checkout (npusim list
    # shows the shipped traces as traces/NAME)
    path = locate(path)
    if not path.exists():
        raise NpusimError(f"--trace: {trace}: no such file (relative to the working directory "
                          f"{Path.cwd()}, or to the npusim checkout); expected a trace file (CSV, "
                          "JSONL, Azure CSV or Mooncake JSONL). --set workload.trace.file="
                          f"{trace} also looks beside the scenario")
    if not path.is_file() and not path.is_dir():  # (a directory: the reader says so)
        # `--trace <(head -300 big.csv)`: resolved, the pipe's name (/proc/N/fd/pipe:[..])
        # named no file, and the error said "trace file not found"
        raise NpusimError(f"--trace: {trace}: not a regular file (a pipe, as <(...) gives, "
                          "or a device); expected a trace file on disk (save the rows to a "
                          "file first and name it)")
    return [f"workload.trace={{file: {json.dumps(str(path.resolve()))}}}"]


def check_option_conflicts(set_: list[str], options: dict[str, tuple[Any, tuple[str, ...]]]
                           ) -> None:
    """Raise :class:`NpusimError` when a ``--set PATH=VALUE`` sets what an option given
    beside it sets: ``options`` maps an option (``--trace``) to its value (None when not
    given) and the paths it sets (``workload.trace.file``); a --set of such a path, or of
    a section holding one (``workload.trace``), would silently lose to, or beat, the
    option.  Other fields of the section (``workload.trace.limit``) are fine."""
    from npusim.config.overrides import format_path, parse_override

    def set_path(item: str) -> str | None:
        try:  # the path as the loader reads it (a malformed one is reported there)
            return format_path(parse_override(item)[0])
        except NpusimError:
            return None

    for option, (value, paths) in options.items():
        if value is None:
            continue
        for item in set_:
            path = set_path(item)
            if path is not None and any(path == target or target.startswith(path + ".")
                                        for target in paths):
                raise NpusimError(f"{option} and --set {item} both set {paths[0]}; give one "
                                  f"of them")


def guard(action: Callable[[], Any]) -> Any:
    """Run ``action``; turn user errors into one message and a non-zero exit."""
    from npusim.core.errors import ConfigNote

    try:
        return action()
    except NpusimError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(exc.exit_code) from None
    except ConfigNote as exc:  # python -W error made a note an error: said as one
        typer.secho(f"error: {exc} (a note, made an error by the warnings filter: "
                    "python -W error)", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None


class OnceOptionsCommand(TyperCommand):
    """A command whose single-valued options (``--trace FILE``, ``--out DIR`` ...) may be
    given once.

    Click keeps the last of ``--trace a.csv --trace b.csv`` without a word, so a
    command line assembled from pieces (a script adding its own ``--trace``) would
    simulate a trace other than the one its author reads first.  Repeatable options
    (``--set``, ``--case``) and flags are not affected.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            # Typer reflows only a docstring's first paragraph; the later ones kept their
            # source line breaks and wrapped raggedly ("change every / point's key").
            self.help = "\n\n".join(" ".join(paragraph.split())
                                     for paragraph in self.help.split("\n\n"))

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        # (typer bundles its own click: parameters are told apart by duck typing)
        options = {name: param for param in self.get_params(ctx)
                   if param.param_type_name == "option" for name in param.opts}
        seen: dict[str, tuple[Any, list[str]]] = {}
        tokens = iter(args)
        for token in tokens:
            if token == "--":
                break
            if token.startswith("--"):
                name, has_value = token.split("=", 1)[0], "=" in token
            elif token.startswith("-") and len(token) > 2 and token[:2] in options:
                name, has_value = token[:2], True  # '-kline': a short option and its value
            else:
                name, has_value = token, False
            param = options.get(name)
            if param is None or param.is_flag or param.count:
                continue
            if not param.multiple:
                seen.setdefault(param.name or name, (param, []))[1].append(name)
            if not has_value:
                next(tokens, None)  # the option's value, even if it looks like an option
        if any(token in ctx.help_option_names for token in args):
            return super().parse_args(ctx, args)  # --help wins, as click has it
        for param, names in seen.values():
            if len(names) > 1:
                raise typer.BadParameter(f"given {len(names)} times; give it once (only one "
                                         "value would be used)", ctx=ctx, param=param)
        return super().parse_args(ctx, args)


def option_origins(set_: list[str], options: dict[str, tuple[str, Any]]) -> list[tuple[str, str]]:
    """``(field path, how it was given)`` for each ``--set PATH=VALUE`` and each option
    in ``options`` (``{path: (option, value)}``, ``None`` values skipped), in that order,
    for :func:`name_option_origins`."""
    from npusim.config.overrides import format_path, parse_override

    origins = []
    for text in set_:
        try:
            origins.append((format_path(parse_override(text)[0]), f"--set {text}"))
        except NpusimError:  # pragma: no cover - the scenario loaded, so it parsed
            continue
    origins += [(path, f"{option} {value}") for path, (option, value) in options.items()
                if value is not None]
    return origins


def name_option_origins(exc: NpusimError, origins: list[tuple[str, str]],
                        hw_file: Any = None) -> NpusimError:
    """``exc`` (a mapping or trace error raised once the scenario loaded, so not a
    :class:`ConfigError` with field paths) with the options behind the fields its message
    names: ``(set by --set workload.tp=3)``, ``(hardware from --hw chip.yaml)``.  The file
    in front of the message is the scenario; the value may not be in it."""
    import re

    message = str(exc)

    def named(path: str) -> bool:
        return re.search(rf"(?<![\w.]){re.escape(path)}(?![\w])", message) is not None

    named_paths = [(path, label) for path, label in origins if named(path)]
    parts = [f"set by {'; '.join(dict.fromkeys(label for _, label in named_paths))}"] \
        if named_paths else []
    if hw_file is not None and re.search(r"(?<![\w.])hw\.", message) \
            and not any(path.startswith("hw.") for path, _ in named_paths):
        parts.append(f"hardware from --hw {hw_file}")
    if parts:
        exc.args = (f"{message} ({'; '.join(parts)})", *exc.args[1:])
    return exc
