"""Every op's FLOPs, MAC and weight bytes against a hand calculation.

Conventions are documented in perfseer_rt/graph/ops.py; MAC counts bytes of
data inputs + weights + outputs (float32: 4 bytes per element).
"""

import numpy as np
import pytest
from onnx import helper

from perfseer_rt import extract
from tests.onnx_builders import const, model, single_op

B = 4  # bytes per float32


def only(graph):
    assert graph.num_nodes == 1, graph.node_ops
    return {c: graph.node_column(c)[0] for c in ("flops", "mac", "weight", "params",
                                                  "kernel_h", "stride_h", "pad_h", "groups",
                                                  "has_bias", "in_channels", "out_channels")}


def test_conv_grouped_strided_with_bias():
    # x 1x8x10x10, w 16x(8/2)x3x3, groups 2, stride 2, pad 1 -> y 1x16x5x5
    w, b = const("w", (16, 4, 3, 3)), const("b", (16,))
    g = extract(single_op("Conv", (1, 8, 10, 10), [w, b], extra_inputs=("w", "b"),
                          attrs=dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1])))
    r = only(g)
    out = 16 * 5 * 5
    assert r["flops"] == 2 * out * 4 * 9 + out
    assert r["weight"] == (16 * 4 * 9 + 16) * B
    assert r["params"] == 16 * 4 * 9 + 16
    assert r["mac"] == (8 * 100 + 16 * 4 * 9 + 16 + out) * B
    assert (r["kernel_h"], r["stride_h"], r["pad_h"], r["groups"], r["has_bias"]) == (3, 2, 1, 2, 1)
    assert (r["in_channels"], r["out_channels"]) == (8, 16)
    assert g.node_column("ai")[0] == pytest.approx(r["flops"] / r["mac"])


def test_conv_batch_scales_flops_not_weights():
    w = const("w", (8, 3, 3, 3))
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
              [("x", ["N", 3, 8, 8])], [("y", None)], [w])
    g1, g8 = extract(m, batch=1), extract(m, batch=8)
    assert g8.node_column("flops")[0] == 8 * g1.node_column("flops")[0] == 8 * 2 * 8 * 64 * 27
    assert g8.node_column("weight")[0] == g1.node_column("weight")[0] == 8 * 27 * B


def test_depthwise_conv():
    w = const("w", (32, 1, 3, 3))
    r = only(extract(single_op("Conv", (2, 32, 16, 16), [w], extra_inputs=("w",),
                               attrs=dict(group=32, pads=[1, 1, 1, 1]))))
    assert r["flops"] == 2 * (2 * 32 * 16 * 16) * 1 * 9
    assert r["has_bias"] == 0


def test_conv_transpose():
    # x 1x8x4x4, w (C_in=8, C_out=4, 2, 2), stride 2 -> y 1x4x8x8
    w = const("w", (8, 4, 2, 2))
    r = only(extract(single_op("ConvTranspose", (1, 8, 4, 4), [w], extra_inputs=("w",),
                               attrs=dict(strides=[2, 2]))))
    assert r["flops"] == 2 * (8 * 16) * 4 * 4
    assert r["mac"] == (8 * 16 + 8 * 4 * 4 + 4 * 64) * B
    assert r["out_channels"] == 4


def test_gemm_trans_b_with_bias():
    w, b = const("w", (10, 64)), const("b", (10,))
    r = only(extract(single_op("Gemm", (3, 64), [w, b], extra_inputs=("w", "b"),
                               attrs=dict(transB=1))))
    assert r["flops"] == 2 * 3 * 10 * 64 + 3 * 10
    assert r["weight"] == (640 + 10) * B
    assert r["mac"] == (3 * 64 + 650 + 30) * B
    assert (r["in_channels"], r["out_channels"]) == (64, 10)


def test_batched_matmul_two_activations():
    m = model([helper.make_node("MatMul", ["a", "b"], ["y"])],
              [("a", [2, 4, 8, 16]), ("b", [2, 4, 16, 8])], [("y", None)])
    r = only(extract(m))
    assert r["flops"] == 2 * (2 * 4 * 8 * 8) * 16
    assert r["weight"] == 0
    assert r["mac"] == (2 * 4 * 8 * 16 * 2 + 2 * 4 * 8 * 8) * B


def test_einsum():
    m = model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
              [("a", [2, 3, 5]), ("b", [2, 5, 7])], [("y", None)])
    assert only(extract(m))["flops"] == 2 * 2 * 3 * 5 * 7


