"""The shared invariant checks get pytest's assertion messages, as test modules do."""

import pytest

pytest.register_assert_rewrite("tests.serving.engine_invariants")
