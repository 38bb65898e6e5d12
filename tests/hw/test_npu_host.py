"""The NPU's optional host tier (``hw.host``): a PCIe link at a port core and host DRAM."""

from __future__ import annotations

import pytest

from npusim.api import build_device
from npusim.config.loader import scenario_from_dict
from npusim.core.errors import ConfigError, MappingError
from npusim.executor.analytic import run_analytic
from npusim.executor.base import prepare
from npusim.executor.tlm import run_tlm
from npusim.mapping.taskgraph import TaskGraph

pytestmark = pytest.mark.component

HOST = {"link": {"preset": "links/pcie4_x16"},
        "memory": {"preset": "memory/ddr4_3200", "channels": 4}}  # 4 x 25.6 GB/s


def npu(**hw):
    scenario = scenario_from_dict({"name": "t", "hw": {"preset": "npu/large_core_64", **hw},
                                   "workload": {"kind": "gemm", "m": 1, "k": 1, "n": 4}})
    return build_device(scenario.hw)


def to_host(device, source: str) -> TaskGraph:
    graph = TaskGraph()
    graph.transfer(source, device.host_memory, 8 << 20, chunk_bytes=256 << 10)
    return prepare(graph, device)


def test_a_transfer_to_the_host_crosses_the_noc_to_the_port_then_the_link():
    device = npu(host={**HOST, "port_core": 0})
    assert device.host_memory == "core0.host"
    plan = device.plan_transfer(to_host(device, "core9.hbm").tasks[0])
    assert [(stage.part.name, stage.action) for stage in plan.stages] == [
        ("core9.hbm", "read"), ("noc", "net"), ("host.link", "net"), ("host.dram", "write")]
    # 8 MiB from the port core: PCIe 4.0 x16 (31.5 GB/s per direction) is the bottleneck,
    # >= 266 us.  From core 9 the 16 GB/s NoC links to the port are (>= 524 us).  Both
    # fidelities agree.
    for source, low, high in (("core0.hbm", 266e6, 290e6), ("core9.hbm", 524e6, 570e6)):
        analytic = run_analytic(to_host(device, source), device).makespan_ps
        tlm = run_tlm(to_host(device, source), device).makespan_ps
        assert low < analytic < high, (source, analytic)
        assert abs(tlm - analytic) / analytic < 0.05, (source, tlm, analytic)


def test_host_endpoints_are_checked():
    with pytest.raises(MappingError, match="this device has no host"):
        npu().endpoint("core0.host")
    with pytest.raises(MappingError, match="host memory is reached as 'core0.host'"):
        npu(host=HOST).endpoint("core5.host")
    with pytest.raises(ConfigError, match="host.port_core = 64 is not a core"):
        npu(host={**HOST, "port_core": 64})
