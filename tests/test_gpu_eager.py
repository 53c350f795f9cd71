"""The kernels PyTorch eager launches for an exported graph
(perfseer_rt/gpu/eager.py, patterns.py, dtypes.py, backward.py, step.py)."""

import math

import numpy as np
import pytest
from onnx import helper

from perfseer_rt import extract
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import backward as B
from perfseer_rt.gpu import eager, mem_graph, patterns, step
from perfseer_rt.gpu.dtypes import infer
from perfseer_rt.gpu.kernel_table import KernelTable
from perfseer_rt.gpu.precision import get_precision
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.gpu.timeline import host_gaps
from tests.gpu_models import conv_pair, transformer
from tests.onnx_builders import const, model

CNN = "examples/resnet18.onnx"
FP32, AMP, HALF = (get_precision(p) for p in ("fp32", "amp-fp16", "fp16"))


def classes(t: KernelTable) -> list[str]:
    return [str(c) for c in t["cls"]]


@pytest.fixture(scope="module")
def tfm():
    return extract(transformer(seq=64, dim=128, heads=2, layers=2), batch=4)


# ---------------------------------------------------------------- patterns
def test_attention_is_one_fused_kernel_with_the_gemm_views_of_its_halves(tfm):
    adj = patterns.Adjacency.of(tfm)
    groups = patterns.attention_groups(tfm, adj)
    assert len(groups) == 2
    a = groups[0]
    assert (a.heads_batch, a.seq_q, a.seq_k, a.head_dim) == (8, 64, 64, 64)
    assert [tfm.node_ops[i] for i in a.nodes] == ["MatMul", "Div", "Softmax", "MatMul"]
    fused = eager.forward(tfm, FP32)
    apart = eager.forward(tfm, FP32, sdpa=False)
    assert classes(fused).count("attention") == 4 and "softmax" not in classes(fused)
    assert classes(apart).count("bmm") == 4 and classes(apart).count("softmax") == 2
    # FLOPs are kept; the fused kernel reads q, k, v and writes the output once
    att = fused.select(fused["cls"] == "attention")
    mats = apart.select(np.isin(apart["cls"], ["bmm", "softmax", "elem"])
                        & np.isin(apart["node"], list(a.nodes) + list(groups[1].nodes)))
    assert att["flops"].sum() == pytest.approx(mats["flops"].sum())
    assert att["bytes"].sum() == pytest.approx(2 * 4 * 4 * 8 * 64 * 64)  # 2 layers x q,k,v,o x 4 B
    assert att["launches"].sum() == 2


def _act_model(kind: str, leak: bool = False):
    n = helper.make_node
    if kind == "silu":
        nodes = [n("Relu", ["x"], ["h"]), n("Sigmoid", ["h"], ["s"]), n("Mul", ["h", "s"], ["m"]),
                 n("Relu", ["m"], ["y"])]
        inits = []
    else:
        nodes = [n("Relu", ["x"], ["h"]), n("Div", ["h", "sqrt2"], ["s"]), n("Erf", ["s"], ["e"]),
                 n("Add", ["e", "one"], ["a"]), n("Mul", ["h", "a"], ["m"]), n("Mul", ["m", "half"], ["g"]),
                 n("Relu", ["g"], ["y"])]
        inits = [const("sqrt2", [], math.sqrt(2)), const("one", [], 1.0), const("half", [], 0.5)]
    outputs = [("y", [8, 64, 256])]
    if leak:
        nodes.append(n("Neg", ["s"], ["z"]))
        outputs.append(("z", [8, 64, 256]))
    return model(nodes, [("x", [8, 64, 256])], outputs, inits)


@pytest.mark.parametrize("kind,members", [("silu", 2), ("gelu", 5)])
@pytest.mark.parametrize("leak", [False, True])
def test_an_activation_pytorch_runs_as_one_kernel_fuses_unless_an_intermediate_is_read(kind, members, leak):
    g = extract(_act_model(kind, leak))
    t = eager.forward(g, FP32)
    if leak:
        assert len(t) == g.num_nodes
        return
    assert len(t) == g.num_nodes - members + 1
    act = t.select(t["transcendental"] == 1.0)
    assert len(act) == 1 and act["bytes"][0] == pytest.approx(2 * 8 * 64 * 256 * 4)  # reads x, writes y
    assert act["flops"][0] == pytest.approx(sum(g.node_column("flops")[1:1 + members]))


