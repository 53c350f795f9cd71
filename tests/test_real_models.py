"""Real architectures extract (issue 13): structure-only exports of
``transformers`` models built from configs (``tests/models/build.py``)."""

from pathlib import Path

import numpy as np
import onnx
import pytest

from perfseer_rt import extract
from perfseer_rt.errors import ShapeError
from tests.contrib_models import run_shapes

MODELS = Path(__file__).parent / "models"


def _matmul_flops(g):
    ops = np.array(g.node_ops)
    return g.node_column("flops")[np.isin(ops, ["MatMul", "Gemm", "MatMulInteger"])].sum()


def test_swin_with_dynamic_batch_extracts_at_batch_1_and_scales():
    one = extract(MODELS / "swin_tiny.onnx", batch=1)
    four = extract(MODELS / "swin_tiny.onnx", batch=4)
    assert one.unknown_ops == [] and one.num_nodes == four.num_nodes
    assert _matmul_flops(four) == pytest.approx(4 * _matmul_flops(one))


def test_bert_base_extracts_with_named_seq():
    g = extract(MODELS / "bert_base.onnx", batch=2, dims={"seq": 128})
    assert g.input_shapes["input_ids"] == (2, 128)
    # 12 layers x (4 x 768^2 attention + 2 x 768 x 3072 FFN) + embeddings
    layer = 4 * 768 * 768 + 2 * 768 * 3072
    assert g.globals["params_total"] > 12 * layer
    # the dense layers alone: 2 FLOPs per MAC, 2 x 128 tokens
    assert _matmul_flops(g) > 2 * 256 * 12 * layer


def test_gpt2_kv_cache_needs_dims_listed_at_once_then_extracts():
    with pytest.raises(ShapeError) as err:
        extract(MODELS / "gpt2_kv.onnx")
    assert "--dim past_seq=N --dim seq=N --dim total_seq=N" in str(err.value)
    short = extract(MODELS / "gpt2_kv.onnx", dims={"seq": 1, "past_seq": 7, "total_seq": 8})
    long = extract(MODELS / "gpt2_kv.onnx", dims={"seq": 1, "past_seq": 63, "total_seq": 64})
    assert short.input_shapes["past_k_0"] == (1, 2, 7, 16)
    # attention over the cache grows with its length; the dense layers do not
    assert _matmul_flops(long) > _matmul_flops(short)


def test_dynamically_quantized_model_costs_its_integer_ops():
    g = extract(MODELS / "bert_small_int8.onnx", dims={"seq": 64})
    ops = set(g.node_ops)
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops
    assert g.unknown_ops == []
    mmi = g.node_column("flops")[np.array(g.node_ops) == "MatMulInteger"]
    assert (mmi > 0).all()
    fp = extract(MODELS / "bert_small.onnx", dims={"seq": 64})
    # the int8 dense layers do the float model's dense MACs
    assert mmi.sum() == pytest.approx(_matmul_flops(fp) - _attention_matmuls(fp), rel=0.01)
    assert any("uint8" in w for w in g.warnings)


def _attention_matmuls(g):
    """MatMuls between two activations (no weight): Q.K^T and P.V."""
    ops = np.array(g.node_ops)
    sel = (ops == "MatMul") & (g.node_column("weight") == 0)
    return g.node_column("flops")[sel].sum()


def test_fp16_model_is_flagged_and_its_weights_are_two_bytes():
    fp16 = extract(MODELS / "bert_small_fp16.onnx", dims={"seq": 64})
    fp32 = extract(MODELS / "bert_small.onnx", dims={"seq": 64})
    assert fp16.info["dtype"] == "float16"
    assert any("float16" in w for w in fp16.warnings)
    assert fp16.globals["params_total"] == fp32.globals["params_total"]
    assert fp16.globals["weight_total"] == pytest.approx(fp32.globals["weight_total"] / 2, rel=0.01)
    assert fp32.warnings == []


def test_llama_from_torchs_default_exporter_at_opset_20_and_23():
    """The same LLaMA through torch's dynamo exporter: at opset 23 it uses
    the standard Attention, RMSNormalization and RotaryEmbedding ops where
    opset 20 spells them out; both extract with every op costed, and the
    two counts of one model agree."""
    g20 = extract(MODELS / "llama_dynamo_op20.onnx", dims={"seq": 64})
    g23 = extract(MODELS / "llama_dynamo_op23.onnx", dims={"seq": 64})
    assert {"Attention", "RMSNormalization", "RotaryEmbedding"} <= set(g23.node_ops)
    assert not {"Attention", "RMSNormalization"} & set(g20.node_ops)
    assert g20.unknown_ops == [] and g23.unknown_ops == []
    # 64 tokens x 2 FLOPs x (2 layers x (q, o: 64x64; k, v: 64x32; gate, up, down: 64x128)
    # + lm_head 64x256); attention's own MatMuls come on top
    dense = 64 * 2 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) + 64 * 256)
    assert dense < _matmul_flops(g20) < 1.2 * dense
    assert g23.globals["flops_total"] == pytest.approx(g20.globals["flops_total"], rel=0.03)
    # the same weights (op 20 also holds a few scalar constants: exponents, epsilons)
    assert g23.globals["params_total"] == pytest.approx(g20.globals["params_total"], abs=8)


def test_the_exporter_is_read_and_a_dynamo_export_is_flagged():
    """The shipped CPU predictors were trained on TorchScript exports; the
    dynamo exporter's spelling of a model can use other memory
    (reports/cpu-amd-epyc-1t/model_kinds.md), so predictions on its exports say so."""
    dyn = extract(MODELS / "llama_dynamo_op20.onnx", dims={"seq": 16})
    ts = extract(MODELS / "bert_small.onnx", dims={"seq": 16})
    assert dyn.info["exporter"] == "torch-dynamo" and ts.info["exporter"] == "torch-torchscript"
    assert any("dynamo exporter" in w for w in dyn.warnings)
    assert not any("dynamo exporter" in w for w in ts.warnings)


#: The classic ONNX Model Zoo architectures that onnx ships as backend test
#: data (Caffe2 exports, IR 3, opset 9; weights made by ConstantOfShape).
ONNX_ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@pytest.mark.skipif(not ONNX_ZOO.is_dir(), reason="this onnx build ships no backend test data")
@pytest.mark.parametrize("name", ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                                  "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512"])
def test_onnx_model_zoo_classics_extract_with_onnxruntimes_shapes(name):
    path = ONNX_ZOO / f"light_{name}.onnx"
    g = extract(path)
    assert g.unknown_ops == []
    rng = np.random.default_rng(0)
    feeds = {n: rng.random(s, dtype=np.float32) for n, s in g.input_shapes.items()}
    ran = run_shapes(onnx.load(str(path)), feeds)
    ours = dict(zip(g.edge_tensors, map(tuple, g.edge_shapes)))
    assert len(ours) > 10 and {t: tuple(ran[t]) for t in ours} == ours
    # the weights ConstantOfShape makes are weights: AlexNet 61.1M parameters, ResNet-50 25.6M
    expected = {"bvlc_alexnet": 61.1e6, "resnet50": 25.6e6}.get(name)
    if expected:
        assert g.globals["params_total"] == pytest.approx(expected, rel=0.01)
