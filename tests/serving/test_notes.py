"""Settings a serving run cannot act on are said (metrics.json ``notes``, printed by
``npusim run`` and counted by ``npusim sweep``), not silently ignored; a run whose
settings all act has none."""

import json

import pytest

from npusim.api import simulate
from npusim.cli import main
from npusim.config.presets import REPO_ROOT
from npusim.sweep import run_sweep, spec_from_dict

pytestmark = pytest.mark.component

FUSION = str(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml")
DISAGG = str(REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_disagg.yaml")
FAST = ["run.mode=analytic", "workload.trace.limit=4"]
HOST = ("hw.host={link: {preset: links/pcie4_x16}, memory: {preset: memory/ddr4_3200, "
        "channels: 4}}")


def notes(scenario, *overrides):
    return simulate(scenario, overrides=[*FAST, *overrides]).metrics["notes"]


def test_the_shipped_scenarios_have_no_notes():
    assert notes(FUSION) == [] and notes(DISAGG) == []


@pytest.mark.parametrize("overrides, fragment", [
    (["workload.scheduler.order=priority"],
     "workload.scheduler.order: priority, but every request has priority 0"),
    (["workload.router=round_robin"],
     "workload.router: round_robin has one replica to route to (pd.dp = 1)"),
    (["workload.trace.limit=1000"],
     "workload.trace.limit: 1,000 is more than the trace's 32 requests"),
    (["workload.kv_block_tokens=4096"],
     "workload.kv_block_tokens: 4,096 is more than the longest request (200 tokens)"),
    (["workload.preemption=swap", HOST],
     "workload.preemption: swap, but nothing is preempted: kv_reservation: max_length"),
    # chunked_prefill caps iterations at the token budget (the field said it sized the
    # buffers and capped the batch: it did neither)
    (["workload.scheduler.max_batch_tokens=65536"],
     "workload.scheduler.max_batch_tokens: 65,536, but chunked_prefill caps an iteration "
     "at token_budget (512 tokens)"),
    # the static scheduler never has more than one batch under way
    (["workload.scheduler={kind: static, max_batch_size: 8, max_micro_batches_in_flight: 1}"],
     "workload.scheduler.max_micro_batches_in_flight: the static scheduler runs one batch"),
    (["workload.trace={arrival: {kind: fixed, rate_per_s: 4}, prompt: 64, output: 2, "
      "num_requests: 4, shared_prefix: {groups: 2, tokens: 32}}"],
     "workload.trace.shared_prefix gives requests common prompt blocks, but "
     "workload.prefix_caching is false"),
])
def test_a_setting_without_effect_is_noted(overrides, fragment):
    found = notes(FUSION, *overrides)
    assert len(found) == 1 and fragment in found[0]


def test_settings_that_act_are_not_noted(tmp_path):
    # two replicas to route between; swap under incremental reservation; a block below
    # the longest request; priorities served by priority
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_ps,prompt_tokens,output_tokens,priority\n"
                     + "".join(f"r{i},{i * 1000},100,10,{i % 2}\n" for i in range(4)))
    assert notes(FUSION, f"workload.trace.file={trace}", "workload.pd.dp=2",
                 "workload.router=round_robin", "workload.kv_reservation=incremental",
                 "workload.preemption=swap", HOST, "workload.kv_block_tokens=16",
                 "workload.scheduler.order=priority") == []
    # the same priority classes served by arrival are noted
    found = notes(FUSION, f"workload.trace.file={trace}")
    assert found == ["the trace has 2 priority classes and workload.scheduler.order is fcfs: "
                     "served by arrival (by_priority in metrics.json shows how each class "
                     "fared); order: priority serves lower values first"]


def test_pipeline_options_on_one_stage_replicas_are_noted():
    # 16 cores per replica at TP 16: one stage each
    found = notes(FUSION, "workload.pd.tp=16", "workload.pd.dp=4",
                  "workload.scheduler.fill_pipeline=true", "workload.scheduler.pipeline_chunks=true",
                  "workload.scheduler.decode_lanes=sticky")
    assert [note.split(":")[0] for note in found] == [
        "workload.scheduler.fill_pipeline", "workload.scheduler.decode_lanes",
        "workload.scheduler.pipeline_chunks"]
    assert all("each replica has one pipeline stage: no effect" in note for note in found)
    # the same options on the shipped 4-stage pipeline act
    assert notes(FUSION, "workload.scheduler.fill_pipeline=true",
                 "workload.scheduler.pipeline_chunks=true") == []
    # a one-stage decode pool with its own option names where it was set
    found = notes(DISAGG, "workload.pd.decode_cores=7",
                  "workload.pd.decode_scheduler={fill_pipeline: true}")
    assert found[0].startswith("workload.pd.decode_scheduler.fill_pipeline: true splits "
                               "decodes over the stages, and the replica has one")


def test_a_decode_pools_note_names_the_field_where_it_was_written():
    # max_batch_tokens written in workload.scheduler is inherited by the decode pool:
    # its note names workload.scheduler, once, not the decode scheduler
    found = notes(DISAGG, "workload.scheduler={kind: chunked_prefill, max_batch_size: 64, "
                          "max_batch_tokens: 1024}",
                  "workload.pd.decode_scheduler={max_batch_size: 32}")
    assert len(found) == 1 and found[0].startswith("workload.scheduler.max_batch_tokens: 1,024")
    # the static scheduler's option on a one-stage replica is said once, for the static
    # scheduler (the one-stage note would be a second reason for the same field)
    found = notes(FUSION, "workload.pd.tp=16", "workload.pd.dp=4",
                  "workload.scheduler={kind: static, max_batch_size: 8, fill_pipeline: true}")
    assert found == ["workload.scheduler.fill_pipeline: the static scheduler runs one batch "
                     "at a time through the whole pipeline: no effect"]


def test_chunked_prefill_decodes_at_most_the_budget_so_max_batch_tokens_above_it_is_inert():
    # A decode takes a unit of the budget: the budget bounds an iteration's decodes and
    # the backend's decode timing grid, whatever max_batch_tokens says above it.
    from npusim.serving.schedulers.chunked_prefill import ChunkedPrefillConfig

    config = ChunkedPrefillConfig(token_budget=48, prefill_chunk=48, max_batch_size=64)
    assert config.decode_slots == 48
    assert config.model_copy(update={"max_batch_tokens": 48}).decode_slots == 48
    assert config.model_copy(update={"token_budget": 128, "prefill_chunk": 128,
                                     "max_batch_size": 16}).decode_slots == 16
    common = ["workload.scheduler.token_budget=48", "workload.scheduler.prefill_chunk=48",
              "workload.trace.limit=12"]
    noted = simulate(FUSION, overrides=[*FAST, *common,
                                        "workload.scheduler.max_batch_tokens=48"]).metrics
    plain = simulate(FUSION, overrides=[*FAST, *common]).metrics
    assert noted["notes"][0].startswith("workload.scheduler.max_batch_tokens: 48, but")
    assert {k: v for k, v in noted.items() if k != "notes"} == \
        {k: v for k, v in plain.items() if k != "notes"}


def test_disaggregation_names_its_own_router_field():
    assert "(pd.prefill_dp = 1)" in notes(DISAGG, "workload.router=least_outstanding")[0]


def test_npusim_run_prints_the_notes_even_when_quiet(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", FUSION, "-q", "--mode", "analytic", "--out", str(tmp_path),
              "--set", "workload.trace.limit=1000"])
    err = capsys.readouterr().err
    assert info.value.code in (0, None)
    assert "note: workload.trace.limit: 1,000 is more than" in err
    assert json.loads((tmp_path / "metrics.json").read_text())["notes"][0].startswith(
        "workload.trace.limit")


