"""Config loading: presets, overrides and error messages (independent of any device)."""

import re
from typing import Literal

import pytest
import yaml
from pydantic import Field

from npusim.config import loader
from npusim.config.presets import REPO_ROOT, load_preset
from npusim.core.errors import ConfigError
from npusim.core.registry import PartConfig
from npusim.core.units import Bytes

pytestmark = pytest.mark.unit


class Sram(PartConfig):
    kind: Literal["sram"] = "sram"
    capacity_bytes: Bytes = Field(description="capacity")


class Core(PartConfig):
    kind: Literal["core"] = "core"
    sram: Sram
    lanes: int = Field(32, gt=0)


class Hw(PartConfig):
    kind: Literal["hw"] = "hw"
    cores: list[Core]


def test_error_names_full_path_value_and_expectation():
    data = {"cores": [{"sram": {"capacity_bytes": "1MiB"}},
                      {"sram": {"capacity_bytes": "12XB"}, "lanes": 0}]}
    with pytest.raises(ConfigError) as info:
        loader.validate(Hw, data, "hw.yaml")
    text = str(info.value)
    assert "hw.yaml" in text
    assert "cores[1].sram.capacity_bytes" in text and "'12XB'" in text and "64MiB" in text
    assert "cores[1].lanes" in text and "greater than 0" in text


def test_unknown_key_suggests_the_closest_field():
    with pytest.raises(ConfigError) as info:
        loader.validate(Core, {"sram": {"capacity_bytes": 1}, "lane": 4}, "core.yaml")
    assert "lane" in str(info.value) and "did you mean 'lanes'" in str(info.value)


def test_a_flow_mapping_without_a_space_after_the_colon_is_explained():
    # `--set 'x={lanes:4}'` parses as the one key "lanes:4" (YAML needs ": ")
    with pytest.raises(ConfigError) as info:
        loader.validate(Core, {"sram": {"capacity_bytes": 1}, "lanes:4": None}, "core.yaml")
    assert "YAML needs a space after the colon: {lanes: 4}" in str(info.value)


@pytest.mark.parametrize("key, spelt, what", [(1, "1", "number"), (2.5, "2.5", "number"),
                                              (True, "true", "boolean"), (None, "null", "null")])
def test_a_key_that_is_not_text_is_named_on_its_mapping(key, spelt, what):
    # `1: 2` in a block was reported at "sram[1]" (a list item's path) as "Keys should be
    # strings", and a null key at "sram.None"; the key is spelt as the YAML has it (not
    # Python's True / None)
    with pytest.raises(ConfigError) as info:
        loader.validate(Core, {"sram": {"capacity_bytes": 1, key: 2}}, "core.yaml")
    assert info.value.problems == [("sram", f"key {spelt} is read as a {what}; expected a "
                                            "field name (quote it if text)")]


def test_a_dotted_key_in_a_file_says_to_nest_it():
    # `noc.width: 4` in a scenario (as --set and sweep specs write paths) was
    # "hw.noc.width: unknown key (known keys: ..., noc)": a path that looks valid.
    with pytest.raises(ConfigError) as info:
        loader.validate(Core, {"sram.capacity_bytes": "1MiB", "lanes": 4}, "core.yaml")
    message = dict(info.value.problems)["sram.capacity_bytes"]  # (and sram is missing)
    assert message.startswith(
        "unknown key; a key with dots is not a path in a YAML file: nest it, "
        "sram: {capacity_bytes: 1MiB} (dotted paths are for --set")
    with pytest.raises(ConfigError) as info:  # a first part that is no field: the usual
        loader.validate(Core, {"sram": {"capacity_bytes": 1}, "lane.s": {"x": 1}}, "core.yaml")
    assert "with dots" not in str(info.value)


def test_overrides_parse_paths_and_yaml_values():
    parts, value = loader.parse_override("hw.cores[2].sram.capacity_bytes=32MiB")
    assert parts == ["hw", "cores", 2, "sram", "capacity_bytes"] and value == "32MiB"
    data = {"hw": {"cores": [{}, {}, {"sram": {}}]}}
    loader.apply_override(data, parts, value, "x")
    assert data["hw"]["cores"][2]["sram"]["capacity_bytes"] == "32MiB"
    assert loader.parse_override("run.seed=7")[1] == 7
    with pytest.raises(ConfigError, match="PATH=VALUE"):
        loader.parse_override("run.seed")
    with pytest.raises(ConfigError, match="no list item 5"):
        loader.apply_override(data, ["hw", "cores", 5, "x"], 1, "hw.cores[5].x=1")


@pytest.mark.parametrize("text, number", [("1e3", 1000.0), ("2.5e9", 2.5e9), ("1e+3", 1000.0),
                                          ("-4E-2", -0.04), ("1_000e3", 1e6)])
