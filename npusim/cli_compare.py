"""``npusim compare``: runs side by side, the settings that differ and the metrics'
change (:mod:`npusim.analysis.compare`); registered on the main app by :func:`register`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from npusim.cli_common import OnceOptionsCommand, path_argument
from npusim.cli_common import guard as _guard


def compare(
    runs: List[Path] = typer.Argument(..., metavar="DIR",
                                      parser=path_argument("a run or sweep directory "
                                                           "(npusim run/sweep --out DIR)"),
                                      help="Two or more run directories (npusim run --out "
                                      "DIR), or two or more sweep directories (npusim sweep "
                                      "--out DIR), compared point by point; the first is "
                                      "the baseline."),
    metric: Optional[List[str]] = typer.Option(
        None, "--metric", "-m", metavar="PATTERN",
        help="A metric to show, by its metrics.json path or a glob (ttft_ms_*, energy.*, "
        "'*' for all); repeatable.  Default: the headline metrics the runs have."),
    name: Optional[List[str]] = typer.Option(
        None, "--name", metavar="NAME", help="A column name per run, in order (default: "
        "the directories' names); repeatable."),
    csv: Optional[str] = typer.Option(None, "--csv", metavar="FILE",
                                      help="Also write the metrics table to FILE as CSV."),
) -> None:
    """Runs side by side: the settings that differ, each metric's change.

    The settings are those of the runs' resolved configurations; the changes are
    relative to the first run.  Sweeps are compared point by point, their points
    matched on the parameters they share."""
    def action() -> None:
        from rich.console import Console

        from npusim import analysis
        from npusim.core.output_paths import check_output_file, option_path

        target = option_path(csv, "--csv", "a CSV file name")
        if target is not None:
            check_output_file(target, "--csv")  # before reading: fail before any work
        names = name or None
        from npusim.analysis.sweep_compare import is_sweep_dir

        kinds = [is_sweep_dir(run) for run in runs]
        if any(kinds):
            for run in runs:  # what each path is, before saying it is not a sweep
                if not run.exists():
                    raise analysis.AnalysisError(f"{run}: no such directory; expected a "
                                                 "sweep directory (npusim sweep --out DIR)")
                if not run.is_dir():
                    raise analysis.AnalysisError(
                        f"{run}: is a file, not a directory; expected a sweep directory "
                        "(npusim sweep --out DIR)")
            if not all(kinds):
                sweep, run = runs[kinds.index(True)], runs[kinds.index(False)]
                raise analysis.AnalysisError(
                    f"{sweep} is a sweep directory and {run} is not; expected run "
                    "directories only or sweep directories only")
            table = analysis.compare_sweeps(*runs, metrics=metric or None, names=names)
            _print_sweeps(table, len(runs))
            _write_csv(table, target)
            return
        settings = analysis.config_diff(*runs, names=names)
        metrics = analysis.compare_runs(*runs, metrics=metric or None, names=names)
        console = Console()
        console.print(_settings_table(settings) if len(settings) else
                      "[bold]settings:[/bold] the resolved configurations are the same")
        if "workload.kind" in settings.index:
            kinds = ", ".join(dict.fromkeys(map(str, settings.loc["workload.kind"])))
            console.print(f"[yellow]note: the runs' workloads are of different kinds "
                          f"({kinds}): a metric they share does not measure the same "
                          "thing[/yellow]")
        console.print(_metrics_table(metrics, len(runs)))
        _write_csv(metrics, target)

    _guard(action)


def _write_csv(table, target) -> None:
    """The comparison as CSV at ``target`` (checked writable before any work), if any."""
    if target is None:
        return
    from npusim.core.output_paths import atomic_output

    target.parent.mkdir(parents=True, exist_ok=True)  # checked creatable above
    with atomic_output(target, "the comparison") as handle:
        table.to_csv(handle)
    typer.echo(f"wrote {target}")


def _print_sweeps(table, sweeps: int) -> None:
    """Sweeps' points side by side: which parameters matched them, then one row per
    metric and point (the metric named on its first row)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    matched = table.attrs.get("matched_on") or []
    counts = ", ".join(f"{name} {count}" for name, count in table.attrs["points"].items())
    on = ", ".join(matched) or "nothing (one point each)"
    console.print(f"[bold]points matched on:[/bold] {on} (points that ran: {counts})")
    names = list(table.columns[:sweeps])
    out = Table(title="metrics per point (change relative to the first sweep)",
                show_header=True)
    out.add_column("metric", no_wrap=True)
    # a parameter by its last name where that is unique (the line above has them whole)
    short = [param.rsplit(".", 1)[-1] for param in matched]
    for param, label in zip(matched, short):
        out.add_column(label if short.count(label) == 1 else param, justify="right",
                       overflow="fold")
    for column in names:
        out.add_column(str(column), justify="right", overflow="fold")
    for column in table.columns[sweeps:]:
        out.add_column(str(column).replace(" change %", " vs " + str(names[0])),
                       justify="right", overflow="fold")
    # each parameter's values in its unit, raw where rounding would merge two of them
    labels = [_shown(str(param), [index[i + 1] for index in table.index])
              for i, param in enumerate(matched)]
    previous = None
    for number, (index, row) in enumerate(zip(table.index, table.itertuples(index=False))):
        metric = index[0] if matched else index
        cells = [str(metric) if metric != previous else "",
                 *(shown[number] for shown in labels),
                 *(_value(value, str(metric)) for value in row[:sweeps]),
                 *(_percent(value) for value in row[sweeps:])]
        out.add_row(*cells, end_section=False)
        previous = metric
    console.print(out)
    shared = table.attrs.get("points_shared")
    if shared == 0 and matched:
        console.print("[yellow]note: no point is in more than one sweep (their parameter "
                      "values differ), so nothing is compared[/yellow]")


