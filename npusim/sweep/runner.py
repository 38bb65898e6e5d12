"""Run a sweep: resolve points, skip finished ones, execute the rest, store each row.

Executors:

* ``local`` (default) – ``concurrent.futures.ProcessPoolExecutor``, no extra service;
* ``dask`` – Dask distributed: a ``LocalCluster`` on loopback when no scheduler address
  is given, else the existing cluster at ``scheduler`` (workers need npusim installed);
* ``serial`` – in this process, one point after another (debugging, tiny sweeps).

Rows are written by the driver as each point finishes (workers may live on other
machines and share no file system), one part file per point, so a killed sweep loses at
most the points that were running.  A point that raises records its error and the
sweep continues; an executor that loses a worker leaves that point unrecorded, so the
next run retries it.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from npusim.core.console import console
from npusim.core.errors import ConfigError, NpusimError
from npusim.sweep.request_tables import (REQUESTS_FIELD, request_table_bytes,
                                         stored_request_keys, write_request_table)
from npusim.sweep.spec import Point, SweepSpec, load_spec, spec_from_dict
from npusim.sweep.store import ResultStore, flatten_metrics

EXECUTORS = ("local", "dask", "serial")
#: The column of a serving point's setting notes (JSON list; kept by every metrics filter),
#: and of a capacity point's (its probes' notes).
NOTES_COLUMN = "metrics.notes"
CAPACITY_NOTES_COLUMN = "capacity.settings_notes"
#: Most ``--workers`` per CPU.  The points are CPU-bound, so more processes than CPUs
#: only compete for them, and each costs memory: ``--workers 100000`` started ~1900
#: processes and exhausted memory before failing.  Far beyond this is a typo.
MAX_WORKERS_PER_CPU = 4
#: A Dask scheduler address: optional scheme, host (name, IPv4 or bracketed IPv6), port.
_SCHEDULER = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx)://)?"
                        r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})")


@dataclass
class SweepSummary:
    """What one :func:`run_sweep` call did."""

    out_dir: Path
    total: int
    skipped_done: int = 0       # already in the store (resumed)
    ok: int = 0
    failed: int = 0
    skipped: int = 0            # constraints / invalid configs, recorded with a reason
    lost: int = 0               # a worker died; not recorded, retried next run
    failed_before: int = 0      # stored as failed by an earlier run and not retried
    duplicates: int = 0         # points with another point's config and parameters
    #: finished serving points run again because their per-request table was not stored
    #: (``store: {requests: true}`` added to a sweep that ran without it)
    rerun_for_requests: int = 0
    wall_time_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    unmatched_metrics: list[str] = field(default_factory=list)  # spec patterns matching none
    #: each setting note of a serving run (metrics.json ``notes``) and how many points had it
    notes: dict[str, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every point has a result: none failed (now or stored) and none was lost."""
        return not (self.failed or self.lost or self.failed_before)


def point_task(point: Point, sweep: str, capacity: dict[str, Any] | None = None,
               metrics: tuple[str, ...] | None = None, requests: bool = False) -> dict[str, Any]:
    """The picklable description of a point that :func:`run_point` executes;
    ``capacity`` (find_capacity's arguments) makes it a capacity search; ``metrics``
    (glob patterns) keeps only the metrics they match; ``requests`` returns a serving
    run's per-request table too (as Parquet bytes, under ``REQUESTS_FIELD``)."""
    from npusim import __version__

    return {"point": point.index, "params": point.params, "config": point.config,
            "config_hash": point.config_hash, "key": point.key, "skip": point.skip_reason,
            "sweep": sweep, "npusim_version": __version__, "capacity": capacity,
            "metrics": metrics, "requests": requests}


