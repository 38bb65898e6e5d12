"""Reading trace files row by row: CSV and JSONL records with their line numbers, and
exact parsers for the cells :mod:`npusim.workload.traces` builds requests from.

Every parser raises :class:`~npusim.core.errors.TraceError` as ``FILE:LINE: column
'NAME': got VALUE; expected ...``.  Numbers are parsed as decimals, not floats, so
arrival times keep every digit the file gives (the Azure traces carry 100 ns).
"""

from __future__ import annotations

import calendar
import csv
import datetime
import json
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Iterator, Mapping

from npusim.core.errors import TraceError
from npusim.core.json_keys import DuplicateKeyError, unique_keys
from npusim.core.text import UNENCODABLE, unencodable_path
from npusim.core.units import PS_PER_S

__all__ = ["Row", "csv_rows", "jsonl_rows", "present", "integer_cell", "seconds_cell",
           "timestamp_cell", "hash_ids_cell"]


class Row:
    """One record: its 1-based line number and a mapping column → raw value."""

    __slots__ = ("line", "values")

    def __init__(self, line: int, values: Mapping[str, Any]):
        self.line = line
        self.values = values


def csv_rows(lines: Iterable[str], source: str) -> tuple[list[str], Iterator[Row]]:
    """The header and the rows of CSV ``lines`` (read lazily, as the rows are taken)."""
    # Strict: a quote left open would otherwise swallow the rest of the file into one
    # field (read as a header and no requests).
    reader = csv.reader(lines, strict=True)
    try:
        header = [name.strip() for name in next(reader)]
    except csv.Error as exc:
        raise TraceError(f"{source}:1: cannot parse the CSV header ({_csv_problem(exc)})") from None
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise TraceError(f"{source}:1: header: column {dup[0]!r} appears twice; expected "
                         "each column once")

    def rows() -> Iterator[Row]:
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise TraceError(f"{source}:{reader.line_num}: malformed CSV "
                                 f"({_csv_problem(exc)})") from None
            if not cells or all(not c.strip() for c in cells):
                continue  # blank line
            if len(cells) != len(header):
                raise TraceError(f"{source}:{reader.line_num}: got {len(cells)} fields; "
                                 f"expected {len(header)} (header: {','.join(header)})")
            yield Row(reader.line_num, dict(zip(header, (c.strip() for c in cells))))

    return header, rows()


def _csv_problem(exc: csv.Error) -> str:
    """What a csv module error means, in the user's terms."""
    if "unexpected end of data" in str(exc):
        return ('a quoted field opened at or before this line is never closed; expected '
                'a closing double quote ("), or no quote at the start of a cell')
    return f"{exc}; expected comma-separated cells, quoted cells closed before the next comma"


def jsonl_rows(lines: Iterable[str], source: str) -> tuple[list[str] | None, Iterator[Row]]:
    """No header, and one row per JSON object of ``lines`` (read lazily)."""
    def rows() -> Iterator[Row]:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, object_pairs_hook=unique_keys)
            except DuplicateKeyError as exc:
                raise TraceError(f"{source}:{number}: key {exc.key!r} appears twice in "
                                 "one object; expected each key once") from None
            except json.JSONDecodeError as exc:
                # a pretty-printed array of objects (json.dump(requests, f, indent=2))
                array = " (this looks like one JSON array: write JSON Lines, one object " \
                    "per line, e.g. pandas' to_json(orient='records', lines=True))" \
                    if line.lstrip().startswith("[") else ""
                # a line cut short fails past its last character (json.loads counts its
                # newline: "line 2 column 1"), so say where that is
                where = ("at the end of the line" if exc.pos >= len(line.rstrip("\r\n"))
                         else f"at column {exc.colno}")
                raise TraceError(f"{source}:{number}: invalid JSON ({exc.msg} {where}); "
                                 f"expected one JSON object per line{array}") from None
            except RecursionError:
                raise TraceError(f"{source}:{number}: JSON nested too deeply; expected one "
                                 "flat JSON object per line") from None
            except ValueError:  # only an integer past Python's 4300-digit conversion limit
                raise TraceError(f"{source}:{number}: an integer of more than 4300 digits; "
                                 "expected token counts and times of at most a few dozen "
                                 "digits") from None
            if not isinstance(obj, dict):
                whole = isinstance(obj, list) and obj and all(isinstance(o, dict) for o in obj)
                array = " (a whole trace as one array: write one object per line)" if whole else ""
                raise TraceError(f"{source}:{number}: got a JSON {type(obj).__name__}; "
                                 f"expected one JSON object per line{array}")
            # decoded UTF-8 holds no lone surrogate: only a "\u" escape can make one
            bad = unencodable_path(obj) if "\\u" in line else None
            if bad is not None:  # "\ud800": refused here, not when requests.csv is written
                # a key comes back quoted (ascii()), a value as its column's path
                what = f"a column name ({bad})" if bad[:1] in "'\"" else f"column {bad!r}"
                raise TraceError(f"{source}:{number}: {what} {UNENCODABLE}")
            yield Row(number, obj)

    return None, rows()


