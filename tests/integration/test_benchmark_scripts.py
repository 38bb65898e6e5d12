"""The benchmark scripts treat bad arguments like the CLI: one line, exit 2, no
traceback, and before any measuring (results of a long run are never lost)."""

import subprocess
import sys

import pytest

from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.component


def bench(name, *args):
    return subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / name), *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name, args, message", [
    ("bench_llm.py", ["--modes", "bogus"], "--modes: bogus: expected analytic and/or tlm"),
    ("bench_serving.py", ["--limit", "0"], "--limit must be >= 1"),
    ("bench_executor.py", ["--json", "{tmp}/afile/x.json"], "afile is a file, not a directory"),
])
def test_a_bad_argument_is_one_line_and_exit_2(name, args, message, tmp_path):
    (tmp_path / "afile").write_text("")
    proc = bench(name, *[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
