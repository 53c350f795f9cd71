"""The GPU prior's runtime: features, node mapping, memory, MIG, calibration,
and `perfseer-rt predict --device h100` end to end on a CNN and a transformer.

The shipped prior (exported_models/_gpu_prior, from `python -m
training.gpuprior`) is used as is; accuracy lives in reports/gpu-prior/.
"""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from perfseer_rt import extract
from perfseer_rt.cli import main
from perfseer_rt.errors import DeviceError, MetricError, PerfSeerError
from perfseer_rt.gpu import features as F
from perfseer_rt.gpu import memory
from perfseer_rt.gpu.calibrate import fit_correction
from perfseer_rt.gpu.kernels import map_graph
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.predict import api, registry
from tests.gpu_models import shared_weight_chain, transformer

CNN = "examples/resnet18.onnx"
GPU_ENTRIES = ("h100", "h200", "a100-40gb", "a100-80gb", "l4", "v100", "t4", "p100", "p4",
               "a100-sxm4-40gb")
H100 = GpuSpec("H100", 80, 3430, 132, 128, 1980, 66908, 50, 989500)


@pytest.fixture(scope="module")
def tfm_path(tmp_path_factory):
    import onnx
    path = tmp_path_factory.mktemp("m") / "tfm.onnx"
    onnx.save(transformer(), path)
    return str(path)


def _run(*args):
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


# ---------------------------------------------------------------- features
def test_roofline_is_the_larger_of_compute_and_memory_time():
    spec = F.spec_arrays(H100, 2)
    flops, nbytes = np.array([66908e9, 1.0]), np.array([1.0, 3430e9])
    assert np.allclose(F.roofline_ms(flops, nbytes, spec), [1000.0, 1000.0])


def test_gemm_waves_fill_and_tile_padding():
    # 132 SMs: 12 x 11 tiles of 128 = exactly one full wave; m = 1500 pads the last tile row
    shape = F.gemm_shape([1, 1], [12 * 128, 1500], [11 * 128, 11 * 128], [256, 256],
                         weight_batched=False)
    x = F.features("linear", shape, F.spec_arrays(H100, 2))
    names = F.feature_names("linear")
    waves, fill, pad = (x[:, names.index(f"{k}_128")] for k in ("log2_waves", "wave_eff", "tile_eff"))
    assert waves[0] == pytest.approx(0.0) and fill[0] == pytest.approx(1.0)
    assert pad[0] == pytest.approx(1.0) and pad[1] == pytest.approx(1500 / 1536)


def test_features_have_no_raw_device_identity():
    names = set(F.feature_names("bmm")) | set(F.feature_names("elem"))
    assert not {"log2_sms", "log2_clock"} & names


# ---------------------------------------------------------------- mapping
def test_transformer_nodes_map_to_families():
    g = extract(transformer(seq=64, dim=128, heads=2, layers=1), batch=2)
    k = map_graph(g)
    fam_of = {int(i): f for f, idx in k.nodes.items() for i in idx}
    ops = g.node_ops
    assert {ops[i] for i, f in fam_of.items() if f == "linear"} == {"MatMul"}
    assert len(k.nodes["linear"]) == 6 and len(k.nodes["bmm"]) == 2
    bmm = k.shapes["bmm"]  # Q @ K^T: batch 2 x 2 heads, 64 x 64 over k = 64
    assert bmm["batch"][0] == 4 and bmm["m"][0] == 64 and bmm["n"][0] == 64 and bmm["k"][0] == 64
    assert k.shapes["softmax"]["cols"][0] == 64 and k.shapes["ln"]["cols"][0] == 128
    assert {ops[i] for i in k.views} == {"Reshape", "Identity"}
    assert {ops[i] for i in k.nodes["memory"]} == {"Transpose"}
    elem = k.shapes["elem"]
    binary = {ops[int(i)]: b for i, b in zip(k.nodes["elem"], elem["binary"])}
    assert binary["Div"] == 0 and binary["Add"] == 1  # Div by a constant scale: the scalar form


