"""The scenario schema: hardware + workload + run settings in one typed tree.

``hw`` is any registered device (``kind: npu`` …), ``workload`` any registered workload
(``kind: gemm``, ``kind: taskgraph`` …).  The schema is assembled from the registry on
first use, so a new device or workload file is picked up without editing this module.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from npusim.core import registry
from npusim.core.registry import NumbersNotBooleans
from npusim.hw.energy import EnergyConfig


class RunConfig(NumbersNotBooleans):
    """How to run: fidelity, seed and memoisation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["tlm", "analytic"] = Field(
        "tlm", description="Fidelity: 'tlm' runs SimPy transactions with contention; "
                           "'analytic' computes the same task graph in closed form.")
    seed: int = Field(0, ge=0, description="Seed for every random choice (same seed, same result).")
    memoize: bool = Field(True, description="Reuse the timing of identical sub-graphs "
                                            "(same ops, shapes, placement, idle start).")
    trace: bool = Field(True, description="Record per-task rows (ops.csv) and the Perfetto "
                                          "timeline.")
    trace_max_tasks: int = Field(
        200_000, ge=0, description="Stop recording per-task rows after this many (whole "
                                   "segments only; segments.csv and every metric still "
                                   "cover the full run). Keeps long serving runs fast.")
    energy: EnergyConfig | None = Field(
        None, description="Energy/power parameters; default: the 7 nm defaults in "
                          "npusim/hw/energy.py")


def _workload_fits_device(scenario: BaseModel) -> BaseModel:
    """A workload that asks for more of the device than it has (more cores than the chip)
    is refused when the scenario is read, at the workload's field, rather than when its
    mapping runs: a sweep then refuses such a point before any point runs."""
    check = getattr(scenario.workload, "hw_problem", None)
    problem = check(scenario.hw) if check is not None else None
    if problem:
        field, message = problem
        raise ValueError(f"{field}: {message}")
    return scenario


@cache
def scenario_model() -> type[BaseModel]:
    """The pydantic model of a whole scenario (built once from the registry)."""
    return create_model(
        "Scenario",
        __config__=ConfigDict(extra="forbid", frozen=True),
        __doc__="A scenario: hardware, workload and run settings.",
        name=(str, Field("scenario", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", max_length=128,
                         description="Name shown in reports and the default output "
                                     "directory (out/<name>): letters, digits, '_', '-', "
                                     "'.' (no path separators).")),
        description=(str, Field("", description="Free text describing the scenario.")),
        hw=(registry.config_union("device"), Field(description="The device (kind: npu, ...).")),
        workload=(registry.config_union("workload"), Field(description="What to run (kind: gemm, ...).")),
        run=(RunConfig, Field(default_factory=RunConfig, description="Run settings.")),
        __validators__={"_workload_fits_device": model_validator(mode="after")(_workload_fits_device)},
    )
