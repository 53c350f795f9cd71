"""Peak GPU memory as PyTorch allocates it (perfseer_rt/gpu/memory.py,
mem_graph.py, mem_schedule.py): mechanisms on small graphs, no torch."""

import numpy as np
import pytest
from onnx import helper

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import cuda_context, mem_graph, mem_schedule, memory
from perfseer_rt.gpu.optimizers import optimizer_rule
from perfseer_rt.gpu.precision import get_precision as precision
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph import extract
from perfseer_rt.graph.load import load_model
from tests.gpu_models import transformer
from tests.onnx_builders import const, model

CNN = "examples/resnet18.onnx"
A100 = GpuSpec("NVIDIA A100-SXM4-40GB", 40, 1555, 108, 64, 1410, 19500, 40)
H100 = GpuSpec("NVIDIA H100 SXM", 80, 3350, 132, 128, 1980, 67000, 50)


@pytest.fixture(scope="module")
def cnn():
    proto = load_model(CNN)[0]
    return extract(proto, batch=8), proto


@pytest.fixture(scope="module")
def tfm():
    proto = transformer(seq=32, dim=64, heads=4, layers=2)
    return extract(proto, batch=4), proto


def mlp(width: int = 256, depth: int = 3):
    nodes, inits, x = [], [], "x"
    for i in range(depth):
        inits += [const(f"w{i}", [width, width]), const(f"b{i}", [width])]
        nodes += [helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [f"a{i}"])]
        x = f"a{i}"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return model(nodes, [("x", [32, width])], [("y", [32, width])], inits)


def train(g, proto, **kw):
    return memory.predict_memory(g, proto, A100, mode="train", **kw)


# ---------------------------------------------------------------- optimizers
def test_adam_state_is_twice_sgd_momentum_and_sgd_has_none(cnn):
    g, proto = cnn
    parts = {o: train(g, proto, optimizer=o).parts for o in ("sgd", "sgd-momentum", "adam", "adamw", "adadelta")}
    weights = parts["sgd"]["weights"]
    assert parts["sgd"]["optimizer_state"] == 0
    assert parts["sgd-momentum"]["optimizer_state"] == pytest.approx(weights, rel=0.01)
    assert parts["adam"]["optimizer_state"] == pytest.approx(2 * parts["sgd-momentum"]["optimizer_state"], rel=1e-6)
    assert parts["adadelta"]["optimizer_state"] == pytest.approx(parts["adam"]["optimizer_state"], rel=1e-6)


def test_the_step_temporaries_follow_the_foreach_code():
    g = extract(mlp(512, 4))
    w = float(g.node_column("weight").sum())
    peaks = {o: train(g, None, optimizer=o) for o in ("sgd", "adam", "adadelta")}
    # for an MLP whose weights dwarf its activations the peak is inside step():
    # params + grads + state + temporaries (adam: 1 list, adadelta: 2 lists)
    mib = w / 2**20
    assert peaks["adam"].tensor_peak_mib == pytest.approx(5 * mib, rel=0.05)
    assert peaks["adadelta"].tensor_peak_mib == pytest.approx(6 * mib, rel=0.05)
    assert peaks["sgd"].tensor_peak_mib < 3 * mib


def test_weight_decay_adds_a_list_to_sgd_but_not_to_adamw():
    g = extract(mlp(512, 4))
    assert train(g, None, optimizer="sgd", weight_decay=True).tensor_peak_mib > \
        train(g, None, optimizer="sgd").tensor_peak_mib
    assert train(g, None, optimizer="adamw", weight_decay=True).tensor_peak_mib == \
        train(g, None, optimizer="adamw").tensor_peak_mib


# ---------------------------------------------------------------- views and parts
def test_views_nest_and_parts_add_up_to_nvml(cnn):
    g, proto = cnn
    for mode in ("inference", "train"):
        est = memory.predict_memory(g, proto, A100, mode=mode)
        v = est.views
        assert v["nvml"] == pytest.approx(v["torch_reserved"] + sum(est.context.values()))
        assert v["torch_reserved"] >= v["torch_allocated"] >= est.tensor_peak_mib
        assert sum(est.parts.values()) == pytest.approx(v["nvml"], rel=1e-9)
        block = est.metric()
        assert block["unit"] == "MiB" and set(block["views"]) == {"nvml", "torch_allocated", "torch_reserved"}
        assert all(view["meaning"] for view in block["views"].values())