def test_a_linear_layer_and_its_bias_add_are_one_gemm():
    n = helper.make_node
    proto = model([n("MatMul", ["x", "w"], ["h"]), n("Add", ["h", "b"], ["y"])], [("x", [4, 32, 64])],
                  [("y", [4, 32, 128])], [const("w", [64, 128]), const("b", [128])])
    t = eager.forward(extract(proto), FP32)
    assert classes(t) == ["linear"] and t["host_ops"][0] == 1.0
    assert (t["m"][0], t["n"][0], t["k"][0]) == (128, 128, 64)


def test_views_cost_no_kernel_but_a_transpose_that_must_copy_does(tfm):
    t = eager.forward(tfm, FP32)
    adj = patterns.Adjacency.of(tfm)
    views = patterns.view_nodes(tfm, adj)
    ops = tfm.node_ops
    assert {ops[i] for i in views} >= {"Reshape", "Identity"}
    # q/k/v transposes feed the attention's MatMuls (strided reads); the merge transpose feeds a Reshape
    copies = [ops[int(i)] for i in t.select(t["cls"] == "copy")["node"]]
    assert copies == ["Transpose", "Transpose"]
    assert t["host_ops"].sum() == len(ops) - 2 * 3  # one op per node, one per attention's four


def test_an_eval_export_gets_back_the_batchnorm_pytorch_runs_apart():
    g = extract(CNN, batch=2)
    t = eager.forward(g, FP32)
    convs = sum(op == "Conv" for op in g.node_ops)
    assert classes(t).count("norm_bn") == convs  # every ResNet conv had a BatchNorm, all folded
    off = eager.forward(g, FP32, fold_bn=False)
    assert "norm_bn" not in classes(off)


def test_a_conv_followed_by_a_norm_or_in_a_graph_with_batchnorm_left_gets_none():
    n = helper.make_node
    proto = model([n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                   n("BatchNormalization", ["c", "s", "o", "m", "v"], ["y"])],
                  [("x", [2, 8, 16, 16])], [("y", [2, 8, 16, 16])],
                  [const("w", [8, 8, 3, 3]), const("b", [8])] + [const(k, [8]) for k in "somv"])
    g = extract(proto)
    assert patterns.folded_batchnorm(g, patterns.Adjacency.of(g)) == set()
    assert classes(eager.forward(g, FP32)) == ["conv", "norm_bn"]


def test_a_torchscript_export_names_the_biases_its_batchnorm_folding_made():
    # onnx::Conv_<n>: a constant of the exporter's folding (Conv + BatchNorm);
    # "head.bias": the Conv's own parameter, no BatchNorm behind it
    g = extract(conv_pair("onnx::Conv_7", "head.bias"))
    assert g.info["exporter"] == "torch-torchscript" and g.info["folded_batchnorm"] == [0]
    assert patterns.folded_batchnorm(g, patterns.Adjacency.of(g)) == {0}
    assert classes(eager.forward(g, FP32)) == ["conv", "norm_bn", "elem", "conv"]
    units = [u for u in mem_graph.build(g).units if u.op == "Conv"]
    assert [u.folded_bn for u in units] == [True, False]
    # no folded bias anywhere: no BatchNorm, though the guess of other
    # producers would take both biases for folded ones
    plain = extract(conv_pair("a.bias", "b.bias"))
    assert plain.info["folded_batchnorm"] == []
    assert "norm_bn" not in classes(eager.forward(plain, FP32))


def test_a_dynamo_export_says_which_convs_took_a_batchnorm_or_a_pad():
    # the rewriter drops the zero bias a fresh BatchNorm leaves: no bias to guess from
    g = extract(conv_pair(None, None, ("RemoveOptionalBiasFromConv, FuseBatchNormIntoConv", "FuseConvPad")), batch=2)
    assert g.info["exporter"] == "torch-dynamo"
    assert g.info["folded_batchnorm"] == [0] and g.info["folded_pads"] == [2]
    t = eager.forward(g, FP32)
    assert classes(t) == ["conv", "norm_bn", "elem", "copy", "conv"]
    pad = t.select(t["cls"] == "copy")
    assert pad["bytes"].sum() == pytest.approx(2 * 2 * 8 * 16 * 16 * 4)  # reads r, writes it padded
    assert [u.folded_bn for u in mem_graph.build(g).units if u.op == "Conv"] == [True, False]
    # a dynamo export without the rewriter's metadata tells nothing: the guess decides
    bare = extract(conv_pair("b0", None, ("", "")))
    assert "folded_batchnorm" not in bare.info
    assert patterns.folded_batchnorm(bare, patterns.Adjacency.of(bare)) == {0}