def _settings_table(settings):
    from rich.table import Table

    table = Table(title="settings that differ", show_header=True)
    table.add_column("setting", no_wrap=True)  # a path cut short names nothing
    for column in settings.columns:
        table.add_column(str(column), overflow="fold")
    # (rows as given: a row of a DataFrame would turn a None among numbers into nan)
    for path, values in settings.to_dict("index").items():
        raw = [values[column] for column in settings.columns]
        table.add_row(str(path), *_shown(str(path), raw))
    return table


def _shown(path: str, values: list) -> list[str]:
    """``values`` (of setting ``path``) as :func:`_setting` writes them, or raw where
    the rounding of the unit would show two different ones as one."""
    shown, raw = [_setting(path, value) for value in values], [str(value) for value in values]
    return raw if len(set(shown)) < len(set(raw)) else shown


def _setting(path: str, value) -> str:
    """A setting in the unit its name carries (``64 MiB`` for ``capacity_bytes``,
    ``16 GB/s`` for ``_bps``, ``500 MHz``, ``15 ns``), as written in a scenario."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    from npusim.core.units import format_bytes, format_si, format_time_ps

    name = path.rsplit(".", 1)[-1]
    if name.endswith("_bytes"):
        return format_bytes(value)
    if name.endswith("_bps"):
        return format_si(value, "B/s")
    if name.endswith("_hz"):
        return format_si(value, "Hz")
    if name.endswith("_ps"):
        return format_time_ps(value)
    return str(value)


def _metrics_table(metrics, runs: int):
    from rich.table import Table

    table = Table(title="metrics (change relative to the first run)", show_header=True)
    table.add_column("metric", no_wrap=True)  # a path cut short names nothing
    names = list(metrics.columns[:runs])
    for column in names:  # (folded, not cut short, on a narrow terminal)
        table.add_column(str(column), justify="right", overflow="fold")
    for column in metrics.columns[runs:]:
        table.add_column(str(column).replace(" change %", " vs " + str(names[0])),
                         justify="right", overflow="fold")
    for path, row in metrics.iterrows():
        cells = [_value(row[column], str(path)) for column in names]
        cells += [_percent(row[column]) for column in metrics.columns[runs:]]
        table.add_row(str(path), *cells)
    return table


def _value(value, path: str = "") -> str:
    """A metric as the table shows it: byte counts in binary units (``30.9 TiB``),
    integers whole, large numbers to one decimal, others to 4 significant digits, a
    missing value as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:  # numpy scalars from a numeric column
            value = value.item()
        except AttributeError:
            return str(value)
    if isinstance(value, bool):
        return str(value)
    if "bytes" in path.rsplit(".", 1)[0] or path.endswith("_bytes"):
        from npusim.core.units import format_bytes

        return format_bytes(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)  # a whole number read back from a numeric column
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.1f}" if 1e3 <= abs(value) < 1e15 else f"{value:.4g}"


def _percent(value) -> str:
    """A change in percent to two decimals (``+0.00%``: changed by less than 0.005%;
    exactly ``0%``: unchanged); empty where it means nothing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return "0%" if value == 0 else f"{value:+.2f}%"


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to ``app``."""
    app.command("compare", cls=OnceOptionsCommand)(compare)
