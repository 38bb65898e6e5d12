"""The ``python`` code blocks in the docs run, so the examples cannot go stale.

Each document's blocks run top to bottom in one fresh interpreter (they share a
namespace, like cells of a notebook) started in the repository root.  A fresh process
keeps the examples' registrations (a new part defined inline) out of the test process's
registry.  Blocks fenced as ```text, ```sh or ```yaml are not run, nor is a python block
whose first line starts with ``# not run`` (one that needs packages npusim does not
install, say why on that line).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from npusim.config.presets import REPO_ROOT

pytestmark = pytest.mark.unit

#: Documents whose python blocks must run.
DOCUMENTS = ["README.md", "docs/architecture.md", "docs/hardware-model.md", "docs/models.md",
             "docs/moe.md", "docs/partition.md", "docs/sweeps.md", "docs/traces.md"]

_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, code)`` of every ```python block in ``text``."""
    return [(text.count("\n", 0, match.start(1)) + 1, match[1]) for match in _BLOCK.finditer(text)
            if not match[1].startswith("# not run")]


def as_script(document: str, blocks: list[tuple[int, str]]) -> str:
    """One script; each block compiled with its document line numbers for tracebacks."""
    parts = []
    for line, code in blocks:
        padded = "\n" * (line - 1) + code  # so tracebacks show the document's line numbers
        parts.append(f"exec(compile({padded!r}, {document!r}, 'exec'))")
    return "\n".join(parts) + "\n"


def test_block_extraction():
    text = textwrap.dedent("""\
        intro
        ```python
        x = 1
        ```
        ```sh
        not python
        ```
        ```python
        assert x == 1
        ```
        ```python
        # not run: needs torch
        ```
        """)
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "assert x == 1\n")]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_document_examples_run(document, tmp_path):
    path = REPO_ROOT / document
    blocks = python_blocks(path.read_text())
    assert blocks, f"{document} has no python examples"
    script = tmp_path / "examples.py"
    script.write_text(as_script(document, blocks))
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"{document} examples failed:\n{proc.stderr[-4000:]}"
