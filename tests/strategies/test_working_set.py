"""The partitions' SRAM working set (``PartitionCost.buffer_bytes``) and the plan that
reserves it (``workload.sram_buffers: working_set``).

The buffer formula is checked against the lowered graph itself: timed by the analytic
executor, every rotating block a core receives (or loads) occupies SRAM from the moment
it starts to arrive until the last task using it (its compute and its forward) ends;
the most a core ever holds at once must be within the reserved buffers."""

from __future__ import annotations

from collections import defaultdict

import pytest

from npusim.api import simulate
from npusim.cli import main
from npusim.core.errors import MappingError
from npusim.executor.analytic import run_analytic
from npusim.executor.base import prepare
from npusim.mapping.taskgraph import ComputeTask, TransferTask
from npusim.strategies.npu.partition import GemmSpec, grid_of

from tests.strategies.test_partition import device, lower, place  # noqa: F401 (fixture)

pytestmark = pytest.mark.component

LLM = "workloads/scenarios/qwen3_4b_npu64.yaml"
SHORT = ["run.mode=analytic", "run.trace=false", "workload.output_len=2"]
ROTATING = [{"kind": "mn"}, {"kind": "mn", "rotate": "input"}, {"kind": "mnk"},
            {"kind": "mnk", "rotate": "input"}]


def _core(endpoint: str) -> int:
    return int(endpoint.split(".")[0][4:])


def peak_rotation_bytes(graph, run, loads: bool = True) -> dict[int, int]:
    """Per core, the most bytes of rotating blocks (NoC receives of the rotation, HBM
    loads) held at once: each from its transfer's start until the last task *on that
    core* using it ends (its compute there and its forward from there; a send is also
    its sender's buffer, whose later waits on it are not this core's use)."""
    users: dict[int, list] = defaultdict(list)
    for task in graph.tasks:
        for dep in task.deps:
            users[dep].append(task)
    last_compute: dict[int, int] = defaultdict(int)
    for task in graph.tasks:
        if isinstance(task, ComputeTask):
            last_compute[_core(task.unit)] = max(last_compute[_core(task.unit)], run.ends[task.id])
    events: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for task in graph.tasks:
        if not isinstance(task, TransferTask) or " row" in task.name:  # (MNK's AllReduce)
            continue
        if not loads and task.src.endswith(".hbm"):
            continue
        core = _core(task.dst)

        def on_core(user, core=core) -> bool:
            if isinstance(user, ComputeTask):
                return _core(user.unit) == core
            return (isinstance(user, TransferTask) and _core(user.src) == core
                    and " row" not in user.name)

        released = max((run.ends[u.id] for u in users[task.id] if on_core(u)),
                       default=run.ends[task.id])
        if ":load W." in task.name:  # a stationary slice (rotate: input): every step uses it
            released = last_compute[core]
        events[core] += [(run.starts[task.id], task.size_bytes), (released, -task.size_bytes)]
    peaks = {}
    for core, changes in events.items():
        held = peak = 0
        for _, change in sorted(changes, key=lambda e: (e[0], e[1])):  # frees first on a tie
            held += change
            peak = max(peak, held)
        peaks[core] = peak
    return peaks


@pytest.mark.parametrize("strategy", ROTATING + [{"kind": "mnk", "rows": 1},
                                                 {"kind": "mnk", "rows": 4}], ids=str)
@pytest.mark.parametrize("placement, tp", [("ring", 4), ("mesh2d", 4), ("linear_seq", 4),
                                           ("linear_seq", 1)])
