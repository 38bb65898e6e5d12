"""PD disaggregation's decode pool takes its own scheduler limits
(``workload.pd.decode_scheduler``), as DistServe and Splitwise size each pool's batches;
the prefill pool keeps ``workload.scheduler``'s."""

import pytest

from npusim.api import simulate
from npusim.config.loader import load_scenario
from npusim.config.presets import REPO_ROOT
from npusim.core.errors import ConfigError

pytestmark = pytest.mark.component

DISAGG = REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_disagg.yaml"
FUSION = REPO_ROOT / "workloads" / "scenarios" / "qwen3_4b_npu64_pd_fusion.yaml"
# 32 requests within ~0.4 s: batches fill on both pools
LOADED = ["workload.scheduler.max_batch_size=6", "workload.trace.rate_scale=50"]


def largest_batches(*overrides):
    result = simulate(DISAGG, overrides=[*LOADED, *overrides])
    table = result.table("iterations")
    return table.groupby("role")["requests"].max().to_dict(), result.metrics


def test_the_decode_pool_takes_its_own_batch_limit_and_the_prefill_pool_keeps_its_own():
    shared, shared_metrics = largest_batches()
    own, own_metrics = largest_batches("workload.pd.decode_scheduler={max_batch_size: 2}")
    assert shared["decode"] == 6 and own["decode"] == 2
    assert own["prefill"] == shared["prefill"]
    # smaller decode batches: each request waits longer between its tokens; the prefill
    # pool, and so the first tokens, are untouched
    assert own_metrics["tpot_ms_mean"] > 1.5 * shared_metrics["tpot_ms_mean"]
    assert own_metrics["ttft_ms_mean"] == shared_metrics["ttft_ms_mean"]


def test_a_dotted_override_sets_one_decode_limit():
    config = load_scenario(DISAGG, ["workload.pd.decode_scheduler.max_batch_size=8"])
    workload = config.workload
    assert workload.scheduler_for("decode").max_batch_size == 8
    assert workload.scheduler_for("prefill").max_batch_size == 64
    assert workload.scheduler_for("decode").kind == workload.scheduler.kind


@pytest.mark.parametrize("scenario, override, fragment", [
    (DISAGG, "workload.pd.decode_scheduler={max_batch_sise: 3}",
     "workload.pd.decode_scheduler.max_batch_sise: unknown key for kind: continuous; "
     "did you mean 'max_batch_size'?"),
    (DISAGG, "workload.pd.decode_scheduler={token_budget: 64}",
     "workload.pd.decode_scheduler.token_budget: unknown key for kind: continuous (known"),
    (DISAGG, "workload.pd.decode_scheduler={kind: static}",
     "workload.pd.decode_scheduler.kind: a decode pool runs workload.scheduler's kind"),
    (DISAGG, "workload.pd.decode_scheduler={max_batch_size: 0}",
     "workload.pd.decode_scheduler.max_batch_size: Input should be greater than or equal "
     "to 1 (got 0)"),
    (DISAGG, "workload.pd.decode_scheduler={preempt_lower_priority: true}",
     "workload.pd.decode_scheduler: preempt_lower_priority: true needs order: priority"),
    (FUSION, "workload.pd.decode_scheduler={max_batch_size: 8}",
     "only mode: disaggregation uses it; mode: fusion would ignore it"),
])
def test_a_bad_decode_scheduler_names_its_field(scenario, override, fragment):
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario, [override])
    assert fragment in str(info.value)
