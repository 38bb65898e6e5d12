"""Errors in the taskgraph workload name the task's field, the bad value and what was
expected, and exit 2 without a traceback."""

import pytest

from npusim.cli import main
from npusim.core.errors import MappingError
from npusim.mapping.collectives import expand_collectives
from npusim.mapping.taskgraph import TaskGraph

pytestmark = pytest.mark.unit

SCENARIO = """\
name: tg
hw:
  preset: npu/large_core_64
workload:
  kind: taskgraph
  tasks:
    - {type: collective, name: c, collective: allreduce, group: [core0, core1], size_bytes: 1MiB}
run:
  mode: analytic
"""


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    return info.value.code, captured.err


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "tg.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.mark.parametrize("override, expected", [
    # collective fields are reported at the field, not under the 'collective' union tag
    ("workload.tasks[0].group=[0, 1]", "workload.tasks[0].group[0]: Input should be a valid string (got 0)"),
    ("workload.tasks[0].size_bytes=12XB",
     "workload.tasks[0].size_bytes: expected a size like '64MiB' or '2GB', got '12XB'"),
    ("workload.tasks[0].szie_bytes=1",
     "workload.tasks[0].szie_bytes: unknown key for a collective task; did you mean 'size_bytes'?"),
    ("workload.tasks[0].group=[core0, core1, core0]",
     "workload.tasks[0].group: 'core0' is listed twice (group[0] and group[2] of "
     "['core0', 'core1', 'core0']); expected each member once"),
    ("workload.tasks=[{type: compute, unit: core0.hbm, op: {kind: gemm}}]",
     "workload.tasks[0].unit: 'core0.hbm' is a DramChannel, not a compute unit; expected a "
     "compute unit such as core0.sa"),
    ("workload.tasks=[{type: compute, unit: core0.sa, op: {kind: gemm, m: 0}}]",
     "workload.tasks[0].op.m: "),
    # a unit that cannot run the op named only the unit ("core0.vec: a vector unit runs ...")
    ("workload.tasks=[{type: compute, unit: core0.vec, op: {kind: gemm}}]",
     "workload.tasks[0].unit: core0.vec (VectorUnit) cannot run the task's op.kind 'gemm'; "
     "expected a unit that runs gemm ops, such as core0.sa, core1.sa, core2.sa, ..."),
    ("workload.tasks=[{type: compute, unit: core3.sa, op: {kind: softmax, elements: 8}}]",
     "workload.tasks[0].unit: core3.sa (SystolicArray) cannot run the task's op.kind "
     "'softmax'; expected a unit that runs softmax ops, such as core0.vec"),
    ("workload.tasks[0].type=foo", "workload.tasks[0]: unknown kind 'foo'"),
    ("workload.tasks=[{name: c, unit: core0.sa}]", "workload.tasks[0]: missing 'type:' key"),
])
def test_taskgraph_errors_name_the_field(scenario, override, expected, tmp_path, capsys):
    code, err = run_cli(["run", str(scenario), "--set", override, "--out", str(tmp_path / "out")],
                        capsys)
    assert code == 2
    assert expected in err, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert ".collective" not in err


def test_the_valid_scenario_still_runs(scenario, tmp_path, capsys):
    code, err = run_cli(["run", str(scenario), "--out", str(tmp_path / "out")], capsys)
    assert code in (0, None), err


def test_expanding_a_collective_with_a_repeated_member_names_it():
    graph = TaskGraph(name="g")
    graph.collective("allgather", ["core0", "core1", "core0"], 64, [], "ag")
    with pytest.raises(MappingError, match=r"lists member 'core0' twice in its group "
                                           r"\['core0', 'core1', 'core0'\]; expected each member once"):
        expand_collectives(graph, lambda endpoint: None)


def test_an_unknown_key_with_a_dot_in_it_is_reported_at_that_key(tmp_path, capsys):
    # "KEY.SUBKEY: ..." messages are reported at a nested key; a key the user wrote with a
    # dot in it is still found as written first
    path = tmp_path / "tg.yaml"
    path.write_text(SCENARIO.replace(
        "    - {type: collective, name: c, collective: allreduce, group: [core0, core1], "
        "size_bytes: 1MiB}",
        "    - {type: host, name: h, duration_ps: 5us, dur.ns: 3}"))
    code, err = run_cli(["run", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "workload.tasks[0].dur.ns: unknown key for a host task" in err, err


def test_a_boolean_core_id_is_refused_not_read_as_core_1(tmp_path, capsys):
    quickstart = "workloads/scenarios/quickstart.yaml"
    code, err = run_cli(["run", quickstart, "--set", "workload.cores=[true, 2, 3, 4]",
                         "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "workload.cores[0]: got True, a boolean; expected a number" in err, err
