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
from npusim.core.console import console
from npusim.core.json_keys import natural_key
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


def _share_text(share: float) -> str:
    """A share as a percentage that shows a small one (0.4%, not 0%)."""
    percent = 100 * share
    if 0 < percent < 0.01:
        return "<0.01%"
    return f"{percent:.0f}%" if percent >= 10 or percent == 0 else f"{percent:.2g}%"


def _summary_table(result) -> None:
    from rich.table import Table

    from npusim.core.units import format_bytes, format_time_ps

    metrics = result.metrics
    # the chip by its own name: a --hw file (or --set hw.preset) replaces the one the
    # scenario's name and description speak of
    chip = (result.config.get("hw") or {}).get("name")
    table = Table(title=f"{metrics['scenario']}{f' on {chip}' if chip else ''} "
                        f"({metrics['mode']})", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    serving = "requests_total" in metrics
    # A serving run's latency_ps is the simulated span (first arrival to last token).
    table.add_row("simulated time (makespan)" if serving else "latency",
                  format_time_ps(metrics["latency_ps"]))
    for key, label in (("ttft_ps", "TTFT"), ("tbt_ps", "TBT (mean)"),
                       ("e2e_latency_ps", "end-to-end")):
        if key in metrics:
            table.add_row(label, format_time_ps(metrics[key]))
    if "requests_total" in metrics:  # a serving run
        table.add_row("requests finished / rejected / total",
                      f"{metrics['requests_finished']} / {metrics['requests_rejected']} / "
                      f"{metrics['requests_total']}")
        for name, label in (("ttft", "TTFT"), ("tbt", "TBT (every gap)"),
                            ("tpot", "TPOT (mean gap per request)"), ("e2e", "E2E"),
                            ("queue", "queueing")):
            table.add_row(f"{label} p50 / p90 / p99",
                          _milliseconds([metrics[f"{name}_ms_p{q}"] for q in (50, 90, 99)]))
        table.add_row("throughput", f"{metrics['throughput_tokens_per_s']:,.1f} tokens/s")
        # Rates follow the offered load until the chip saturates: beside it, the reader
        # sees whether a throughput (or its per-mm² figure) is the chip's or the trace's.
        offered = metrics["offered_requests_per_s"]
        # (two time bases: offered counts the gaps between arrivals, served the whole
        # serving window, so a short trace can show served above offered)
        table.add_row("requests offered / served",
                      (f"{offered:.2f} req/s between arrivals" if offered else "all at once")
                      + f" / {metrics['throughput_requests_per_s']:.2f} req/s over the run")
        table.add_row("goodput (SLO met)", f"{metrics['goodput_requests_per_s']:.2f} req/s "
                                           f"({100 * metrics['slo_attainment']:.0f}%)")
        # slo.tbt_ms bounds each request's TPOT (its mean gap), not every gap
        table.add_row(f"SLO met: TTFT <= {metrics['slo_ttft_ms']:g} ms / "
                      f"TPOT <= {metrics['slo_tbt_ms']:g} ms alone",
                      f"{100 * metrics['slo_attainment_ttft']:.0f}% / "
                      f"{100 * metrics['slo_attainment_tbt']:.0f}%")
        table.add_row("tokens/s per mm² (at this load)",
                      f"{metrics['throughput_tokens_per_s_per_mm2']:.4f}")
        if metrics.get("preemptions"):
            table.add_row("preemptions / swap-outs",
                          f"{metrics['preemptions']:,} / {metrics['swap_outs']:,}")
        if metrics.get("prefix_cache_hit_tokens"):
            table.add_row("prefix cache hits / evictions",
                          f"{100 * metrics['prefix_cache_hit_rate']:.1f}% of prompt tokens / "
                          f"{metrics['prefix_cache_evicted_blocks']:,} blocks")
        for replica, its in metrics["iterations_by_replica"].items():
            table.add_row(f"{replica}: batch mean / KV peak / most in flight",
                          f"{its['batch_requests_mean']:.1f} req / "
                          f"{_share_text(its['kv_utilisation_peak'])} / "
                          f"{its['micro_batches_in_flight_max']} micro-batches")
        flops_share = metrics.get("flops_utilisation_by_replica", {})
        hbm_share = metrics.get("hbm_bandwidth_utilisation_by_replica", {})
        by_stage = metrics.get("sa_utilisation_by_stage", {})
        for replica, share in metrics.get("sa_utilisation_by_replica", {}).items():
            table.add_row(f"{replica}: arrays busy / MFU / HBM MBU",
                          f"{100 * share:.1f}% / {100 * flops_share.get(replica, 0.0):.1f}% / "
                          f"{100 * hbm_share.get(replica, 0.0):.1f}%")
            stages = by_stage.get(replica, [])
            if len(stages) > 1:
                table.add_row(f"{replica}: stage arrays busy, least / most",
                              _least_most(stages))
        if metrics.get("cores_idle"):
            table.add_row("cores no pool uses (cores_idle)",
                          f"{metrics['cores_idle']} of {metrics['chip_cores']}")
        for replica in metrics.get("replicas", []):
            memory = replica.get("memory_by_stage", [])
            if memory:
                table.add_row(f"{replica['name']}: weights held in SRAM, least / most",
                              _least_most([stage["weights_in_sram_share"] for stage in memory]))
                _working_set_row(table, memory, f"{replica['name']}: ")
    if metrics.get("memory_by_stage"):
        shares = [stage["weights_in_sram_share"] for stage in metrics["memory_by_stage"]]
        table.add_row("weights held in SRAM, least / most stage", _least_most(shares))
        _working_set_row(table, metrics["memory_by_stage"], "")
    if metrics.get("tokens_per_s"):
        table.add_row("output tokens/s", f"{metrics['tokens_per_s']:,.1f}")
    if metrics.get("throughput_flops_per_s"):
        table.add_row("compute throughput",
                      f"{metrics['throughput_flops_per_s'] / 1e12:.3f} TFLOP/s")
    if metrics.get("peak_flops_per_s"):
        # Against the whole chip, then against the arrays that did work (mapping studies
        # use a few cores of many).
        table.add_row("FLOPs of peak (MFU): chip / used units",
                      f"{100 * metrics['flops_utilisation']:.1f}% / "
                      f"{100 * metrics['flops_utilisation_of_used_units']:.1f}%")
    if metrics.get("operand_stall_ps"):
        table.add_row("operand stalls (shared SRAM port)",
                      f"{format_time_ps(metrics['operand_stall_ps'])} "
                      f"({100 * metrics['operand_stall_share']:.1f}% of compute units' time)")
    for level, share in metrics.get("bandwidth_utilisation_by_level", {}).items():
        if share:
            table.add_row(f"bandwidth of peak @ {level}", f"{100 * share:.1f}%")
    for level, size in metrics["bytes_by_level"].items():
        if size:
            table.add_row(f"bytes moved @ {level}", format_bytes(size))
    # The five busiest units; equal shares in natural order (core2 before core10).
    busiest = sorted(metrics["unit_utilisation"].items(),
                     key=lambda kv: (-kv[1], natural_key(kv[0])))[:5]
    for unit, share in busiest:
        if share > 0:
            table.add_row(f"utilisation {unit}", f"{100 * share:.1f}%")
    if metrics["events"] or metrics["transactions"]:  # none in analytic mode: no SimPy run
        table.add_row("events / transactions",
                      f"{metrics['events']:,} / {metrics['transactions']:,}")
    memo = metrics["memo"]
    table.add_row("memo hits / misses", f"{memo['hits']} / {memo['misses']}")
    table.add_row("wall time", f"{result.host['wall_time_s']:.3f} s")
    console().print(table)


def _working_set_row(table, memory: list[dict], prefix: str) -> None:
    """A row when a stage's largest GEMM working set needs more SRAM buffers than its
    plan reserved (``workload.sram_buffers: activations`` assumes the excess fits)."""
    from npusim.core.units import format_bytes

    over = [(stage["sram_buffer_working_set_bytes"], stage["sram_buffer_bytes"])
            for stage in memory
            if stage.get("sram_buffer_working_set_bytes", 0) > stage["sram_buffer_bytes"]]
    if over:
        exact, reserved = max(over)
        table.add_row(f"{prefix}SRAM buffers / working set",
                      f"{format_bytes(reserved)} / {format_bytes(exact)}")


def _least_most(shares: list[float]) -> str:
    """``least% (stage i) / most% (stage j)`` of per-stage shares, or ``x% on every
    stage`` when they agree to a tenth of a percent (one stage: that stage's share)."""
    low = min(range(len(shares)), key=shares.__getitem__)
    high = max(range(len(shares)), key=shares.__getitem__)
    if f"{shares[low]:.3f}" == f"{shares[high]:.3f}":
        return f"{100 * shares[low]:.1f}% on every stage"
    return (f"{100 * shares[low]:.1f}% (stage {low}) / "
            f"{100 * shares[high]:.1f}% (stage {high})")


def _milliseconds(values: list[float]) -> str:
    """``a / b / c ms``, or seconds when the largest is 10 s or more; ``n/a`` when there
    is none (no request finished, or none produced a second token)."""
    if any(v is None for v in values):
        return "n/a"
    if max(values) >= 10_000:
        return " / ".join(f"{v / 1e3:.2f}" for v in values) + " s"
    return " / ".join(f"{v:.1f}" for v in values) + " ms"


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
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the summary table (nor the note that the per-task rows were cut)."),
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
            _summary_table(result)
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
    from rich.table import Table

    from npusim.api import build_device
    from npusim.config.loader import resolve_presets
    from npusim.config.validation_errors import validate
    from npusim.core import registry
    from npusim.core.units import format_bytes
    from npusim.hw.facts import device_facts

    devices = registry.entries("device")
    table = Table(title="device presets (whole chip)")
    for column in ("preset", "cores", "peak TFLOP/s", "SRAM", "SRAM TB/s", "HBM", "HBM TB/s"):
        table.add_column(column, justify="left" if column == "preset" else "right")
    for name in presets:
        try:
            resolved = resolve_presets({"preset": name}, f"preset {name}")
            kind = resolved.get("kind")  # (a preset naming another gets its kind there)
            if not isinstance(kind, str) or kind not in devices:
                continue
            config = validate(devices[kind].config, resolved, f"preset {name}")
            facts = device_facts(build_device(config))
        except NpusimError as exc:
            table.add_row(name, f"[yellow]does not build: {str(exc).splitlines()[-1].strip()}"
                                "[/yellow]")
            continue
        size, rate = facts["capacity_bytes_by_level"], facts["peak_bandwidth_bps_by_level"]
        table.add_row(name, str(facts["cores"]), f"{facts['peak_flops_per_s'] / 1e12:,.0f}",
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
    app(args=argv if argv is not None else sys.argv[1:], prog_name="npusim")


if __name__ == "__main__":  # pragma: no cover
    main()