def test_batchnorm_and_layernorm():
    c = 6
    bn_inits = [const(n, (c,)) for n in ("s", "bb", "m", "v")]
    r = only(extract(single_op("BatchNormalization", (2, c, 4, 4), bn_inits,
                               extra_inputs=("s", "bb", "m", "v"))))
    assert r["flops"] == 2 * 2 * c * 16
    assert r["weight"] == 4 * c * B
    ln = [const("g", (32,)), const("beta", (32,))]
    r = only(extract(single_op("LayerNormalization", (2, 10, 32), ln, extra_inputs=("g", "beta"),
                               attrs=dict(axis=-1))))
    assert r["flops"] == 7 * 2 * 10 * 32


def test_softmax_pools_and_reductions():
    assert only(extract(single_op("Softmax", (2, 4, 8, 8))))["flops"] == 5 * 512
    r = only(extract(single_op("MaxPool", (1, 3, 8, 8),
                               attrs=dict(kernel_shape=[2, 2], strides=[2, 2]))))
    assert r["flops"] == 3 * 16 * 4 and r["kernel_h"] == 2 and r["stride_h"] == 2
    assert only(extract(single_op("GlobalAveragePool", (2, 3, 8, 8))))["flops"] == 2 * 3 * 64
    axes = const("axes", (1,), [1], dtype=np.int64)
    r = only(extract(single_op("ReduceMean", (2, 10, 32), [axes], extra_inputs=("axes",))))
    assert r["flops"] == 2 * 10 * 32
    assert r["weight"] == 0  # axes are a parameter input, not a weight
    assert r["mac"] == (640 + 64) * B


def test_elementwise_with_broadcast_constant():
    bias = const("bias", (32,))
    r = only(extract(single_op("Add", (2, 10, 32), [bias], extra_inputs=("bias",))))
    assert r["flops"] == 640
    assert r["weight"] == 32 * B and r["mac"] == (640 + 32 + 640) * B
    assert only(extract(single_op("Sigmoid", (5, 5))))["flops"] == 4 * 25
    assert only(extract(single_op("Relu", (5, 5))))["flops"] == 25


def test_data_movement_is_free_and_shape_input_is_not_data():
    shape = const("shape", (2,), [2, -1], dtype=np.int64)
    r = only(extract(single_op("Reshape", (2, 3, 4), [shape], extra_inputs=("shape",))))
    assert r["flops"] == 0 and r["weight"] == 0
    assert r["mac"] == 2 * 24 * B
    r = only(extract(single_op("Transpose", (2, 3, 4), attrs=dict(perm=[0, 2, 1]))))
    assert r["flops"] == 0 and r["mac"] == 2 * 24 * B


def test_resize_modes():
    scales = const("scales", (4,), [1, 1, 2, 2])
    for mode, per in (("nearest", 0), ("linear", 4)):
        m = single_op("Resize", (1, 3, 4, 4), [scales], extra_inputs=("", "scales"),
                      attrs=dict(mode=mode))
        r = only(extract(m))
        assert r["flops"] == per * 3 * 64
        assert r["mac"] == (48 + 192) * B  # scales are a parameter input


def test_attention_opset23():
    q = ("q", [2, 4, 16, 8])
    m = model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
              [q, ("k", [2, 4, 16, 8]), ("v", [2, 4, 16, 8])], [("y", None)], opset=23)
    scores = 2 * 4 * 16 * 16
    assert only(extract(m))["flops"] == 2 * 2 * scores * 8 + 5 * scores


@pytest.mark.parametrize("ratio, samples", [(2, 4), (3, 9), (0, 4)])
def test_roi_align_costs_its_bilinear_samples(ratio, samples):
    # x 1x8x16x16, 5 regions, 7x7 bins: 5*8*7*7 outputs, ratio^2 samples each (0: 2x2 assumed)
    from perfseer_rt.graph.ops import BILINEAR_FLOPS

    rois, idx = const("rois", (5, 4)), const("idx", (5,), dtype=np.int64)
    g = extract(single_op("RoiAlign", (1, 8, 16, 16), [rois, idx], extra_inputs=("rois", "idx"),
                          attrs=dict(output_height=7, output_width=7, sampling_ratio=ratio)))
    assert not g.unknown_ops
    assert only(g)["flops"] == BILINEAR_FLOPS * samples * 5 * 8 * 7 * 7


