"""``npusim sweep`` and ``npusim plot``: registered on the main typer app by
:func:`register` (``npusim/cli.py`` calls it once)."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

import typer

from npusim.cli_common import (OnceOptionsCommand, check_option_conflicts, mode_option,
                               path_argument, set_option, whole_number)
from npusim.cli_common import guard as _guard
from npusim.core.errors import NpusimError
from npusim.core.output_paths import option_path
from npusim.core.text import counted

PLOT_KINDS = ("line", "heatmap", "pareto", "cdf", "timeline", "batches", "capacity")
#: The plot kinds each option of ``npusim plot`` acts on (elsewhere it is an error).
_OPTION_KINDS = {"--x": ("line", "heatmap", "pareto"), "--y": ("line", "heatmap", "pareto"),
                 "--value": ("heatmap", "cdf"), "--hue": ("line", "pareto", "cdf"),
                 "--maximize-y": ("pareto",), "--logx": ("line",), "--bins": ("timeline",),
                 "--units": ("timeline",), "--group": ("timeline",)}
DEFAULT_BINS = 100

#: From this many points the sweep command says it is checking them first.
_SAY_CHECKING_FROM = 1000


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM (``kill``, a batch system's time limit) as Ctrl-C while a sweep runs:
    the finished points are already stored, the workers are stopped, exit 130."""
    sweep_pid = os.getpid()

    def interrupt(signum, frame):
        if os.getpid() != sweep_pid:  # a forked worker inherited this: just end
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (a sweep run from a library thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def sweep(
    spec: Path = typer.Argument(..., metavar="SPEC", parser=path_argument("a sweep spec YAML file"),
                                help="Sweep spec YAML (base scenario + axes)."),
    out: Optional[str] = typer.Option(None, "--out", metavar="DIR", help="Results directory "
                                       "(default out/sweeps/<name>); re-running resumes."),
    executor: str = typer.Option("local", "--executor", metavar="local|dask|serial",
                                 help="local (processes), dask, or serial."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N",
                                          parser=whole_number, help="Worker processes "
                                          "(default: number of CPUs; never more than the "
                                          "points to run; at most 4 per CPU)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDRESS",
                                            help="Dask scheduler address "
                                            "tcp://HOST:PORT (default: a LocalCluster on "
                                            "loopback)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run failed points again."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    overrides: List[str] = set_option(),
    mode: Optional[str] = mode_option(),
) -> None:
    """Run every point of a sweep and store one Parquet row per point in OUT.

    --set and --mode apply to every point, after the spec's own set: (they change every
    point's key, so results stored without them are not reused).

    Exits 1 if a point failed (in this run or stored by an earlier one) or was lost,
    after every result is written; 2 on a user error before any point runs."""
    from npusim.api import check_mode
    from npusim.sweep.runner import SweepSummary, check_options, run_sweep
    from npusim.sweep.spec import load_spec
    from npusim.sweep.store import ResultStore

    def action() -> SweepSummary:
        if scheduler is not None and executor != "dask":  # '' too: never ignored silently
            raise NpusimError("--scheduler needs --executor dask")
        check_options(executor, workers, scheduler, flags=True)  # before the spec is read
        check_option_conflicts(overrides, {"--mode": (mode, ("run.mode",))})
        check_mode(mode, "--mode")  # blamed on --mode, not on the spec it is applied to
        extra = [*overrides, *([f"run.mode={mode}"] if mode is not None else [])]
        parsed = load_spec(spec, extra)
        out_dir = (option_path(out, "--out", "a directory for the sweep results")
                   or Path("out") / "sweeps" / parsed.name)
        store = ResultStore(out_dir)
        store.check_output("--out", requests=parsed.store_requests)  # before any point runs
        store.check_same_sweep(parsed.name, "--out")
        count = len(parsed.combinations())
        if count >= _SAY_CHECKING_FROM and not quiet:
            # every point is resolved and validated before any runs (a few ms each): say
            # so, or a large grid looks hung for minutes
            typer.echo(f"checking {count:,} points against the base scenario before running "
                       "any ...", err=True)
        stored: list[str] = []
        try:
            with _sigterm_as_interrupt():
                summary = run_sweep(parsed, out_dir, executor=executor, workers=workers,
                                    scheduler=scheduler, retry_failed=retry_failed,
                                    progress=not quiet,
                                    on_row=lambda row: stored.append(row["status"]))
        except KeyboardInterrupt:
            # Every finished point is already in OUT/parts: say so, and how to go on.
            typer.secho(f"\ninterrupted: this run stored {len(stored):,} of {count:,} points "
                        f"({stored.count('ok'):,} ok) in {out_dir}/; run the same command "
                        "again to run the rest", fg=typer.colors.YELLOW, err=True)
            raise typer.Exit(130) from None
        typer.echo(f"{summary.total} points: {summary.ok} ok, {summary.failed} failed, "
                   f"{summary.skipped} skipped (by a constraint, or invalid under "
                   "on_invalid: skip), "
                   f"{summary.skipped_done} already "
                   f"done, {summary.lost} lost ({summary.wall_time_s:.1f} s)")
        for line in summary.errors[:10]:
            typer.secho(f"  {line.splitlines()[0]}", fg=typer.colors.YELLOW, err=True)
        if len(summary.errors) > 10:
            typer.secho(f"  ... and {len(summary.errors) - 10} more (see the error column)",
                        fg=typer.colors.YELLOW, err=True)
        if summary.unmatched_metrics:
            typer.secho("  metrics: no stored metric matches "
                        + ", ".join(repr(p) for p in summary.unmatched_metrics)
                        + " (names as in metrics.json, nested keys joined with dots, e.g. "
                        "'ttft_ms_p90', 'bytes_by_level.hbm'; globs allowed)",
                        fg=typer.colors.YELLOW, err=True)
        for note, points in summary.notes.items():  # settings the runs could not act on
            typer.secho(f"  note ({points:,} of {summary.ok:,} points run): {note}",
                        fg=typer.colors.YELLOW, err=True)
        if summary.duplicates:
            typer.secho(f"  {counted(summary.duplicates, 'point')} "
                        f"{'repeats' if summary.duplicates == 1 else 'repeat'} another "
                        "point's config and parameters (a random axis drew a value twice, "
                        "or a grid lists it twice): stored once",
                        fg=typer.colors.YELLOW, err=True)
        if summary.rerun_for_requests:
            typer.secho(f"  {counted(summary.rerun_for_requests, 'finished serving point')} "
                        "ran again to store per-request tables (none was stored: they ran "
                        "before store: {requests: true} was set, or the file was moved "
                        "away)", fg=typer.colors.YELLOW,
                        err=True)
        if summary.failed_before:
            typer.secho(f"  {counted(summary.failed_before, 'point')} stored as failed by an earlier run "
                        f"(--retry-failed runs them again)", fg=typer.colors.YELLOW, err=True)
        tables = (f"; per-request tables: npusim.analysis.load_sweep_requests('{out_dir}')"
                  if parsed.store_requests else "")
        typer.echo(f"results in {out_dir}/ (npusim.analysis.load_sweep('{out_dir}'){tables})")
        return summary

    summary = _guard(action)
    if not summary.complete:  # everything is written; the exit code says it is not all there
        raise typer.Exit(1)


def plot(
    source: Path = typer.Argument(..., metavar="SOURCE", parser=path_argument(
                                      "a sweep, run or capacity directory"), help="A sweep directory (npusim "
                                  "sweep --out), a run directory (npusim run --out) or a "
                                  "capacity search (npusim capacity --out)."),
    kind: str = typer.Option(..., "--kind", "-k", metavar="KIND",
                             help="line | heatmap | pareto | cdf | "
                             "timeline | batches (a serving run's requests in flight, KV and queue "
                             "per replica over time) | capacity (SLO attainment against "
                             "offered load)"),
    x: Optional[str] = typer.Option(None, "--x", "-x", metavar="COLUMN",
                                    help="x column (line: a parameter; "
                                    "heatmap: a parameter; pareto: a metric)."),
    y: Optional[str] = typer.Option(None, "--y", "-y", metavar="COLUMN",
                                    help="y column (line/pareto: a metric; "
                                    "heatmap: a parameter)."),
    value: Optional[str] = typer.Option(None, "--value", metavar="COLUMN",
                                        help="heatmap: the metric to colour; "
                                        "cdf: the column to take samples from (a serving "
                                        "run, or a sweep that stored its requests: a "
                                        "requests.csv column, or gap_ps for every "
                                        "inter-token gap)."),
    hue: Optional[str] = typer.Option(None, "--hue", metavar="COLUMN",
                                      help="line: one line per value; "
                                      "cdf: one curve per value (a sweep's requests: "
                                      "default one per point, named by the parameters that differ)."),
    maximize: bool = typer.Option(False, "--maximize-y", help="pareto: larger y is better."),
    bins: Optional[int] = typer.Option(None, "--bins", metavar="N", parser=whole_number, help="timeline: number of time bins "
                             "(1 to 100,000; default 100)."),
    units: Optional[List[str]] = typer.Option(
        None, "--units", metavar="PATTERN", help="timeline: only these units, names or glob "
        "patterns ('*.sa', 'core1?.*'); repeat for more."),
    group: Optional[str] = typer.Option(
        None, "--group", metavar="unit|kind", help="timeline: one row per unit, or per kind "
        "of unit (core*.sa: the mean over every array); default: by kind past 48 units "
        "unless --units chooses them."),
    logx: bool = typer.Option(False, "--logx", help="line: log2 x axis (sizes, powers of two)."),
    out: Optional[str] = typer.Option(None, "--out", metavar="FILE",
                                      help="Figure file (.png/.svg/.pdf; default "
                                       "SOURCE/plot-KIND.png, with the columns plotted "
                                       "for line, pareto, heatmap and cdf: "
                                       "plot-line-Y-vs-X.png)."),
) -> None:
    """Plot a sweep (line, heatmap, pareto, cdf), a run (timeline, cdf, batches) or a
    capacity search (capacity) to PNG, SVG or PDF."""
    from npusim import analysis
    from npusim.analysis.frames import MAX_BINS, TIMELINE_GROUPS
    from npusim.analysis.plots import check_figure_path

    def need(name: str, given: Optional[str]) -> str:
        if not given:
            raise NpusimError(f"--kind {kind} needs {name}")
        return given

    def action() -> None:
        if kind not in PLOT_KINDS:
            raise NpusimError(f"--kind: unknown plot {kind!r}; expected one of {', '.join(PLOT_KINDS)}")
        if not source.exists():
            raise NpusimError(f"{source}: no such directory")
        if not source.is_dir():
            raise NpusimError(f"{source}: not a directory; expected a sweep directory (npusim "
                              "sweep --out DIR) or a run directory (npusim run --out DIR)")
        # The figure path is checked before anything is loaded or drawn.
        figure = option_path(out, "--out", "a figure file (.png, .svg or .pdf)")
        target = check_figure_path(figure, "--out") if figure is not None else \
            check_figure_path(source / _default_figure_name(kind, x, y, value))
        if bins is not None and not 1 <= bins <= MAX_BINS:
            raise NpusimError(f"--bins: expected a number of time bins from 1 to "
                              f"{MAX_BINS:,}, got {bins}")
        if group is not None and group not in TIMELINE_GROUPS:
            raise NpusimError(f"--group: expected one of {', '.join(TIMELINE_GROUPS)}, "
                              f"got {group!r}")
        given = {"--x": x is not None, "--y": y is not None, "--value": value is not None,
                 "--hue": hue is not None, "--maximize-y": maximize, "--logx": logx,
                 "--bins": bins is not None, "--units": bool(units),
                 "--group": group is not None}
        for option, kinds in _OPTION_KINDS.items():
            if given[option] and kind not in kinds:  # ignored, the figure would mislead
                listed = kinds[0] if len(kinds) == 1 else \
                    f"{', '.join(kinds[:-1])} or {kinds[-1]}"
                raise NpusimError(f"{option} applies to --kind {listed} only (got --kind "
                                  f"{kind})")
        is_run = (source / "ops.csv").is_file()
        if kind != "capacity" and (source / "capacity.csv").is_file() and not is_run \
                and not (source / "manifest.json").is_file():
            raise NpusimError(f"{source}: a capacity search's directory (capacity.csv); it "
                              "plots with --kind capacity (a request-latency CDF needs a run "
                              "directory: npusim run SCENARIO --out DIR)")
        if kind == "capacity":
            figure = analysis.plot_capacity(source)
        elif kind == "batches":
            if not (source / "iterations.csv").is_file():
                raise NpusimError(f"{source}: --kind batches needs a serving run directory "
                                  "with iterations.csv (npusim run SCENARIO --out DIR, a "
                                  "serving workload)")
            figure = analysis.plot_serving_timeline(source)
        elif kind == "timeline" or (kind == "cdf" and is_run):
            if not is_run:
                raise NpusimError(f"{source}: --kind {kind} needs a run directory with ops.csv "
                                  "(npusim run SCENARIO --out DIR)")
            from npusim.analysis.frames import as_ops

            ops = as_ops(source)
            if kind == "timeline":
                figure = analysis.plot_utilisation_timeline(ops, bins=bins or DEFAULT_BINS,
                                                            units=units or None,
                                                            group=group)
            else:  # per request when the run has requests.csv, else per task
                figure = analysis.plot_latency_cdf(source, column=value, by=hue)
        else:
            import warnings

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                frame = analysis.load_sweep(source)
                # a column of the stored per-request tables (or none: e2e_ps), not a row's
                requests = (analysis.load_sweep_requests(source)
                            if kind == "cdf" and value not in frame.columns
                            and not (value or "").startswith(("metrics.", "capacity."))
                            and _stored_requests(source) else None)
            for text in dict.fromkeys(str(w.message) for w in caught):
                # points with no result yet: a note, not a Python warning
                typer.secho(f"  note: {text}", fg=typer.colors.YELLOW, err=True)
            if kind == "cdf" and requests is None and value and value not in frame.columns \
                    and not value.startswith(("metrics.", "capacity.")) \
                    and f"metrics.{value}" not in frame.columns:
                raise NpusimError(
                    f"--value {value}: not a column of the sweep's rows; a per-request "
                    f"column such as ttft_ps needs the sweep's per-request tables (add store: "
                    "{requests: true} to its spec and run it again with the same --out), and "
                    "a metric is metrics.NAME")
            if kind == "line":
                figure = analysis.plot_metric(frame, need("--x", x), need("--y", y), hue=hue,
                                             logx=logx)
            elif kind == "heatmap":
                figure = analysis.plot_heatmap(frame, need("--x", x), need("--y", y),
                                               need("--value", value))
            elif kind == "pareto":
                figure = analysis.plot_pareto(frame, need("--x", x), need("--y", y),
                                              minimize=(True, not maximize), label=hue)
            elif requests is not None:  # one curve per point, or per value of --hue
                # a point's curve is labelled by the parameters that tell it apart
                figure = analysis.plot_latency_cdf(
                    requests, column=value,
                    by=hue or analysis.varying_params(requests) or "point")
            else:
                figure = analysis.plot_latency_cdf(frame[frame["status"] == "ok"],
                                                   column=need("--value", value), by=hue)
        path = analysis.save_figure(figure, target)
        typer.echo(f"wrote {path}")

    _guard(action)


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` and ``plot`` commands to ``app``."""
    app.command("sweep", cls=OnceOptionsCommand,
                short_help="Run every point of a sweep; one Parquet row per point.")(sweep)
    app.command("plot", cls=OnceOptionsCommand,
                short_help="Plot a sweep, a run or a capacity search to PNG, SVG or PDF.")(plot)


def _stored_requests(source: Path) -> bool:
    """Whether the sweep in ``source`` stored per-request tables (store: {requests: true})."""
    from npusim.sweep.request_tables import stored_request_keys

    return bool(stored_request_keys(source))


def _default_figure_name(kind: str, x: Optional[str], y: Optional[str],
                         value: Optional[str]) -> str:
    """``plot-KIND.png``, naming the columns a sweep plot shows, so that plots of other
    columns of the same directory do not overwrite one another."""
    import re

    columns = {"line": (y, x), "pareto": (y, x), "heatmap": (value, y, x), "cdf": (value,)}
    named = [c for c in columns.get(kind, ()) if c]
    if kind in ("line", "pareto") and len(named) == 2:
        named = [named[0], "vs", named[1]]
    stem = "-".join(["plot", kind, *named])
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) + ".png"