def run_point(task: dict[str, Any]) -> dict[str, Any]:
    """Simulate one point and return its results row (never raises for a bad point)."""
    started = time.perf_counter()
    row: dict[str, Any] = {"point": task["point"], "status": "ok"}
    row.update(task["params"])
    if task["skip"] is not None:
        row.update(status="skipped", error=task["skip"])
    else:
        try:
            if task.get("capacity") is not None:
                row.update(capacity_columns(task["config"], task["capacity"]))
            else:
                from npusim.api import simulate

                result = simulate(task["config"])
                row.update(kept_metrics(flatten_metrics(result.metrics), task.get("metrics")))
                table = (request_table_bytes(result, task["key"])
                         if task.get("requests") else None)
                if table is not None:  # popped by the driver, which writes it
                    row[REQUESTS_FIELD] = table
            row["error"] = None
        except NpusimError as exc:
            row.update(status="failed", error=str(exc))
        except Exception as exc:  # a bug in npusim: record it, keep the sweep going
            row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    row.update(wall_time_s=time.perf_counter() - started, config_hash=task["config_hash"],
               key=task["key"], npusim_version=task["npusim_version"], sweep=task["sweep"])
    return row


def kept_metrics(flat: dict[str, Any], patterns: tuple[str, ...] | None) -> dict[str, Any]:
    """The ``metrics.*`` columns whose names (without the prefix) match one of
    ``patterns`` (``fnmatch`` globs, case-sensitive); all of them without patterns.  A
    pattern naming a nested metric keeps everything under it (``bytes_by_level``)."""
    if patterns is None:
        return flat
    prefix = len("metrics.")
    # The notes (settings a serving run could not act on) explain the kept numbers.
    return {key: value for key, value in flat.items()
            if key == NOTES_COLUMN or any(_metric_matches(key[prefix:], p) for p in patterns)}


