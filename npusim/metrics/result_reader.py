"""A run directory read back as a :class:`~npusim.metrics.result.Result`
(:meth:`Result.read`): what ``npusim run --out DIR`` or :meth:`Result.write` wrote.

The metrics, configuration, host facts, per-task, per-segment and extra tables come back
as written; the per-unit counters come from ``units.csv``, where a counter only some
parts have is 0 on the others (so ``units`` matches, ``unit_stats`` lists those zeros).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npusim.core.errors import OutputError

if TYPE_CHECKING:
    import pandas as pd

    from npusim.metrics.result import Result

#: What a run directory must hold to be read back.
_REQUIRED = ("metrics.json", "ops.csv", "units.csv", "config.resolved.yaml")
#: Extra tables a serving run writes beside the others.
_EXTRA_TABLES = ("requests", "iterations")


def read_result(out_dir: str | Path) -> "Result":
    """The run written in ``out_dir``; :class:`OutputError` naming what is missing or
    damaged."""
    from npusim.analysis.frames import AnalysisError, iteration_table, read_table, request_table
    from npusim.metrics.result import OP_COLUMNS, SEGMENT_COLUMNS, Result

    root = Path(out_dir)
    metrics, config = read_metrics_and_config(root, _REQUIRED)
    host_file = root / "host.json"
    host = _read_mapping(host_file, json.loads) if host_file.is_file() else {}
    try:
        # (a column missing from a hand-edited file: an error naming it, not a KeyError)
        ops = read_table(root / "ops.csv", "ops table", "task", required=OP_COLUMNS)
        units = read_table(root / "units.csv", "per-unit table", "unit", required=("unit",))
        segments = (read_table(root / "segments.csv", "segment table", "segment",
                               required=SEGMENT_COLUMNS)
                    if (root / "segments.csv").is_file() else None)
        # as the analysis helpers read them: text columns stay text when all empty
        readers = {"requests": request_table, "iterations": iteration_table}
        tables = {name: readers[name](root) for name in _EXTRA_TABLES
                  if (root / f"{name}.csv").is_file()}
    except AnalysisError as exc:
        raise OutputError(str(exc)) from None
    op_columns = {name: _plain(ops[name]) for name in OP_COLUMNS}
    unit_stats = {str(row.pop("unit")): {k: v for k, v in row.items() if k != "utilisation"}
                  for row in _rows(units)}
    segment_rows = ([] if segments is None else
                    [tuple(row[c] for c in SEGMENT_COLUMNS) for row in _rows(segments)])
    return Result(metrics=metrics, op_columns=op_columns, unit_stats=unit_stats,
                  config=config, host=host, segment_rows=segment_rows,
                  tables={name: _rows(frame) for name, frame in tables.items()})


def read_metrics_and_config(out_dir: str | Path,
                            required: tuple[str, ...] = ("metrics.json", "config.resolved.yaml")
                            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``metrics.json`` and ``config.resolved.yaml`` of the run in ``out_dir`` (without
    its tables: what comparing runs needs); :class:`OutputError` naming the directory
    when it is not a run directory, one of ``required`` is missing or a file is
    damaged."""
    import yaml

    root = Path(out_dir)
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "no such directory"
        raise OutputError(f"{root}: {what}; expected a run directory (npusim run --out DIR)")
    missing = [name for name in required if not (root / name).is_file()]
    if missing:
        raise OutputError(f"{root}: no {', '.join(missing)}; expected a run directory "
                          "(npusim run --out DIR writes them)")
    metrics = _read_mapping(root / "metrics.json", json.loads)
    config = _read_mapping(root / "config.resolved.yaml", yaml.safe_load)
    return metrics, config


def _read_mapping(path: Path, parse) -> dict[str, Any]:
    """The mapping the run file ``path`` holds (JSON or YAML, read by ``parse``), or an
    :class:`OutputError` naming that file, where it broke and what was expected."""
    import yaml

    expected = f"expected the {path.name} that npusim run writes (rerun to write it again)"
    try:
        data = parse(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise OutputError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                          f"offset {exc.start}); {expected}") from None
    except json.JSONDecodeError as exc:
        raise OutputError(f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON "
                          f"({exc.msg}); {expected}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "not readable"
        raise OutputError(f"{path}: {where}invalid YAML ({problem}); {expected}") from None
    except (OSError, ValueError) as exc:
        raise OutputError(f"{path}: cannot read it ({exc}); {expected}") from None
    if not isinstance(data, dict):
        raise OutputError(f"{path}: holds {type(data).__name__ if data is not None else 'nothing'}"
                          f", not a mapping; {expected}")
    return data


def _plain(values: "pd.Series") -> list:
    """A column as Python values (int, float, str, None for an empty cell)."""
    return [_value(v) for v in values.tolist()]


def _rows(frame: "pd.DataFrame") -> list[dict[str, Any]]:
    return [{k: _value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _value(value: Any) -> Any:
    """numpy and pandas scalars as Python ones; a missing value as None."""
    if value is None:
        return None
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        return value
    return value.item() if hasattr(value, "item") else value
