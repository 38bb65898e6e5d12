"""The Result of a simulation: metrics, per-op and per-unit tables, timeline, config.

``metrics`` is deterministic (same config and seed, same bytes in ``metrics.json``);
host facts that vary between runs (wall time) live in ``host`` and ``host.json``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from npusim.core.errors import NpusimError, OutputError
from npusim.core.json_keys import naturally_ordered
from npusim.metrics.perfetto import build_trace, write_trace

if TYPE_CHECKING:
    import pandas as pd

SEGMENT_COLUMNS = ("segment", "label", "start_ps", "end_ps", "memo_hit")
OP_COLUMNS = ("segment", "label", "task", "name", "op", "type", "unit", "start_ps", "end_ps",
              "duration_ps", "flops", "bytes")
_OP_TEXT = ("label", "name", "op", "type", "unit")


class NoSuchTable(NpusimError, KeyError):
    """:meth:`Result.table` of a name the run has no table for (a KeyError too, as a
    mapping lookup; npusim's own error, so the message prints as written)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(repr=False, eq=False)  # the generated repr printed every column (8 MB for 32 requests)
class Result:
    """Everything one :func:`npusim.simulate` call produced.

    Two Results are equal when the simulation gave the same answers: ``host`` (wall time,
    machine) is left out, so the same config and seed compare equal.
    """

    metrics: dict[str, Any]
    op_columns: dict[str, list]
    unit_stats: dict[str, dict[str, int]]
    config: dict[str, Any]
    host: dict[str, Any] = field(default_factory=dict)
    segment_rows: list[tuple] = field(default_factory=list)
    #: Extra tables by name: rows as dicts, or columns as lists (which keep an empty
    #: table's header).
    tables: dict[str, list[dict[str, Any]] | dict[str, list]] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (self.metrics, self.op_columns, self.unit_stats, self.config,
                self.segment_rows, self.tables) == (
            other.metrics, other.op_columns, other.unit_stats, other.config,
            other.segment_rows, other.tables)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        """One line a notebook can show: what ran, how long it took in simulated time,
        and the tables to look at (``result.metrics`` and the frames hold the rest)."""
        from npusim.core.units import format_time_ps

        m = self.metrics
        # ops.csv rows: the tasks traced (run.trace), not the operations that ran
        parts = [f"scenario={m.get('scenario')!r}", f"mode={m.get('mode')!r}",
                 f"latency={format_time_ps(m.get('latency_ps') or 0)}",
                 f"segments={m.get('segments')}",
                 f"traced_ops={len(self.op_columns.get('task', ()))}",
                 f"units={len(self.unit_stats)}"]
        if "requests_total" in m:  # a serving run
            parts.append(f"requests={m['requests_total']} ({m.get('requests_finished')} "
                         f"finished, {m.get('requests_rejected')} rejected)")
            for name in ("ttft_ms_mean", "tpot_ms_mean"):
                if isinstance(m.get(name), (int, float)):
                    parts.append(f"{name}={m[name]:.4g}")
        if m.get("notes"):  # settings the run could not act on: worth a look
            parts.append(f"notes={len(m['notes'])} (metrics['notes'])")
        if self.tables:
            parts.append(f"tables={sorted(self.tables)}")
        return f"Result({', '.join(parts)})"

    def table(self, name: str) -> "pd.DataFrame":
        """An extra table of the run (``requests`` for serving runs) as a DataFrame."""
        import pandas as pd

        if name not in self.tables:
            hint = "" if "requests" in self.tables else \
                " (requests and iterations come with serving runs)"
            raise NoSuchTable(f"no table {name!r}; this result has: "
                              f"{', '.join(self.tables) or 'none'}{hint}")
        raw = self.tables[name]
        frame = pd.DataFrame(raw)
        # An integer column with gaps (a rejected request has no first_token_ps) would
        # become float64 and print as 4.07e10-style "40789163616.0": keep it integral with
        # pandas' nullable Int64 (an empty cell in the CSV), built from the exact values.
        for column in frame.columns:
            if frame[column].dtype.kind != "f" or not frame[column].isna().any():
                continue
            values = raw[column] if isinstance(raw, dict) else [row.get(column) for row in raw]
            if all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
                frame[column] = pd.array(values, dtype="Int64")
        return frame

    @property
    def requests(self) -> "pd.DataFrame":
        """One row per request (serving runs): arrival, first token, finish, tokens…"""
        return self.table("requests")

    @property
    def segments(self) -> "pd.DataFrame":
        """One row per segment (iteration x stage): label, start/end in ps, memo hit."""
        import pandas as pd

        return pd.DataFrame(self.segment_rows, columns=list(SEGMENT_COLUMNS))

    @property
    def ops(self) -> "pd.DataFrame":
        """One row per executed task (segment, name, unit, start/end/duration in ps…)."""
        import pandas as pd

        frame = pd.DataFrame(self.op_columns, columns=list(OP_COLUMNS))
        if frame.empty:  # an untraced run: the dtypes a traced one has, not float64
            frame = frame.astype({name: str if name in _OP_TEXT else "int64"
                                  for name in OP_COLUMNS})
        return frame

    @property
    def units(self) -> "pd.DataFrame":
        """One row per part: busy time, utilisation, bytes, transactions and extra counters."""
        import pandas as pd

        frame = pd.DataFrame.from_dict(self.unit_stats, orient="index").fillna(0)
        # A counter only some parts have (flops on compute units) is 0 on the others,
        # not NaN: keep such columns integral (counts, bytes, ps) rather than float64.
        fractional = {name for stats in self.unit_stats.values()
                      for name, value in stats.items()
                      if not isinstance(value, int) or isinstance(value, bool)}
        for column in frame.columns:
            if column not in fractional and frame[column].dtype.kind == "f":
                frame[column] = frame[column].astype("int64")
        frame.index.name = "unit"
        latency = self.metrics["latency_ps"]
        if "busy_ps" in frame and latency:
            frame["utilisation"] = frame["busy_ps"] / latency
        return frame

    def trace(self) -> dict[str, Any]:
        """The Perfetto/Chrome trace as a JSON-able dict."""
        cols = self.op_columns
        rows = []
        for i in range(len(cols["task"])):
            unit = cols["unit"][i]
            owner, _, track = unit.partition(".")
            rows.append((owner, track or owner, cols["name"][i], cols["start_ps"][i],
                         cols["end_ps"][i], {"segment": cols["label"][i], "type": cols["type"][i],
                                             "flops": cols["flops"][i], "bytes": cols["bytes"][i]}))
        return build_trace(rows)

    @classmethod
    def read(cls, out_dir: str | Path) -> "Result":
        """The run ``npusim run --out DIR`` (or :meth:`write`) wrote in ``out_dir``, with
        its metrics, tables and plots as a fresh Result has them
        (:mod:`npusim.metrics.result_reader`)."""
        from npusim.metrics.result_reader import read_result

        return read_result(out_dir)

    def write(self, out_dir: str | Path) -> Path:
        """Write metrics.json, ops.csv, segments.csv, units.csv, trace.json,
        config.resolved.yaml and host.json into ``out_dir``, plus one CSV per extra
        table (``requests.csv`` and ``iterations.csv`` for serving runs).  An extra table an earlier run left
        there and this run does not have is removed, so ``plot`` cannot mistake it
        for this run's.

        The files are written into a staging directory beside ``out_dir`` first and
        moved in only when all of them exist, so a failure (a disk full, a directory
        where a file should be) leaves the previous results whole instead of a mix of
        two runs.  Raises :class:`~npusim.core.errors.OutputError` naming the path.
        """
        from npusim.core.output_paths import check_output_dir

        out = check_output_dir(out_dir, option="")  # (the CLI checked --out already)
        out.mkdir(parents=True, exist_ok=True)
        names = (["metrics.json", "ops.csv", "segments.csv"] + [f"{n}.csv" for n in self.tables]
                 + list(RUN_FILES))
        clash = [n for n in names if (out / n).is_dir()]
        if clash:
            raise OutputError(f"{out / clash[0]}: is a directory; expected to write a file "
                              "there (move it away)")
        try:
            with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out) as staging_dir:
                staging = Path(staging_dir)
                (staging / "metrics.json").write_text(
                    json.dumps(naturally_ordered(self.metrics), indent=2) + "\n")
                self.ops.to_csv(staging / "ops.csv", index=False)
                self.segments.to_csv(staging / "segments.csv", index=False)
                for name in self.tables:
                    self.table(name).to_csv(staging / f"{name}.csv", index=False)
                self.units.to_csv(staging / "units.csv")
                write_trace(self.trace(), staging / "trace.json")
                (staging / "config.resolved.yaml").write_text(yaml.safe_dump(self.config, sort_keys=False))
                (staging / "host.json").write_text(json.dumps(self.host, indent=2, sort_keys=True) + "\n")
                for name in names:
                    os.replace(staging / name, out / name)
            _remove_stale_tables(out, keep=self.tables)
        except OSError as exc:
            raise OutputError(f"{out}: cannot write the results ({exc.strerror or exc}: "
                              f"{exc.filename or ''})") from None
        return out


#: The files every run writes besides metrics.json, ops.csv, segments.csv and its extra
#: tables (:meth:`Result.write`).
RUN_FILES = ("units.csv", "trace.json", "config.resolved.yaml", "host.json")


def output_names() -> list[str]:
    """Every file name a run may write into its output directory."""
    return (["metrics.json", "ops.csv", "segments.csv", *RUN_FILES]
            + [f"{name}.csv" for name in _EXTRA_TABLE_HEADERS])


#: Extra tables a run may write, with the header npusim gives each: a file of that name
#: is removed from a reused output directory only if it is npusim's own (a user's file
#: that happens to share the name stays).
_EXTRA_TABLE_HEADERS = {"requests": "request_id,arrival_ps,prompt_tokens,output_tokens,status",
                        "iterations": "iteration,replica,role,start_ps,end_ps,requests"}


def _remove_stale_tables(out: Path, keep: dict[str, Any]) -> None:
    for name, header in _EXTRA_TABLE_HEADERS.items():
        path = out / f"{name}.csv"
        if name in keep or not path.is_file() or path.is_symlink():
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
        if first.startswith(header):
            path.unlink()