def test_resnet_convs_map_to_conv_in_the_gemm_view():
    g = extract(CNN, batch=1)
    k = map_graph(g)
    conv = k.shapes["conv"]
    assert len(conv["m"]) == sum(op == "Conv" for op in g.node_ops)
    assert np.allclose(2 * conv["m"] * conv["n"] * conv["k"], conv["flops"], rtol=0.01)
    assert any("7x7/s2" in n for n in k.notes)


# ---------------------------------------------------------------- memory
def test_weights_count_a_shared_initializer_once():
    proto = shared_weight_chain()
    g = extract(proto)
    exact, ok = memory.weight_bytes(proto, g)
    assert ok and exact == 64 * 64 * 4
    assert memory.weight_bytes(None, g)[0] == 2 * 64 * 64 * 4  # PerfGraph view: per use


def test_live_set_of_a_chain_is_input_plus_two_neighbours():
    proto = shared_weight_chain()
    g = extract(proto)
    # x (8x64) lives throughout; a is alive while y is produced; y to the end
    assert memory.peak_activation_bytes(g) == 3 * 8 * 64 * 4


def test_memory_parts_add_up_and_weights_are_exact_for_resnet18():
    g = extract(CNN, batch=4)
    from perfseer_rt.graph.load import load_model
    proto = load_model(CNN)[0]
    total, parts, exact = memory.estimate(g, proto, {"cuda_context_mib": 500, "cublas_workspace_mib": 32})
    assert exact and total == pytest.approx(sum(parts.values()), abs=0.05)
    n_params = sum(math.prod(t.dims) for t in proto.graph.initializer)
    assert parts["weights"] == pytest.approx(n_params * 4 / 2**20, abs=0.01)
    assert 11e6 < n_params < 12.5e6  # ResNet-18


# ---------------------------------------------------------------- calibration
def test_correction_recovers_a_scale_and_slope():
    rng = np.random.default_rng(0)
    pred = np.exp(rng.uniform(-3, 3, 200))
    meas = np.exp(0.3 + 1.1 * np.log(pred))
    c = fit_correction(pred, meas)
    assert c.alpha == pytest.approx(0.3) and c.beta == pytest.approx(1.1)
    assert c.mape_after < 1e-6 < c.mape_before
    few = fit_correction(pred[:5], 2 * pred[:5])  # below 20 pairs: a scale only
    assert few.beta == 1.0 and few.alpha == pytest.approx(math.log(2))


def test_a_correction_scales_only_the_families_its_pairs_held():
    c = fit_correction([1.0, 2.0, 4.0], [0.5, 1.0, 2.0], ("linear", "bmm"))
    assert c.families == ("linear", "bmm")
    assert c.total({"linear": 6.0, "bmm": 4.0, "conv": 3.0}) == pytest.approx(0.5 * 10.0 + 3.0)
    assert c.total({"conv": 3.0}) == pytest.approx(3.0)
    # launch overhead is not kernel time: it stays as the prior has it
    assert c.total({"linear": 6.0, "conv": 3.0}, {"linear": 2.0, "conv": 1.0}) == pytest.approx(
        0.5 * 4.0 + 2.0 + 3.0)
    assert fit_correction([1.0, 2.0, 4.0], [2.0, 4.0, 8.0]).total({"conv": 3.0}) == pytest.approx(6.0)


def test_a_shipped_transformer_calibration_leaves_convolutions_to_the_prior():
    cal = registry.get_predictor("v100").manifest["calibration"]
    assert cal is not None and "conv" not in cal["families"] and "linear" in cal["families"]
    (r,) = api.predict(CNN, batch=8, device="v100")
    lat = r["metrics"]["latency_ms"]
    scale = math.exp(cal["alpha"])
    conv = lat["parts"]["conv"]
    kernels = map_graph(extract(CNN, batch=8))
    launch = registry.get_predictor("v100").manifest["kernel_launch_ms"]
    fixed = launch * sum(len(n) for f, n in kernels.nodes.items() if f != "conv")
    assert lat["launch_overhead_ms"] == pytest.approx(launch * kernels.count, abs=1e-3)
    covered = sum(lat["parts"].values()) - conv
    assert conv > 0 and lat["value"] == pytest.approx(scale * (covered - fixed) + fixed + conv, abs=1e-3)


