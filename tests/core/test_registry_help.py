"""The one-line help of every registered part (`npusim list`)."""

from __future__ import annotations

from npusim.core import registry


def test_every_part_has_a_whole_sentence_for_npusim_list():
    # `npusim list` showed the docstring's first line, cut mid-sentence ("... whole
    # prompts, one") or with Sphinx markup (":class:`~npusim...`").
    registry.discover()
    for category in registry.categories():
        for kind, entry in registry.entries(category).items():
            assert entry.help.endswith((".", ")")), (category, kind, entry.help)
            assert "``" not in entry.help and ":class:" not in entry.help, (category, kind)