def test_a_sweep_counts_each_note_over_its_points_and_keeps_the_column(tmp_path):
    spec = spec_from_dict({"base": FUSION, "set": {"run.mode": "analytic",
                                                   "workload.trace.limit": 4},
                           "metrics": ["ttft_ms_p90"],
                           "axes": [{"grid": {"workload.router": ["shared_queue",
                                                                  "round_robin"]}}]},
                          "notes.yaml")
    summary = run_sweep(spec, tmp_path / "out", executor="serial")
    assert summary.ok == 2
    ((note, points),) = summary.notes.items()
    assert note.startswith("workload.router: round_robin") and points == 1
    from npusim.sweep import load_results

    frame = load_results(tmp_path / "out")
    # a metrics filter keeps the notes: they explain the numbers it keeps
    assert {"metrics.ttft_ms_p90", "metrics.notes"} <= set(frame.columns)
    assert set(frame["metrics.notes"]) == {"[]", json.dumps([note])}


def test_a_capacity_search_keeps_and_prints_the_notes(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["capacity", FUSION, "-q", "--mode", "analytic", "--max-probes", "2",
              "--out", str(tmp_path), "--set", "workload.router=round_robin",
              "--set", "workload.trace.limit=8"])
    assert info.value.code in (0, None)
    assert "note: workload.router: round_robin has one replica" in capsys.readouterr().err
    saved = json.loads((tmp_path / "capacity.json").read_text())["settings_notes"]
    assert len(saved) == 1 and saved[0].startswith("workload.router: round_robin")