def test_exponents_without_a_decimal_point_are_numbers(text, number):
    # PyYAML (YAML 1.1) leaves these as text; a rate or a size written so must not fail
    # as "not a number" (YAML 1.2, JSON and Python read them as floats).
    from npusim.config.presets import parse_yaml

    assert parse_yaml(text) == number and isinstance(parse_yaml(text), float)
    assert parse_yaml("1e3x") == "1e3x" and parse_yaml("e3") == "e3"
    assert parse_yaml("1000") == 1000 and isinstance(parse_yaml("1000"), int)


@pytest.mark.parametrize("text, value", [("010", 10), ("0o10", 8), ("0x1F", 31), ("1_000", 1000),
                                         (".5", 0.5), ("1:30", "1:30"), ("0b11", "0b11"),
                                         ("no", "no"), ("on", "on"), ("true", True),
                                         ("False", False), ("2024-05-01", "2024-05-01"),
                                         ("2023-11-16 18:15:46", "2023-11-16 18:15:46")])
def test_plain_scalars_are_typed_by_yaml_1_2_not_1_1(text, value):
    # PyYAML's YAML 1.1 rules silently changed values: 010 was octal 8, 1:30 base 60
    # (90), 0b11 binary 3, and a model named `no` became False.
    from npusim.config.presets import parse_yaml

    parsed = parse_yaml(text)
    assert parsed == value and type(parsed) is type(value)


def test_a_date_like_name_is_text_not_a_date():
    # `name: 2024-05-01` (a dated experiment) was a datetime.date that every text field
    # refused: "name: Input should be a valid string (got datetime.date(2024, 5, 1))".
    scenario = loader.load_scenario(REPO_ROOT / "workloads/scenarios/quickstart.yaml",
                                    ["name=2024-05-01", "description=2024-05-01 12:00:00"])
    assert scenario.name == "2024-05-01" and scenario.description == "2024-05-01 12:00:00"


@pytest.mark.parametrize("text, fragment", [("!!float abc", "float 'abc': expected a number"),
                                            ("!!bool maybe", "bool 'maybe': expected true or false"),
                                            ("!!int 0b11", "!!int '0b11' is not an integer"),
                                            ("!!timestamp soon", "timestamp 'soon': expected a date")])
def test_an_explicitly_tagged_value_that_does_not_parse_is_a_located_yaml_error(text, fragment):
    # PyYAML's constructors raised a bare ValueError / KeyError: a traceback, not a message.
    import yaml

    from npusim.config.presets import parse_yaml

    with pytest.raises(yaml.YAMLError, match=re.escape(fragment)) as info:
        parse_yaml(f"a: 1\nb: {text}\n")
    assert info.value.problem_mark.line == 1


def test_a_merge_key_is_a_located_error_saying_what_to_write_instead(tmp_path):
    # `<<: *common` (docker-compose style) failed as "could not determine a constructor
    # for the tag 'tag:yaml.org,2002:merge'": no word of merge keys or what to write.
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ncommon: &c {kind: gemm, m: 4}\nworkload:\n  <<: *c\n  m: 8\n")
    with pytest.raises(ConfigError) as info:
        loader.load_raw(scenario)
    [(where, message)] = info.value.problems
    assert where == "line 4, column 3"
    assert message.startswith("YAML error: '<<' (a YAML 1.1 merge key) is not read")
    assert "expected plain keys" in message and "preset: FILE.yaml" in message
    from npusim.config.presets import parse_yaml

    assert parse_yaml('"<<": 1') == {"<<": 1}  # a quoted key is plain text


@pytest.mark.parametrize("encode, where, start", [
    (lambda t: t.encode("utf-16"), "", "not a UTF-8 text file (byte 0xff at offset 0)"),
    (lambda t: t.encode("utf-16-be"), "line 1, column 1", "NUL byte; expected a UTF-8 text"),
    (lambda t: t.replace("m: 4", "m: 4\x07").encode(), "line 2, column 28",
     "YAML syntax error: character U+0007 (a control character); expected printable text"),
    # a binary file has NULs too, but is no UTF-16 (an ELF header's NULs were read so)
    (lambda t: b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x03\x00>\x00\x01\x00\x00\x00",
     "line 1, column 8", "NUL byte; expected a UTF-8 text (YAML) file"),
])
def test_a_scenario_saved_as_utf16_or_with_a_control_character_is_named(tmp_path, encode,
                                                                       where, start):
    # PowerShell's `>` writes UTF-16: without a byte-order mark PyYAML's two-line
    # "unacceptable character #x0000 ... in '<unicode string>', position 0" came out.
    scenario = tmp_path / "s.yaml"
    scenario.write_bytes(encode("name: s\nworkload: {kind: gemm, m: 4}\n"))
    with pytest.raises(ConfigError) as info:
        loader.load_raw(scenario)
    [(path, message)] = info.value.problems
    assert path == where and message.startswith(start) and "\n" not in message
    assert ("looks like UTF-16" in message) == ("U+0007" not in message
                                                and not message.endswith("(YAML) file"))


