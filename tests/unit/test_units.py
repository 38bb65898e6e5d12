"""Unit-string parsing: the only place unit strings are accepted."""

import pytest
from hypothesis import given, strategies as st

from npusim.core.units import (UnitError, cycles_to_ps, parse_bandwidth_bps, parse_bytes,
                               parse_freq_hz, parse_time_ps, transfer_ps)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, expected", [
    ("64MiB", 64 * 2**20), ("1.5GB", 1_500_000_000), ("4096", 4096), (4096, 4096),
    ("512Kib", 65536), ("2 KiB", 2048), ("0B", 0),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("15ns", 15_000), ("3.9us", 3_900_000), ("1s", 10**12), ("250ps", 250), (42, 42),
])
def test_parse_time(text, expected):
    assert parse_time_ps(text) == expected


@pytest.mark.parametrize("text, expected", [("500MHz", 500_000_000), ("2.3GHz", 2_300_000_000)])
def test_parse_freq(text, expected):
    assert parse_freq_hz(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("460GB/s", 460 * 10**9), ("16Gb/s", 2 * 10**9), ("1.2TB/s", 1_200_000_000_000),
    ("25.6GBps", 25_600_000_000), ("21PB/s", 21 * 10**15),  # Cerebras WSE-2's SRAM
])
def test_parse_bandwidth(text, expected):
    assert parse_bandwidth_bps(text) == expected


@pytest.mark.parametrize("parse, bad", [
    (parse_bytes, "12XB"), (parse_bytes, "-4KiB"), (parse_bytes, "3.3B"), (parse_bytes, True),
    (parse_time_ps, "15 parsecs"), (parse_time_ps, "nan ns"), (parse_freq_hz, "0Hz"),
    (parse_freq_hz, "500MB"), (parse_bandwidth_bps, "460GB"), (parse_bytes, [1]),
    (parse_bytes, float("inf")), (parse_bytes, "1e999MiB"), (parse_bytes, float("nan")),
])
def test_bad_values_raise_with_the_value_in_the_message(parse, bad):
    with pytest.raises(UnitError) as info:
        parse(bad)
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)


@given(st.integers(min_value=0, max_value=2**50))
def test_bytes_round_trip_every_binary_prefix(value):
    assert parse_bytes(f"{value}B") == value
    assert parse_bytes(f"{value}KiB") == value * 1024


def test_cycle_and_transfer_helpers_round_up():
    assert cycles_to_ps(1, 500_000_000) == 2000
    assert cycles_to_ps(3, 3_000_000_000) == 1000
    assert transfer_ps(1, 10**12) == 1
    assert transfer_ps(3, 2 * 10**12) == 2  # 1.5 ps rounds up
    assert transfer_ps(0, 1) == 0


@pytest.mark.parametrize("parse, text, message", [
    (parse_time_ps, "0.4ps", "duration of at least 1 ps"),   # would disable refresh (tREFI 0)
    (parse_time_ps, 0.4, "duration of at least 1 ps"),
    (parse_freq_hz, "0.4Hz", "frequency of at least 1 Hz"),  # not "expected a positive frequency"
])
def test_a_positive_quantity_never_rounds_to_zero(parse, text, message):
    with pytest.raises(UnitError, match=message):
        parse(text)
    assert parse_time_ps(0) == 0 and parse_time_ps("1.4ps") == 1  # rounding stays otherwise


@pytest.mark.parametrize("value, ms", [("200ms", 200.0), ("1.5s", 1500.0), ("250us", 0.25),
                                       (45, 45), ("45", "45"), ("1e3", "1e3")])
def test_parse_time_ms_converts_times_with_units_and_leaves_numbers_in_ms(value, ms):
    from npusim.core.units import parse_time_ms

    assert parse_time_ms(value) == ms


def test_a_sub_resolution_bandwidth_is_not_told_to_use_zero():
    # bandwidth fields are > 0: "use 0 for none" would send the user into the next error
    with pytest.raises(UnitError) as info:
        parse_bandwidth_bps(0.5)
    assert "at least 1" in str(info.value) and "use 0" not in str(info.value)
    with pytest.raises(UnitError, match="use 0 for none"):
        parse_time_ps("0.1ps")  # a duration of 0 is a valid "none"


@pytest.mark.parametrize("value", [800, 1.5, 999_999])
def test_a_bare_number_below_a_megahertz_is_refused_as_a_clock(value):
    # `freq_hz: 800` (meant as MHz) ran at 800 Hz: a TTFT of 4.7e4 s, nothing flagged
    with pytest.raises(UnitError, match="a number without a unit is hertz"):
        parse_freq_hz(value)
    assert parse_freq_hz(1_000_000) == 1_000_000 and parse_freq_hz("800Hz") == 800
