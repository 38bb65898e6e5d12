"""Reference cases (``npusim/validation/cases/*.yaml``) through the validation harness.

* Every case file loads with the harness's own loader, and every case names its source,
  its role (calibration or prediction, written out, not defaulted) and a bench or
  scenario that exists (scenarios are loaded with the case's overrides, so a bad
  ``--set`` is caught here rather than when the case runs).
* Every case is run exactly as ``npusim validate`` runs it
  (:func:`npusim.validation.runner.run_cases`) and must pass its tolerance.  Cases
  marked ``slow: true`` in their file carry the ``slow`` marker, so the default test run
  (``-m 'not slow'``) runs the fast subset and ``pytest -m slow`` runs the rest.

A failing case is a real failure.  The one exception is a case whose file states a
``known_gap`` (why the model misses the reference): the test then asserts that it still
fails as documented, so the gap stays visible in ``npusim validate`` and
``docs/validation.md`` and this test flags the case the day it starts passing.
"""

from __future__ import annotations

import shutil

import pytest

from npusim.config.loader import load_scenario
from npusim.config.presets import REPO_ROOT, read_yaml
from npusim.validation.bench_registry import bench_names
from npusim.core.errors import ConfigError
from npusim.validation.cases import CASES_DIR, load_cases
from npusim.validation.runner import run_cases

pytestmark = pytest.mark.validation

CASE_FILES = sorted(CASES_DIR.glob("*.yaml"))
CASES = load_cases()


def _case_param(case):
    marks = [pytest.mark.slow] if case.slow else []
    return pytest.param(case, id=case.id, marks=marks)


def test_there_are_case_files_and_cases():
    assert CASE_FILES, f"no case files under {CASES_DIR}"
    assert CASES
    # The cases parametrising test_case_passes are every file's cases, each once, file by
    # file (a loader that dropped a file, or a case, would let it go untested in silence);
    # each file's suite is its own, or the file's stem.
    per_file = []
    for path in CASE_FILES:
        suite = (read_yaml(path) or {}).get("suite", path.stem)
        cases = load_cases_of(path)
        assert {c.suite for c in cases} == {suite}, path.name
        per_file += [c.id for c in cases]
    assert [c.id for c in CASES] == per_file and len(set(per_file)) == len(per_file)


def load_cases_of(path):
    """The cases of one file, loaded on their own (a copy in a directory of its own)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(path, Path(tmp) / path.name)
        return load_cases(Path(tmp))


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.name for p in CASE_FILES])
def test_case_file_loads_on_its_own(path, tmp_path):
    """Each file is valid by itself (so an error points at one file) and is not empty."""
    shutil.copy(path, tmp_path / path.name)
    cases = load_cases(tmp_path)
    assert cases, f"{path.name} holds no cases"


def test_a_misspelt_top_level_key_is_named(tmp_path):
    (tmp_path / "bad.yaml").write_text("suite: x\ncasse: []\ncases: []\n")
    with pytest.raises(ConfigError, match="casse"):
        load_cases(tmp_path)


@pytest.mark.parametrize("case", [_case_param(c) for c in CASES])
def test_case_is_well_formed(case):
    assert case.source.strip(), f"{case.id}: no source"
    assert case.title.strip(), f"{case.id}: no title"
    # The schema defaults ``role`` to prediction; a reference case must say which it is.
    assert "role" in case.model_fields_set, f"{case.id}: role not stated (calibration|prediction)"
    assert case.role in ("calibration", "prediction")
    if case.kind != "trend":  # a trend case's reference is its expected direction
        low, high = case.reference_range()
        assert low <= high, f"{case.id}: reference range {case.reference!r} is reversed"
    known = set(bench_names())
    for name, run in case.all_runs().items():
        if run.bench is not None:
            assert run.bench in known, (f"{case.id} run {name!r}: unknown bench {run.bench!r}; "
                                        f"known: {', '.join(sorted(known))}")
        else:
            path = REPO_ROOT / run.scenario
            assert path.is_file(), f"{case.id} run {name!r}: no scenario {run.scenario}"
            load_scenario(path, run.set)  # raises ConfigError naming the bad field


@pytest.mark.parametrize("case", [_case_param(c) for c in CASES])
def test_case_passes(case):
    (outcome,) = run_cases(ids=[case.id], show=False)
    reference = case.expect if case.kind == "trend" else case.reference
    error = "-" if outcome.error is None else f"{outcome.error:.1%}"
    if case.known_gap:
        assert not outcome.passed, (f"{case.id} now passes (simulated {outcome.simulated}); "
                                    f"remove its known_gap: {case.known_gap}")
        return
    assert outcome.passed, (
        f"{case.id} ({case.title}): simulated {outcome.simulated} vs reference {reference} "
        f"{case.unit}, error {error} (tolerance {case.tolerance:.0%}) {outcome.message}".rstrip())


def test_runs_share_overrides_through_a_yaml_alias():
    # NpuSim Fig. 11's runs take one list of load overrides; a nested list (the YAML
    # alias) is flattened in place, so the runs cannot drift apart.
    from npusim.validation.cases import RunSpec

    shared = ["workload.pd.tp=1", "hw.core.sram=128MiB"]
    spec = RunSpec(scenario="x.yaml", set=[shared, "workload.pd.prefill_cores=49"])
    assert spec.set == [*shared, "workload.pd.prefill_cores=49"]
    fig11 = [c for c in load_cases()
             if c.id in ("S004-020", "S004-021", "S004-022", "S004-023", "S004-025")]
    loads = {tuple(s for s in run.set if s.startswith(("workload.trace=", "workload.scheduler=",
                                                       "workload.pd.tp=")))
             for case in fig11 for run in case.runs.values()}
    assert len(loads) == 1, loads
    (load,) = loads
    assert "workload.pd.tp=1" in load and any("num_requests: 200" in s for s in load)


def test_fig11_splits_are_seven_stage_pipelines():
    # The authors' simulator counts a split in 7-core pipelines (one core per stage):
    # every Fig. 11 run gives prefill_dp = P / 7 and decode_dp = D / 7.
    for case in load_cases():
        if not case.source.endswith("Fig. 11"):
            continue
        for name, run in case.runs.items():
            sets = dict(s.split("=", 1) for s in run.set if s.startswith("workload.pd."))
            for role in ("prefill", "decode"):
                cores, dp = int(sets[f"workload.pd.{role}_cores"]), int(sets[f"workload.pd.{role}_dp"])
                assert cores == 7 * dp, f"{case.id} run {name}: {role} {cores} cores, dp {dp}"

def test_the_fig11_sweep_runs_exactly_the_cases_configurations():
    # workloads/sweeps/npusim_fig11.yaml reproduces the figure the Fig. 11 cases check;
    # the two must not drift apart: each sweep point is one of the cases' runs.
    from npusim.config.loader import load_scenario
    from npusim.sweep.spec import load_spec

    points = load_spec(REPO_ROOT / "workloads" / "sweeps" / "npusim_fig11.yaml").points()
    swept = {p.params["workload.pd.prefill_cores"]: p.config for p in points}
    runs = {}
    for case in load_cases():
        if case.id in ("S004-020", "S004-021", "S004-023", "S004-024", "S004-025", "S004-026"):
            for run in case.runs.values():
                config = load_scenario(REPO_ROOT / run.scenario, run.set).model_dump(mode="json")
                runs[config["workload"]["pd"]["prefill_cores"]] = config
    assert sorted(swept) == sorted(runs) == [21, 28, 42, 49]
    for cores, config in runs.items():
        assert swept[cores]["workload"] == config["workload"], cores
        assert swept[cores]["hw"] == config["hw"], cores
