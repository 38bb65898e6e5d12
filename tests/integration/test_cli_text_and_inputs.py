"""Text no file can hold, and outputs that would replace the run's own inputs: what a
fuzzing review (2026-11-27) found ending in a traceback after the whole run, or in a
previous run's files silently overwritten."""

import json

import pytest

from npusim.cli import main
from npusim.config.presets import REPO_ROOT, parse_yaml

pytestmark = pytest.mark.component
FUSION = REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml"
UNENCODABLE = "holds a character that cannot be written as UTF-8"


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code or 0, captured.out, captured.err


def test_a_lone_surrogate_in_a_scenario_is_named_by_its_field(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(FUSION.read_text() + '\nx-note: ["fine", "\\ud800"]\n')
    code, _, err = run_cli(["run", scenario, "--out", tmp_path / "out"], capsys)
    assert code == 2 and f"s.yaml: invalid configuration" in err
    assert f"x-note[1]: {UNENCODABLE}" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override, where", [
    ('workload.model="\\ud800"', "workload.model"),       # a YAML escape in the value
    ("workload.model=\udcff", "'workload.model=\\udcff'"),  # a command-line byte 0xff
])
def test_a_lone_surrogate_in_an_override_is_blamed_on_set(override, where, tmp_path, capsys):
    code, _, err = run_cli(["run", FUSION, "--set", override, "--out", tmp_path], capsys)
    assert code == 2 and f"--set: invalid configuration" in err and f"{where}: {UNENCODABLE}" in err


def test_a_surrogate_pair_is_the_character_it_encodes():
    # json.dumps writes U+1F600 as "\ud83d\ude00"; YAML loads the halves, JSON joins them
    assert parse_yaml(json.dumps({"name": "\U0001F600"})) == {"name": "\U0001F600"}
    assert parse_yaml('a: ["\\ud83d\\ude00", "\\ud800"]') == {"a": ["\U0001F600", "\ud800"]}


def test_a_key_written_twice_once_as_an_escaped_pair_is_refused():
    import yaml

    with pytest.raises(yaml.YAMLError, match=r"key '\\U0001f600' appears twice"):
        parse_yaml('a: {"\\ud83d\\ude00": 1, "\U0001F600": 2}')


def test_a_lone_surrogate_in_a_jsonl_trace_names_line_and_column(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "arrival_ps": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
                     '{"id": "\\ud800", "arrival_ps": 1, "prompt_tokens": 10, "output_tokens": 5}\n')
    code, _, err = run_cli(["run", FUSION, "--trace", trace, "--mode", "analytic",
                            "--out", tmp_path / "out"], capsys)
    assert code == 2 and f"t.jsonl:2: column 'id' {UNENCODABLE}" in err
    assert not (tmp_path / "out").exists()
    trace.write_text('{"\\udc80": 1, "arrival_ps": 0, "prompt_tokens": 10, "output_tokens": 5}\n')
    code, _, err = run_cli(["run", FUSION, "--trace", trace, "--out", tmp_path / "out"], capsys)
    assert code == 2 and f"t.jsonl:1: a column name ('\\udc80') {UNENCODABLE}" in err


def test_an_out_path_that_is_not_utf8_is_refused_before_the_run(tmp_path, capsys):
    code, _, err = run_cli(["run", FUSION, "--out", f"{tmp_path}/l\udce9"], capsys)
    assert code == 2 and "--out: the path" in err and "holds bytes that are not UTF-8" in err


def test_a_run_does_not_overwrite_the_trace_it_reads(tmp_path, capsys):
    out = tmp_path / "out"
    code, _, _ = run_cli(["run", FUSION, "--mode", "analytic", "--out", out, "-q",
                          "--set", "workload.trace.limit=3"], capsys)
    assert code == 0
    before = (out / "requests.csv").read_bytes()
    # a previous run's requests.csv is a valid trace: replacing it would leave that
    # directory's config naming a trace whose rows changed
    code, _, err = run_cli(["run", out / "config.resolved.yaml", "--trace", out / "requests.csv",
                            "--out", out, "-q"], capsys)
    assert code == 2 and f"--out {out}: would replace the trace {out / 'requests.csv'}" in err
    linked = tmp_path / "elsewhere.csv"          # the same file under another name
    linked.hardlink_to(out / "requests.csv")
    code, _, err = run_cli(["run", FUSION, "--trace", linked, "--out", out, "-q"], capsys)
    assert code == 2 and f"would replace the trace {linked}" in err
    assert (out / "requests.csv").read_bytes() == before
    # its config.resolved.yaml may be rerun in place (rewritten with what the run resolved)
    code, _, _ = run_cli(["run", out / "config.resolved.yaml", "--out", out, "-q"], capsys)
    assert code == 0 and (out / "requests.csv").read_bytes() == before
    # and with the old trace into another directory it is an ordinary rerun
    code, _, _ = run_cli(["run", out / "config.resolved.yaml", "--trace", out / "requests.csv",
                          "--out", tmp_path / "again", "-q"], capsys)
    assert code == 0 and (tmp_path / "again" / "requests.csv").read_text().count("\n") == 4


