"""Run reference cases and write the report."""

from __future__ import annotations

from pathlib import Path

from npusim.core.errors import NpusimError
from npusim.validation.cases import Outcome, evaluate, load_cases
from npusim.validation.report import markdown, print_table


def select(suite: str | None = None, ids: list[str] | None = None, fast: bool = False):
    cases = load_cases()
    if suite:
        known = sorted({c.suite for c in cases})
        if suite not in known:
            raise NpusimError(f"no suite {suite!r}; known suites: {', '.join(known)}")
        cases = [c for c in cases if c.suite == suite]
    if ids:
        unknown = sorted(set(ids) - {c.id for c in cases})
        if unknown:
            raise NpusimError(f"unknown case ids: {', '.join(unknown)}")
        cases = [c for c in cases if c.id in ids]
    if fast:
        cases = [c for c in cases if not c.slow]
    return cases


def run_cases(suite: str | None = None, ids: list[str] | None = None, fast: bool = False,
              report: Path | None = None, show: bool = True) -> list[Outcome]:
    """Evaluate the selected cases; a case that raises is reported as failed, not fatal."""
    outcomes = []
    for case in select(suite, ids, fast):
        try:
            outcomes.append(evaluate(case))
        except NpusimError as exc:
            outcomes.append(Outcome(case, None, None, False, f"error: {exc}"))
    if show:
        print_table(outcomes)
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(markdown(outcomes) + "\n")
    return outcomes
