"""with_source: a front end names the user's file in an error raised deep in a run."""

import pytest

from npusim.core.errors import MappingError, TraceError, with_source
from npusim.mapping.kv_blocks import OutOfMemoryError

pytestmark = pytest.mark.unit


def test_the_error_keeps_its_type_and_attributes():
    # rebuilding it as type(exc)(message) raised TypeError for this subclass
    exc = with_source(OutOfMemoryError("no free KV blocks", needed=8, available=2), "s.yaml")
    assert isinstance(exc, OutOfMemoryError) and isinstance(exc, MappingError)
    assert str(exc) == "s.yaml: no free KV blocks" and (exc.needed, exc.available) == (8, 2)


def test_a_message_that_names_the_file_already_is_left_alone():
    exc = with_source(TraceError("s.yaml: line 3: bad"), "s.yaml")
    assert str(exc) == "s.yaml: line 3: bad"