def test_training_holds_more_than_inference_and_at_least_weights_and_grads(cnn):
    g, proto = cnn
    inf = memory.predict_memory(g, proto, A100, mode="inference")
    tr = train(g, proto, optimizer="sgd")
    assert tr.tensor_peak_mib > inf.tensor_peak_mib
    w, _ = memory.weight_bytes(proto, g)
    assert tr.tensor_peak_mib > 2 * w / 2**20


def test_activations_grow_with_the_batch():
    proto = load_model(CNN)[0]
    small = train(extract(proto, batch=2), proto).parts
    big = train(extract(proto, batch=16), proto).parts
    assert big["activations"] > 4 * small["activations"]


# ---------------------------------------------------------------- precision
def test_pure_bf16_halves_weights_and_amp_keeps_fp32_weights_plus_casts(cnn):
    g, proto = cnn
    fp32 = memory.predict_memory(g, proto, A100, precision="fp32")
    bf16 = memory.predict_memory(g, proto, A100, precision="bf16")
    amp = memory.predict_memory(g, proto, A100, precision="amp-fp16")
    assert bf16.parts["weights"] == pytest.approx(fp32.parts["weights"] / 2, rel=0.01)
    assert amp.parts["weights"] == pytest.approx(fp32.parts["weights"], rel=1e-6)
    # under autocast the cached fp16 copies of the weights pile up through the forward:
    # with tiny activations (batch 1) the peak is at its end, with every copy alive
    one = extract(proto, batch=1)
    amp1 = memory.predict_memory(one, proto, A100, precision="amp-fp16")
    assert amp1.parts["weight_casts"] == pytest.approx(fp32.parts["weights"] / 2, rel=0.05)
    with pytest.raises(PerfSeerError, match="precision"):
        memory.predict_memory(g, proto, A100, precision="fp8")


def test_amp_training_activations_are_smaller_than_fp32(tfm):
    g, proto = tfm
    fp32 = train(g, proto, precision="fp32")
    amp = train(g, proto, precision="amp-bf16")
    assert amp.parts["activations"] < fp32.parts["activations"]
    # fp32 parameters: the same fp32 optimizer state
    assert amp.parts["optimizer_state"] == pytest.approx(fp32.parts["optimizer_state"])


# ---------------------------------------------------------------- workspaces, context
def test_cublas_workspace_per_handle_by_architecture(tfm):
    g, proto = tfm
    a = train(g, proto).parts["workspace"]
    h = memory.predict_memory(g, proto, H100, mode="train").parts["workspace"]
    lt = cuda_context.CUBLASLT_WORKSPACE_BYTES / 2**20
    # two handles in training: the forward's and autograd's device thread's
    assert a == pytest.approx(2 * cuda_context.cublas_workspace_bytes("ampere") / 2**20, abs=2 * lt + 0.01)
    assert h == pytest.approx(2 * 32.0, abs=2 * lt + 0.01)
    inf = memory.predict_memory(g, proto, A100, mode="inference").parts["workspace"]
    assert inf == pytest.approx(a / 2, abs=lt + 0.01)


def test_context_scales_with_sms_and_eager_loading_costs_more(tfm):
    g, proto = tfm
    small = memory.predict_memory(g, proto, GpuSpec("NVIDIA T4", 16, 320, 40, 64, 1590, 8100, 4), mode="train")
    big = memory.predict_memory(g, proto, H100, mode="train")
    assert big.context["stack"] > small.context["stack"]
    eager = memory.predict_memory(g, proto, H100, mode="train", lazy_loading=False)
    assert eager.views["nvml"] > big.views["nvml"]
    assert any("ESTIMATE" in a for a in big.assumptions)


# ---------------------------------------------------------------- graph rules
def test_an_eval_export_conv_with_bias_is_taken_as_conv_plus_batchnorm(cnn):
    g, proto = cnn
    est = train(g, proto)
    assert any("BatchNorm folded" in a for a in est.assumptions)
    plain = train(g, proto, folded_bn=False)
    assert est.parts["activations"] > plain.parts["activations"]
    assert est.parts["buffers"] > 0 and plain.parts["buffers"] == 0


