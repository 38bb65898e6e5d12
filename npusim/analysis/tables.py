"""The CSV tables a run writes (ops.csv, requests.csv, iterations.csv; capacity.csv)
read back and checked: readable UTF-8 CSV, the columns a reader needs, finite times
within int64 picoseconds, and the dtypes a :class:`~npusim.metrics.result.Result` gives
the same table.  Every problem is an :class:`AnalysisError` naming the file and line."""

from __future__ import annotations

import difflib
import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from npusim.core.errors import NpusimError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["AnalysisError", "read_table", "check_times"]

#: Times are int64 picoseconds in npusim; larger magnitudes (or inf) are damage.
_TIME_LIMIT = 2 ** 63
_TIME_EXPECTED = "expected a time in picoseconds (a finite number of magnitude below 2^63)"


class AnalysisError(NpusimError):
    """An analysis input is missing or names an unknown (or non-numeric) column."""


def read_table(path: Path, what: str, row: str, required: Sequence[str] = (),
               times: Mapping[str, bool] | None = None, other: str = "",
               writer: str = "npusim run --out DIR", text: Sequence[str] = ()) -> "pd.DataFrame":
    """A CSV table ``writer`` wrote (ops.csv, requests.csv; capacity.csv), checked:
    readable UTF-8 CSV, the ``required`` columns, and ``times`` (column -> value needed
    in every row) finite numbers.  Any problem is an :class:`AnalysisError` naming the
    file and the line (and column); ``other`` is advice for a file that is some other
    table.  The
    frame's ``attrs["source"]`` names the file for later
    messages (a column a plot asks for that is not there)."""
    import pandas as pd

    expected = f"expected the {what} (one line per {row}) that `{writer}` writes"
    try:
        frame = pd.read_csv(path, low_memory=False)  # low_memory: no DtypeWarning on damage
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: {_undecodable(path, exc)}; {expected}") from None
    except pd.errors.EmptyDataError:
        raise AnalysisError(f"{path}: the file is empty; {expected}, starting with a header "
                            "line of column names") from None
    except ValueError as exc:  # pandas' ParserError: "Expected 12 fields in line 5, saw 13"
        gist = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        gist = gist.removeprefix("Error tokenizing data. C error: ")
        raise AnalysisError(f"{path}: not a readable CSV table ({gist}); {expected}") from None
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    frame = _as_written(path, frame, text)
    frame.attrs["source"] = str(path)
    for column in required:
        if column not in frame.columns:
            known = [str(c) for c in frame.columns]
            close = difflib.get_close_matches(column, known, n=1, cutoff=0.6)
            hint = f" (is {close[0]!r} a misspelling?)" if close else ""
            shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
            raise AnalysisError(f"{path}: no column {column!r}{hint}; {expected}, with columns "
                                f"{', '.join(required)}, ...; this file has: {shown}{other}")
    return check_times(frame, times or {}, what)


def _as_written(path: Path, frame: "pd.DataFrame", text: Sequence[str] = ()) -> "pd.DataFrame":
    """``frame`` with the dtypes :meth:`Result.table` gives the same table: a whole-number
    column with empty cells (a rejected request has no ``first_token_ps``) as nullable
    Int64, parsed from the text again (float64 would print 4.005622e+10 and round
    picoseconds past 2**53, 2.5 hours of simulated time), and an empty text cell as
    ``""`` rather than NaN; ``text`` names columns that are text even when every cell
    is empty (``reason`` of a run where every request finished)."""
    import pandas as pd

    gaps = [column for column in frame.columns
            if frame[column].dtype.kind == "f" and frame[column].isna().any()
            and frame[column].notna().any() and (frame[column].dropna() % 1 == 0).all()]
    if gaps:  # integers as written ("40056216465"), not whole floats ("2.0", a mean)
        try:
            raw = pd.read_csv(path, low_memory=False, usecols=gaps, dtype=str)
            gaps = [c for c in gaps if raw[c].dropna().str.fullmatch(r"-?\d+").all()]
        except (ValueError, TypeError, OSError):
            gaps = []
    dtypes = {**{column: "Int64" for column in gaps},
              **{column: str for column in text if column in frame.columns}}
    if dtypes:
        try:
            again = pd.read_csv(path, low_memory=False, dtype=dtypes)
        except (ValueError, TypeError, OSError):  # "4.0" in the text: keep the floats
            again = None
        if again is not None and list(again.columns) == list(frame.columns):
            frame = again
    for column in frame.columns:
        values = frame[column]
        if isinstance(values.dtype, pd.StringDtype) and values.isna().any() or \
                values.dtype == object and values.isna().any() \
                and all(isinstance(v, str) for v in values.dropna()):
            frame[column] = values.fillna("")
    return frame


