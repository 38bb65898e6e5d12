"""Natural key order of written results (metrics.json)."""

import json

import pytest

from npusim.core.json_keys import natural_key, naturally_ordered

pytestmark = pytest.mark.unit


def test_numbers_inside_names_sort_by_value():
    names = ["decode10", "decode2", "prefill1", "noc", "core10.sa", "core2.sa", "10", "2", ""]
    assert sorted(names, key=natural_key) == ["", "2", "10", "core2.sa", "core10.sa",
                                              "decode2", "decode10", "noc", "prefill1"]


def test_nested_dicts_are_ordered_and_lists_keep_their_order():
    value = {"by_priority": {"10": {"b": 1, "a": 2}, "2": {}}, "z": [{"y": 1, "x": 2}, 3]}
    text = json.dumps(naturally_ordered(value))
    assert text == '{"by_priority": {"2": {}, "10": {"a": 2, "b": 1}}, "z": [{"x": 2, "y": 1}, 3]}'
    # the same value built in another order writes the same bytes
    shuffled = {"z": [{"x": 2, "y": 1}, 3], "by_priority": {"2": {}, "10": {"a": 2, "b": 1}}}
    assert json.dumps(naturally_ordered(shuffled)) == text
