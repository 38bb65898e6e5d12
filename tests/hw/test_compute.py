"""Compute parts: systolic array (SCALE-Sim v2 numbers), vector unit, roofline engine."""

import math

import pytest
from pydantic import ValidationError

from npusim.core.errors import MappingError
from npusim.core import registry
from npusim.hw.compute.roofline import RooflineConfig, RooflineUnit
from npusim.hw.compute.systolic import SystolicArray, SystolicConfig
from npusim.hw.compute.vector import VectorConfig, VectorUnit
from npusim.mapping.taskgraph import Op
from npusim.validation.bench_registry import get_bench

pytestmark = pytest.mark.component


def array(**fields) -> SystolicArray:
    return SystolicArray("sa", SystolicConfig(**fields))


# -- systolic array ---------------------------------------------------------------------

@pytest.mark.parametrize("dataflow, expected", [("ws", 89_984), ("os", 81_792)])
def test_scalesim_v2_reference_cycles(dataflow, expected):
    sa = array(rows=128, cols=128, dataflow=dataflow)
    assert sa.gemm_cycles(1024, 1024, 1024) == expected
    parts = sa.breakdown(1024, 1024, 1024)
    assert parts.folds == 64 and parts.mapping_efficiency == 1.0
    assert parts.utilisation == pytest.approx(1024**3 / (128 * 128 * expected))


def test_bench_reports_cycles_and_utilisation():
    out = get_bench("systolic_gemm")(rows=128, cols=128, dataflow="ws", m=1024, k=1024, n=1024)
    assert out["cycles"] == 89_984 and 0 < out["utilisation"] < 1
    assert out["time_ps"] == 89_984 * 2000  # 500 MHz -> 2 ns per cycle


def test_per_fold_formulas():
    sa = array(rows=32, cols=16, dataflow="ws")
    # ws: Sr=K, Sc=N, T=M; folds = ceil(100/32)*ceil(40/16) = 4*3; per fold 2R+C+T-2
    assert sa.gemm_cycles(m=50, k=100, n=40) == 12 * (2 * 32 + 16 + 50 - 2)
    os_ = array(rows=32, cols=16, dataflow="os")
    # os: Sr=M, Sc=N, T=K; folds = ceil(50/32)*ceil(40/16) = 2*3; per fold R+C+T-2
    assert os_.gemm_cycles(m=50, k=100, n=40) == 6 * (32 + 16 + 100 - 2)
    is_ = array(rows=32, cols=16, dataflow="is")
    # is: Sr=K, Sc=M, T=N; folds = 4 * ceil(50/16) = 16; per fold 2R+C+T-2
    assert is_.gemm_cycles(m=50, k=100, n=40) == 16 * (2 * 32 + 16 + 40 - 2)


@pytest.mark.parametrize("configured", ["ws", "is"])
def test_operand_swap_takes_the_faster_of_ws_and_is_per_gemm(configured):
    fixed, swapping = array(dataflow=configured), array(dataflow=configured, operand_swap=True)
    # A decode GEMM of 32 token rows: weight-stationary needs 20 x 20 folds of T = 32,
    # input-stationary 20 folds of T = 2560 (the weights stream through).
    decode = swapping.breakdown(32, 2560, 2560)
    assert decode.dataflow == "is" and decode.folds == 20
    assert decode.total_cycles == array(dataflow="is").gemm_cycles(32, 2560, 2560) == 20 * (
        2 * 128 + 128 + 2560 - 2)
    assert decode.total_cycles < 0.4 * array(dataflow="ws").gemm_cycles(32, 2560, 2560)
    # The swapped form never loses, and a tie keeps the configured dataflow.
    for shape in [(1024, 1024, 1024), (4, 128, 1500), (2048, 2560, 9728), (1, 64, 64)]:
        assert swapping.gemm_cycles(*shape) == min(array(dataflow="ws").gemm_cycles(*shape),
                                                   array(dataflow="is").gemm_cycles(*shape))
    assert swapping.breakdown(1024, 1024, 1024).dataflow == configured
    # Operand traffic follows the dataflow chosen: the stationary activations are read once.
    traffic = swapping.operand_traffic(32, 2560, 2560)
    assert traffic == array(dataflow="is").operand_traffic(32, 2560, 2560)
    assert traffic.ifmap_read_bytes == 32 * 2560 * 2
    if configured == "ws":
        assert fixed.breakdown(32, 2560, 2560).dataflow == "ws"


