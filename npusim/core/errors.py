"""User-facing errors.

Every mistake a user can make (a bad config value, a missing file, an impossible
mapping) raises a subclass of :class:`NpusimError`.  The CLI prints ``str(error)`` as one
message and exits non-zero; it never shows a traceback for these.  Anything else that
escapes is a bug in npusim and keeps its traceback.
"""

from __future__ import annotations


class NpusimError(Exception):
    """Base of every error caused by user input rather than by a bug."""

    exit_code = 2


def with_source(exc: NpusimError, source: str) -> NpusimError:
    """``exc`` with ``source: `` in front of its message, unless it starts so already.

    Errors raised deep inside a run (a mapping that does not fit, a trace line) do not
    know the file the user named; the front end adds it.  The error keeps its type and
    attributes (rebuilding it as ``type(exc)(message)`` would fail for subclasses whose
    constructor takes more, such as an out-of-memory error with its byte counts).
    """
    if isinstance(exc, ConfigError) and exc.source == SCENARIO_SOURCE:
        return ConfigError(source, exc.problems)  # a field checked against the built device
    message = str(exc)
    if not message.startswith(f"{source}:"):
        exc.args = (f"{source}: {message}", *exc.args[1:])
    return exc


#: The source a ConfigError names when a scenario was passed as a mapping or a validated
#: Scenario rather than a file (a front end that read the file puts its name instead).
SCENARIO_SOURCE = "<scenario>"


class ConfigError(NpusimError):
    """A configuration file or override is invalid.

    ``problems`` holds one ``(path, message)`` pair per invalid field, where ``path``
    is the dotted field path (``hw.cores[3].sram_bytes``).
    """

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        if len(problems) == 1 and not problems[0][0]:  # about the file as a whole
            super().__init__(f"{source}: {problems[0][1]}")
            return
        lines = [f"{source}: invalid configuration ({len(problems)} problem"
                 f"{'s' if len(problems) != 1 else ''})"]
        lines += [f"  {path or '<root>'}: {message}" for path, message in problems]
        super().__init__("\n".join(lines))


class MappingError(NpusimError):
    """A workload cannot be mapped onto the hardware (it does not fit, a unit is missing)."""


class OutputError(NpusimError):
    """An output path cannot be written: a file where a directory should be (or the
    reverse), or no permission.  Raised before a run starts, so no work is lost."""


class TraceError(NpusimError):
    """A request or routing trace is malformed; the message names file and line."""


class ConfigNote(UserWarning):
    """Something a valid configuration does that its author may not expect (a swapped
    block preset that keeps the chip's other keys for the block); the command line
    prints it as a note, Python code sees a warning."""


class ValidationFailure(NpusimError):
    """One or more reference cases are outside their tolerance."""

    exit_code = 1
