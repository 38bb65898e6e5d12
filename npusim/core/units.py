"""Unit strings, parsed once at config load.

Inside the simulator time is an integer number of picoseconds and sizes are integer
bytes; bandwidths are integer bytes per second and frequencies integer hertz.  Unit
strings such as ``"500MHz"``, ``"64MiB"``, ``"460GB/s"`` or ``"15ns"`` are accepted only
at the configuration boundary: the ``Annotated`` types below (``TimePs``, ``Bytes``,
``FreqHz``, ``BandwidthBps``) parse them during pydantic validation, so every field a
part sees is already a plain ``int`` in the unit its name carries.

Decimal prefixes (k, M, G, T) are powers of 1000 and binary prefixes (Ki, Mi, Gi, Ti) powers
of 1024, as in the datasheets; ``b`` is a bit and ``B`` a byte.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

PS_PER_S = 10**12
PS_PER_NS = 1000
#: Milliseconds per picosecond (reported latencies are in ms, simulated time in ps).
MS_PER_PS = 1e-9

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_PREFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_TIME = {"ps": 1, "ns": 10**3, "us": 10**6, "µs": 10**6, "ms": 10**9, "s": 10**12}


class UnitError(ValueError):
    """A value that is not a valid quantity of the expected unit."""


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    match = re.fullmatch(_NUMBER + r"\s*(?P<unit>[A-Za-zµ/]*)", text.strip())
    if not match:
        raise UnitError(f"expected {what} like {example!r}, got {text!r}")
    return float(match["num"]), match["unit"]


def _as_nonneg_int(value: float, text: object, what: str, resolution: str = "") -> int:
    if math.isnan(value) or math.isinf(value):
        raise UnitError(f"expected a finite {what}, got {text!r}")
    if value < 0:
        raise UnitError(f"expected a non-negative {what}, got {text!r}")
    result = int(round(value))
    if value > 0 and result == 0:  # rounding must not turn a quantity into "none"
        none = "" if what in ("frequency", "bandwidth") else "; use 0 for none"
        raise UnitError(f"expected a {what} of at least {resolution or '1'} (the resolution "
                        f"npusim keeps), got {text!r}{none}")
    return result


def _plain_number(value: object, what: str) -> float | None:
    if isinstance(value, bool):
        raise UnitError(f"expected {what}, got a boolean {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    return None


def parse_bytes(value: object) -> int:
    """Parse a size (``"64MiB"``, ``"1.5GB"``, ``"4096"``, ``4096``) into bytes.

    A trailing ``b`` means bits (``"512Kib"`` is 65536 bytes); the result must be a
    whole number of bytes.
    """
    number = _plain_number(value, "a size in bytes")
    if number is not None:
        if not math.isfinite(number):
            raise UnitError(f"expected a finite size, got {value!r}")
        if number != int(number):
            raise UnitError(f"expected a whole number of bytes, got {value!r}")
        return _as_nonneg_int(number, value, "size")
    if not isinstance(value, str):
        raise UnitError(f"expected a size like '64MiB', got {value!r}")
    num, unit = _split(value, "a size", "64MiB")
    match = re.fullmatch(r"(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|)(B|b|)", unit)
    if not match:
        raise UnitError(f"expected a size like '64MiB' or '2GB', got {value!r} (unknown unit {unit!r})")
    scale = _PREFIX[match[1]]
    bits = num * scale if match[2] == "b" else None
    total = bits / 8 if bits is not None else num * scale
    if not math.isfinite(total):
        raise UnitError(f"expected a finite size, got {value!r}")
    if abs(total - round(total)) > 1e-6 * max(1.0, abs(total)):
        raise UnitError(f"expected a whole number of bytes, got {value!r} = {total} B")
    return _as_nonneg_int(total, value, "size")


def parse_time_ps(value: object) -> int:
    """Parse a duration (``"15ns"``, ``"3.9us"``, ``"1s"``) into integer picoseconds.

    A bare number is taken as picoseconds.
    """
    number = _plain_number(value, "a duration")
    if number is not None:
        return _as_nonneg_int(number, value, "duration", "1 ps")
    if not isinstance(value, str):
        raise UnitError(f"expected a duration like '15ns', got {value!r}")
    num, unit = _split(value, "a duration", "15ns")
    if unit == "":
        return _as_nonneg_int(num, value, "duration", "1 ps")
    if unit not in _TIME:
        raise UnitError(f"expected a duration like '15ns' (units ps, ns, us, ms, s), got {value!r}")
    return _as_nonneg_int(num * _TIME[unit], value, "duration", "1 ps")


def parse_time_ms(value: object) -> object:
    """A duration with a unit (``"200ms"``, ``"1.5s"``) as float milliseconds, for the
    few fields kept in ms (serving SLOs); anything else (a number, numeric text) is
    returned as given, already in ms."""
    if isinstance(value, str):
        try:
            float(value)  # numeric text ("45", "1e3"): already ms
        except ValueError:
            return parse_time_ps(value) / 1e9
    return value


#: The lowest frequency a bare number (no unit) may give: below 1 MHz it is almost
#: surely MHz or GHz written without the unit (a unit string may still say '800Hz').
BARE_HZ_MIN = 1_000_000


def parse_freq_hz(value: object) -> int:
    """Parse a frequency (``"500MHz"``, ``"2.3GHz"``) into integer hertz."""
    number = _plain_number(value, "a frequency")
    if number is not None:
        hz = _as_nonneg_int(number, value, "frequency", "1 Hz")
        if 0 < hz < BARE_HZ_MIN:  # `freq_hz: 800` meant as MHz ran at 800 Hz, unflagged
            raise UnitError(f"got {value!r}: a number without a unit is hertz, and "
                            f"{hz} Hz is no clock of a chip; expected a unit (e.g. "
                            f"'800MHz'), or at least {BARE_HZ_MIN:,} Hz")
    else:
        if not isinstance(value, str):
            raise UnitError(f"expected a frequency like '500MHz', got {value!r}")
        num, unit = _split(value, "a frequency", "500MHz")
        match = re.fullmatch(r"(k|K|M|G|T|)Hz", unit)
        if not match:
            raise UnitError(f"expected a frequency like '500MHz' or '2.3GHz', got {value!r}")
        hz = _as_nonneg_int(num * _PREFIX[match[1]], value, "frequency", "1 Hz")
    if hz <= 0:
        raise UnitError(f"expected a positive frequency, got {value!r}")
    return hz


def parse_bandwidth_bps(value: object) -> int:
    """Parse a bandwidth (``"460GB/s"``, ``"16Gb/s"``, ``"1.2TB/s"``) into bytes per second.

    ``b/s`` is bits per second and is divided by 8.  A bare number is bytes per second.
    """
    number = _plain_number(value, "a bandwidth")
    if number is not None:
        return _as_nonneg_int(number, value, "bandwidth")
    if not isinstance(value, str):
        raise UnitError(f"expected a bandwidth like '460GB/s', got {value!r}")
    num, unit = _split(value, "a bandwidth", "460GB/s")
    match = re.fullmatch(r"(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|)(B|b)(?:/s|ps)", unit)
    if not match:
        raise UnitError(f"expected a bandwidth like '460GB/s' or '16Gb/s', got {value!r}")
    total = num * _PREFIX[match[1]] / (8 if match[2] == "b" else 1)
    return _as_nonneg_int(total, value, "bandwidth")


def _validator(parse):
    def validate(value: object) -> object:
        try:
            return parse(value)
        except UnitError as exc:  # pydantic turns ValueError into a located error
            raise ValueError(str(exc)) from None
    return BeforeValidator(validate)


TimePs = Annotated[int, _validator(parse_time_ps)]
"""Duration in integer picoseconds; accepts ``"15ns"`` etc. at load."""
Bytes = Annotated[int, _validator(parse_bytes)]
"""Size in integer bytes; accepts ``"64MiB"`` etc. at load."""
FreqHz = Annotated[int, _validator(parse_freq_hz)]
"""Frequency in integer hertz; accepts ``"500MHz"`` etc. at load."""
BandwidthBps = Annotated[int, _validator(parse_bandwidth_bps)]
"""Bandwidth in integer bytes per second; accepts ``"460GB/s"`` etc. at load."""


def cycles_to_ps(cycles: int | float, freq_hz: int) -> int:
    """Duration of ``cycles`` clock cycles at ``freq_hz``, rounded up to a picosecond."""
    return -(-int(round(cycles * PS_PER_S)) // freq_hz) if cycles else 0


def period_ps(freq_hz: int) -> int:
    """Clock period in picoseconds (rounded to the nearest picosecond)."""
    return max(1, round(PS_PER_S / freq_hz))


def transfer_ps(size_bytes: int, bandwidth_bps: int) -> int:
    """Time to move ``size_bytes`` at ``bandwidth_bps`` bytes/s, rounded up to a picosecond."""
    if size_bytes <= 0:
        return 0
    return -(-size_bytes * PS_PER_S // bandwidth_bps)


def format_time_ps(ps: int | float) -> str:
    """Human-readable duration for tables (``1.23 ms``)."""
    for unit, scale in (("s", 10**12), ("ms", 10**9), ("us", 10**6), ("ns", 10**3)):
        if abs(ps) >= scale:
            return f"{ps / scale:.3g} {unit}"
    return f"{ps:.0f} ps"


def format_bytes(size: int | float) -> str:
    """Human-readable size with binary prefixes (``64 MiB``)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def format_si(value: int | float, unit: str) -> str:
    """Human-readable rate with decimal prefixes (``16 GB/s``, ``1 GHz``): bandwidths
    and clocks are decimal, as their datasheets give them."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:g} {unit}"


def format_count(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` in agreement, for messages (``1 tensor``, ``3 tensors``)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
