"""The rich console every command prints tables and progress bars with."""

from __future__ import annotations

import os
from typing import Any

#: Columns when the output is not a terminal (a pipe, a log file): rich would fall back
#: to 80 and wrap table cells mid-word; a log is read with a pager or an editor.
PIPE_COLUMNS = 200


def console(stderr: bool = False) -> Any:
    """A ``rich.console.Console`` on stdout (or stderr): the terminal's width, or
    ``$COLUMNS`` / :data:`PIPE_COLUMNS` when the output is piped."""
    from rich.console import Console  # lazy: rich is only needed to print

    plain = Console(stderr=stderr)
    if plain.is_terminal:
        return plain
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=int(columns) if columns.isdigit() and int(columns) > 0
                   else PIPE_COLUMNS)
