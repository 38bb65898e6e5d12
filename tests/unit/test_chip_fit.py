"""A workload that asks for more cores than the chip has is refused when the scenario is
read, at the workload's field (so a sweep refuses such a point before any point runs),
and the mapping keeps the same check as a backstop."""

from __future__ import annotations

import pytest

from npusim.api import build_device
from npusim.config.loader import load_scenario
from npusim.core.errors import ConfigError, MappingError
from npusim.strategies.npu.llm_mapping import map_llm
from npusim.sweep.spec import spec_from_dict

pytestmark = pytest.mark.unit

LLM = "workloads/scenarios/qwen3_4b_npu64.yaml"
FUSION = "workloads/scenarios/qwen3_4b_npu64_pd_fusion.yaml"
DISAGG = "workloads/scenarios/qwen3_4b_npu64_pd_disagg.yaml"


@pytest.mark.parametrize("scenario, overrides, path, message", [
    (LLM, ["workload.pipeline_stages=17"], "workload.pipeline_stages",
     "17 x tp=4 needs 68 cores; the chip has 64 (expected at most 16 stages at tp=4)"),
    (LLM, ["workload.tp=128"], "workload.tp", "128 exceeds the chip's 64 cores"),
    (LLM, ["workload.layers_per_stage=[9,9,9,9]", "hw.noc.width=2", "hw.noc.height=6"],
     "workload.layers_per_stage", "[9, 9, 9, 9] (4 stages) x tp=4 needs 16 cores; the chip "
                                  "has 12 (expected at most 3 stages at tp=4)"),
    (FUSION, ["workload.pd.cores=128"], "workload.pd.cores", "128 exceeds the chip's 64 cores"),
    (DISAGG, ["workload.pd.prefill_cores=63"], "workload.pd",
     "prefill_cores + decode_cores = 63 + 21 = 84 exceeds the chip's 64 cores"),
    (DISAGG, ["hw.noc.width=8", "hw.noc.height=7"], "workload.pd",
     "prefill_cores + decode_cores = 42 + 21 = 63 exceeds the chip's 56 cores"),
    (FUSION, ["workload.pd.tp=128"], "workload.pd.tp", "tp 128 x dp 1 needs 128 cores; the chip has 64"),
    (FUSION, ["workload.pd.dp=32"], "workload.pd.dp", "tp 4 x dp 32 needs 128 cores; the chip has 64"),
])
def test_a_workload_larger_than_the_chip_is_refused_when_read(scenario, overrides, path, message):
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario, overrides)
    assert (path, message) in [(p, m.split(" (from the override")[0].split(" (overrides inside")[0])
                               for p, m in info.value.problems]


def test_pools_that_fill_the_chip_exactly_fit():
    assert load_scenario(DISAGG, ["hw.noc.width=9", "hw.noc.height=7"]).hw.num_cores == 63
    assert load_scenario(FUSION, ["workload.pd.tp=64"]).workload.pd.tp == 64


def test_a_workload_that_fits_is_read_and_the_same_check_guards_the_mapping():
    scenario = load_scenario(LLM, ["workload.pipeline_stages=16"])
    assert scenario.workload.chip_problem(64) is None
    # a config built without the scenario check (e.g. from Python) still meets it when mapped
    assert scenario.workload.chip_problem(32) == (
        "workload.pipeline_stages", "16 x tp=4 needs 64 cores; the chip has 32 (expected at "
                                    "most 8 stages at tp=4)")
    small = build_device(load_scenario(LLM, ["hw.noc.width=4", "hw.noc.height=8"]).hw)
    with pytest.raises(MappingError, match=r"workload.pipeline_stages: 16 x tp=4 needs 64 "
                                           r"cores; the chip has 32"):
        map_llm(small, scenario.workload)


def test_a_sweep_refuses_such_a_point_before_running_or_skips_it():
    spec = {"name": "fit", "base": LLM, "set": {"run.mode": "analytic"},
            "axes": [{"grid": {"workload.pipeline_stages": [8, 17]}}]}
    with pytest.raises(ConfigError, match=r"point 1 \(workload.pipeline_stages=17\): "
                                          r"workload.pipeline_stages: 17 x tp=4 needs 68 cores"):
        spec_from_dict(spec, "fit.yaml", ".").points()
    points = spec_from_dict({**spec, "on_invalid": "skip"}, "fit.yaml", ".").points()
    assert [p.skip_reason is None for p in points] == [True, False]
    assert "needs 68 cores" in points[1].skip_reason