def test_a_sexagesimal_looking_limit_is_rejected_by_name_not_read_as_90():
    with pytest.raises(ConfigError, match=r"workload\.trace\.limit.*'1:30'"):
        loader.load_scenario(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml",
                             ["workload.trace.limit=1:30"])
    scenario = loader.load_scenario(
        REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml",
        ["workload.trace.limit=010"])
    assert scenario.workload.trace.limit == 10


def test_an_exponent_fills_an_integer_field():
    scenario = loader.load_scenario(REPO_ROOT / "workloads/scenarios/quickstart.yaml",
                                    ["hw.noc.width=4e0"])
    assert scenario.hw.noc.width == 4


def test_presets_merge_with_sibling_keys_winning(tmp_path, monkeypatch):
    (tmp_path / "mem").mkdir()
    (tmp_path / "mem" / "base.yaml").write_text("kind: sram\ncapacity_bytes: 1MiB\nbanks: 4\n")
    monkeypatch.setenv("NPUSIM_HWCONFIGS", str(tmp_path))
    resolved = loader.resolve_presets({"sram": {"preset": "mem/base", "banks": 8}}, "s.yaml")
    assert resolved == {"sram": {"kind": "sram", "capacity_bytes": "1MiB", "banks": 8}}
    assert load_preset("mem/base")["banks"] == 4
    with pytest.raises(ConfigError, match="no preset named 'mem/bse'.*mem/base"):
        loader.resolve_presets({"sram": {"preset": "mem/bse"}}, "s.yaml")