def _sdpa_export(dynamo: bool):
    """scaled_dot_product_attention as torch exports its math: q and k^T
    each scaled by sqrt(scale), k transposed by a Transpose (TorchScript) or
    Reshape -> Transpose -> Reshape (dynamo, which also zeroes empty rows)."""
    n = helper.make_node
    b, h, s, d = 2, 4, 32, 16
    if dynamo:
        kt = [n("Reshape", ["k", "flat"], ["k1"]), n("Transpose", ["k1"], ["k2"], perm=[0, 2, 1]),
              n("Reshape", ["k2", "back"], ["kt"])]
        inits = [const("flat", [3], [b * h, s, d], np.int64), const("back", [4], [b, h, d, s], np.int64)]
    else:
        kt, inits = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])], []
    # dynamo also zeroes the rows a mask left empty: Where(IsNaN(p), 0, p)
    empty_rows = [n("IsNaN", ["p0"], ["nan"]), n("Where", ["nan", "sc", "p0"], ["p"])] if dynamo else []
    nodes = [n("Relu", ["qi"], ["q"]), n("Relu", ["ki"], ["k"]), n("Relu", ["vi"], ["v"])] + kt + [
        n("Mul", ["q", "sc"], ["qs"]), n("Mul", ["kt", "sc"], ["ks"]), n("MatMul", ["qs", "ks"], ["sco"]),
        n("Softmax", ["sco"], ["p" if not dynamo else "p0"], axis=-1)] + empty_rows + [
        n("MatMul", ["p", "v"], ["y"])]
    ins = [(name, [b, h, s, d]) for name in ("qi", "ki", "vi")]
    return extract(model(nodes, ins, [("y", [b, h, s, d])], inits + [const("sc", [], 0.5)]))


def test_the_k_transpose_of_an_exported_sdpa_is_inside_the_fused_kernel():
    tables = []
    for dynamo in (False, True):
        g = _sdpa_export(dynamo)
        (a,) = patterns.attention_groups(g, patterns.Adjacency.of(g))
        assert {g.node_ops[i] for i in a.nodes} == {"MatMul", "Mul", "Softmax", "Transpose"} | (
            {"Reshape", "IsNaN", "Where"} if dynamo else set())
        assert [u.op for u in mem_graph.build(g).units].count("Attention") == 1  # the memory side too
        tables.append(eager.forward(g, FP32))
    assert classes(tables[0]) == classes(tables[1]) == ["elem"] * 3 + ["attention"] * 2
    assert tables[0]["host_ops"].sum() == tables[1]["host_ops"].sum() == 4.0  # three Relus, the SDPA
    assert tables[0]["bytes"].sum() == pytest.approx(tables[1]["bytes"].sum())