def present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and value == "")


def _missing(loc: str, column: str, what: str) -> TraceError:
    return TraceError(f"{loc}: column {column!r}: value is missing; expected {what}")


def integer_cell(row: Row, column: str, loc: str, low: int | None, what: str,
                 high: int | None = None) -> int:
    """An integer cell; integral floats (``12.0``, as pandas writes them) are accepted."""
    raw = row.values.get(column)
    if not present(raw):
        raise _missing(loc, column, what)
    value: int | None = None
    if isinstance(raw, bool):
        value = None
    elif isinstance(raw, int):
        value = raw
    elif isinstance(raw, float):
        value = int(raw) if math.isfinite(raw) and raw.is_integer() else None
    elif isinstance(raw, str):
        number = _decimal(raw)
        # adjusted() is the exponent of the leading digit: '1e999999' would otherwise
        # become a million-digit int before the range check (4300 digits is the limit
        # Python's own int() puts on text)
        if number is not None and (not number or number.adjusted() < 4300) \
                and number == number.to_integral_value():
            value = int(number)
    if value is None or (low is not None and value < low) or (high is not None and value > high):
        raise TraceError(f"{loc}: column {column!r}: got {_clip(raw)}; expected {what}")
    return value


# What a number in a trace file looks like: ASCII digits, an optional sign, point and
# exponent.  Python's Decimal() would also take '1_000', full-width or Arabic-Indic
# digits and 'NaN'; a trace cell holding them is a mistake worth naming.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _decimal(raw: Any) -> Decimal | None:
    """``raw`` (a number or its text, surrounding blanks allowed) as a finite Decimal;
    None if it is not a plain ASCII number."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return Decimal(raw)
    if isinstance(raw, float):  # its shortest repr, as JSON wrote it, not the binary value
        return Decimal(repr(raw)) if math.isfinite(raw) else None
    text = str(raw).strip()
    if _NUMBER.fullmatch(text) is None:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid text
        return None


def _clip(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def seconds_cell(row: Row, column: str, loc: str, unit: str = "seconds") -> int:
    """A time in seconds (or ``unit='milliseconds'``) as exact picoseconds (decimal text
    is not rounded through float)."""
    raw = row.values.get(column)
    what = f"a number of {unit} >= 0"
    if not present(raw):
        raise _missing(loc, column, what)
    number = _decimal(raw)
    if number is None or number < 0:
        raise TraceError(f"{loc}: column {column!r}: got {_clip(raw)}; expected {what}")
    if number and number.adjusted() >= 15:  # 1e15 s, 30 million years: '1e999999' overflows Decimal
        raise TraceError(f"{loc}: column {column!r}: got {_clip(raw)}; expected {what} "
                         "and below 1e15")
    scale = PS_PER_S if unit == "seconds" else PS_PER_S // 1000
    return int((number * scale).to_integral_value())


_DATETIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,12}))?"
    r"(Z|[+-]\d{2}:?\d{2})?$", re.ASCII)


def timestamp_cell(row: Row, column: str, loc: str) -> int:
    """A ``timestamp`` cell: seconds (number) or an ISO-8601 datetime, as absolute ps.

    Datetimes are parsed exactly (the Azure traces carry 100 ns digits that Python's
    ``datetime`` would truncate); a datetime without a zone is taken as UTC so no local
    daylight-saving jump can reorder the requests.
    """
    raw = row.values.get(column)
    what = "seconds or an ISO datetime like 2023-11-16 18:15:46.6805900"
    if not present(raw):
        raise _missing(loc, column, what)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return seconds_cell(row, column, loc)
    text = str(raw).strip()
    match = _DATETIME.match(text)
    if match is None:
        if _decimal(text) is None:
            raise TraceError(f"{loc}: column {column!r}: got {_clip(raw)}; expected {what}")
        return seconds_cell(row, column, loc)
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match[7] or "", match[8]
    try:
        datetime.datetime(year, month, day, hour, minute, min(second, 59))
    except ValueError as exc:
        raise TraceError(f"{loc}: column {column!r}: got {raw!r} ({exc}); expected {what}") from None
    if hour > 23 or minute > 59 or second > 60:
        raise TraceError(f"{loc}: column {column!r}: got {raw!r}; expected {what}")
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        zone_hours, zone_minutes = int(digits[:2]), int(digits[2:])
        if zone_minutes > 59 or zone_hours * 60 + zone_minutes > 14 * 60:
            # zones in use span -12:00 to +14:00; anything else is a typo that would
            # silently move the request by hours
            raise TraceError(f"{loc}: column {column!r}: got {raw!r} (zone offset {zone}); "
                             f"expected an offset from -14:00 to +14:00 with minutes below 60")
        seconds -= sign * (zone_hours * 3600 + zone_minutes * 60)
    if second == 60 and seconds % 86400 != 0:
        # A leap second ends a UTC day (23:59:60 becomes the next day's 00:00:00);
        # anywhere else :60 is a typo that would land on the next minute's :00.
        raise TraceError(f"{loc}: column {column!r}: got {raw!r}; expected seconds below "
                         "60 (a leap second, :60, only ends a UTC day: 23:59:60)")
    return seconds * PS_PER_S + int(fraction.ljust(12, "0") or 0)


_MAX_HASH = 2**63 - 1


def hash_ids_cell(row: Row, column: str, loc: str) -> tuple[int, ...]:
    """A prompt's block hashes: a JSON list of integers, or (CSV) integers separated
    by blanks, or by commas inside brackets (``(3, 4)``, ``[3, 4]``); an absent or
    empty cell is no hashes."""
    raw = row.values.get(column)
    what = ("integers from 0 to 2^63 - 1, one per prompt block (a JSON list, or "
            "separated by blanks in a CSV cell)")
    if not present(raw):
        return ()
    if isinstance(raw, list):
        items: list[Any] = raw
    elif isinstance(raw, str):
        text = raw.strip()
        if len(text) >= 2 and text[0] + text[-1] in ("()", "[]"):
            # a tuple or list as pandas writes RequestTrace.to_frame()'s hash_ids
            text = text[1:-1].replace(",", " ")
        items = text.split()
    else:
        raise TraceError(f"{loc}: column {column!r}: got {_clip(raw)}; expected {what}")
    values = []
    for item in items:
        if isinstance(item, bool) or isinstance(item, float) or \
                (isinstance(item, str) and not item.isascii()):
            value = None
        elif isinstance(item, int):
            value = item
        elif isinstance(item, str) and item.isdigit():
            value = int(item) if len(item) < 20 else None
        else:
            value = None
        if value is None or not 0 <= value <= _MAX_HASH:
            raise TraceError(f"{loc}: column {column!r}: got {_clip(item)} in "
                             f"{_clip(raw)}; expected {what}")
        values.append(value)
    return tuple(values)