@pytest.mark.parametrize("pred,meas", [([1, 2], [1, 2]), ([1, 2, 3], [1, 2]), ([1, 2, -3], [1, 2, 3])])
def test_correction_refuses_bad_pairs(pred, meas):
    with pytest.raises(PerfSeerError):
        fit_correction(pred, meas)


# ---------------------------------------------------------------- end to end
def test_devices_lists_every_gpu_entry_with_provenance():
    code, out, _ = _run("devices", "--json")
    assert code == 0
    rows = {r["device"]: r for r in json.loads(out)}
    for name in GPU_ENTRIES:
        assert rows[name]["kind"] == "gpu-prior"
        assert "not measured by us" in rows[name]["predictor"]["provenance"]
    code, out, _ = _run("devices")
    assert "provenance: prior from public kernel measurements" in out


def test_default_device_is_never_a_prior():
    assert registry.get_predictor(None).kind != "gpu-prior"


@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_predict_h100_json_answers_latency_memory_mig_and_provenance(which, tfm_path):
    path = CNN if which == "cnn" else tfm_path
    code, out, err = _run("predict", path, "--device", "h100", "--batch", "8", "--json")
    assert code == 0, err
    (r,) = json.loads(out)
    assert r["device"] == "h100" and r["batch"] == 8 and r["mode"] == "inference"
    assert r["predictor"]["kind"] == "gpu-prior"
    assert "NeuSight" in r["predictor"]["provenance"] and "not measured by us" in r["predictor"]["provenance"]
    lat, mem = r["metrics"]["latency_ms"], r["metrics"]["peak_mem_mb"]
    assert lat["unit"] == "ms" and lat["value"] > 0
    assert lat["value"] == pytest.approx(sum(lat["parts"].values()), rel=1e-3)
    assert mem["unit"] == "MiB" and set(mem["parts"]) == {
        "weights", "activations", "allocator", "workspace", "cuda_context"}
    assert any("fp32" in w for w in r["warnings"])
    mig = r["mig"]
    assert mig["gpu"] == "h100-80gb" and mig["profile"] == "1g.10gb"
    lats = [p["latency_ms"] for p in mig["profiles"]]
    assert lats[0] > lats[-1]  # a 1/7 slice is slower than the whole GPU's 7g
    assert all(p["usable_mib"] < float(p["profile"].split(".")[1][:-2]) * 1024 for p in mig["profiles"])


def test_prediction_follows_the_spec_sheet_and_the_batch(tfm_path):
    def lat(device, batch):
        (r,) = api.predict(tfm_path, batch=batch, device=device)
        return r["metrics"]["latency_ms"]["value"]

    assert lat("h100", 16) < lat("a100-40gb", 16) < lat("t4", 16) < lat("p4", 16)
    assert lat("h100", 1) < lat("h100", 16)


def test_memory_grows_with_batch_by_the_activations(tfm_path):
    (a,), (b,) = (api.predict(tfm_path, batch=n, device="h200") for n in (1, 32))
    pa, pb = a["metrics"]["peak_mem_mb"]["parts"], b["metrics"]["peak_mem_mb"]["parts"]
    assert pa["weights"] == pb["weights"] and pb["activations"] == pytest.approx(32 * pa["activations"], rel=0.05)


def test_tensor_core_precision_is_an_explicit_assumption(tfm_path):
    (fp32,) = api.predict(tfm_path, batch=16, device="h100")
    (fp16,) = api.predict(tfm_path, batch=16, device="h100", precision="fp16-tc")
    assert fp16["metrics"]["latency_ms"]["value"] < fp32["metrics"]["latency_ms"]["value"]
    assert fp16["precision"] == "fp16-tc" and any("ASSUMPTION" in w for w in fp16["warnings"])
    code, _, err = _run("predict", tfm_path, "--device", "p4", "--precision", "fp16-tc")
    assert code == 2 and "tensor-core" in err and "Traceback" not in err


