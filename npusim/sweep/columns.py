"""Values and columns of the sweep results store (:mod:`npusim.sweep.store`): metrics
flattened into columns, values made writable by pyarrow, swept quantities read back in
their field's base unit, and whole-number and boolean columns given exact dtypes."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from npusim.core.errors import NpusimError

if TYPE_CHECKING:
    import pandas as pd

#: Range of a Parquet integer column (int64).  A larger Python integer (the FLOPs of a
#: huge GEMM) is stored as float64 instead; see :func:`_cell`.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: A parameter's unit from its config field name (units live in field names).
_UNIT_SUFFIXES = ("_bytes", "_ps", "_hz", "_bps", "_ms")
#: A size with a byte unit (``128MiB``), as the memory shorthand ``hw.core.sram: 128MiB``
#: takes, and a plain number (bytes; compaction stores a column that mixes the two as text).
_SIZE_TEXT = re.compile(r"\s*\d+(?:\.\d+)?\s*(?:[kKMGTP]i?)?B\s*")
_NUMBER_TEXT = re.compile(r"\s*[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\s*")


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "metrics") -> dict[str, Any]:
    """Scalar metrics as ``{"metrics.a.b": value}``; lists (the energy basis records per
    scratchpad size and DRAM standard), and mappings keyed by free text (spaces, commas),
    are kept as JSON text rather than spread over columns no one can type."""
    flat: dict[str, Any] = {}
    for name, value in metrics.items():
        key = f"{prefix}.{name}"
        if isinstance(value, Mapping) and any(_free_text(k) for k in value):
            flat[key] = json.dumps(value, sort_keys=True)
        elif isinstance(value, Mapping):
            flat.update(flatten_metrics(value, key))
        elif isinstance(value, (list, tuple)):
            flat[key] = json.dumps(value)
        else:
            flat[key] = value
    return flat


def _free_text(key: Any) -> bool:
    return not isinstance(key, str) or any(c.isspace() or c in ",/" for c in key)


def _cell(value: Any) -> Any:
    """Parquet-friendly value: containers become JSON text, and an integer beyond int64
    (which pyarrow refuses, aborting the sweep) becomes float64: exact when the float
    holds it (as it does a FLOP count, a multiple of large powers of two), otherwise
    the nearest float, 16 significant digits.  An integer beyond even float64 (about
    1.8e308) is kept as its decimal text, so nothing is lost or refused."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        try:
            return float(value)
        except OverflowError:
            return str(value)  # at most 1000 digits: YAML and expressions cap integers
    return value


def _normalise(frame: "pd.DataFrame") -> "pd.DataFrame":
    """Make every column writable by pyarrow: a column mixing types (a swept value given
    as ``32MiB`` in one point and ``33554432`` in another) becomes text."""
    import pandas as pd

    for column in frame.columns:
        series = frame[column]
        if series.dtype == object:
            kinds = {type(v) for v in series if v is not None and not (isinstance(v, float) and pd.isna(v))}
            if len(kinds) > 1 and not kinds <= {int, float}:
                frame[column] = series.map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))
    return frame


def _unit_parser(suffix: str):
    """The parser of a field whose name ends in ``suffix`` (numbers pass through)."""
    from npusim.core import units

    if suffix == "_ms":  # serving SLOs: float milliseconds; plain text numbers are ms too
        return lambda v: float(units.parse_time_ms(v))
    return {"_bytes": units.parse_bytes, "_ps": units.parse_time_ps,
            "_hz": units.parse_freq_hz, "_bps": units.parse_bandwidth_bps}[suffix]


def _in_base_units(frame: "pd.DataFrame", params: Iterable[str]) -> "pd.DataFrame":
    """Swept values written with units (``[4MiB, 128MiB]``) as numbers in the field's base
    unit (bytes, ps, Hz, B/s; ms for ``*_ms``), so a plot orders them by size instead of
    as text and takes a log axis.  A column is converted only when every value converts."""
    import pandas as pd

    for column in params:
        if column not in frame or pd.api.types.is_numeric_dtype(frame[column]):
            continue
        values = frame[column]
        texts = [v for v in values if isinstance(v, str)]
        if not texts:
            continue
        sizes = [t for t in texts if not _NUMBER_TEXT.fullmatch(t)]
        suffix = next((end for end in _UNIT_SUFFIXES if column.endswith(end)),
                      "_bytes" if sizes and all(_SIZE_TEXT.fullmatch(t) for t in sizes)
                      else None)
        if suffix is None:
            continue
        parse = _unit_parser(suffix)
        try:
            converted = [None if v is None or (isinstance(v, float) and pd.isna(v))
                         else parse(v) for v in values]
        except (NpusimError, TypeError, ValueError):
            continue  # not all of them are quantities: keep the column as written
        whole = all(isinstance(v, int) for v in converted if v is not None)
        frame[column] = pd.Series(converted, index=frame.index, dtype="int64"
                                  if whole and None not in converted else "float64")
    return frame


def plain_whole_numbers(frame: "pd.DataFrame") -> "pd.DataFrame":
    """``frame`` with every nullable Int64 column that has no missing value as plain
    int64 (the columns with gaps stay Int64 rather than turning float64); likewise a
    column of booleans: bool, or pandas' nullable boolean where some rows lack it (a
    failed point), not object; and a ``metrics.*`` / ``capacity.*`` column with no value
    at all float64 (NaN), not object."""
    for column in frame.columns:
        values = frame[column]
        if values.dtype == "Int64" and not values.isna().any():
            frame[column] = values.astype("int64")
        elif values.dtype == "boolean" and not values.isna().any():
            frame[column] = values.astype(bool)
        elif values.dtype == object and values.notna().any() \
                and all(isinstance(v, bool) for v in values.dropna()):
            frame[column] = values.astype("boolean" if values.isna().any() else bool)
        elif values.dtype == object and str(column).startswith(("metrics.", "capacity.")) \
                and not values.notna().any():
            # a metric no point has (tpot_ms_mean with one output token, any metric of
            # failed points only): missing numbers, so a plot or a mean treats it as one
            frame[column] = values.astype("float64")
    return frame