@pytest.mark.parametrize("offset", ["+00:60", "+25:00", "-14:01", "+2359"])
def test_a_time_zone_offset_out_of_range_is_refused(offset, tmp_path):
    from npusim.core.errors import TraceError
    from npusim.workload.trace_readers import read_trace

    trace = tmp_path / "azure.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900+00:00,10,5\n"
                     f"2023-11-16 18:15:47.6805900{offset},10,5\n")
    with pytest.raises(TraceError, match=r"azure.csv:3: column 'TIMESTAMP': .*expected an "
                                         r"offset from -14:00 to \+14:00"):
        read_trace(trace)


def test_time_zone_offsets_in_range_move_the_arrival():
    from npusim.workload.trace_rows import Row, timestamp_cell

    utc = timestamp_cell(Row(1, {"t": "2023-11-16 18:15:46+00:00"}), "t", "x")
    assert timestamp_cell(Row(1, {"t": "2023-11-16 20:15:46+02:00"}), "t", "x") == utc
    assert timestamp_cell(Row(1, {"t": "2023-11-16 04:15:46-14:00"}), "t", "x") == utc


def test_a_leap_second_is_read_only_where_one_can_be():
    # 18:15:60 was read as 18:16:00 and the next row, a correct 18:16:00, was blamed
    from npusim.core.errors import TraceError
    from npusim.workload.trace_rows import Row, timestamp_cell

    def at(text):
        return timestamp_cell(Row(2, {"t": text}), "t", "azure.csv:2")

    assert at("2016-12-31 23:59:60") == at("2017-01-01 00:00:00")
    assert at("2017-01-01 00:59:60+01:00") == at("2017-01-01 00:00:00")  # 23:59:60 UTC
    with pytest.raises(TraceError, match=r"azure.csv:2: column 't': got '2023-11-16 "
                                         r"18:15:60'; expected seconds below 60 \(a leap "
                                         r"second, :60, only ends a UTC day: 23:59:60\)"):
        at("2023-11-16 18:15:60")


def test_a_bad_override_is_said_to_come_from_the_command_line(tmp_path, capsys):
    code, _, err = run_cli(["run", FUSION, "--out", tmp_path, "--set", "workload.trace.limt=5",
                            "--set", "workload.scheduler.max_batch_size=0"], capsys)
    assert code == 2 and "qwen3_4b_npu64_pd_fusion.yaml: invalid configuration (2 problems)" in err
    assert "workload.trace.limt: unknown key; did you mean 'limit'?" in err
    assert "(from the override workload.trace.limt=5)" in err
    assert "(got 0) (from the override workload.scheduler.max_batch_size=0)" in err
    # a problem in the file itself gets no such note
    scenario = tmp_path / "s.yaml"
    scenario.write_text(FUSION.read_text().replace("kind: serving", "kind: serving\n  tp: 0", 1))
    code, _, err = run_cli(["run", scenario, "--out", tmp_path, "--set", "workload.trace.limit=5"],
                           capsys)
    assert code == 2 and "from the override" not in err


def test_the_override_note_follows_the_hardware_file_and_not_the_mode_option(tmp_path, capsys):
    hw = tmp_path / "hw.yaml"
    hw.write_text("preset: npu/large_core_64\n")
    code, _, err = run_cli(["run", FUSION, "--hw", hw, "--set", "hw.noc.width=-5",
                            "--out", tmp_path], capsys)
    assert code == 2 and f"{hw}: invalid configuration" in err
    assert "noc.width: Input should be greater than or equal to 1 (got -5) (from the override " \
           "hw.noc.width=-5)" in err
    code, _, err = run_cli(["run", FUSION, "--mode", "bogus", "--out", tmp_path], capsys)
    assert code == 2 and err.rstrip().endswith("--mode: Input should be 'tlm' or 'analytic' "
                                               "(got 'bogus')")


def test_an_override_under_a_value_says_what_the_scenario_holds_there(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\nhw: {preset: npu/large_core_64}\nworkload: 5\n")
    code, _, err = run_cli(["run", scenario, "--set", "workload.trace.limit=3",
                            "--out", tmp_path / "out"], capsys)
    assert code == 2 and "workload.trace: cannot set 'workload.trace.limit=3': workload is 5 " \
                         "in the scenario, not a mapping" in err