def test_precision_on_a_measured_device_is_refused(tfm_path):
    with pytest.raises(MetricError):
        api.predict(tfm_path, device=registry.get_predictor(None).device, precision="fp16-tc")


def test_unknown_metric_and_device_are_one_line_errors():
    with pytest.raises(MetricError):
        api.predict(CNN, device="h100", metrics=["energy_j"])
    with pytest.raises(DeviceError):
        api.predict(CNN, device="h300")


def test_table_output_names_the_provenance():
    code, out, _ = _run("predict", CNN, "--device", "t4")
    assert code == 0 and "source     prior from public kernel measurements" in out


def test_a_calibration_in_the_entry_corrects_its_latency(tmp_path, monkeypatch, tfm_path):
    import shutil

    from perfseer_rt.gpu.calibrate import write_calibration

    root = tmp_path / "exported_models"
    shutil.copytree(registry.models_root() / "_gpu_prior", root / "_gpu_prior")
    shutil.copytree(registry.models_root() / "h100", root / "h100")
    (before,) = api.predict(tfm_path, batch=4, device="h100")
    monkeypatch.setattr(registry, "models_root", lambda: root)
    registry.predictors.cache_clear()
    pairs = fit_correction([1.0, 2.0, 4.0], [1.5, 3.0, 6.0])  # a 1.5x scale
    write_calibration(root / "h100" / "manifest.json", pairs, "test pairs")
    registry.predictors.cache_clear()
    try:
        (after,) = api.predict(tfm_path, batch=4, device="h100")
    finally:
        registry.predictors.cache_clear()
    v0, v1 = (r["metrics"]["latency_ms"]["value"] for r in (before, after))
    launch = before["metrics"]["latency_ms"]["launch_overhead_ms"]  # not kernel time: not scaled
    assert 0 < launch < v0 and v1 == pytest.approx(1.5 * (v0 - launch) + launch, rel=1e-3)
    assert "calibrated" in after["predictor"]["description"]


# ---------------------------------------------------------------- fused patterns
def _gelu_model(leak: bool):
    """x -> Relu -> erf-GELU (Div, Erf, Add, Mul, Mul) -> Relu; with ``leak``
    the Erf output is read by one more node, so the pattern cannot fuse."""
    from onnx import helper

    from tests.onnx_builders import const, model

    n = helper.make_node
    nodes = [n("Relu", ["x"], ["h"]), n("Div", ["h", "sqrt2"], ["s"]), n("Erf", ["s"], ["e"]),
             n("Add", ["e", "one"], ["a"]), n("Mul", ["h", "a"], ["m"]), n("Mul", ["m", "half"], ["g"]),
             n("Relu", ["g"], ["y"])]
    outputs = [("y", [8, 64, 256])]
    if leak:
        nodes.append(n("Neg", ["e"], ["z"]))
        outputs.append(("z", [8, 64, 256]))
    inits = [const("sqrt2", [], math.sqrt(2)), const("one", [], 1.0), const("half", [], 0.5)]
    return model(nodes, [("x", [8, 64, 256])], outputs, inits)


@pytest.mark.parametrize("leak", [False, True])
def test_an_erf_gelu_is_one_kernel_unless_an_intermediate_is_read_elsewhere(leak):
    from perfseer_rt.gpu.kernels import erf_gelu_groups

    g = extract(_gelu_model(leak))
    groups = erf_gelu_groups(g)
    k = map_graph(g)
    if leak:
        assert groups == {} and not k.fused and k.count == g.num_nodes
        return
    (erf, members), = groups.items()
    assert [g.node_ops[i] for i in members] == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert k.count == g.num_nodes - 4 and sorted(k.fused) == sorted(set(members) - {erf})
    row = list(k.nodes["elem"]).index(erf)
    flops = g.node_column("flops")
    assert k.shapes["elem"]["flops"][row] == pytest.approx(flops[members].sum())
    assert k.shapes["elem"]["bytes"][row] == pytest.approx(g.node_column("mac")[erf])  # reads x, writes y
    assert k.shapes["elem"]["transcendental"][row] == 1.0 and any("erf-GELU" in t for t in k.notes)