def test_a_key_given_twice_or_a_binary_file_is_a_config_error(tmp_path):
    doubled = tmp_path / "dup.yaml"
    doubled.write_text("name: x\nhw:\n  sram: 1MiB\n  sram: 2MiB\n")
    with pytest.raises(ConfigError, match=r"line 4.*key 'sram' appears twice.*first at line 3"):
        loader.load_raw(doubled)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00name: x\n")
    with pytest.raises(ConfigError, match="not a UTF-8 text file .byte 0xff at offset 0"):
        loader.load_raw(binary)
    with pytest.raises(ConfigError, match="key 'm' appears twice"):
        loader.parse_override("workload={kind: gemm, m: 1, m: 2}")
    # 1 and true are different YAML keys that Python reads as one (one value would be
    # lost): said so, not "appears twice"; 1 and 1.0 are one number twice
    numbered = tmp_path / "numbered.yaml"
    for text, expected in (("{kind: gemm, 1: a, true: b}", "keys 1 and true are one key "
                                                           "once read"),
                           ("{0: 1, false: 4}", "keys 0 and false are one key once read"),
                           ("{0: 1, 1: 4, 1.0: 9}", "key 1.0 appears twice"),
                           ("{null: a, ~: b}", "key null appears twice"),  # not None
                           ("{yes: a, yes: b}", "key 'yes' appears twice")):
        numbered.write_text(f"name: x\nworkload: {text}\n")
        with pytest.raises(ConfigError, match=expected):
            loader.load_raw(numbered)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        loader.load_raw(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("hw: [1, 2\n")
    with pytest.raises(ConfigError, match="YAML syntax error"):
        loader.load_raw(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        loader.load_raw(empty)


def test_size_assigned_to_a_memory_sets_its_capacity_and_keeps_the_preset():
    from npusim.config.loader import load_raw
    from npusim.config.presets import REPO_ROOT

    data = load_raw(REPO_ROOT / "workloads/scenarios/quickstart.yaml", ["hw.core.sram=8MiB"])
    assert data["hw"]["core"]["sram"]["capacity_bytes"] == "8MiB"
    assert data["hw"]["core"]["sram"]["banks"] == 32  # the rest of the preset survives


def test_preset_override_replaces_the_preset_before_resolution(tmp_path, monkeypatch):
    root = tmp_path / "hw"
    (root / "mem").mkdir(parents=True)
    (root / "mem" / "a.yaml").write_text("banks: 4\nwidth: 1\n")
    (root / "mem" / "b.yaml").write_text("banks: 8\n")
    monkeypatch.setenv("NPUSIM_HWCONFIGS", str(root))
    scenario = tmp_path / "s.yaml"
    scenario.write_text("sram: {preset: mem/a}\n")
    data = loader.load_raw(scenario, ["sram.preset=mem/b"])
    assert data["sram"] == {"banks": 8}


def test_a_preset_override_that_every_sibling_key_shadows_is_refused():
    # A full hardware file (--hw) sets every key the preset gives: the preset change was
    # silently a no-op.  Naming the preset where it is the only key still works.
    with pytest.raises(ConfigError, match=r"hw\.preset: 'hw\.preset=npu/small_core_256' "
                                          r"changes nothing: hw also sets every key"):
        loader.load_scenario(REPO_ROOT / "workloads/scenarios/quickstart.yaml",
                             ["hw.preset=npu/small_core_256"],
                             hw_file=REPO_ROOT / "hwconfigs/npu/large_core_64.yaml")
    scenario = loader.load_scenario(REPO_ROOT / "workloads/scenarios/quickstart.yaml",
                                    ["hw.preset=npu/small_core_256"])
    assert scenario.hw.name == load_preset("npu/small_core_256")["name"]


def test_a_relative_file_next_to_the_scenario_is_found_there(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_ps,prompt_tokens,output_tokens\n0,4,4\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nworkload: {trace: {file: t.csv}, routing: {file: absent.npz}}\n")
    data = loader.load_raw(scenario)
    assert data["workload"]["trace"]["file"] == str(tmp_path / "t.csv")
    assert data["workload"]["routing"]["file"] == "absent.npz"  # left to the readers' search


def test_a_preset_may_be_a_yaml_file_next_to_the_file_that_names_it(tmp_path, monkeypatch):
    # The guide offered "preset: ... or a file"; a path was looked up as a shipped preset
    # name ("no preset named 'chips/my.yaml'").
    chips = tmp_path / "chips"
    chips.mkdir()
    (chips / "base.yaml").write_text("kind: hw\ncores: [{sram: {capacity_bytes: 1MiB}}]\n")
    (chips / "mine.yaml").write_text("preset: base.yaml\ncores: [{sram: {capacity_bytes: 2MiB}}]\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nhw: {preset: chips/mine.yaml}\n")
    monkeypatch.chdir(REPO_ROOT)  # not the scenario's directory: found next to the scenario
    hw = loader.load_raw(scenario)["hw"]
    assert hw == {"kind": "hw", "cores": [{"sram": {"capacity_bytes": "2MiB"}}]}
    # a --set override's file is found from the working directory
    monkeypatch.chdir(tmp_path)
    data = loader.load_raw(REPO_ROOT / "workloads/scenarios/quickstart.yaml",
                           overrides=["hw.preset=chips/base.yaml"])
    assert data["hw"]["cores"] == [{"sram": {"capacity_bytes": "1MiB"}}]
    scenario.write_text("name: s\nhw: {preset: chips/absent.yaml}\n")
    with pytest.raises(ConfigError) as info:
        loader.load_raw(scenario)
    assert info.value.problems[0][0] == "hw.preset"
    assert "no file 'chips/absent.yaml'" in info.value.problems[0][1]


@pytest.mark.parametrize("name", ["", "  ", 5, ["npu/large_core_64"]])
def test_an_empty_or_non_text_preset_name_says_a_name_is_expected(name):
    # `--set hw.preset=` listed five unrelated presets as "did you mean" (every name
    # contains '').
    with pytest.raises(ConfigError) as info:
        loader.resolve_presets({"hw": {"preset": name}}, "s.yaml")
    [(path, message)] = info.value.problems
    assert path == "hw.preset" and message == (
        f"expected a preset name such as npu/large_core_64 or a YAML file, got {name!r}")


def test_presets_that_include_each_other_are_a_cycle_named_in_the_scenario(tmp_path):
    # Two preset files naming each other were reported as "presets nest too deeply" at
    # 'hw', in the error of a preset 16 levels down, without the scenario or the files.
    chips = tmp_path / "chips"
    chips.mkdir()
    (chips / "a.yaml").write_text("preset: b.yaml\nname: a\n")
    (chips / "b.yaml").write_text("preset: a.yaml\n")
    (chips / "self.yaml").write_text("preset: self.yaml\n")
    scenario = tmp_path / "s.yaml"
    for first, files in (("a", ["a.yaml", "b.yaml", "a.yaml"]), ("self", ["self.yaml"] * 2)):
        scenario.write_text(f"name: s\nhw: {{preset: chips/{first}.yaml}}\n")
        with pytest.raises(ConfigError) as info:
            loader.load_raw(scenario)
        assert info.value.source == str(scenario)
        [(path, message)] = info.value.problems
        assert path == "hw.preset"
        assert message.startswith("presets include each other in a cycle: ")
        assert [part.rsplit("/", 1)[-1] for part in
                message.split(": ", 1)[1].split(";")[0].split(" -> ")] == files
    # the same preset twice side by side (not inside itself) is no cycle
    scenario.write_text("name: s\nx: {preset: chips/b.yaml, name: x}\n"
                        "y: {sram: {preset: mem.yaml}}\nz: {sram: {preset: mem.yaml}}\n")
    (tmp_path / "mem.yaml").write_text("capacity_bytes: 1MiB\n")
    (chips / "b.yaml").write_text("kind: hw\n")
    data = loader.load_raw(scenario)
    assert data["y"] == data["z"] == {"sram": {"capacity_bytes": "1MiB"}}


def test_a_named_presets_relative_file_is_next_to_it_and_a_cycle_spells_each_once(
        tmp_path, monkeypatch):
    # hwconfigs/x/b.yaml naming preset: a.yaml meant a.yaml in the working directory
    # (not found), while a file preset's relative presets were found next to it.  A
    # cycle through both kinds showed the file as written ('../x/a.yaml').
    monkeypatch.setenv("NPUSIM_HWCONFIGS", str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "b.yaml").write_text("preset: mem.yaml\n")
    (tmp_path / "x" / "mem.yaml").write_text("capacity_bytes: 1MiB\n")
    assert loader.resolve_presets({"sram": {"preset": "x/b"}}, "s.yaml") == {
        "sram": {"capacity_bytes": "1MiB"}}
    (tmp_path / "x" / "a.yaml").write_text("preset: x/b\n")
    (tmp_path / "x" / "b.yaml").write_text("preset: ../x/a.yaml\n")
    with pytest.raises(ConfigError) as info:
        loader.resolve_presets({"hw": {"preset": "x/a"}}, "s.yaml")
    [(_, message)] = info.value.problems
    a_file = str((tmp_path / "x" / "a.yaml").resolve())
    assert message.startswith(f"presets include each other in a cycle: x/a -> x/b -> "
                              f"{a_file} ({a_file} is preset x/a); ")


@pytest.mark.filterwarnings("ignore::npusim.core.errors.ConfigNote")
def test_a_block_naming_its_own_preset_under_a_chip_preset_swaps_the_chips_block(tmp_path):
    # hw: {preset: npu/large_core_64, hbm: {preset: memory/lpddr5}} resolved to the chip's
    # HBM2E: the chip's resolved hbm block was merged over the LPDDR5 preset, silently
    # (and a sweep over hw.hbm.preset gave one latency for every memory).
    from npusim.core.errors import ConfigNote

    lpddr5 = load_preset("memory/lpddr5")

    def resolved(data, overrides=()):
        scenario = tmp_path / "s.yaml"
        scenario.write_text(yaml.safe_dump({"name": "s", **data}))
        return loader.load_raw(scenario, overrides)["hw"]

    def hbm(data, overrides=()):
        return resolved(data, overrides)["hbm"]

    chip = {"hw": {"preset": "npu/large_core_64", "hbm": {"preset": "memory/lpddr5"}}}
    # the chip's channel count stays, and a note says so (it was chosen for HBM2E)
    with pytest.warns(ConfigNote, match=r"hw.hbm: preset memory/lpddr5 in place of the "
                                        r"chip's memory/hbm2e keeps the chip's channels: 4"):
        swapped = hbm(chip)
    assert swapped["standard"] == lpddr5["standard"] and swapped["channels"] == 4
    chip["hw"]["hbm"]["channels"] = 2  # the block's own keys win
    assert hbm(chip)["channels"] == 2
    # the same as an override, also with the chip's preset replaced beside it
    assert hbm({"hw": {"preset": "npu/large_core_64"}}, ["hw.hbm.preset=memory/lpddr5"]) \
        == swapped
    small = hbm({"hw": {"preset": "npu/large_core_64"}},
                ["hw.preset=npu/small_core_256", "hw.hbm.preset=memory/lpddr5"])
    assert small["standard"] == lpddr5["standard"]
    assert small["channels"] == load_preset("npu/small_core_256")["hbm"]["channels"]
    # through a chip file of the user's that chains to it, its own keys for the block
    # stay (2 channels over the base chip's 4)
    (tmp_path / "my_chip.yaml").write_text("preset: npu/large_core_64\nname: mine\n")
    assert hbm({"hw": {"preset": "my_chip.yaml", "hbm": {"preset": "memory/lpddr5"}}}) \
        == swapped
    (tmp_path / "my_chip.yaml").write_text("preset: npu/large_core_64\nhbm: {channels: 2}\n")
    two = hbm({"hw": {"preset": "my_chip.yaml", "hbm": {"preset": "memory/hbm2e"}}})
    assert two["channels"] == 2
    assert two == hbm({"hw": {"preset": "my_chip.yaml"}})  # the chip's own memory again
    # a nested block swaps the same way
    (tmp_path / "sram.yaml").write_text("kind: sram\ncapacity_bytes: 8MiB\n")
    core = resolved({"hw": {"preset": "npu/large_core_64",
                            "core": {"sram": {"preset": str(tmp_path / "sram.yaml")}}}})
    assert core["core"]["sram"]["capacity_bytes"] == "8MiB"
    assert core["core"]["systolic"] == resolved({"hw": {"preset": "npu/large_core_64"}})[
        "core"]["systolic"]
    # a chip that spells its block out, without a preset, has it replaced whole
    spelled = resolved({"hw": {"preset": "npu/large_core_64"}})
    (tmp_path / "spelled.yaml").write_text(yaml.safe_dump(spelled))
    assert hbm({"hw": {"preset": "spelled.yaml", "hbm": {"preset": "memory/lpddr5"}}}) == \
        loader.resolve_presets({"preset": "memory/lpddr5"}, "x")
    # a block naming a preset that does not exist is reported where it is written
    with pytest.raises(ConfigError) as info:
        hbm({"hw": {"preset": "npu/large_core_64", "hbm": {"preset": "memory/lpdr5"}}})
    assert info.value.source == str(tmp_path / "s.yaml")
    [(path, message)] = info.value.problems
    assert path == "hw.hbm.preset" and "no preset named 'memory/lpdr5'" in message


def test_a_preset_of_another_category_or_a_scenario_as_hw_is_one_problem(tmp_path):
    # They were reported as a device missing every field and holding thirty unknown keys.
    quickstart = REPO_ROOT / "workloads/scenarios/quickstart.yaml"
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(quickstart, ["hw.preset=memory/hbm2"])
    assert len(info.value.problems) == 1
    path, message = info.value.problems[0]
    assert path == "hw.preset" and message.startswith(
        "'dram' (the kind of preset memory/hbm2) is a memory part, not a device")
    assert message.endswith("(from the override hw.preset=memory/hbm2)")
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(quickstart, hw_file=quickstart)
    assert info.value.problems == [("", "this is a scenario (it has hw:, workload:), not a "
                                        "hardware file; --hw expects what a scenario's hw: "
                                        "holds (kind: npu, ... or preset: npu/NAME)")]


def test_the_kept_keys_note_leaves_out_what_a_later_override_sets(tmp_path):
    # It said "keeps the chip's channels: 4" after --set hw.hbm.channels=2, and after
    # its own advice --set 'hw.hbm={preset: ...}' (overrides apply after resolution).
    import warnings

    from npusim.core.errors import ConfigNote

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"name": "s", "hw": {
        "preset": "npu/large_core_64", "hbm": {"preset": "memory/lpddr5"}}}))

    def notes(*overrides):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader.load_raw(scenario, overrides)
        return [str(w.message) for w in caught if issubclass(w.category, ConfigNote)]

    [note] = notes()
    assert note.startswith("hw.hbm: preset memory/lpddr5 in place of the chip's memory/hbm2e "
                           "keeps the chip's channels: 4 (chosen for memory/hbm2e)")
    assert notes("hw.hbm.rows=1024") == [note]  # a key the chip did not set: still kept
    assert notes("hw.hbm.channels=2") == []
    assert notes("hw.hbm={preset: memory/lpddr5}") == []
    assert notes("hw={preset: npu/large_core_64}") == []  # what holds the block, afresh
    # of two kept keys, the one not set again is still said
    (tmp_path / "chip.yaml").write_text("kind: npu\nhbm: {preset: memory/hbm2e, channels: 4, "
                                        "rows: 1024}\n")
    scenario.write_text(yaml.safe_dump({"name": "s", "hw": {
        "preset": str(tmp_path / "chip.yaml"), "hbm": {"preset": "memory/lpddr5"}}}))
    assert "keeps the chip's channels: 4, rows: 1024 (" in notes()[0]
    [note] = notes("hw.hbm.channels=2")
    assert "keeps the chip's rows: 1024 (chosen for memory/hbm2e)" in note
    # the chip's own memory file named again by another spelling is no swap to note
    (tmp_path / "mem.yaml").write_text("preset: memory/hbm2e\n")
    (tmp_path / "chip.yaml").write_text("kind: npu\nhbm: {preset: mem.yaml, channels: 4}\n")
    scenario.write_text(yaml.safe_dump({"name": "s", "hw": {
        "preset": str(tmp_path / "chip.yaml"), "hbm": {"preset": f"{tmp_path}/./mem.yaml"}}}))
    assert notes() == []


