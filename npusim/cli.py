"""Command line: ``npusim run | list | validate``.

User mistakes (:class:`~npusim.core.errors.NpusimError`) print one clear message and
exit non-zero; only bugs show a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from npusim.cli_common import (OnceOptionsCommand, check_option_conflicts, hw_option,
                               mode_option, name_option_origins, option_origins, set_option,
                               trace_option, trace_override, path_argument,
                               whole_number)
from npusim.cli_common import guard as _guard
from npusim.cli_summary import summary_table
from npusim.core.console import console
from npusim.core.errors import (SCENARIO_SOURCE, ConfigError, MappingError, NpusimError,
                                 TraceError, with_source)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="npusim: simulate LLM inference and serving on multi-core NPUs.")


def _print_version(value: bool) -> None:
    if value:
        from npusim import __version__

        typer.echo(f"npusim {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_print_version,
                                          is_eager=True, help="Print the version and exit.")
             ) -> None:
    """npusim: simulate LLM inference and serving on multi-core NPUs."""


def _simulate_with_progress(simulate, config, quiet: bool):
    """Run ``simulate`` with a rich progress bar on a terminal (segments, or requests
    for serving runs); plain when output is redirected or ``--quiet``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err_console = console(stderr=True)
    what = "requests" if getattr(config.workload, "kind", "") == "serving" else "segments"
    with Progress(TextColumn(f"[bold]{config.name}[/bold] {what}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err_console, transient=True,
                  disable=quiet or not err_console.is_terminal) as bar:
        task = bar.add_task("run", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return simulate(config, progress=progress)


@app.command(cls=OnceOptionsCommand,
             short_help="Simulate one scenario; write its metrics, tables and trace.")
def run(
    scenario: Path = typer.Argument(..., metavar="SCENARIO",
                                    parser=path_argument("a scenario YAML file"),
                                    help="Scenario YAML (hardware + workload + run)."),
    hw: Optional[str] = hw_option(),
    set_: List[str] = set_option(),
    mode: Optional[str] = mode_option(),
    out: Optional[str] = typer.Option(None, "--out", metavar="DIR",
                                      help="Output directory (default out/<name>)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the summary table "
                               "(nor the note that the per-task rows were cut)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the scenario and print "
                                 "the configuration it resolves to (as config.resolved.yaml "
                                 "would hold it), without running or writing anything."),
    model: Optional[str] = typer.Option(None, "--model", metavar="NAME",
                                        help="LLM workloads: model name or config.json."),
    prompt_len: Optional[int] = typer.Option(None, "--prompt-len", metavar="TOKENS",
                                             parser=whole_number,
                                             help="LLM workloads: prompt tokens."),
    output_len: Optional[int] = typer.Option(None, "--output-len", metavar="TOKENS",
                                             parser=whole_number,
                                             help="LLM workloads: generated tokens."),
    batch: Optional[int] = typer.Option(None, "--batch", metavar="N", parser=whole_number,
                                        help="LLM workloads: fixed batch size."),
    trace: Optional[str] = trace_option(),
) -> None:
    """Simulate one scenario and write metrics.json, ops.csv, units.csv, segments.csv,
    trace.json, config.resolved.yaml and host.json (serving runs also requests.csv and
    iterations.csv)."""
    from npusim.api import simulate
    from npusim.config.loader import load_scenario
    from npusim.config.overrides import OVERRIDE_NOTE
    from npusim.core.output_paths import check_not_inputs, check_output_dir, option_path
    from npusim.metrics.result import output_names

    def action() -> None:
        # Shorthand values go in as JSON (valid YAML scalars: a model name with ': ' stays text).
        shorthands = {"model": ("--model", model), "prompt_len": ("--prompt-len", prompt_len),
                      "output_len": ("--output-len", output_len), "batch": ("--batch", batch)}
        check_option_conflicts(set_, {
            "--trace": (trace, ("workload.trace.file",)), "--mode": (mode, ("run.mode",)),
            "--hw": (hw, ("hw",)),
            **{option: (value, (f"workload.{field}",))
               for field, (option, value) in shorthands.items()}})
        overrides = trace_override(trace)
        out_path = option_path(out, "--out", "a directory for the results")
        overrides += list(set_) + ([f"run.mode={mode}"] if mode is not None else [])
        for field, (_, value) in shorthands.items():
            if value is not None:
                overrides.append(f"workload.{field}={json.dumps(value)}")
        try:
            config = load_scenario(scenario, overrides,
                                   option_path(hw, "--hw", "a hardware YAML file"))
        except ConfigError as exc:
            # A shorthand the scenario's workload kind has no field for: name the option
            # rather than suggest a look-alike key of that workload.
            for path, message in exc.problems:
                field = path.removeprefix("workload.")
                if field in shorthands and shorthands[field][1] is not None \
                        and message.startswith("unknown key"):
                    raise NpusimError(f"{scenario}: {shorthands[field][0]}: this scenario's "
                                      f"workload has no {field} field (the option applies to "
                                      "LLM workloads, kind: llm; a serving workload takes its "
                                      "requests from workload.trace)") from None
                if path == "workload.trace" and trace and message.startswith("unknown key"):
                    raise NpusimError(f"{scenario}: --trace: this scenario's workload has no "
                                      "trace (the option applies to serving workloads, kind: "
                                      "serving)") from None
                if path == "run.mode" and mode is not None:  # the option says where
                    message = message.removesuffix(OVERRIDE_NOTE.format(f"run.mode={mode}"))
                    raise NpusimError(f"{scenario}: --mode: {message}") from None
            raise
        if dry_run:  # (mapping and device-level checks come with the run)
            import yaml

            typer.echo(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False),
                       nl=False)
            return
        out_dir = check_output_dir(out_path or Path("out") / config.name)  # before the run
        check_not_inputs(out_dir, output_names(), _input_files(config, hw),
                         option="--out" if out_path else "the default --out")
        try:
            result = _simulate_with_progress(simulate, config, quiet)
        except (MappingError, TraceError) as exc:  # valid config that cannot run: say which
            origins = option_origins(set_, {
                "run.mode": ("--mode", mode), "workload.trace.file": ("--trace", trace),
                **{f"workload.{field}": option for field, option in shorthands.items()}})
            raise name_option_origins(with_source(exc, str(scenario)), origins, hw) from None
        except ConfigError as exc:  # a field checked against the built device
            raise (with_source(exc, str(scenario)) if exc.source == SCENARIO_SOURCE
                   else exc) from None
        result.write(out_dir)
        if not quiet:
            summary_table(result)
            typer.echo(f"results written to {out_dir}/")
        metrics = result.metrics
        # the timeline would end early without a word (with --quiet: in metrics.json)
        if metrics.get("trace_truncated") and not quiet:
            typer.secho(f"  per-task rows stopped at run.trace_max_tasks = "
                        f"{result.config['run']['trace_max_tasks']:,}: ops.csv and trace.json "
                        f"cover {metrics['trace_segments']:,} of {metrics['segments']:,} "
                        "segments (every metric covers the whole run); raise it to trace "
                        "them all", fg=typer.colors.YELLOW, err=True)
        if metrics.get("requests_rejected"):
            # said even with --quiet: the latencies and rates cover only what finished
            _warn_rejections(metrics, result.tables.get("requests", []), out_dir)
        for note in metrics.get("notes", ()):  # a setting the run could not act on
            typer.secho(f"  note: {note}", fg=typer.colors.YELLOW, err=True)
        if not quiet:
            if not result.config.get("run", {}).get("trace", True):
                typer.echo("  (run.trace is false: ops.csv and trace.json hold no per-task "
                           "rows; --set run.trace=true records them)")

    _guard(action)


def _input_files(config, hw: str | None) -> dict[str, Path | None]:
    """The data files a run reads that could sit where it writes: a previous run's
    requests.csv is a valid trace, and replacing it would leave that directory's
    config.resolved.yaml naming a trace whose rows changed.  (The scenario itself may be
    replaced: config.resolved.yaml is rewritten with what this run resolved.)"""
    from npusim.config.presets import REPO_ROOT
    from npusim.workload.trace_readers import resolve_trace_path

    trace_file = getattr(getattr(config.workload, "trace", None), "file", None)
    try:  # found as the engine finds it (serving/engine.py)
        trace_path = resolve_trace_path(trace_file, REPO_ROOT) if trace_file else None
    except TraceError:
        trace_path = None
    return {"hardware file": Path(hw) if hw else None, "trace": trace_path}


def _warn_rejections(metrics: dict, requests: list[dict], out_dir: Path) -> None:
    """How many requests were rejected, by kind of reason with the first one's own
    reason (its numbers), and what would admit them."""
    from npusim.serving.state import REFUSAL_KINDS

    rejected, total = metrics["requests_rejected"], metrics["requests_total"]
    if metrics.get("requests_finished"):
        head = f"{rejected} of {total} requests rejected (latencies and rates cover the " \
               "finished ones only):"
    else:  # every latency of this run is undefined (null)
        head = f"no request finished ({rejected} rejected): latencies are null:"
    typer.secho(f"  {head}", fg=typer.colors.YELLOW, err=True)
    first = {}
    for row in requests:
        first.setdefault(row.get("rejected_kind"), row.get("reason"))
    for kind, count in metrics.get("requests_rejected_by_kind", {}).items():
        meaning, hint = REFUSAL_KINDS.get(kind, (kind, ""))
        example = f"; first: {first[kind]}" if first.get(kind) else ""
        typer.secho(f"    {count}: {meaning}" + (f" ({hint})" if hint else "") + example,
                    fg=typer.colors.YELLOW, err=True)
    typer.secho(f"    each request's reason: {out_dir}/requests.csv", fg=typer.colors.YELLOW,
                err=True)


@app.command("list", cls=OnceOptionsCommand)
def list_parts() -> None:
    """Show registered parts, presets, benches and scenarios."""
    _guard(lambda: _list_everything(console()))


def _list_everything(out) -> None:
    from rich.table import Table

    from npusim.config.presets import REPO_ROOT, list_presets, workloads_root
    from npusim.core import registry
    from npusim.validation.bench_registry import bench_names
    from npusim.workload.model_config import list_models

    table = Table(title="registered parts (kind: name)")
    table.add_column("category")
    table.add_column("kind")
    table.add_column("description")
    for category in registry.categories():
        for kind, entry in registry.entries(category).items():
            table.add_row(category, kind, entry.help)
    out.print(table)
    out.print("[bold]hardware presets[/bold]: " + ", ".join(list_presets()))
    out.print(_device_preset_table(list_presets()))
    root = workloads_root()

    def shown(path: Path) -> str:
        for base in (root.parent, REPO_ROOT):  # NPUSIM_WORKLOADS may point elsewhere
            if path.is_relative_to(base):
                return str(path.relative_to(base))
        return str(path)

    def files(folder: Path, *patterns: str) -> str:
        found = sorted(shown(p) for pattern in patterns for p in folder.glob(pattern))
        return ", ".join(found) or "(none)"

    out.print("[bold]models[/bold] (workload.model): " + ", ".join(list_models()))
    out.print("[bold]scenarios[/bold] (npusim run): " + files(root / "scenarios", "*.yaml"))
    out.print("[bold]sweep specs[/bold] (npusim sweep): " + files(root / "sweeps", "*.yaml"))
    out.print("[bold]request traces[/bold] (--trace): "
                  + files(REPO_ROOT / "traces", "*.csv", "*.jsonl"))
    out.print("[bold]component benches[/bold]: " + ", ".join(bench_names()))


def _device_preset_table(presets: list[str]):
    """The device presets' headline figures (cores, peak FLOP/s, memory per level), from
    the devices they build; a preset that does not build shows its first problem."""
    import warnings

    from rich.table import Table
    from rich.text import Text

    from npusim.api import build_device
    from npusim.config.loader import resolve_presets
    from npusim.config.presets import preset_kind
    from npusim.config.validation_errors import validate
    from npusim.core import registry
    from npusim.core.errors import ConfigNote
    from npusim.core.units import format_bytes
    from npusim.hw.facts import device_facts

    devices = registry.entries("device")
    table = Table(title="device presets (whole chip)")
    for column in ("preset", "cores", "peak TFLOP/s", "SRAM", "SRAM TB/s", "HBM", "HBM TB/s"):
        table.add_column(column, justify="left" if column == "preset" else "right")
    for name in presets:
        # the kind the file names, or the preset it builds on, if it loads
        written = preset_kind(name)
        try:
            with warnings.catch_warnings():  # a swapped block's note is the run's to say
                warnings.simplefilter("ignore", ConfigNote)
                resolved = resolve_presets({"preset": name}, f"preset {name}", "hw")
            kind = resolved.get("kind")  # (a preset naming another gets its kind there)
            if not isinstance(kind, str) or kind not in devices:
                continue
            config = validate(devices[kind].config, resolved, f"preset {name}")
            facts = device_facts(build_device(config))
        except NpusimError as exc:
            if written in devices:
                first = exc.problems[0] if isinstance(exc, ConfigError) and exc.problems \
                    else ("", str(exc))
                problem = f"{first[0]}: {first[1]}" if first[0] else first[1]
                table.add_row(name, Text(f"does not build: {problem}", style="yellow"))
            continue  # (a part's preset that does not load is no device)
        size, rate = facts["capacity_bytes_by_level"], facts["peak_bandwidth_bps_by_level"]
        tflops = facts["peak_flops_per_s"] / 1e12
        table.add_row(name, str(facts["cores"]),
                      f"{tflops:,.0f}" if tflops >= 100 else f"{tflops:.3g}",
                      *(cell for level in ("sram", "hbm") for cell in (
                          format_bytes(size[level]) if size.get(level) else "-",
                          f"{rate[level] / 1e12:.2f}" if rate.get(level) else "-")))
    return table


@app.command(cls=OnceOptionsCommand,
             short_help="Run reference cases: simulated vs reference vs error.")
def validate(
    suite: Optional[str] = typer.Option(None, "--suite", metavar="NAME",
                                        help="Only cases of this suite."),
    case: List[str] = typer.Option([], "--case", metavar="ID",
                                   help="Only these case ids (repeatable)."),
    fast: bool = typer.Option(False, "--fast", help="Skip cases marked slow."),
    report: Optional[Path] = typer.Option(
        None, "--report", metavar="FILE",
        help="Markdown report to write ('' for none; default: docs/validation.md for a run "
             "of every case, none for a selection)."),
) -> None:
    """Run reference cases: simulated vs reference vs error; non-zero exit on failure."""
    from npusim.validation.runner import run_cases

    def action() -> None:
        selection = bool(suite or case or fast)
        if report is None:
            # The generated docs/validation.md lists every case: a selection written over
            # it would silently drop the others' results.
            wanted = None if selection else Path("docs/validation.md")
        else:
            # ``--report ''`` arrives as Path('.') (typer turns '' into the current directory).
            wanted = report if str(report) not in ("", ".") else None
        outcomes = run_cases(suite=suite, ids=case, fast=fast, report=wanted)
        if report is None and selection:  # (after the cases: a bad selection says only that)
            typer.echo("(a selection of cases: no report written; --report FILE writes one)")
        failed = [o.case.id for o in outcomes if not o.passed]
        if failed:
            typer.secho(f"{len(failed)} of {len(outcomes)} cases failed: {', '.join(failed)}",
                        fg=typer.colors.RED, err=True)
            raise typer.Exit(1)
        typer.secho(f"all {len(outcomes)} cases pass", fg=typer.colors.GREEN)

    _guard(action)


from npusim.cli_sweep import register as _register_sweep; _register_sweep(app)  # noqa: E402,E702
from npusim.cli_capacity import register as _register_capacity; _register_capacity(app)  # noqa: E402,E702
from npusim.cli_compare import register as _register_compare; _register_compare(app)  # noqa: E402,E702


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    _show_config_notes()
    app(args=argv if argv is not None else sys.argv[1:], prog_name="npusim")


def _show_config_notes() -> None:
    """Print a :class:`ConfigNote` warning as a yellow ``note:`` line, once per distinct
    text in a command (the others as Python shows them); installed once per process."""
    import warnings

    from npusim.core.errors import ConfigNote

    shown = warnings.showwarning
    if getattr(shown, "npusim_notes", False):
        shown.said.clear()  # (a new command: its notes are said again)
        return

    said: set[str] = set()  # a sweep resolves every point: one note per distinct text

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ConfigNote):
            if str(message) not in said:
                said.add(str(message))
                typer.secho(f"note: {message}", fg=typer.colors.YELLOW, err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    show.npusim_notes = True  # type: ignore[attr-defined]
    show.said = said  # type: ignore[attr-defined]
    warnings.showwarning = show


if __name__ == "__main__":  # pragma: no cover
    main()