def _undecodable(path: Path, exc: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 is: ``line 3 is not UTF-8 text (byte 0xff)``."""
    try:
        data = path.read_bytes()
        data.decode("utf-8")
    except UnicodeDecodeError as found:
        line = data.count(b"\n", 0, found.start) + 1
        return f"line {line} is not UTF-8 text (byte 0x{data[found.start]:02x})"
    except OSError:
        pass
    return f"the file is not UTF-8 text (byte 0x{exc.object[exc.start]:02x})"


def check_times(frame: "pd.DataFrame", times: Mapping[str, bool], what: str) -> "pd.DataFrame":
    """``frame`` with its time columns (those of ``times`` it has) checked to be finite
    numbers below 2^63 in magnitude, and present in every row where ``times`` says so;
    columns of such numbers kept as text or Python objects become numeric.  The first bad
    value is an :class:`AnalysisError` naming the file and line (a table read by
    :func:`read_table`) or the row, and the column and the value."""
    import numpy as np
    import pandas as pd

    for column, needed in times.items():
        if column not in frame.columns:
            continue
        series = frame[column]
        given = series.notna().to_numpy()
        if pd.api.types.is_bool_dtype(series):
            numbers, bad = series, given
        elif pd.api.types.is_integer_dtype(series):  # int64 (Int64: gaps) is in range
            numbers, bad = series, np.zeros(len(series), dtype=bool)
        else:  # floats (inf from 1e400), text, Python ints too large for int64
            numbers = series if pd.api.types.is_float_dtype(series) else \
                pd.to_numeric(series.map(_number), errors="coerce")
            with np.errstate(invalid="ignore"):
                bad = given & ~(np.abs(numbers.to_numpy(dtype=float)) < _TIME_LIMIT)
        if needed:
            bad = bad | ~given
        if bad.any():
            position = int(np.argmax(bad))
            raise AnalysisError(f"{_where(frame, position, column, what)}: {_TIME_EXPECTED}, "
                                f"got {_shown(frame, position, column)}")
        if numbers is not series:
            frame[column] = numbers
    return frame


def _number(value: Any) -> Any:
    """``value`` as a number for :func:`check_times` (NaN when it is none: text, a bool)."""
    if isinstance(value, bool):
        return float("nan")
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _where(frame: "pd.DataFrame", position: int, column: str, what: str) -> str:
    label = frame.index[position]
    if frame.attrs.get("source") and isinstance(label, numbers.Integral):
        # read_csv numbers rows from 0, one line each after the header (as npusim writes)
        return f"{frame.attrs['source']}: line {int(label) + 2}, column {column!r}"
    return f"row {label!r}, column {column!r} of the {what}"


def _shown(frame: "pd.DataFrame", position: int, column: str) -> str:
    """The bad value as written in the file (``'1e400'``, not ``inf``) when it came from one."""
    import pandas as pd

    value = frame[column].iloc[position]
    label = frame.index[position]
    if frame.attrs.get("source") and isinstance(label, numbers.Integral):
        try:  # only on this error path: the column again, as text
            value = pd.read_csv(frame.attrs["source"], usecols=[column], dtype=str,
                                keep_default_na=False)[column].iloc[int(label)]
        except (OSError, ValueError, IndexError, KeyError):
            pass
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return "an empty cell"
    return repr(value.item() if hasattr(value, "item") else value)