def test_the_kept_keys_note_is_an_ordinary_warning_of_the_loader_module(tmp_path):
    # Recorded and re-emitted, it lost its module (a -W filter naming it no longer
    # matched) and Python's once-per-text registry was cleared on every resolve.
    import warnings

    from npusim.core.errors import ConfigNote

    scenario = REPO_ROOT / "workloads/scenarios/quickstart.yaml"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=ConfigNote, module="npusim.config.loader")
        loader.load_scenario(scenario, ["hw.hbm.preset=memory/hbm3"])
    assert not [w for w in caught if issubclass(w.category, ConfigNote)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per text and place
        for _ in range(3):
            loader.load_scenario(scenario, ["hw.hbm.preset=memory/hbm3"])
    assert len([w for w in caught if issubclass(w.category, ConfigNote)]) == 1


def test_a_sweep_says_a_kept_keys_note_once_and_not_for_keys_its_points_set(tmp_path, capsys):
    from npusim.cli import main

    spec = tmp_path / "s.yaml"
    for axes, count in (("{workload.m: [64, 128]}", 1), ("{hw.hbm.channels: [2, 4]}", 0)):
        spec.write_text(f"base: {REPO_ROOT / 'workloads/scenarios/quickstart.yaml'}\n"
                        "set: {run.mode: analytic, hw.hbm.preset: memory/hbm3}\n"
                        f"axes: {axes}\n")
        with pytest.raises(SystemExit) as info:
            main(["sweep", str(spec), "--out", str(tmp_path / f"o{count}"), "-q",
                  "--executor", "serial"])
        err = capsys.readouterr().err
        assert info.value.code in (0, None), err
        assert err.count("note: hw.hbm: preset memory/hbm3 in place of the chip's "
                         "memory/hbm2e keeps the chip's channels: 4") == count, err


@pytest.mark.parametrize("override, given, held", [
    ("hw.hbm.preset=npu/large_core_64", "a device preset (kind: npu)", "a memory part (kind: dram)"),
    ("hw.hbm.preset=links/pcie4_x16", "an interconnect preset (kind: link)",
     "a memory part (kind: dram)"),
    ("hw.noc.preset=memory/hbm2e", "a memory preset (kind: dram)",
     "an interconnect part (kind: noc)"),
])
def test_a_blocks_preset_of_another_category_under_a_chip_preset_is_one_problem(
        override, given, held):
    # The chip's own preset for its HBM was reported as a cycle, a link's as 33 problems.
    scenario = REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64.yaml"
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(scenario, [override])
    [(path, message)] = info.value.problems
    block, preset = override.removesuffix(".preset=" + override.split("=")[1]), \
        override.split("=")[1]
    assert path == f"{block}.preset"
    assert message.startswith(f"{preset} is {given}, but the block holds {held}; expected a "
                              "preset of kind ")
    if block == "hw.hbm":
        assert "memory/hbm2e, memory/hbm3, memory/lpddr5" in message
    else:
        assert "(none is shipped: set the block's fields instead)" in message


def test_a_block_of_another_kind_is_one_problem_that_counts_the_rest(tmp_path):
    # A spelled-out chip (no preset to swap into) with a link's preset for its HBM: the
    # link's keys unknown to a DRAM and the DRAM's missing fields follow from the kind.
    scenario = REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64.yaml"
    hw = loader.load_raw(scenario)["hw"]
    for preset, kind, what in [("links/pcie4_x16", "link", "an interconnect part"),
                               ("npu/small_core_256", "npu", "a device")]:
        hw["hbm"] = {"preset": preset}
        (tmp_path / "hw.yaml").write_text(yaml.safe_dump(hw))
        with pytest.raises(ConfigError) as info:
            loader.load_scenario(scenario, hw_file=tmp_path / "hw.yaml")
        [(path, message)] = info.value.problems
        assert path == "hbm.kind"
        assert message.startswith(f"{kind!r} is {what}, not a memory part; expected kind: "
                                  "dram, or a preset of that kind (memory/ddr4_3200, ")
        assert re.search(r"; the block's \d\d other problems are not shown \(fix its kind "
                         r"first: most follow from it\)$", message), message
    # a kind of the same category, or no registered kind, is said as such; problems
    # outside the block stay
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(scenario, ["hw.noc.kind=link", "hw.hbm.kind=dramm",
                                        "hw.core.sram.capacity_bytes=-1"])
    problems = dict(info.value.problems)
    assert problems["hw.noc.kind"].startswith("'link' is another interconnect part; "
                                              "expected kind: noc (from the override")
    assert problems["hw.hbm.kind"].startswith("unexpected kind 'dramm'; expected kind: dram "
                                              "(from the override")
    assert "hw.core.sram.capacity_bytes" in problems and len(problems) == 3
    # a kind that an override's preset brought is that override's
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(scenario, ["hw.core.sram.preset=memory/hbm3"])
    [(path, message)] = info.value.problems
    assert path == "hw.core.sram.kind" and message.startswith("'dram' is another memory part")
    assert message.endswith("(from the override hw.core.sram.preset=memory/hbm3)")


def test_hw_may_name_a_shipped_preset(tmp_path, monkeypatch):
    # --hw npu/small_core_256 was "file not found"
    monkeypatch.chdir(tmp_path)
    quickstart = REPO_ROOT / "workloads/scenarios/quickstart.yaml"
    data = loader.load_raw(quickstart, hw_file="npu/small_core_256")
    assert data["hw"]["name"] == "small_core_256"
    with pytest.raises(ConfigError, match="file not found, nor a shipped preset of that name"):
        loader.load_raw(quickstart, hw_file="npu/no_such_chip")


def test_a_hw_file_with_its_section_key_says_to_unwrap_it(tmp_path):
    # A hardware file copied out of a scenario with its `hw:` line gave three problems
    # (core and noc missing, hw unknown) that hid the one mistake.
    quickstart = REPO_ROOT / "workloads/scenarios/quickstart.yaml"
    hw = tmp_path / "hw.yaml"
    hw.write_text("hw:\n  preset: npu/large_core_64\n  noc: {width: 8}\n")
    with pytest.raises(ConfigError) as info:
        loader.load_raw(quickstart, hw_file=hw)
    assert info.value.source == str(hw)
    [(path, message)] = info.value.problems
    assert path == "hw" and message.startswith("the hardware is inside an hw: key; --hw "
                                               "expects what a scenario's hw: holds")
    hw.write_text("hw:\n  preset: npu/large_core_64\n")
    with pytest.raises(ConfigError, match="remove the hw: line"):
        loader.load_raw(quickstart, hw_file=hw)


def test_errors_in_a_hw_file_name_that_file_and_its_own_field_paths(tmp_path):
    hw = tmp_path / "hw.yaml"
    hw.write_text("preset: npu/large_core_64\ncore: 5\n")
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(REPO_ROOT / "workloads/scenarios/quickstart.yaml", hw_file=hw)
    assert info.value.source == str(hw) and info.value.problems[0][0] == "core"
    hw.write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"expected a hardware mapping .*got \[1\]"):
        loader.load_scenario(REPO_ROOT / "workloads/scenarios/quickstart.yaml", hw_file=hw)


