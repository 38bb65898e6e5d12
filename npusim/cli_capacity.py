"""``npusim capacity``: the highest request rate a serving scenario sustains within its
SLO (:mod:`npusim.sweep.capacity`); registered on the main app by :func:`register`."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import List, Optional

import typer

from npusim.cli_common import (OnceOptionsCommand, check_option_conflicts, hw_option,
                               mode_option, mode_problem, name_option_origins, option_origins,
                               set_option, trace_option, trace_override, path_argument,
                               real_number, whole_number)
from npusim.cli_common import guard as _guard
from npusim.sweep.capacity import DEFAULTS


def capacity(
    scenario: Path = typer.Argument(..., metavar="SCENARIO",
                                    parser=path_argument("a serving scenario YAML file"),
                                    help="Serving scenario YAML (its trace is replayed faster "
                                    "or slower)."),
    hw: Optional[str] = hw_option(),
    set_: List[str] = set_option(),
    mode: Optional[str] = mode_option(),
    trace: Optional[str] = trace_option(),
    attainment: float = typer.Option(DEFAULTS["attainment"], "--attainment", metavar="SHARE",
                                     parser=real_number,
                                     help="Share of requests that must meet workload.slo."),
    tolerance: float = typer.Option(DEFAULTS["tolerance"], "--tolerance", metavar="REL",
                                    parser=real_number,
                                    help="Stop when the meeting and missing rates are this "
                                    "close (relative)."),
    max_probes: int = typer.Option(DEFAULTS["max_probes"], "--max-probes", metavar="N",
                                   parser=whole_number,
                                   help="At most this many probes."),
    seeds: int = typer.Option(DEFAULTS["seeds"], "--seeds", metavar="N", parser=whole_number,
                              help="Replays per probe of a generated trace, each with the "
                              "next seed, pooled (steadier on short traces)."),
    lengthen: int = typer.Option(DEFAULTS["lengthen"], "--lengthen", metavar="N", parser=whole_number,
                                 help="While the capacity is flagged as found on a trace "
                                 "too short to settle (or every probe met the SLO in one "
                                 "burst), search again with twice the requests, at most N "
                                 "times (0 to 6): a generator's num_requests, or a trace "
                                 "file's limit while the file has rows."),
    out: Optional[str] = typer.Option(None, "--out", metavar="DIR",
                                      help="Where capacity.json and capacity.csv go "
                                      "(default out/capacity/<name>)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the result line."),
) -> None:
    """Search the highest request rate at which at least --attainment of the requests
    meet the scenario's SLO: simulate its trace at a rate_scale, double or halve until
    one probe meets the target and one misses it, then bisect."""
    from npusim.config.loader import load_scenario
    from npusim.core.errors import NpusimError, with_source
    from npusim.core.output_paths import check_output_dir, option_path
    from npusim.sweep.capacity import argument_problems, find_capacity
    from npusim.sweep.capacity_lengthen import find_steady_capacity

    def action() -> None:
        options = {"target_attainment": "--attainment", "tolerance": "--tolerance",
                   "max_probes": "--max-probes", "seeds": "--seeds", "lengthen": "--lengthen"}
        problems = argument_problems(attainment, tolerance, max_probes, seeds, lengthen)
        if problems:
            raise NpusimError("; ".join(f"{options[name]}: {message}" for name, message in problems))
        check_option_conflicts(set_, {"--trace": (trace, ("workload.trace.file",)),
                                      "--mode": (mode, ("run.mode",)), "--hw": (hw, ("hw",))})
        if mode_problem(mode):  # as npusim run says it, not as the scenario's run.mode
            raise NpusimError(f"{scenario}: {mode_problem(mode)}")
        out_path = option_path(out, "--out", "a directory for the results")
        overrides = trace_override(trace) + list(set_) + ([f"run.mode={mode}"] if mode is not None else [])
        config = load_scenario(scenario, overrides, option_path(hw, "--hw", "a hardware YAML file"))
        out_dir = check_output_dir(out_path or Path("out") / "capacity" / config.name)
        done: list = []
        show = _printer(quiet)

        def progress(probe) -> None:
            done.append(probe)
            if show is not None:
                show(probe)
        try:
            search = find_capacity if not lengthen else functools.partial(
                find_steady_capacity, doublings=lengthen)
            found = search(config, target_attainment=attainment, tolerance=tolerance,
                           max_probes=max_probes, seeds=seeds, progress=progress,
                           source=str(scenario))
        except KeyboardInterrupt:  # keep the probes that finished
            _write_partial(done, out_dir)
            raise
        except NpusimError as exc:  # a valid scenario that cannot run: name the file
            origins = option_origins(set_, {"run.mode": ("--mode", mode),
                                            "workload.trace.file": ("--trace", trace)})
            raise name_option_origins(with_source(exc, str(scenario)), origins, hw) from None
        found.write(out_dir)
        best = found.best
        # which SLO: the scenario's, or the defaults when it gives none
        typer.echo(f"SLO: TTFT <= {found.slo['ttft_ms']:g} ms and TPOT <= "
                   f"{found.slo['tbt_ms']:g} ms (workload.slo), for {100 * attainment:g}% "
                   "of the requests")
        if found.status == "found":
            typer.echo(f"capacity: {best.offered_requests_per_s:.4g} req/s meets the SLO for "
                       f"{100 * best.slo_attainment:.1f}% of the requests (target "
                       f"{100 * attainment:g}%); {found.first_miss.offered_requests_per_s:.4g} "
                       f"req/s misses it" + (f"; {found.note}" if found.note else ""))
        else:
            typer.echo(f"capacity: {found.status.replace('_', ' ')}: {found.note}")
        for note in found.settings_notes:  # a setting the runs could not act on
            typer.secho(f"  note: {note}", fg=typer.colors.YELLOW, err=True)
        if not quiet:
            typer.echo(f"results written to {out_dir}/")

    _guard(action)


def _ms(value: float, width: int) -> str:
    """A latency column: ``-`` where no request finished (NaN), not ``nan``."""
    return f"{'-':>{width}}   " if math.isnan(value) else f"{value:{width}.1f} ms"


def _printer(quiet: bool):
    """One line per probe as it finishes (a probe is a whole simulation: seconds)."""
    if quiet:
        return None

    def show(probe) -> None:
        typer.echo(f"  rate_scale {probe.rate_scale:<10.5g} {probe.offered_requests_per_s:>10.4g} "
                   f"req/s  SLO met {100 * probe.slo_attainment:5.1f}% (TTFT "
                   f"{100 * probe.slo_attainment_ttft:5.1f}%, TPOT "
                   f"{100 * probe.slo_attainment_tbt:5.1f}%)  TTFT p90 "
                   f"{_ms(probe.ttft_ms_p90, 8)}  TBT mean {_ms(probe.tbt_ms_mean, 7)}  "
                   f"{'meets' if probe.meets_target else 'misses'}"
                   + (f"  ({probe.requests_rejected} rejected)" if probe.requests_rejected else ""))
    return show


def _write_partial(probes: list, out_dir: Path) -> None:
    """On Ctrl-C: the finished probes as capacity.csv (no summary: there is no result)."""
    if not probes:
        return
    from npusim.sweep.capacity import probes_table, write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("capacity.json", "config.resolved.yaml"):  # an earlier search's: not these probes'
        if (out_dir / stale).is_file():
            (out_dir / stale).unlink()
    write_text(out_dir / "capacity.csv", probes_table(probes).to_csv(index=False), "the probes")
    typer.echo(f"interrupted: the {len(probes)} finished probes are in {out_dir}/capacity.csv",
               err=True)


def register(app: typer.Typer) -> None:
    """Add the ``capacity`` command to ``app``."""
    app.command("capacity", cls=OnceOptionsCommand,
                short_help="Find the highest request rate that meets the SLO.")(capacity)
