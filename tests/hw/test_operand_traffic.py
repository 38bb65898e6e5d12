"""Operand traffic between a compute unit and its scratchpad (energy counters only):
the systolic array's fold model against hand-computed folds and against an element-by-
element replay of SCALE-Sim v2's fold loops, and the vector unit's streamed elements."""

import pytest

from npusim.hw.compute.systolic import SystolicArray, SystolicConfig
from npusim.hw.compute.vector import VectorConfig, VectorUnit
from npusim.mapping.taskgraph import Op

pytestmark = pytest.mark.component


def array(**fields) -> SystolicArray:
    return SystolicArray("sa", SystolicConfig(**fields))


def words(traffic, dtype_bytes=2):
    """``(ifmap reads, filter reads, ofmap writes, psum reads)`` in elements."""
    return tuple(value // dtype_bytes for value in (
        traffic.ifmap_read_bytes, traffic.filter_read_bytes, traffic.ofmap_write_bytes,
        traffic.psum_read_bytes))


def replay_scalesim(dataflow, rows, cols, m, k, n):
    """Count SCALE-Sim v2's per-fold demands element by element (its
    ``systolic_compute_{ws,os,is}.py`` loops: every fold ``fc x fr``, only real elements),
    plus one partial-sum read per output element of every row fold after the first."""
    sr, sc, t = {"ws": (k, n, m), "os": (m, n, k), "is": (k, m, n)}[dataflow]
    ifmap = weights = outputs = psums = 0
    row_folds, col_folds = -(-sr // rows), -(-sc // cols)
    for fc in range(col_folds):
        used_c = min(cols, sc - fc * cols)
        for fr in range(row_folds):
            used_r = min(rows, sr - fr * rows)
            if dataflow == "ws":      # A[:, rows of fold] streams, W tile is stationary
                ifmap += t * used_r
                weights += used_r * used_c
                outputs += t * used_c
                psums += t * used_c if fr else 0
            elif dataflow == "is":    # A tile stationary, W[rows of fold, :] streams
                ifmap += used_r * used_c
                weights += t * used_r
                outputs += t * used_c
                psums += t * used_c if fr else 0
            else:                     # os: A[rows, :] and W[:, cols] stream, C in place
                ifmap += used_r * t
                weights += t * used_c
                outputs += used_r * used_c
    return ifmap, weights, outputs, psums


def test_weight_stationary_fold_formula_by_hand():
    # R x C = 32 x 16, M=50, K=100, N=40: ws maps K on rows (4 row folds), N on columns
    # (3 column folds), streams the M=50 input rows.
    traffic = array(rows=32, cols=16, dataflow="ws").operand_traffic(50, 100, 40)
    assert words(traffic) == (
        3 * 50 * 100,      # every input row once per column fold
        100 * 40,          # every weight once (its fold's stationary tile)
        4 * 50 * 40,       # outputs written once per K (row) fold: partial sums
        3 * 50 * 40)       # and read back by the 3 folds that accumulate onto them
    assert traffic.read_bytes == 2 * (15_000 + 4_000 + 6_000)
    assert traffic.written_bytes == 2 * 8_000


def test_output_and_input_stationary_fold_formulas_by_hand():
    # os: Sr=M=50 (2 row folds), Sc=N=40 (3 column folds), T=K streamed; C stays in place.
    assert words(array(rows=32, cols=16, dataflow="os").operand_traffic(50, 100, 40)) == (
        3 * 50 * 100, 2 * 100 * 40, 50 * 40, 0)
    # is: Sr=K=100 (4 row folds), Sc=M=50 (4 column folds), T=N streamed.
    assert words(array(rows=32, cols=16, dataflow="is").operand_traffic(50, 100, 40)) == (
        50 * 100, 4 * 40 * 100, 4 * 50 * 40, 3 * 50 * 40)


def test_scalesim_reference_layer_counts():
    """M=K=N=1024 on 128x128 ws (the components.md cycle reference): SCALE-Sim v2's
    loops give 8 column folds x 1M input reads, 1M weight reads, 8 row folds x 1M writes
    (SCALE-Sim counts no read-backs; the 7 x 1M partial-sum reads are npusim's addition)."""
    mega = 1024 * 1024
    assert words(array(rows=128, cols=128).operand_traffic(1024, 1024, 1024)) == (
        8 * mega, mega, 8 * mega, 7 * mega)


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 2560, 9728), (129, 129, 129),
                                   (256, 2560, 256), (7, 33, 17), (300, 64, 1000)])
def test_closed_form_matches_a_replay_of_scalesims_fold_loops(dataflow, shape):
    sa = array(rows=32, cols=16, dataflow=dataflow)
    assert words(sa.operand_traffic(*shape)) == replay_scalesim(dataflow, 32, 16, *shape)


def test_padding_moves_nothing_and_fold_options_do_not_change_traffic():
    exact = array(rows=128, cols=128).operand_traffic(128, 128, 128)
    assert words(exact) == (128 * 128, 128 * 128, 128 * 128, 0)  # one fold, no psums
    # One more K row costs a second row fold: the output is written twice and read back
    # once, but the padded rows of the second fold read no weights or inputs.
    padded = array(rows=128, cols=128).operand_traffic(128, 129, 128)
    assert words(padded) == (128 * 129, 129 * 128, 2 * 128 * 128, 128 * 128)
    for option in ({"double_buffer": True}, {"pipelined_folds": True}, {"inject_cycles": 9}):
        assert array(rows=128, cols=128, **option).operand_traffic(128, 129, 128) == padded


def test_batch_and_operand_width_scale_bytes_not_the_fold_count():
    sa = array(rows=32, cols=16)
    one = sa.operand_traffic(50, 100, 40)
    three = sa.operand_traffic(50, 100, 40, batch=3)
    assert three.read_bytes == 3 * one.read_bytes and three.written_bytes == 3 * one.written_bytes
    # FP32 operands on an FP16 array: two passes of native-width slices, twice the bytes.
    wide = sa.operand_traffic(50, 100, 40, dtype_bytes=4)
    assert wide.read_bytes == 2 * one.read_bytes and wide.written_bytes == 2 * one.written_bytes
    assert sa.operand_traffic(0, 100, 40).read_bytes == 0  # no MACs: not issued


def test_operand_bytes_per_op_is_cached_and_leaves_timing_alone():
    sa = array(rows=32, cols=16)
    op = Op("gemm", m=50, k=100, n=40, batch=2, dtype_bytes=2)
    before = sa.op_time_ps(op)
    traffic = sa.operand_traffic(50, 100, 40, 2, 2)
    assert sa.operand_bytes(op) == (traffic.read_bytes, traffic.written_bytes)
    assert sa.operand_bytes(op) is sa.operand_bytes(op)  # computed once per op shape
    assert sa.op_time_ps(op) == before
    assert sa.stats.as_dict()["flops"] == 0  # pure: executors count, units do not


def test_vector_unit_streams_each_element_once():
    vec = VectorUnit("vec", VectorConfig())
    assert vec.operand_bytes(Op("elementwise", elements=1000, flops_per_element=4)) == (2000, 2000)
    assert vec.operand_bytes(Op("softmax", elements=1000, dtype_bytes=4)) == (4000, 4000)
    assert vec.operand_bytes(Op("reduce", elements=1000)) == (2000, 0)  # outputs not counted
    assert vec.operand_bytes(Op("elementwise", elements=0)) == (0, 0)