@pytest.mark.parametrize("weights_in", ["sram", "hbm"])
@pytest.mark.parametrize("shape", [(512, 1024, 2048), (7, 515, 257)], ids=str)
def test_rotation_never_holds_more_than_its_buffer_bytes(device, strategy, placement, tp,  # noqa: F811
                                                         weights_in, shape):
    if strategy.get("rows", 0) > tp:
        pytest.skip("more grid rows than cores")
    m, k, n = shape
    gemm = GemmSpec("g", m=m, k=k, n=n, weights_in=weights_in, weight_tile_bytes=128 << 10)
    group = place(placement, tp)
    graph, _, partition = lower(strategy, gemm, group)
    run = run_analytic(prepare(graph, device), device)
    cost = partition.cost(gemm, group, 8)
    rows = tp if strategy["kind"] == "mn" else len(grid_of(group, strategy.get("rows", 0)))
    # alone on its ring, a streamed weight block goes through the shared tile buffers
    tiled = rows == 1 and strategy.get("rotate", "weight") == "weight" and weights_in == "hbm"
    peaks = peak_rotation_bytes(run.graph, run, loads=not tiled)
    assert max(peaks.values(), default=0) <= cost.buffer_bytes
    if tiled:
        held = peak_rotation_bytes(run.graph, run)
        largest = max(t.size_bytes for t in run.graph.tasks
                      if isinstance(t, TransferTask) and t.src.endswith(".hbm"))
        assert cost.buffer_bytes == 0 and 0 < max(held.values()) <= 2 * largest
    if strategy["kind"] == "mn" and tp > 2 and shape[0] > 8:  # some core fills most of it
        assert max(peaks.values()) > cost.buffer_bytes // 2


def test_buffer_bytes_formulas():
    gemm = GemmSpec("g", m=512, k=1024, n=2048, dtype_bytes=2)
    streamed = GemmSpec("g", m=512, k=1024, n=2048, dtype_bytes=2, weights_in="hbm")
    ring, alone = place("ring", 4), place("linear_seq", 1)
    from npusim.strategies.npu.partition import get_partition

    def buffers(strategy, spec, group):
        return get_partition(strategy).cost(spec, group, 8).buffer_bytes

    weight_block, input_block = 1024 * 512 * 2, 128 * 1024 * 2
    assert buffers("mn", gemm, ring) == 2 * weight_block
    assert buffers({"kind": "mn", "rotate": "input"}, gemm, ring) == 2 * input_block
    # a streamed stationary slice is loaded whole for every step
    assert buffers({"kind": "mn", "rotate": "input"}, streamed, ring) == 2 * input_block + weight_block
    # one core rotates nothing: its streamed weights go through the shared tile buffers
    assert buffers("mn", gemm, alone) == buffers({"kind": "mn", "rotate": "input"}, gemm, alone) == 0
    assert buffers("mn", streamed, alone) == 0
    # the K partition streams through the shared tile buffers
    assert buffers("k", streamed, ring) == 0
    # MNK on a 2 x 2 grid: blocks of k/2 x n/2, one received (two with the own one streamed)
    assert buffers("mnk", gemm, place("mesh2d", 4)) == 512 * 1024 * 2
    assert buffers("mnk", streamed, place("mesh2d", 4)) == 2 * 512 * 1024 * 2
    cost = get_partition("k").cost(gemm, ring, 8)
    assert cost.working_set_bytes == 512 * 256 * 2 + 512 * 2048 * 2


def memory(*more: str) -> list[dict]:
    return simulate(LLM, overrides=[*SHORT, *more]).metrics["memory_by_stage"]


@pytest.mark.parametrize("partition", ["k", "mn"])
def test_working_set_reserves_what_the_default_reports(partition):
    default = memory("workload.prompt_len=1024", f"workload.partition={partition}")
    exact = memory("workload.prompt_len=1024", f"workload.partition={partition}",
                   "workload.sram_buffers=working_set")
    for loose, tight in zip(default, exact):
        # the default reserves two activations and reports the larger working set ...
        assert loose["sram_buffer_working_set_bytes"] > loose["sram_buffer_bytes"]
        # ... which working_set reserves, leaving fewer weights in SRAM
        assert tight["sram_buffer_bytes"] == loose["sram_buffer_working_set_bytes"]
        assert tight["sram_weight_bytes"] < loose["sram_weight_bytes"]