def test_unbind_written_as_split_or_as_slices_is_one_host_op():
    n = helper.make_node
    split = [n("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3)]
    slices = [n("Slice", ["x", f"s{k}", f"e{k}", "ax"], [f"{v}0"]) for k, v in enumerate("abc")]
    consts = [const("ax", [1], [0], np.int64)]
    for k in range(3):
        consts += [const(f"s{k}", [1], [k], np.int64), const(f"e{k}", [1], [k + 1], np.int64)]
    host = []
    for head, names, inits in ((split, "abc", []), (slices, ["a0", "b0", "c0"], consts)):
        nodes = [n("Relu", ["in"], ["x"])] + head
        nodes += [n("Squeeze", [t, "zero"], [f"q{k}"]) for k, t in enumerate(names)]
        nodes += [n("Add", ["q0", "q1"], ["s"]), n("Add", ["s", "q2"], ["y"])]
        g = extract(model(nodes, [("in", [3, 4, 16])], [("y", [4, 16])],
                          inits + [const("zero", [1], [0], np.int64)]))
        host.append(float(eager.forward(g, FP32)["host_ops"].sum()))
    assert host[0] == host[1] == 4.0  # Relu, unbind, two Adds


# ---------------------------------------------------------------- precision and dtypes
def test_autocast_halves_gemm_outputs_keeps_norms_fp32_and_casts_weights(tfm):
    dt = infer(tfm, patterns.Adjacency.of(tfm), AMP)
    ops = tfm.node_ops
    by_op = {}
    for i, op in enumerate(ops):
        by_op.setdefault(op, set()).add(float(dt.out_bytes[i]))
    assert by_op["MatMul"] == {2.0} and by_op["LayerNormalization"] == {4.0} and by_op["Softmax"] == {4.0}
    assert by_op["Add"] == {4.0}  # residual: fp32 input + fp16 branch promotes to fp32
    weights = [e for i, e, why in dt.casts if why == "weight"]
    assert len(weights) == 12 and sum(weights) == tfm.node_column("params")[
        [i for i, op in enumerate(ops) if op == "MatMul"]].sum()
    t = eager.forward(tfm, AMP)
    assert set(t.select(np.isin(t["cls"], ["linear", "attention"]))["peak"]) == {"fp16"}
    attention = {j for a in patterns.attention_groups(tfm, patterns.Adjacency.of(tfm)) for j in a.nodes}
    # SDPA reads q, k and v in fp16: the cast of the softmax output before A @ V never runs
    assert classes(t).count("cast") == len([c for c in dt.casts if c[0] not in attention]) == len(dt.casts) - 2


def test_a_half_model_moves_half_the_bytes_and_has_no_casts(tfm):
    full, half = eager.forward(tfm, FP32), eager.forward(tfm, HALF)
    assert "cast" not in classes(half) and len(full) == len(half)
    assert half["bytes"].sum() == pytest.approx(full["bytes"].sum() / 2)
    assert set(full.select(full["cls"] == "linear")["peak"]) == {"fp32"}  # matmuls: no TF32 by default
    assert set(eager.forward(tfm, get_precision("tf32")).select(full["cls"] == "linear")["peak"]) == {"tf32"}


def test_convolutions_use_tf32_by_default_and_not_when_strict():
    g = extract(CNN, batch=2)
    for name, peak in (("fp32", "tf32"), ("fp32-strict", "fp32"), ("amp-bf16", "bf16")):
        t = eager.forward(g, get_precision(name))
        assert set(t.select(t["cls"] == "conv")["peak"]) == {peak}


def test_peaks_fall_back_where_the_gpu_lacks_them_and_bf16_is_refused():
    turing = GpuSpec("T4", 16, 320, 40, 64, 1590, 8141, 4, tc16_gflops=65000, arch="turing")
    assert turing.peak_gflops("tf32") == turing.fp32_gflops
    assert turing.peak_gflops("fp16") == 65000
    with pytest.raises(PerfSeerError, match="no bf16"):
        turing.peak_gflops("bf16")
    with pytest.raises(PerfSeerError, match="precision 'fp8'"):
        get_precision("fp8")
    assert get_precision("fp16-tc") is HALF  # the older spelling


# ---------------------------------------------------------------- training step
def test_each_gemm_gets_its_two_gradient_gemms_of_the_transposed_shapes(tfm):
    fwd = eager.forward(tfm, FP32)
    bwd = B.backward(fwd)
    lin_f, lin_b = fwd.select(fwd["cls"] == "linear"), bwd.select(bwd["cls"] == "linear")
    assert len(lin_b) == 2 * len(lin_f)
    assert lin_b["flops"].sum() == pytest.approx(2 * lin_f["flops"].sum())
    m, n, k = lin_f["m"][0], lin_f["n"][0], lin_f["k"][0]
    shapes = {(b_m, b_n, b_k) for b_m, b_n, b_k in zip(lin_b["m"], lin_b["n"], lin_b["k"])}
    assert (m, k, n) in shapes and (k, n, m) in shapes
    att_f, att_b = fwd.select(fwd["cls"] == "attention"), bwd.select(bwd["cls"] == "attention")
    assert att_b["flops"].sum() == pytest.approx(2.5 * att_f["flops"].sum())


def test_optimizers_differ_in_the_bytes_they_move_per_parameter(tfm):
    params = tfm.globals["params_total"]
    moved = {name: B.optimizer(tfm, B.get_optimizer(name), FP32)["bytes"].sum() for name in B.OPTIMIZERS}
    assert moved["sgd"] == pytest.approx(12 * params)
    assert moved["sgd"] < moved["sgd-momentum"] < moved["adam"] < moved["adamw"]
    amp = B.optimizer(tfm, B.get_optimizer("adamw"), AMP)
    assert classes(amp) == ["cast", "optimizer"]  # the fp16 gradients cast back to the fp32 master weights
    with pytest.raises(PerfSeerError, match="optimizer 'lamb'"):
        B.get_optimizer("lamb")


def test_a_training_step_holds_every_phase_in_order(tfm):
    cfg = step.StepConfig(FP32, mode="train", optimizer=B.get_optimizer("sgd"))
    t = step.kernels(tfm, cfg)
    phases = [str(p) for p in t["phase"]]
    order = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    assert order == ["forward", "loss", "backward", "optimizer"]
    fwd = eager.forward(tfm, FP32)
    bn_free = t.select(t["phase"] == "forward")
    assert bn_free["bytes"].sum() == pytest.approx(fwd["bytes"].sum())  # no BatchNorm here to re-read


# ---------------------------------------------------------------- step time
def test_the_step_is_the_gpu_or_the_host_whichever_dominates():
    assert step.total_ms(100.0, 1.0) == pytest.approx(100.0, rel=1e-6)
    assert step.total_ms(1.0, 100.0) == pytest.approx(100.0, rel=1e-6)
    both = step.total_ms(10.0, 10.0)
    assert 10.0 < both <= 10.0 * 2 ** (1 / step.SMOOTH_P) + 1e-9


def test_gaps_appear_only_where_the_host_is_slower_than_the_kernels():
    short = np.full(4, 0.1)
    gaps = host_gaps(short, np.array([0.01, 1.0, 1.0, 0.01]))
    assert gaps == pytest.approx([0.01, 0.9, 0.9, 0.0])  # the GPU waits for two slow dispatches
    ahead = host_gaps(np.array([5.0, 0.1, 0.1]), np.array([0.01, 1.0, 1.0]))
    assert ahead == pytest.approx([0.01, 0.0, 0.0])  # the host ran ahead during the long kernel


def test_nchw_transposes_frame_each_dense_half_precision_conv_only_when_asked():
    """With ``nchw_transposes`` an NCHW AMP step gets one ``copy`` (two
    launches, no framework op) per dense convolution kernel - forward, dgrad
    and wgrad - moving twice its bytes less its fp16 weight, in its phase;
    channels-last, fp32-strict, depthwise work and the flag's default add none."""
    g = extract(CNN, batch=8)
    strict = get_precision("fp32-strict")
    for mode in ("inference", "train"):
        base = step.kernels(g, step.StepConfig(AMP, mode=mode))
        with_t = step.kernels(g, step.StepConfig(AMP, mode=mode, nchw_transposes=True))
        convs = base.select((base["cls"] == "conv") & np.isin(base["peak"], ["fp16", "bf16"]))
        added = with_t.select(np.arange(len(with_t)) >= len(base))
        assert len(convs) > 0 and len(added) == len(convs)
        assert set(classes(added)) == {"copy"}
        assert list(added["phase"]) == list(convs["phase"])
        np.testing.assert_allclose(added["bytes"], 2 * (convs["bytes"] - 2 * convs["n"] * convs["k"]))
        assert (added["bytes"] > 0).all() and (added["launches"] == 2).all() and (added["host_ops"] == 0).all()
        assert with_t.launches == base.launches + 2 * len(convs)
        nhwc = step.kernels(g, step.StepConfig(AMP, mode=mode, layout="nhwc", nchw_transposes=True))
        assert len(nhwc) == len(base)
        fp32 = step.kernels(g, step.StepConfig(strict, mode=mode, nchw_transposes=True))
        assert len(fp32) == len(step.kernels(g, step.StepConfig(strict, mode=mode)))