def test_a_broken_preset_file_is_named_with_its_line(tmp_path, monkeypatch):
    (tmp_path / "npu").mkdir()
    (tmp_path / "npu" / "broken.yaml").write_text("kind: npu\ncore: [\n")
    monkeypatch.setenv("NPUSIM_HWCONFIGS", str(tmp_path))
    with pytest.raises(ConfigError, match=r"hw.preset: in .*npu/broken.yaml, line 3, column 1: YAML syntax"):
        loader.resolve_presets({"hw": {"preset": "npu/broken"}}, "s.yaml")


def test_error_paths_follow_what_the_user_wrote():
    base = loader.load_raw(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml")

    def problems(trace):
        data = {**base, "workload": {**base["workload"], "trace": trace}}
        with pytest.raises(ConfigError) as info:
            loader.scenario_from_dict(data)
        return info.value.problems

    shorthand = problems({"num_requests": 4, "arrival": {"kind": "poisson", "rate_per_s": 1},
                          "prompt": 0, "output": 5})
    assert shorthand[0][0] == "workload.trace.prompt"  # not ...prompt.fixed.tokens
    extra = problems({"num_requests": 4, "arrival": {"kind": "poisson", "rate_per_s": 1, "bogus": 2},
                      "prompt": 5, "output": 5})
    assert extra == [("workload.trace.arrival.bogus", "unknown key (known keys: kind, rate_per_s)")]


def test_a_check_across_a_block_is_not_followed_by_the_whole_block():
    data = loader.load_raw(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml",
                           ["workload.pd.dp=2"])
    with pytest.raises(ConfigError) as info:
        loader.scenario_from_dict(data)
    (path, message), = info.value.problems
    assert path == "workload.pd" and "pd.dp=2: only mode: fusion" in message
    assert "got {" not in message


@pytest.mark.parametrize("value", ["/nonexistent", ""])
def test_a_preset_root_variable_that_is_not_a_directory_is_named(value, monkeypatch):
    monkeypatch.setenv("NPUSIM_HWCONFIGS", value)
    with pytest.raises(ConfigError, match=r"\$NPUSIM_HWCONFIGS='.*' is not a directory; hardware presets"):
        loader.resolve_presets({"hw": {"preset": "npu/large_core_64"}}, "s.yaml")


def test_a_bad_choice_that_is_part_of_an_allowed_one_is_still_shown():
    class Run(PartConfig):
        kind: Literal["run"] = "run"
        mode: Literal["tlm", "analytic"] = "tlm"

    with pytest.raises(ConfigError) as info:
        loader.validate(Run, {"mode": "analy"}, "s.yaml")
    assert "(got 'analy')" in str(info.value)


def test_running_a_sweep_spec_as_a_scenario_says_what_it_is():
    # It used to list five schema errors (base: unknown key, hw: missing, ...).
    with pytest.raises(ConfigError, match=r"looks like a sweep spec .* `npusim sweep`") as info:
        loader.load_scenario(REPO_ROOT / "workloads/sweeps/quickstart_grid.yaml")
    assert len(info.value.problems) == 1


def test_a_key_another_kind_takes_names_where_this_kind_keeps_it():
    # workload.tp on a serving scenario said only "llm takes it"
    with pytest.raises(ConfigError) as info:
        loader.load_scenario(REPO_ROOT / "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml",
                             ["workload.tp=4"])
    (path, message), = info.value.problems
    assert path == "workload.tp"
    assert "llm takes it; kind: serving has it as workload.pd.tp (known keys" in message