def test_bert_base_gelus_fuse_and_its_prediction_drops(monkeypatch):
    from perfseer_rt.gpu import kernels

    g = extract("tests/models/bert_base.onnx", batch=8, dims={"seq": 128})
    k = map_graph(g)
    assert len(k.fused) == 4 * 12  # one GELU per layer
    (fused,) = api.predict(g, device="h100")
    assert fused["metrics"]["latency_ms"]["launch_overhead_ms"] == pytest.approx(k.count * 0.005, abs=1e-3)
    monkeypatch.setattr(kernels, "erf_gelu_groups", lambda graph: {})
    (apart,) = api.predict(g, device="h100")
    f, a = (r["metrics"]["latency_ms"] for r in (fused, apart))
    assert a["parts"]["linear"] == f["parts"]["linear"] and a["parts"]["elem"] > f["parts"]["elem"]
    assert a["launch_overhead_ms"] == pytest.approx(f["launch_overhead_ms"] + 48 * 0.005, abs=1e-3)


def _lstm(hidden: int = 16, width: int = 8):
    """A bidirectional LSTM (layout 0: X [seq, batch, width]) whose Y another node reads."""
    from onnx import helper

    from tests.onnx_builders import const, model

    gates = 4 * hidden
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden,
                              direction="bidirectional"),
             helper.make_node("Relu", ["y"], ["z"])]
    inits = [const("W", (2, gates, width)), const("R", (2, gates, hidden)),
             const("B", (2, 2 * gates))]
    return model(nodes, [("x", ["seq", "batch", width])], [("z", None)], inits, opset=17)


def test_a_recurrent_layer_runs_one_gemm_and_one_cell_per_step_and_direction():
    g = extract(_lstm(), input_shapes={"x": (6, 3, 8)})
    k = map_graph(g)
    assert len(k.shapes["linear"]["m"]) == 2 + 6 * 2  # projections, then per step and direction
    assert len(k.shapes["elem"]["rows"]) == 6 * 2 + 1  # cells, and the Relu
    m = k.shapes["linear"]["m"]
    assert sorted(set(m)) == [3.0, 18.0]  # batch rows per step; seq x batch per projection
    gemm_flops = k.shapes["linear"]["flops"].sum()
    assert gemm_flops == 2 * 6 * 3 * 2 * 64 * (8 + 16)  # the gate GEMMs of recurrent_flops
    assert any("LSTM priced as cuDNN runs them" in n for n in k.notes)


def test_a_longer_sequence_costs_more_sequential_steps_on_the_gpu():
    pred = registry.get_predictor("h100")
    short, long = (api.predict([_lstm()], device=pred.device, input_shapes={"x": (s, 4, 8)})[0]
                   for s in (10, 40))
    ratio = long["metrics"]["latency_ms"]["value"] / short["metrics"]["latency_ms"]["value"]
    assert 3.0 < ratio <= 4.0  # launch-bound steps: nearly 4x the steps, nearly 4x the time


def test_weights_held_in_subgraphs_are_resident_too():
    """onnxruntime loads the initializers of both branches of an If."""
    from onnx import helper

    from tests.onnx_builders import const

    def branch(tag):
        return helper.make_graph([helper.make_node("MatMul", ["x", f"w{tag}"], [f"y{tag}"])], tag,
                                 [], [helper.make_tensor_value_info(f"y{tag}", 1, None)],
                                 initializer=[const(f"w{tag}", (64, 32))])

    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch("a"), else_branch=branch("b")),
         helper.make_node("Relu", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", 1, [2, 64]), helper.make_tensor_value_info("c", 9, [])],
        [helper.make_tensor_value_info("z", 1, None)], initializer=[const("top", (10,))])
    proto = helper.make_model(graph)
    weights, exact = memory.weight_bytes(proto, extract(proto))
    assert exact and weights == 4 * (2 * 64 * 32 + 10)