def test_padding_of_last_tile_counts():
    sa = array(rows=128, cols=128, dataflow="ws")
    exact, padded = sa.breakdown(128, 128, 128), sa.breakdown(129, 129, 129)
    assert exact.folds == 1 and padded.folds == 4  # like 256x256x256's folds
    assert padded.folds == sa.breakdown(256, 256, 256).folds
    # 129 costs far more than 128 and almost as much as 256 (only T differs).
    assert padded.total_cycles > 3.9 * exact.total_cycles
    assert padded.total_cycles == pytest.approx(sa.gemm_cycles(256, 256, 256), rel=0.2)
    assert padded.mapping_efficiency == pytest.approx(129 * 129 / (4 * 128 * 128))


def test_double_buffering_hides_weight_loads():
    plain = array(dataflow="ws")
    buffered = array(dataflow="ws", double_buffer=True)
    r, c, t, folds = 128, 128, 1024, 64
    assert buffered.gemm_cycles(1024, 1024, 1024) == r + folds * (r + c + t - 2)
    assert buffered.gemm_cycles(1024, 1024, 1024) < plain.gemm_cycles(1024, 1024, 1024)
    # A single fold cannot hide its own load.
    assert buffered.gemm_cycles(128, 128, 128) == plain.gemm_cycles(128, 128, 128)
    # Output-stationary has no stationary pre-load: the flag changes nothing.
    assert (array(dataflow="os", double_buffer=True).gemm_cycles(512, 512, 512)
            == array(dataflow="os").gemm_cycles(512, 512, 512))


def test_double_buffer_exposes_load_longer_than_stream():
    # R=128 load, stream R+C+T-2 with C=1, T=1: 128 -> load fully hidden (128 <= 128).
    sa = array(rows=128, cols=1, dataflow="ws", double_buffer=True)
    parts = sa.breakdown(m=1, k=256, n=3)  # folds = 2 * 3 = 6
    assert parts.stream_cycles_per_fold == 128
    assert parts.exposed_load_cycles == 128


def test_batch_multiplies_and_inject_is_paid_once():
    sa = array(inject_cycles=100)
    one = sa.gemm_cycles(256, 256, 256)
    assert sa.gemm_cycles(256, 256, 256, batch=3) == 3 * (one - 100) + 100
    op = Op("gemm", m=256, k=256, n=256, batch=3)
    assert sa.op_time_ps(op) == (3 * (one - 100) + 100) * 2000


def test_wider_operands_take_more_passes():
    sa = array(dtype_bytes=1)
    base = sa.op_time_ps(Op("gemm", m=64, k=64, n=64, dtype_bytes=1))
    assert sa.op_time_ps(Op("gemm", m=64, k=64, n=64, dtype_bytes=2)) == 2 * base


def test_systolic_supports_only_gemm():
    sa = array()
    assert sa.supports(Op("gemm")) and not sa.supports(Op("softmax", elements=4))
    with pytest.raises(MappingError, match="only 'gemm'"):
        sa.op_time_ps(Op("softmax", elements=4))


def test_op_time_is_pure():
    sa = array()
    sa.op_time_ps(Op("gemm", m=64, k=64, n=64))
    assert sa.stats.busy_ps == 0 and sa.stats.ops == 0


def test_registered_kinds():
    # Read the table filled at import time rather than registry.lookup(), whose discover()
    # imports every part module (this test must not depend on unrelated parts).
    table = registry._ENTRIES["compute"]
    assert table["systolic"].impl is SystolicArray and table["systolic"].config is SystolicConfig
    assert table["vector"].impl is VectorUnit
    assert table["roofline"].impl is RooflineUnit


@pytest.mark.parametrize("fields, needle", [
    ({"rows": 0}, "rows"),
    ({"cols": -4}, "cols"),
    ({"rows": 5000}, "less than or equal to 4096"),
    ({"dataflow": "rs"}, "dataflow"),
    ({"freq_hz": "0Hz"}, "positive frequency"),
    ({"inject_cycles": -1}, "inject_cycles"),
    ({"row": 4}, "row"),
    ({"dataflow": "os", "operand_swap": True}, "dataflow 'os' keeps neither stationary"),
])
def test_systolic_invalid_config(fields, needle):
    with pytest.raises(ValidationError, match=needle):
        SystolicConfig(**fields)


def test_systolic_config_parses_units():
    assert SystolicConfig(freq_hz="1GHz").freq_hz == 1_000_000_000


# -- vector unit --------------------------------------------------------------------------

