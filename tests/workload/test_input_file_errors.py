"""Model configs and request traces a user saved or wrote the wrong way (UTF-16, a JSON
array, a multimodal config, a missing empirical file): each error names the file, the
field or line and says what to write instead."""

import json
from pathlib import Path

import pytest

from npusim.config.loader import validate
from npusim.core.errors import ConfigError, TraceError
from npusim.workload.models import load_model
from npusim.workload.trace_spec import TraceSpec
from npusim.workload.traces import read_trace

pytestmark = pytest.mark.unit


def _base() -> dict:
    return json.loads((Path(__file__).parents[2] / "workloads/models/qwen3_4b.json").read_text())


def _write(tmp_path, data) -> Path:
    path = tmp_path / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_utf16_config_says_so(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(json.dumps(_base()).encode("utf-16"))
    with pytest.raises(ConfigError, match=r"not a UTF-8 text file \(byte 0xff at offset 0\); "
                                          r"expected a JSON config.json \(it looks like UTF-16"):
        load_model(path)


def test_a_multimodal_config_says_its_language_model_is_in_text_config(tmp_path):
    # Gemma 3 / Llama 4 / Qwen2.5-VL keep the decoder under text_config: the error listed
    # five "required field is missing" without saying where the fields were.
    fields = ("hidden_size", "num_hidden_layers", "num_attention_heads")
    data = {"model_type": "gemma3", "text_config": {k: v for k, v in _base().items()
                                                    if k in fields}}
    with pytest.raises(ConfigError) as info:
        load_model(_write(tmp_path, data))
    ((path, message),) = info.value.problems
    assert path == "text_config"
    assert message.startswith("the language model's fields (hidden_size, num_attention_heads, "
                              "num_hidden_layers) are inside text_config")
    assert "expected them at the top level" in message
    del data["text_config"]["hidden_size"]
    data["text_config"] = {}  # nothing of the decoder there: the plain missing fields
    with pytest.raises(ConfigError) as info:
        load_model(_write(tmp_path, data))
    assert "text_config" not in dict(info.value.problems)


def test_an_empirical_file_that_is_not_there_is_named_at_its_field(tmp_path, monkeypatch):
    # "nothere.csv: trace file not found" named no field (workload.trace.prompt.file), and
    # a checkout-relative file (traces/...), found for workload.trace.file, was not found.
    spec = {"num_requests": 3, "arrival": {"kind": "fixed", "interval_s": 1}, "output": 4,
            "prompt": {"kind": "empirical", "file": "nothere.csv"}}
    with pytest.raises(TraceError) as info:
        validate(TraceSpec, spec, "s.yaml").build()
    assert str(info.value).startswith("workload.trace.prompt.file: nothere.csv: trace file "
                                      "not found (looked ")
    with pytest.raises(TraceError, match=r"^workload\.trace\.prompt\.file: .* is a directory"):
        validate(TraceSpec, {**spec, "prompt": {"kind": "empirical", "file": str(tmp_path)}},
                 "s.yaml").build()
    monkeypatch.chdir(tmp_path)  # not the checkout
    shipped = {**spec, "prompt": {"kind": "empirical", "file": "traces/ratio_1_1_32.csv"}}
    assert {r.prompt_tokens for r in validate(TraceSpec, shipped, "s.yaml").build()} == {100}


def test_a_utf16_trace_says_so(tmp_path):
    # "NUL byte at column 4; expected a text trace file, not binary data" for a trace
    # PowerShell saved as UTF-16 (a gzip or a NUL further down stays as it was).
    path = tmp_path / "t.csv"
    path.write_bytes("id,arrival_ps,prompt_tokens,output_tokens\na,0,16,4\n".encode("utf-16"))
    with pytest.raises(TraceError, match=r"t\.csv:1: NUL byte at column \d+; .*it looks like "
                                         r"UTF-16, .*re-save it as UTF-8"):
        read_trace(path)
    path.write_bytes(b"id,arrival_ps,prompt_tokens,output_tokens\na,0,1\x006,4\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert "UTF-16" not in str(info.value)


def test_a_json_array_of_requests_says_to_write_json_lines(tmp_path):
    # json.dump(requests, f, indent=2) gave "invalid JSON (Expecting value at column 1)"
    rows = [{"arrival_ps": 0, "prompt_tokens": 16, "output_tokens": 4},
            {"arrival_ps": 5, "prompt_tokens": 16, "output_tokens": 4}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(rows, indent=2))
    with pytest.raises(TraceError, match=r"t\.json:1: invalid JSON \(Expecting value at the end "
                                         r"of the line\); "
                                         r"expected one JSON object per line \(this looks like one "
                                         r"JSON array: write JSON Lines"):
        read_trace(path)
    path.write_text(json.dumps(rows))
    with pytest.raises(TraceError, match=r"t\.json:1: got a JSON list; expected one JSON object "
                                         r"per line \(a whole trace as one array"):
        read_trace(path)
    # an array whose first object opens on the bracket's line (json.dumps(rows)[:-1] cut)
    path.write_text("[" + json.dumps(rows[0]) + ",\n" + json.dumps(rows[1]) + "]\n")
    with pytest.raises(TraceError, match=r"t\.json:1: invalid JSON .*this looks like one "
                                         r"JSON array"):
        read_trace(path)
    path.write_text(json.dumps(rows[0]) + "\n[1, 2]\n")
    with pytest.raises(TraceError, match=r"t\.json:2: got a JSON list; expected one JSON object "
                                         r"per line$"):
        read_trace(path)


@pytest.mark.unit
def test_hash_block_tokens_on_a_trace_without_hashes_is_named_at_its_setting(tmp_path):
    # the message named the file and the value but not the setting that asked for hashes
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_ps,prompt_tokens,output_tokens\n0,16,4\n")
    spec = validate(TraceSpec, {"file": str(trace), "hash_block_tokens": 16}, "s.yaml")
    with pytest.raises(TraceError, match=r": workload\.trace\.hash_block_tokens = 16, but no "
                                         r"request of the file has hash_ids"):
        spec.build()
    with pytest.raises(TraceError, match=r"t\.csv: hash_block_tokens = 16, but"):
        read_trace(trace, hash_block_tokens=16)  # the API's own argument, by its name


def test_a_json_line_cut_short_is_said_to_end_too_soon(tmp_path):
    # json.loads counts the line's newline, so a cut line failed "at column 1" (of the
    # line after it), pointing at nothing
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_ps": 0, "prompt_tokens": 16, "output_tokens": 4}\n'
                    '{"arrival_ps": 5, "prompt_tokens": 16,\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:2: invalid JSON \(Expecting property name "
                                         r"enclosed in double quotes at the end of the line\)"):
        read_trace(path)
    path.write_text('{"arrival_ps": 0, "prompt_tokens": 16 "output_tokens": 4}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:1: invalid JSON \(Expecting ',' delimiter "
                                         r"at column 39\)"):
        read_trace(path)
