"""The generated configuration reference: every parameter has help text (as in gem5)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npusim.config import reference
from npusim.config.presets import REPO_ROOT
from npusim.core import registry

pytestmark = pytest.mark.unit

DOCS = reference.collect()


@pytest.mark.parametrize("doc", DOCS, ids=[d.title for d in DOCS])
def test_every_field_has_a_description(doc):
    """Each documented class (registered parts, the blocks nested in them, the scenario)."""
    missing = [name for name, info in doc.model.model_fields.items()
               if not reference._is_discriminator(doc, name, info)
               and not (info.description or "").strip()]
    assert not missing, (f"{doc.model.__module__}.{doc.model.__qualname__} ({doc.title}): "
                         f"fields without description: {', '.join(missing)}")


def test_discriminators_are_single_valued_literals():
    """The reference describes ``kind``/``type`` itself; that is only right if each one
    names exactly its own class."""
    for doc in DOCS:
        for name in doc.discriminators:
            info = doc.model.model_fields[name]
            assert reference._is_discriminator(doc, name, info), (doc.title, name)


def test_discriminators_are_documented_as_required():
    # A task without ``type:`` is rejected ("missing 'type:' key"), so the reference must
    # not offer the model's default for it.
    text = reference.render()
    assert "| `type` | `\"compute\"` | **required** | Selects this class" in text
    assert "| `kind` | `\"taskgraph\"` | **required** | Selects this class" in text


def test_a_kind_nothing_else_could_stand_for_is_documented_as_optional():
    # The NPU's noc and sram are plain field types, so their kind has a default (a --hw
    # file without kind: lines loads); the reference called it required.
    from npusim.config.loader import scenario_from_dict

    text = reference.render()
    assert "| `kind` | `\"noc\"` | `\"noc\"` | Always `noc`; may be omitted" in text
    assert "| `kind` | `\"sram\"` | `\"sram\"` | Always `sram`; may be omitted" in text
    hw = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64"},
                             "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}}
                            ).model_dump(mode="json")["hw"]
    hw.pop("kind"), hw["noc"].pop("kind"), hw["core"]["sram"].pop("kind")
    loaded = scenario_from_dict({"name": "t", "hw": hw,
                                 "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    assert (loaded.hw.kind, loaded.hw.noc.kind, loaded.hw.core.sram.kind) == ("npu", "noc", "sram")


def test_every_registered_part_is_documented():
    documented = {(d.category, d.kind) for d in DOCS if d.category}
    expected = {(category, kind) for category in registry.categories()
                for kind in registry.entries(category)}
    assert documented == expected
    text = reference.render()
    for category, kind in expected:
        assert f"### `{category}: {kind}`" in text


def test_nested_blocks_and_units_are_rendered():
    text = reference.render()
    assert "#### `npu.core.dma` (DmaConfig)" in text          # nested, unregistered block
    assert "[SramConfig](#memory-sram)" in text                 # link to a registered part
    assert "duration (integer ps; accepts '15ns')" in text     # unit types named as such
    assert "`500000000` (500 MHz)" in text                      # defaults with their unit
    assert "**required**" in text


def test_links_point_at_anchors():
    import re

    text = reference.render()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    assert len(anchors) == len(re.findall(r'<a id="', text)), "duplicate anchors"
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert targets <= anchors, targets - anchors


def test_module_entry_point_prints_the_reference():
    out = subprocess.run([sys.executable, "-m", "npusim.config.reference"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert out == reference.render()
