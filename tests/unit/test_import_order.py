"""Every module imports on its own, whatever was imported before it.

Two modules that import each other work only in one order: the package's usual entry
points import them that way, so the suite never noticed that ``import
npusim.workload.trace_readers`` (or ``npusim.hw.interconnect.noc_single``) as the first
import of a session raised ImportError.  Each module is imported here in a fresh
interpreter state: the npusim modules are dropped from ``sys.modules`` before each one
(third-party packages stay loaded, which keeps this to a few seconds).
"""

import subprocess
import sys

import pytest

from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.unit

SCRIPT = r"""
import importlib, pathlib, sys
root = pathlib.Path(sys.argv[1])
names = sorted(".".join(p.relative_to(root).with_suffix("").parts)
               for p in (root / "npusim").rglob("*.py"))
failed = []
for name in names:
    name = name.removesuffix(".__init__")
    for loaded in [m for m in sys.modules if m == "npusim" or m.startswith("npusim.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\n".join(failed))
print(f"{len(names)} modules")
"""


def test_every_module_imports_first():
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO_ROOT)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    *failed, summary = proc.stdout.strip().splitlines()
    assert int(summary.split()[0]) > 100    # it walked the package
    assert [line for line in failed if line] == []