def test_a_working_set_larger_than_sram_names_the_gemm_and_the_settings():
    with pytest.raises(MappingError) as error:
        simulate(LLM, overrides=[*SHORT, "workload.prompt_len=4096",
                                 "workload.sram_buffers=working_set"])
    message = str(error.value)
    for part in ("L0.gate_proj under the k partition needs 81 MiB per core", "4096 tokens",
                 "64 MiB of SRAM", "workload.prefill_chunk", "workload.sram_buffers = activations"):
        assert part in message
    # prefill chunks bring it back within SRAM
    assert simulate(LLM, overrides=[*SHORT, "workload.prompt_len=4096", "workload.prefill_chunk=1024",
                                    "workload.sram_buffers=working_set"]).metrics["ttft_ps"] > 0


def test_serving_pools_plan_with_the_setting(tmp_path):
    base = ["run", "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml", "--mode", "analytic",
            "--set", "workload.trace.limit=2", "--set", "workload.partition=mn"]
    import json

    held = {}
    for setting in ("activations", "working_set"):
        out = tmp_path / setting
        with pytest.raises(SystemExit) as code:
            main([*base, "--set", f"workload.sram_buffers={setting}", "--out", str(out)])
        assert code.value.code == 0
        replica = json.loads((out / "metrics.json").read_text())["replicas"][0]
        held[setting] = replica["memory_by_stage"][0]
    assert held["working_set"]["sram_buffer_bytes"] == held["activations"]["sram_buffer_working_set_bytes"]
    assert held["working_set"]["sram_buffer_bytes"] > held["activations"]["sram_buffer_bytes"]


def test_console_shows_the_working_set_beyond_the_reservation(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", LLM, "--set", "run.mode=analytic", "--set", "workload.output_len=2",
              "--out", str(tmp_path)])
    row = next(line for line in capsys.readouterr().out.splitlines()
               if "SRAM buffers / working set" in line)
    assert "17.5 MiB / 28.2 MiB" in row


def test_partitioned_experts_count_and_the_error_says_what_fewer_tokens_cannot_fix():
    # expert_placement tp lowers every expert through the partition: its rotation blocks
    # (Mixtral's 4096 x 14336 expert matrices over TP 4, 2 blocks: 56 MiB) do not shrink
    # with the tokens; with ep the experts stream through the tile buffers
    moe = ["workload.model=mixtral_8x7b_v0_1", "workload.partition=mn", "workload.prompt_len=256",
           "workload.output_len=1", "run.trace=false", "run.mode=analytic"]
    scenario = "workloads/scenarios/qwen3_30b_a3b_npu64.yaml"
    tp = simulate(scenario, overrides=[*moe, "workload.expert_placement={kind: tp}"])
    ep = simulate(scenario, overrides=[*moe, "workload.expert_placement={kind: ep}"])
    needed = [stage["sram_buffer_working_set_bytes"] for stage in tp.metrics["memory_by_stage"]]
    assert min(needed) > 56 << 20
    assert max(stage["sram_buffer_working_set_bytes"]
               for stage in ep.metrics["memory_by_stage"]) < 56 << 20
    with pytest.raises(MappingError) as error:
        simulate(scenario, overrides=[*moe, "workload.expert_placement={kind: tp}",
                                      "workload.sram_buffers=working_set"])
    message = str(error.value)
    assert "expert_gate_proj under the mn partition" in message
    assert "56 MiB of rotation buffers" in message and "fewer tokens" not in message


def test_activation_buffers_too_large_are_blamed_on_the_activations():
    # the working set is smaller than two 4096-token activations here: the message is the
    # activation buffers' (it named a 20 MiB GEMM against a 64 MiB core)
    with pytest.raises(MappingError, match="2 activations of 4096 tokens"):
        simulate("workloads/scenarios/qwen3_30b_a3b_npu64.yaml",
                 overrides=["workload.partition=mn", "workload.prompt_len=4096",
                            "workload.output_len=1", "workload.sram_buffers=working_set",
                            "run.mode=analytic"])
