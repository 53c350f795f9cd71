"""Tests of the model zoo (training/zoo): specs, ids, samplers, export, CLI.

Every family is exported in a small variant and run in onnxruntime (CPU) at
two batch sizes; the file keeps to small models so it runs in well under a
minute on a shared 2-core machine.
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from training.zoo import (
    ModelConfig,
    SpecError,
    build_model,
    example_inputs,
    export_onnx,
    family_names,
    input_specs,
    output_specs,
    parse_spec,
    sample,
    sample_many,
    to_spec,
)
from training.zoo.__main__ import main as zoo_main
from training.zoo.nb201 import parse_cell

NB201_CELL = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"

#: One small spec per family (two for perfseer: together they cover all six styles).
SMALL = {
    "perfseer": "perfseer:res=64,s1=vgg-d1-w8-k3,s2=inception-d1-w16-k5-r0.5,"
                "s3=resnext-d1-w32-k3-r0.5-g8,s4=densenet-d2-w8-k3-r2",
    "perfseer2": "perfseer:res=32,s1=resnet-d1-w8-k7-r0.25,s2=mobilenet-d2-w16-k5-r6,"
                 "s3=resnet-d1-w16-k3-r1,s4=mobilenet-d1-w32-k3-r1",
    "vgg": "vgg:depth=11,width=0.125,res=32",
    "resnet": "resnet:depth=18,width=0.125,res=32",
    "mobilenetv2": "mobilenetv2:width=0.25,depth=0.5,res=32",
    "mobilenetv3": "mobilenetv3:variant=small,width=0.25,res=32",
    "densenet": "densenet:depth=121,width=0.25,res=32",
    "efficientnet": "efficientnet:width=0.25,depth=0.25,res=32",
    "googlenet": "googlenet:width=0.125,res=32",
    "vit": "vit:depth=1,dim=32,heads=2,patch=8,res=32,classes=10",
    "bert": "bert:depth=1,dim=32,heads=2,seq=8,vocab=100",
    "gpt": "gpt:depth=2,dim=32,heads=2,seq=8,vocab=100",
    "nb201": f"nb201:{NB201_CELL},cells=1",
    # published architectures (training/zoo/real): the smallest real ones
    "hf": "hf:model=bert-L2-H128,seq=8",
    "timm": "timm:model=mobilenetv3_small_050,res=64",
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """spec -> path of its dynamic-batch export (each spec exported once per module)."""
    root = tmp_path_factory.mktemp("zoo")
    cache: dict[str, str] = {}

    def get(spec: str) -> str:
        if spec not in cache:
            cache[spec] = str(export_onnx(parse_spec(spec), root / f"m{len(cache)}.onnx"))
        return cache[spec]

    return get


def _session(path: str) -> ort.InferenceSession:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def _ops(path: str) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)


# ------------------------------------------------------------------ export


def test_every_registered_family_has_a_small_spec():
    assert {parse_spec(s).family for s in SMALL.values()} == set(family_names())


@pytest.mark.parametrize("key", sorted(SMALL))
def test_family_exports_and_runs_at_two_batches(key, exported):
    cfg = parse_spec(SMALL[key])
    path = exported(SMALL[key])
    model = onnx.load(path)
    onnx.checker.check_model(model)
    # every input and output has the dynamic batch axis, as input_specs says
    graph_ins = {i.name: i for i in model.graph.input}
    for spec in input_specs(cfg):
        dims = graph_ins[spec.name].type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch"
        assert [d.dim_value for d in dims[1:]] == list(spec.shape[1:])
    for out in model.graph.output:
        assert out.type.tensor_type.shape.dim[0].dim_param == "batch"
    sess = _session(path)
    for batch in (1, 3):
        feeds = example_inputs(cfg, batch)
        outs = sess.run(None, feeds)
        expected = output_specs(cfg, batch)
        assert [o.shape for o in outs] == [s.shape for s in expected]
        assert all(np.isfinite(o).all() for o in outs)


@pytest.mark.parametrize("key", ["resnet", "gpt", "perfseer", "hf", "timm"])
def test_onnx_matches_torch(key, exported):
    cfg = parse_spec(SMALL[key])
    feeds = example_inputs(cfg, 2, seed=3)
    with torch.no_grad():
        ref = build_model(cfg)(*[torch.from_numpy(v) for v in feeds.values()]).numpy()
    got = _session(exported(SMALL[key])).run(None, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def test_batchnorm_is_folded_and_graph_is_clean(exported):
    ops = _ops(exported(SMALL["resnet"]))
    assert ops["Conv"] == 20 and "BatchNormalization" not in ops  # 17 convs + 3 shortcuts
    assert "Identity" not in ops  # no deduplicated weights (all tensors differ)


def test_fixed_batch_export(tmp_path):
    cfg = parse_spec(SMALL["bert"])
    path = export_onnx(cfg, tmp_path / "b4.onnx", batch=4)
    model = onnx.load(str(path))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_value == 8
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["zoo.config"])["batch"] == 4
    assert meta["zoo.arch_id"] == cfg.arch_id
    out = _session(str(path)).run(None, example_inputs(cfg, 4))[0]
    assert out.shape == (4, 8, 32)


def test_export_is_deterministic(tmp_path, exported):
    cfg = parse_spec(SMALL["mobilenetv3"])
    again = export_onnx(cfg, tmp_path / "again.onnx")
    first = Path(exported(SMALL["mobilenetv3"])).read_bytes()
    assert again.read_bytes() == first
    other = export_onnx(cfg, tmp_path / "seed.onnx", seed=12345)
    assert other.read_bytes() != first  # the seed drives the weights


def test_structure_only_keeps_dims_not_data(tmp_path, exported):
    spec = SMALL["vit"]
    full = onnx.load(exported(spec))
    path = export_onnx(parse_spec(spec), tmp_path / "s.onnx", structure_only=True)
    assert not (tmp_path / "s.onnx.data").exists()
    assert path.stat().st_size < 0.2 * len(full.SerializeToString())
    stripped = onnx.load(str(path), load_external_data=False)
    full_dims = {t.name: list(t.dims) for t in full.graph.initializer}
    assert {t.name: list(t.dims) for t in stripped.graph.initializer} == full_dims
    external = [t for t in stripped.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and all(not t.raw_data for t in external)
    assert any(t.name.endswith("pos_embed") for t in external)
    # integer tensors (reshape shapes, gather indices) stay inline and readable
    ints = [a.t for n in stripped.graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    ints += [t for t in stripped.graph.initializer if t.data_type == onnx.TensorProto.INT64]
    ints = [t for t in ints if t.data_type == onnx.TensorProto.INT64]
    assert ints and all(t.data_location == onnx.TensorProto.DEFAULT for t in ints)
    shapes = [onnx.numpy_helper.to_array(t).tolist() for t in ints]
    assert [-1, 17, 3, 2, 16] in shapes  # qkv reshape: 16 patches + cls, 3, heads, head dim
    inferred = onnx.shape_inference.infer_shapes(stripped)
    assert [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim][1:] == [10]


# ------------------------------------------------------------------ nb201


def test_nb201_parses_none_edges():
    cell = "|none~0|+|none~0|nor_conv_1x1~1|+|skip_connect~0|none~1|avg_pool_3x3~2|"
    assert parse_cell(cell) == [["none"], ["none", "nor_conv_1x1"], ["skip_connect", "none", "avg_pool_3x3"]]
    cfg = parse_spec(f"nb201:{cell}")
    assert cfg.params["cell"] == cell and cfg.params["cells"] == 5
    assert to_spec(cfg) == f"nb201:{cell}"
    assert parse_spec(f"nb201:cell={cell}") == cfg


def test_nb201_full_network_structure(exported):
    ops = _ops(exported(f"nb201:{NB201_CELL}"))
    # 15 cells x 3 conv3x3 + stem + 2 reductions x (2 convs + 1x1 shortcut)
    assert ops["Conv"] == 15 * 3 + 1 + 2 * 3
    assert ops["AveragePool"] == 15 + 2 and ops["Gemm"] == 1 and "Mul" not in ops


def test_nb201_none_edges_are_omitted_and_zero_nodes_export(exported, tmp_path):
    # node 1 is all-none (zero), node 2 convolves it, node 3 = skip(x) + avgpool(node 2)
    cell = "|none~0|+|none~0|nor_conv_1x1~1|+|skip_connect~0|none~1|avg_pool_3x3~2|"
    path = exported(f"nb201:{cell}")
    ops = _ops(path)
    assert ops["Mul"] == 15  # one x * 0 per cell for the zero node
    assert ops["Conv"] == 15 + 1 + 2 * 3 and ops["AveragePool"] == 15 + 2
    cfg = parse_spec(f"nb201:{cell}")
    out = _session(path).run(None, example_inputs(cfg, 2))[0]
    assert out.shape == (2, 10) and np.isfinite(out).all()
    # a cell of only none edges outputs zeros: the logits no longer depend on the input
    dead = parse_spec("nb201:|none~0|+|none~0|none~1|+|none~0|none~1|none~2|,cells=1")
    sess = _session(str(export_onnx(dead, tmp_path / "dead.onnx")))
    a = sess.run(None, example_inputs(dead, 2, seed=0))[0]
    b = sess.run(None, example_inputs(dead, 2, seed=1))[0]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell, token", [
    ("|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|", "conv"),
    ("|none~1|+|none~0|none~1|+|none~0|none~1|none~2|", "none~1"),
    ("|none~0|+|none~0|none~1|", "3 nodes"),
    ("|none~0|+|none~0|+|none~0|none~1|none~2|", "node 2"),
])
def test_nb201_bad_cells(cell, token):
    with pytest.raises(SpecError, match=token):
        parse_spec(f"nb201:{cell}")


# ------------------------------------------------------------------ specs and ids


def test_spec_round_trip_for_small_and_sampled_configs():
    configs = [parse_spec(s) for s in SMALL.values()]
    configs += [c for f in family_names() for c in sample_many(f, 2, seed=5)]
    for cfg in configs:
        assert parse_spec(to_spec(cfg)) == cfg
        assert ModelConfig.from_json(cfg.to_json()) == cfg
        assert ModelConfig.from_dict(cfg.to_dict(include_arch_id=True)) == cfg
        assert parse_spec(cfg.to_json()) == cfg  # the CLI accepts config JSON too


def test_spec_examples_from_the_docs():
    cfg = parse_spec("resnet:depth=50,width=1.0,res=224")
    assert to_spec(cfg) == "resnet:depth=50,width=1.0,res=224"
    assert cfg.to_json() == '{"family":"resnet","params":{"classes":1000,"depth":50,"res":224,"width":1.0}}'
    vit = parse_spec("vit:depth=12,dim=768,heads=12,patch=16,res=224")
    assert vit.params == {"depth": 12, "dim": 768, "heads": 12, "patch": 16, "res": 224, "mlp": 4.0,
                          "classes": 1000}
    nb = parse_spec(f"nb201:{NB201_CELL}")
    assert nb.params["cell"] == NB201_CELL and input_specs(nb, 5)[0].shape == (5, 3, 32, 32)


def test_arch_id_is_stable_and_canonical():
    cfg = parse_spec("resnet:depth=50,width=1.0,res=224")
    assert cfg.arch_id == "c52a0088c53d9398"  # golden: must not change between runs or versions
    assert len(cfg.arch_id) == 16 and int(cfg.arch_id, 16) >= 0
    # defaults, int-vs-float spellings and spacing give the same architecture
    assert parse_spec("resnet").arch_id == cfg.arch_id
    assert parse_spec(" resnet : depth = 50 , width=1 ,res=224,classes=1000 ").arch_id == cfg.arch_id
    assert parse_spec("efficientnet:variant=b0").arch_id == parse_spec("efficientnet").arch_id
    assert parse_spec("efficientnet:variant=b2").params["res"] == 260
    # stage fields a style does not use are dropped
    a = parse_spec("perfseer:s1=vgg-d2-w64-k3-r0.5,s2=resnet-d2-w128-g8")
    b = parse_spec("perfseer:s1=vgg-d2-w64,s2=resnet-d2-w128-k3-r1")
    assert a.arch_id == b.arch_id and "ratio" not in a.params["s1"] and "group" not in a.params["s2"]


def test_arch_id_ignores_batch_and_separates_configs():
    plain = parse_spec("resnet:depth=18")
    batched = parse_spec("resnet:depth=18,batch=8")
    assert batched.batch == 8 and plain.batch is None
    assert batched.arch_id == plain.arch_id == plain.with_batch(64).arch_id
    assert batched != plain and json.loads(batched.to_json())["batch"] == 8
    assert to_spec(batched, with_batch=True) == "resnet:depth=18,width=1.0,res=224,batch=8"
    ids = [parse_spec(s).arch_id for s in SMALL.values()]
    ids += [c.arch_id for f in family_names() if f != "mobilenetv3" for c in sample_many(f, 3, seed=1)]
    assert len(set(ids)) == len(ids)
    assert plain.arch_id != parse_spec("resnet:depth=18,res=256").arch_id
    assert parse_spec("gpt").arch_id != parse_spec("gpt:seq=512").arch_id


def test_samplers_are_deterministic_and_valid():
    for fam in family_names():
        first = sample_many(fam, 4, seed=11)
        assert first == sample_many(fam, 4, seed=11)
        assert all(c.family == fam for c in first)
        assert len({c.arch_id for c in sample_many(fam, 20, seed=11)}) >= 8  # a real spread
        assert [c.arch_id for c in first] != [c.arch_id for c in sample_many(fam, 4, seed=12)]
    rng_a, rng_b = random.Random(3), random.Random(3)
    assert [sample("perfseer", rng_a) for _ in range(3)] == [sample("perfseer", rng_b) for _ in range(3)]


def test_perfseer_sampler_covers_styles_and_a_wide_flops_range():
    from torch import nn

    from training.zoo.registry import get_family

    configs = sample_many("perfseer", 10, seed=0)
    styles = {c.params[f"s{i}"]["style"] for c in configs for i in range(1, 5)}
    assert styles == {"vgg", "inception", "resnet", "resnext", "densenet", "mobilenet"}
    flops = []
    for cfg in configs:
        assert cfg.params["res"] == 224 and cfg.params["stem"] == 32
        with torch.device("meta"):
            model = get_family("perfseer").build(cfg.params)
        macs = [0]

        def hook(mod, _inp, out, macs=macs):
            if isinstance(mod, nn.Conv2d):
                macs[0] += out.numel() * mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]

        for m in model.modules():
            m.register_forward_hook(hook)
            if isinstance(m, nn.BatchNorm2d):  # shape-preserving; slow on the meta device
                m.forward = lambda x: x
        with torch.no_grad():
            model(torch.zeros(1, 3, 224, 224, device="meta"))
        flops.append(2 * macs[0])
    assert min(flops) < 2e8 and max(flops) > 2e10 and max(flops) < 5e11  # seed 0: 7e7 .. 6e10


def test_input_specs_per_modality():
    img = input_specs(parse_spec(SMALL["resnet"]))
    assert [(t.name, t.shape, t.dtype) for t in img] == [("input", ("batch", 3, 32, 32), "float32")]
    ids = input_specs(parse_spec(SMALL["bert"]), 16)
    assert [(t.name, t.shape, t.dtype, t.high) for t in ids] == [("input_ids", (16, 8), "int64", 100)]
    assert output_specs(parse_spec(SMALL["gpt"]), 2)[0].shape == (2, 8, 100)
    feeds = example_inputs(parse_spec(SMALL["gpt"]), 3)
    assert feeds["input_ids"].dtype == np.int64 and feeds["input_ids"].max() < 100


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("spec, needles", [
    ("resnt:depth=50", ["'resnt'", "resnet", "nb201", "perfseer"]),
    ("resnet:dpth=50", ["'dpth'", "depth", "width", "res"]),
    ("resnet:depth=51", ["'51'", "18, 34, 50, 101, 152"]),
    ("resnet:width=abc", ["'abc'", "width"]),
    ("resnet:depth", ["'depth'", "name=value"]),
    ("resnet:depth=18,depth=34", ["'depth'", "twice"]),
    ("vit:dim=100,heads=3", ["dim=100", "heads=3"]),
    ("vit:res=100,patch=16", ["res=100", "patch=16"]),
    ("vgg:res=448,width=2.0", ["first FC"]),
    ("efficientnet:variant=b9", ["'b9'", "b0"]),
    ("perfseer:s1=foo-d2-w64", ["'foo'", "inception", "mobilenet"]),
    ("perfseer:s1=resnet-d2-w64-x3", ["'x3'", "d, w, k, r, g"]),
    ("perfseer:s1=mobilenet-d2-w64-r5", ["ratio 5.0", "1, 2, 3, 4, 6"]),
    ("resnet:batch=0", ["batch"]),
    ("", ["empty", "resnet"]),
])
def test_bad_specs_raise_a_helpful_value_error(spec, needles):
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    assert isinstance(info.value, ValueError)
    for needle in needles:
        assert needle in str(info.value)


def test_config_json_with_a_wrong_arch_id_is_rejected():
    data = parse_spec("resnet:depth=18").to_dict(include_arch_id=True)
    data["arch_id"] = "0" * 16
    with pytest.raises(SpecError, match="does not match"):
        ModelConfig.from_dict(data)
    with pytest.raises(SpecError, match="unknown config key"):
        ModelConfig.from_dict({"family": "resnet", "params": {}, "depth": 3})


# ------------------------------------------------------------------ CLI


def test_cli_sample_export_and_errors(tmp_path, capsys):
    assert zoo_main(["sample", "nb201", "-n", "3", "--seed", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and [to_spec(c) for c in sample_many("nb201", 3, 0)] == lines
    assert zoo_main(["sample", "resnet", "-n", "2", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["arch_id"] for r in rows] == [parse_spec(r["spec"]).arch_id for r in rows]

    out = tmp_path / "cli.onnx"
    assert zoo_main(["export", SMALL["vgg"], "-o", str(out), "--batch", "2", "--structure-only", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["arch_id"] == parse_spec(SMALL["vgg"]).arch_id and summary["batch"] == 2
    model = onnx.load(str(out), load_external_data=False)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2

    assert zoo_main(["export", "resnet:dpth=1", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err and "dpth" in err


def test_models_over_the_protobuf_limit_use_external_data(tmp_path, monkeypatch, exported):
    import training.zoo.export as zoo_export

    monkeypatch.setattr(zoo_export, "LARGE_MODEL_BYTES", 0)  # treat every model as > 2 GB
    cfg = parse_spec(SMALL["resnet"])
    path = export_onnx(cfg, tmp_path / "big.onnx")
    assert (tmp_path / "big.onnx.data").stat().st_size > 0.9 * sum(
        t.ByteSize() for t in onnx.load(exported(SMALL["resnet"])).graph.initializer)
    feeds = example_inputs(cfg, 2)
    np.testing.assert_allclose(_session(str(path)).run(None, feeds)[0],
                               _session(exported(SMALL["resnet"])).run(None, feeds)[0], rtol=1e-6, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]  # temp dir removed
    stripped = export_onnx(cfg, tmp_path / "s.onnx", structure_only=True)
    assert not (tmp_path / "s.onnx.data").exists() and stripped.stat().st_size < 50_000


def test_dynamo_exporter_writes_the_same_model_marked_as_such(tmp_path):
    """``exporter="dynamo"`` (torch's default exporter, for the exporter
    checks): same inputs and batch handling; the file reads as a dynamo
    export; an unknown exporter is refused."""
    from perfseer_rt import extract
    from training.zoo import export_onnx, parse_spec
    from training.zoo.errors import SpecError

    cfg = parse_spec("resnet:depth=18,width=0.25,res=32")
    ts = extract(export_onnx(cfg, tmp_path / "ts.onnx"), batch=3)
    dyn = extract(export_onnx(cfg, tmp_path / "dyn.onnx", exporter="dynamo"), batch=3)
    assert (ts.info["exporter"], dyn.info["exporter"]) == ("torch-torchscript", "torch-dynamo")
    assert dyn.input_shapes == ts.input_shapes
    assert dyn.globals["flops_total"] == pytest.approx(ts.globals["flops_total"], rel=0.02)
    with pytest.raises(SpecError, match="unknown exporter"):
        export_onnx(cfg, tmp_path / "x.onnx", exporter="jit")
