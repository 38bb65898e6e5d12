"""Run reference cases and write the report."""

from __future__ import annotations

import difflib
from pathlib import Path

from npusim.core.errors import NpusimError, OutputError
from npusim.core.output_paths import atomic_output, check_output_file
from npusim.validation.cases import Outcome, evaluate, load_cases
from npusim.validation.report import markdown, print_table


def select(suite: str | None = None, ids: list[str] | None = None, fast: bool = False):
    """The cases of ``suite`` (all if ``None``) with these ``ids`` (all if empty)."""
    cases = load_cases()
    if suite is not None:
        known = sorted({c.suite for c in cases})
        if suite not in known:  # '' too: it would otherwise select every suite
            raise NpusimError(f"--suite: no suite {suite!r}; known suites: {', '.join(known)}")
        cases = [c for c in cases if c.suite == suite]
    if ids:
        known_ids = [c.id for c in cases]
        unknown = sorted(set(ids) - set(known_ids))
        if unknown:
            hints = []
            for bad in unknown:
                close = difflib.get_close_matches(bad, known_ids, n=3, cutoff=0.6)
                hints.append(f"{bad!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
            scope = f"suite {suite!r}" if suite is not None else "any suite"
            raise NpusimError(f"--case: unknown case id(s) in {scope}: {', '.join(hints)}; "
                              f"ids look like {known_ids[0]} ({len(known_ids)} cases, "
                              "listed in docs/validation.md)")
        cases = [c for c in cases if c.id in ids]
    if fast:
        slow = [c.id for c in cases if c.slow]
        cases = [c for c in cases if not c.slow]
        if not cases:  # an empty run would "pass" and overwrite the report with nothing
            raise NpusimError(f"--fast leaves no case to run (every selected case is marked "
                              f"slow: {', '.join(slow[:5])}{' ...' if len(slow) > 5 else ''}); "
                              "drop --fast")
    return cases


def run_cases(suite: str | None = None, ids: list[str] | None = None, fast: bool = False,
              report: Path | None = None, show: bool = True) -> list[Outcome]:
    """Evaluate the selected cases; a case that raises is reported as failed, not fatal."""
    cases = select(suite, ids, fast)
    if report is not None:  # before the cases run, so a bad path costs nothing
        check_output_file(report, "--report")
        if Path(report).suffix.lower() not in (".md", ".markdown", ".txt"):
            # x.png would get Markdown text under an image's name
            raise OutputError(f"--report {report}: the report is Markdown; expected a file "
                              "name ending in .md")
    outcomes = []
    for case in cases:
        try:
            outcomes.append(evaluate(case))
        except NpusimError as exc:
            outcomes.append(Outcome(case, None, None, False, f"error: {exc}"))
    if show:
        print_table(outcomes)
    if report is not None:
        try:
            Path(report).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"--report {report}: cannot create its directory "
                              f"({exc.strerror or exc})") from None
        # Replaced whole: a failed write keeps the previous report (docs/validation.md).
        with atomic_output(report, "the report (--report)") as handle:
            handle.write(markdown(outcomes) + "\n")
    return outcomes