def _metric_matches(name: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    return fnmatchcase(name, pattern) or fnmatchcase(name, f"{pattern}.*")


def capacity_columns(config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """A capacity search of ``config`` as result columns: ``capacity.status``,
    ``capacity.requests_per_s`` (None unless bracketed), ``capacity.probes``,
    ``capacity.note``, the search settings (``capacity.attainment`` ...), and the fields
    of the best and first-missing probes (``capacity.best.slo_attainment`` ...; None
    where there is no such probe)."""
    from npusim.sweep.capacity import CapacityProbe, find_capacity
    from npusim.sweep.capacity_lengthen import find_steady_capacity

    search = dict(target_attainment=settings["attainment"], tolerance=settings["tolerance"],
                  max_probes=settings["max_probes"], seeds=settings.get("seeds", 1))
    lengthen = settings.get("lengthen", 0)
    found = (find_steady_capacity(config, doublings=lengthen, **search) if lengthen else
             find_capacity(config, **search))
    row = {"capacity.status": found.status, "capacity.requests_per_s": found.max_requests_per_s,
           "capacity.probes": len(found.probes), "capacity.note": found.note,
           CAPACITY_NOTES_COLUMN: json.dumps(list(found.settings_notes)),
           **{f"capacity.{name}": value for name, value in settings.items()}}
    for name, probe in (("best", found.best), ("first_miss", found.first_miss)):
        for field_name in CapacityProbe.__dataclass_fields__:
            if field_name != "meets_target":  # true for best, false for first_miss
                row[f"capacity.{name}.{field_name}"] = getattr(probe, field_name, None)
    return row


# ------------------------------------------------------------------ executors
# Each yields (task, row) as points finish; row None means the point was lost.

def _serial(tasks: list[dict], workers: int, scheduler: str | None) -> Iterator[tuple[dict, Any]]:
    for task in tasks:
        yield task, run_point(task)


def _ignore_interrupts() -> None:
    """In a worker process: leave Ctrl-C to the sweep.  The terminal sends SIGINT to the
    whole process group; a worker that took it printed its own KeyboardInterrupt
    traceback under the sweep's message.  The parent stops the workers itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _local(tasks: list[dict], workers: int, scheduler: str | None) -> Iterator[tuple[dict, Any]]:
    import importlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # fork where the OS has it: workers inherit the imported simulator (no per-worker
    # start-up) and scripts without an ``if __name__ == "__main__"`` guard still work.
    # The children only run run_point, which touches no lock a parent thread may hold.
    importlib.import_module("npusim.api")  # imported once here, inherited by every worker

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_ignore_interrupts) as pool:
        try:
            # (submitting is inside: a Ctrl-C that lands here must not leave the block
            # the normal way, which waits for every point already queued)
            futures = {pool.submit(run_point, task): task for task in tasks}
            for future in as_completed(futures):
                try:
                    yield futures[future], future.result()
                except BrokenProcessPool:
                    yield futures[future], None
        except BaseException:  # interrupted (Ctrl-C, SIGTERM) or abandoned by the caller
            # Leaving the block would wait for every queued point.  The workers ignore
            # Ctrl-C and a SIGTERM to the sweep does not reach them: stop them here, or
            # they run on as orphans holding their memory.  (The pool keeps its processes
            # in a private mapping; there is no public way to stop a busy worker.)
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)  # forgets the processes
            for process in processes:
                process.kill()  # a worker holds nothing to save: rows are the parent's
            raise


def _dask(tasks: list[dict], workers: int, scheduler: str | None) -> Iterator[tuple[dict, Any]]:
    import logging

    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - distributed is a declared dependency
        raise NpusimError("--executor dask needs the 'distributed' package "
                          "(pip install 'dask[distributed]')") from None
    cluster = None
    try:
        if scheduler:
            client = Client(scheduler, timeout="10s")
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=None,
                                   silence_logs=logging.ERROR)
            client = Client(cluster)
    except (OSError, TimeoutError) as exc:
        raise NpusimError(f"cannot reach the Dask scheduler at {scheduler or 'a LocalCluster'}: "
                          f"{exc}") from None
    try:
        futures = {client.submit(run_point, task, key=f"npusim-{task['key']}", pure=False): task
                   for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            try:
                yield task, future.result()
            except Exception:  # KilledWorker, lost connection: retried on the next run
                yield task, None
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


_RUNNERS: dict[str, Callable[..., Iterator[tuple[dict, Any]]]] = {
    "serial": _serial, "local": _local, "dask": _dask}


# ------------------------------------------------------------------ progress

class _Progress:
    """A rich progress bar on stderr: ok / failed / skipped / remaining and the ETA."""

    def __init__(self, total: int, name: str, enabled: bool):
        self.bar = None
        if not enabled or not total:
            return
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(),
                            TextColumn("ok {task.fields[ok]}  failed {task.fields[failed]}  "
                                       "skipped {task.fields[skipped]}  "
                                       "remaining {task.fields[left]}"),
                            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                            console=console(stderr=True))
        self.task = self.bar.add_task(name, total=total, ok=0, failed=0, skipped=0,
                                      left=total)
        self.bar.start()

    def update(self, summary: SweepSummary, remaining: int) -> None:
        if self.bar is not None:
            # Points skipped by constraints are counted apart, as the summary line does.
            self.bar.update(self.task, advance=1, ok=summary.ok, skipped=summary.skipped,
                            failed=summary.failed + summary.lost, left=remaining)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# ------------------------------------------------------------------ options

def _cpus() -> int:
    return os.cpu_count() or 1


def check_options(executor: str, workers: int | None, scheduler: str | None, *,
                  flags: bool = False) -> None:
    """Raise :class:`NpusimError` for an unknown executor, a worker count below 1 or
    above :data:`MAX_WORKERS_PER_CPU` x the CPUs, or a scheduler address that is not
    ``[tcp://]HOST:PORT``; checked before the spec's points are resolved.  ``flags``
    names the options as the command line spells them (``--workers``) rather than as
    :func:`run_sweep` arguments (``workers=``)."""
    def named(option: str) -> str:
        return f"--{option}" if flags else f"{option}="

    if not isinstance(executor, str) or executor not in _RUNNERS:
        raise NpusimError(f"{named('executor')}: unknown executor {executor!r}; expected one "
                          f"of {', '.join(EXECUTORS)}")
    if workers is not None:
        ceiling = MAX_WORKERS_PER_CPU * _cpus()
        if isinstance(workers, bool) or not isinstance(workers, int):  # run_sweep(workers="2")
            raise NpusimError(f"{named('workers')}: got {workers!r}; expected a whole number "
                              f"of worker processes from 1 to {ceiling}")
        if workers < 1:
            raise NpusimError(f"{named('workers')}: must be at least 1, got {workers}")
        if workers > ceiling:
            raise NpusimError(f"{named('workers')}: {workers:,} is more than {ceiling} "
                              f"({MAX_WORKERS_PER_CPU} per CPU, {_cpus()} CPUs); the points are "
                              "CPU-bound, so extra processes only cost memory. Leave it out to "
                              "use one per CPU")
    if scheduler is not None:
        if not isinstance(scheduler, str):
            raise NpusimError(f"{named('scheduler')}: got {scheduler!r}; expected an address "
                              "text, tcp://HOST:PORT")
        check_scheduler(scheduler, flags=flags)


def check_scheduler(address: str, *, flags: bool = True) -> None:
    """Raise :class:`NpusimError` unless ``address`` is ``[scheme://]HOST:PORT``.  Checked
    here because a malformed address made ``distributed`` raise a bare ValueError
    traceback, and an empty one silently started a LocalCluster instead."""
    option = "--scheduler" if flags else "scheduler="
    expected = ("expected the address of a running Dask scheduler, tcp://HOST:PORT "
                f"(e.g. tcp://10.0.0.5:8786), or no {option} for a LocalCluster")
    if not address.strip():
        raise NpusimError(f"{option}: the address is empty; {expected}")
    match = _SCHEDULER.fullmatch(address)
    if match is None or not 1 <= int(match["port"]) <= 65535:
        raise NpusimError(f"{option}: {address!r} is not a scheduler address; {expected}")


# ------------------------------------------------------------------ driver

def _spec_with_overrides(spec: Mapping | str | os.PathLike, extra: list[str]) -> SweepSpec:
    """The spec given as a path or as its YAML mapping, checked with ``extra`` applied; a
    malformed override is the ``overrides`` argument's error (as in simulate()), not one
    of the spec's ``set:``."""
    try:
        if isinstance(spec, Mapping):
            return spec_from_dict(spec, extra_set=extra)
        return load_spec(spec, extra)
    except ConfigError as exc:
        if exc.source != "--set":
            raise
        raise ConfigError("overrides", exc.problems) from None


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, *, executor: str = "local",
              workers: int | None = None, scheduler: str | None = None,
              retry_failed: bool = False, progress: bool = False,
              on_row: Callable[[dict], None] | None = None,
              overrides: Iterable[str] = (), mode: str | None = None) -> SweepSummary:
    """Run every point of ``spec`` not yet in ``out_dir``'s store; return a summary.

    Re-running with the same spec resumes: points whose key (config hash + parameters)
    is already stored are skipped (failed ones too, unless ``retry_failed``).  The
    store is compacted at the end.  ``on_row`` is called with each row as it is stored.
    ``overrides`` (``path=value`` texts) and ``mode`` apply to every point after the
    spec's own ``set:``, as ``npusim sweep --set/--mode`` do.
    """
    from npusim.api import check_mode
    from npusim.config.overrides import override_list

    check_options(executor, workers, scheduler)
    check_mode(mode, "mode")
    extra = [*override_list(overrides), *([f"run.mode={mode}"] if mode is not None else [])]
    if isinstance(spec, (Mapping, str, os.PathLike)):
        spec = _spec_with_overrides(spec, extra)
    elif isinstance(spec, SweepSpec) and extra:
        raise NpusimError("overrides/mode: a checked SweepSpec is final; pass the spec as a "
                          "path or mapping to add them (or load_spec(path, extra_set))")
    elif not isinstance(spec, SweepSpec):
        raise NpusimError(f"spec: got {type(spec).__name__}; expected a sweep spec path, a "
                          "mapping (as the YAML reads) or a SweepSpec from load_spec / "
                          "spec_from_dict")
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir).strip():
        raise NpusimError(f"out_dir: got {out_dir!r}; expected a directory path")
    started = time.perf_counter()
    store = ResultStore(out_dir)
    # a file in the way of OUT fails now, not after resolving points
    store.check_output(requests=spec.store_requests)
    store.check_same_sweep(spec.name)
    points = spec.points()  # a spec error here leaves OUT untouched
    with store.lock():  # one sweep at a time writes a directory
        return _run_locked(spec, points, store, out_dir, executor, workers, scheduler,
                           retry_failed, progress, on_row, started)


def _run_locked(spec: SweepSpec, points: list[Point], store: ResultStore, out_dir,
                executor: str, workers, scheduler, retry_failed: bool, progress: bool,
                on_row, started: float) -> SweepSummary:
    # Read what is stored before writing anything: a damaged file stops the sweep here
    # (StoreError naming it) with the directory exactly as it was.
    store.compact()  # fold in parts left by an earlier (possibly killed) run
    done = store.finished()
    serving = {p.key for p in points if p.config is not None
               and p.config["workload"].get("kind") == "serving"}
    store.write_manifest(spec.name, spec.param_names, points,
                         requests=serving if spec.store_requests else None)
    # Points with the same key (a random axis drawing a value twice) are one result.
    unique: list[Point] = []
    seen: set[str] = set()
    for point in points:
        if point.key not in seen:
            seen.add(point.key)
            unique.append(point)
    # A serving point that ran without keeping its per-request table runs again to keep it.
    tableless = (serving & {k for k, status in done.items() if status == "ok"}
                 - stored_request_keys(store.root)) if spec.store_requests else set()
    todo = [p for p in unique if p.key not in done or p.key in tableless
            or (retry_failed and done[p.key] == "failed")]
    summary = SweepSummary(out_dir=Path(out_dir), total=len(unique),
                           duplicates=len(points) - len(unique),
                           rerun_for_requests=sum(1 for p in unique if p.key in tableless),
                           skipped_done=len(unique) - len(todo),
                           failed_before=sum(1 for p in unique if p.key in done
                                             and done[p.key] == "failed" and not retry_failed))
    # Skipped points cost nothing: record them here instead of shipping them to workers.
    tasks = [point_task(p, spec.name, spec.capacity, spec.metrics, spec.store_requests)
             for p in todo]
    runnable = [t for t in tasks if t["skip"] is None]
    bar = _Progress(len(tasks), spec.name, progress)
    remaining = len(tasks)
    try:
        for task in (t for t in tasks if t["skip"] is not None):
            remaining -= 1
            _record(store, run_point(task), summary, on_row)
            bar.update(summary, remaining)
        if runnable:
            # Never more processes than points: an idle worker is only start-up and memory.
            count = min(workers or _cpus(), len(runnable))
            for task, row in _RUNNERS[executor](runnable, count, scheduler):
                remaining -= 1
                if row is None:
                    summary.lost += 1
                    summary.errors.append(f"point {task['point']}: worker lost; rerun to retry")
                else:
                    _record(store, row, summary, on_row)
                bar.update(summary, remaining)
    finally:
        bar.close()
    store.compact()
    if spec.metrics is not None and summary.ok:
        # A pattern no stored row matches is most likely a typo: say so.
        names = [c[len("metrics."):] for c in store.read().columns if c.startswith("metrics.")]
        summary.unmatched_metrics = [p for p in spec.metrics
                                     if not any(_metric_matches(n, p) for n in names)]
    summary.wall_time_s = time.perf_counter() - started
    return summary


def _record(store: ResultStore, row: dict, summary: SweepSummary,
            on_row: Callable[[dict], None] | None) -> None:
    table = row.pop(REQUESTS_FIELD, None)
    if table is not None:  # first: a stored row of a serving point then has its table
        write_request_table(store.root, row["key"], table)
    store.write_row(row)
    status = row["status"]
    if status == "ok":
        summary.ok += 1
        for note in json.loads(row.get(NOTES_COLUMN) or row.get(CAPACITY_NOTES_COLUMN) or "[]"):
            summary.notes[note] = summary.notes.get(note, 0) + 1
    elif status == "skipped":
        summary.skipped += 1
    else:
        summary.failed += 1
        summary.errors.append(f"point {row['point']}: {row.get('error')}")
    if on_row is not None:
        on_row(row)