@pytest.mark.parametrize("op, gates, cell", [("LSTM", 4, 24), ("GRU", 3, 16), ("RNN", 1, 4)])
@pytest.mark.parametrize("layout", [0, 1])
def test_recurrent_layers_cost_their_gate_gemms_and_cells(op, gates, cell, layout):
    # bidirectional, seq 5, batch 2, input 3, hidden 4, with bias
    seq, batch, width, hidden = 5, 2, 3, 4
    w = const("W", (2, gates * hidden, width))
    r = const("R", (2, gates * hidden, hidden))
    b = const("B", (2, 2 * gates * hidden))
    x_shape = (seq, batch, width) if layout == 0 else (batch, seq, width)
    g = extract(single_op(op, x_shape, [w, r, b], extra_inputs=("W", "R", "B"), n_outputs=2,
                          attrs=dict(hidden_size=hidden, direction="bidirectional",
                                     layout=layout)))
    assert not g.unknown_ops
    per_unit = 2 * gates * (width + hidden) + cell + 2 * gates
    assert only(g)["flops"] == 2 * seq * batch * hidden * per_unit
    assert only(g)["params"] == sum(int(np.prod(t.dims)) for t in (w, r, b))


def test_lrn_grid_sample_and_deform_conv():
    lrn = extract(single_op("LRN", (1, 8, 5, 5), attrs=dict(size=3)))
    assert only(lrn)["flops"] == (3 + 5) * 8 * 25
    grid = const("grid", (1, 6, 7, 2))
    gs = extract(single_op("GridSample", (1, 4, 10, 10), [grid], extra_inputs=("grid",),
                           opset=16))
    assert only(gs)["flops"] == 4 * 4 * 6 * 7  # bilinear: 4 per output, as Resize
    # DeformConv: x 1x4x8x8, w 6x4x3x3, pad 1 -> 1x6x8x8; offsets 1x18x8x8
    from perfseer_rt.graph.ops import BILINEAR_FLOPS

    w, off = const("w", (6, 4, 3, 3)), const("off", (1, 18, 8, 8))
    dc = extract(single_op("DeformConv", (1, 4, 8, 8), [w, off], extra_inputs=("w", "off"),
                           attrs=dict(pads=[1, 1, 1, 1]), opset=19))
    assert not dc.unknown_ops
    assert only(dc)["flops"] == 2 * 6 * 64 * 4 * 9 + BILINEAR_FLOPS * 64 * 4 * 9


def test_fourier_transforms_cost_an_fft_per_transform():
    """DFT and STFT (audio front ends: torch.stft exports STFT) cost
    FFT_FLOPS N log2 N per N-point transform, half on a real signal; STFT
    adds its window's multiply. Before, 1 FLOP per output element."""
    from perfseer_rt.graph.ops import FFT_FLOPS

    # DFT along axis 1 of a complex [2, 64, 2] signal: 2 transforms of 64 points
    dft = extract(single_op("DFT", (2, 64, 2), attrs=dict(axis=1), opset=17))
    assert not dft.unknown_ops
    assert only(dft)["flops"] == 2 * FFT_FLOPS * 64 * 6
    # a real [3, 16, 1] signal: half
    real = extract(single_op("DFT", (3, 16, 1), attrs=dict(axis=1), opset=17))
    assert only(real)["flops"] == 3 * 0.5 * FFT_FLOPS * 16 * 4
    # STFT of a real 1 x 1000 signal, 256-point Hann frames every 128 samples:
    # 1 + (1000 - 256) // 128 = 6 frames, 129 bins
    step, window = const("step", (), 128, dtype=np.int64), const("window", (256,))
    stft = extract(single_op("STFT", (1, 1000, 1), [step, window],
                             extra_inputs=("step", "window"), opset=17))
    assert not stft.unknown_ops
    assert only(stft)["flops"] == 6 * (0.5 * FFT_FLOPS * 256 * 8 + 256)


def test_removed_experimental_ops_of_old_files_are_shaped_and_costed():
    """ONNX's removed experimental ops that onnxruntime still runs (the ONNX
    model zoo's Tiny YOLOv2 starts with ImageScaler): shaped like their
    input without the guessed-shape warning, and costed per element."""
    m = single_op("ImageScaler", (1, 3, 8, 8), attrs=dict(scale=1 / 255, bias=[0.0, 0.0, 0.0]),
                  opset=8)
    m.ir_version = 3
    g = extract(m)
    assert not g.unknown_ops
    assert only(g)["flops"] == 2 * 3 * 64
    assert not any("without a shape rule" in w for w in g.warnings)