def test_vector_formula():
    vec = VectorUnit("vec", VectorConfig(lanes=32, alus_per_lane=64, pipeline_latency_cycles=8))
    op = Op("elementwise", elements=10_000, flops_per_element=3)
    assert vec.cycles(op) == math.ceil(30_000 / 2048) + 8
    assert vec.op_time_ps(op) == vec.cycles(op) * 2000
    assert vec.cycles(Op("elementwise", elements=0)) == 0


def test_vector_per_kind_costs():
    vec = VectorUnit("vec", VectorConfig(lanes=64, pipeline_latency_cycles=0))
    n = 4096 * 100
    assert vec.cycles(Op("softmax", elements=n)) == 5 * 100
    assert vec.cycles(Op("reduce", elements=n)) == 100
    assert vec.cycles(Op("elementwise", elements=n)) == 100
    # An op may declare a higher cost than the intrinsic one, never a lower one.
    assert vec.cycles(Op("softmax", elements=n, flops_per_element=8)) == 800
    cheap = VectorUnit("v", VectorConfig(lanes=64, pipeline_latency_cycles=0,
                                         softmax_ops_per_element=12))
    assert cheap.cycles(Op("softmax", elements=n)) == 1200


def test_vector_ops_are_fed_at_the_operand_bandwidth():
    # 4096 ALUs at 500 MHz; a 256 GB/s port moves 512 B a cycle (reads + writes).
    vec = VectorUnit("vec", VectorConfig(lanes=64, pipeline_latency_cycles=8,
                                         operand_bandwidth_bps="256GB/s"))
    n = 4096 * 100
    # element-wise FP16, 1 op/element: ALUs 100 cycles; 2 x 819,200 B / 512 B = 3,200
    assert vec.cycles(Op("elementwise", elements=n, dtype_bytes=2)) == 3200 + 8
    # a reduce writes nothing per element: 819,200 B / 512 = 1,600
    assert vec.cycles(Op("reduce", elements=n, dtype_bytes=2)) == 1600 + 8
    # ALU-bound when each element takes enough operations: 40 ops x 100 = 4,000 > 3,200
    assert vec.cycles(Op("elementwise", elements=n, flops_per_element=40,
                         dtype_bytes=2)) == 4000 + 8
    unbounded = VectorUnit("vec", VectorConfig(lanes=64, pipeline_latency_cycles=8))
    assert unbounded.cycles(Op("elementwise", elements=n, dtype_bytes=2)) == 100 + 8


def test_a_binary_op_reads_both_operands():
    vec = VectorUnit("vec", VectorConfig(lanes=64, pipeline_latency_cycles=0,
                                         operand_bandwidth_bps="256GB/s"))  # 512 B/cycle
    n = 4096 * 100
    add = Op("elementwise", elements=n, dtype_bytes=2, inputs=2)  # a residual add
    assert vec.operand_bytes(add) == (2 * 2 * n, 2 * n)
    assert vec.cycles(add) == 3 * 2 * n // 512  # 4,800 cycles, 3,200 with one operand
    assert add.signature() != Op("elementwise", elements=n, dtype_bytes=2).signature()


def test_an_npu_core_feeds_its_vector_unit_from_its_sram():
    from npusim.api import build_device
    from npusim.config.loader import resolve_presets, validate
    from npusim.hw.devices.npu import NpuConfig

    device = build_device(validate(NpuConfig, resolve_presets(
        {"preset": "npu/large_core_64"}, "test"), "test"))
    vec, sram = device.parts["core0.vec"], device.parts["core0.sram"]
    assert vec.config.operand_bandwidth_bps == (sram.config.bytes_per_cycle
                                                * sram.config.freq_hz)  # 512 B x 500 MHz
    op = Op("elementwise", elements=1 << 20, dtype_bytes=2)
    assert vec.cycles(op) == 2 * (1 << 21) // 512 + vec.config.pipeline_latency_cycles


def test_vector_rejects_gemm_and_bad_config():
    vec = VectorUnit("vec", VectorConfig())
    assert not vec.supports(Op("gemm"))
    with pytest.raises(MappingError, match="vector unit"):
        vec.op_time_ps(Op("gemm"))
    with pytest.raises(ValidationError, match="lanes"):
        VectorConfig(lanes=0)
    with pytest.raises(ValidationError, match="alus_per_lane"):
        VectorConfig(alus_per_lane=-1)


# -- roofline ------------------------------------------------------------------------------

def roof(**fields) -> RooflineUnit:
    base = {"peak_flops_per_s": 1e13, "memory_bandwidth_bps": "100GB/s"}
    return RooflineUnit("gpu", RooflineConfig(**{**base, **fields}))