def test_fused_attention_never_materialises_the_score_matrix():
    proto = transformer(seq=256, dim=64, heads=4, layers=2)
    g = extract(proto, batch=4)
    fused = train(g, proto)
    eager = train(g, proto, fused_attention=False)
    scores = 4 * 4 * 256 * 256 * 4 / 2**20   # one (B, H, S, S) fp32 tensor
    assert eager.tensor_peak_mib - fused.tensor_peak_mib > 2 * scores
    mg = mem_graph.build(g)
    assert sum(u.op == "Attention" for u in mg.units) == 2


def test_maxpool_keeps_int64_indices_in_training_only():
    node = helper.make_node("MaxPool", ["h"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    conv = helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1])
    proto = model([conv, node], [("x", [2, 3, 16, 16])], [("y", [2, 8, 8, 8])], [const("w", [8, 3, 3, 3])])
    g = extract(proto)
    mg = mem_graph.build(g, folded_bn=False)
    opts = mem_schedule.Options(precision("fp32"), True, optimizer_rule("sgd"), steps=1)
    ev = mem_schedule.Schedule(mg, opts).run()
    idx = [e for e in ev if e.kind == "+" and e.op == "MaxPool" and e.nbytes == 2 * 8 * 8 * 8 * 8]
    assert len(idx) == 1
    inf = mem_schedule.Schedule(mg, mem_schedule.Options(precision("fp32"), False, steps=1)).run()
    assert not [e for e in inf if e.kind == "+" and e.op == "MaxPool" and e.nbytes == 2 * 8 * 8 * 8 * 8]


def test_unknown_ops_are_reported_not_dropped():
    proto = model([helper.make_node("Hardmax", ["x"], ["y"])], [("x", [4, 16])], [("y", [4, 16])])
    est = memory.predict_memory(extract(proto), proto, A100)
    assert any("Hardmax" in a for a in est.assumptions)


# ---------------------------------------------------------------- budgets and errors
def test_capacity_says_whether_the_run_fits(cnn):
    g, proto = cnn
    est = train(g, proto)
    assert train(g, proto, capacity_mib=est.views["nvml"] * 2).fits
    tight = train(g, proto, capacity_mib=est.views["nvml"] * 0.5)
    assert not tight.fits and tight.oom_at


def test_bad_mode_and_optimizer_are_refused(cnn):
    g, proto = cnn
    with pytest.raises(PerfSeerError, match="optimizer"):
        train(g, proto, optimizer="lion")
    with pytest.raises(PerfSeerError, match="mode"):
        memory.predict_memory(g, proto, A100, mode="serve")


def test_shared_weights_count_once_in_parameters():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("MatMul", ["a", "w"], ["y"])]
    proto = model(nodes, [("x", [8, 256])], [("y", [8, 256])], [const("w", [256, 256])])
    est = train(extract(proto), proto, optimizer="sgd-momentum")
    assert est.parts["optimizer_state"] == pytest.approx(256 * 256 * 4 / 2**20, rel=0.01)
    assert np.isfinite(est.views["nvml"])


def test_a_transposed_copy_of_a_tied_embedding_counts_once():
    v, d = 512, 64
    table = np.arange(v * d, dtype=np.float32).reshape(v, d) % 5
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["h"]),
             helper.make_node("MatMul", ["h", "head"], ["y"])]
    from onnx import TensorProto, numpy_helper
    tied = model(nodes, [("ids", [4, 16], TensorProto.INT64)], [("y", [4, 16, v])],
                 [numpy_helper.from_array(table, "emb"), numpy_helper.from_array(table.T.copy(), "head")])
    untied = model(nodes, [("ids", [4, 16], TensorProto.INT64)], [("y", [4, 16, v])],
                   [numpy_helper.from_array(table, "emb"), numpy_helper.from_array(table.T + 1, "head")])
    assert memory.tied_transpose_bytes(tied) == v * d * 4
    assert memory.tied_transpose_bytes(untied) == 0
    a = train(extract(tied), tied, optimizer="sgd-momentum")
    b = train(extract(untied), untied, optimizer="sgd-momentum")
    assert a.parts["optimizer_state"] == pytest.approx(b.parts["optimizer_state"] / 2, rel=0.01)
    assert any("tied" in x for x in a.assumptions)
