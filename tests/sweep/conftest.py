"""Fixtures shared by the sweep CLI and plot tests."""

from __future__ import annotations

import pytest

from npusim.cli import main
from npusim.config.presets import REPO_ROOT

SWEEP = REPO_ROOT / "workloads" / "sweeps" / "quickstart_grid.yaml"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The quickstart grid swept once per test module (serial executor)."""
    out = tmp_path_factory.mktemp("cli") / "grid"
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(SWEEP), "--out", str(out), "--executor", "serial", "-q"])
    assert (info.value.code or 0) == 0
    return out