def test_roofline_compute_and_memory_bound():
    unit = roof(launch_ps="5us")
    big = Op("gemm", m=4096, k=4096, n=4096)
    assert unit.bound(big) == "compute"
    assert unit.op_time_ps(big) == math.ceil(big.flops / 1e13 * 1e12) + 5_000_000
    gemv = Op("gemm", m=1, k=4096, n=4096)
    assert unit.bound(gemv) == "memory"
    size = gemv.input_bytes + gemv.output_bytes
    assert unit.op_time_ps(gemv) == math.ceil(size / 100e9 * 1e12) + 5_000_000


def test_roofline_saturating_curve_is_monotonic():
    unit = roof(efficiency_max=0.8, efficiency_half_flops=1e9)
    points = [10.0**e for e in range(3, 16)]
    effs = [unit.efficiency(x) for x in points]
    assert all(b > a for a, b in zip(effs, effs[1:]))
    assert unit.efficiency(1e9) == pytest.approx(0.4)
    assert effs[-1] == pytest.approx(0.8, rel=1e-5)
    op = Op("gemm", m=512, k=512, n=512)
    assert unit.op_time_ps(op) == math.ceil(op.flops * 1e12 / (1e13 * unit.efficiency(op.flops)))


def test_roofline_table_interpolates_in_log_space():
    unit = roof(efficiency_table=[[1e6, 0.1], [1e8, 0.5], [1e10, 0.9]])
    assert unit.efficiency(1e3) == 0.1 and unit.efficiency(1e12) == 0.9
    assert unit.efficiency(1e7) == pytest.approx(0.3)
    assert unit.efficiency(1e9) == pytest.approx(0.7)
    effs = [unit.efficiency(10.0 ** (e / 4)) for e in range(16, 48)]
    assert all(b >= a for a, b in zip(effs, effs[1:]))


def test_roofline_per_precision_peak():
    unit = roof(peak_flops_per_s_by_dtype_bytes={1: 4e13})
    int8 = Op("gemm", m=4096, k=4096, n=4096, dtype_bytes=1)
    fp16 = Op("gemm", m=4096, k=4096, n=4096, dtype_bytes=2)
    assert unit.op_time_ps(int8) == pytest.approx(unit.op_time_ps(fp16) / 4, rel=1e-6)


@pytest.mark.parametrize("fields, needle", [
    ({"peak_flops_per_s": 0}, "peak_flops_per_s"),
    ({"memory_bandwidth_bps": 0}, "memory_bandwidth_bps"),
    ({"efficiency_max": 1.5}, "efficiency_max"),
    ({"bandwidth_efficiency": 0}, "bandwidth_efficiency"),
    ({"efficiency_table": [[1e6, 0.5], [1e5, 0.6]]}, "strictly increasing"),
    ({"efficiency_table": [[1e6, 1.5]]}, r"efficiency must be in \(0, 1\]"),
    ({"efficiency_table": [[1e6, 0.5]], "efficiency_half_flops": 1e6}, "not both"),
    ({"launch_ps": "-3us"}, "non-negative"),
])
def test_roofline_invalid_config(fields, needle):
    base = {"peak_flops_per_s": 1e13, "memory_bandwidth_bps": "100GB/s"}
    with pytest.raises(ValidationError, match=needle):
        RooflineConfig(**{**base, **fields})


def test_pipelined_folds_pay_the_skew_once_and_speed_up_gemv_not_big_gemms():
    from npusim.hw.compute.systolic import SystolicArray, SystolicConfig

    plain = SystolicArray("sa", SystolicConfig(rows=128, cols=128, double_buffer=True))
    piped = SystolicArray("sa", SystolicConfig(rows=128, cols=128, double_buffer=True,
                                               pipelined_folds=True))
    # GEMV (decode): 20 x 8 folds; per fold max(T=1, R=128) = 128 cycles + one skew + first load.
    assert piped.gemm_cycles(1, 2560, 1024) == 160 * 128 + 254 + 128
    assert plain.gemm_cycles(1, 2560, 1024) > 1.9 * piped.gemm_cycles(1, 2560, 1024)
    # Large GEMM: the skew is small next to T = 1024 rows per fold, so both agree within 25%.
    big_plain, big_piped = plain.gemm_cycles(1024, 1024, 1024), piped.gemm_cycles(1024, 1024, 1024)
    assert big_piped < big_plain < 1.25 * big_piped
    # Default stays SCALE-Sim v2 (C-SA-01).
    assert SystolicArray("sa", SystolicConfig(rows=128, cols=128)).gemm_cycles(1024, 1024, 1024) == 89984
