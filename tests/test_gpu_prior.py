"""The GPU kernel prior's features, inference memory, and recurrent layers.

The shipped prior (exported_models/_gpu_prior, from `python -m
training.gpuprior`) is used as is; accuracy lives in reports/gpu-prior/.
"""

import math

import numpy as np
import pytest

from perfseer_rt import extract
from perfseer_rt.gpu import eager, memory
from perfseer_rt.gpu import features as F
from perfseer_rt.gpu.precision import get_precision
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.predict import api
from tests.gpu_models import shared_weight_chain

CNN = "examples/resnet18.onnx"
H100 = GpuSpec("H100", 80, 3430, 132, 128, 1980, 66908, 50, 989500)


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
    t = eager.forward(g, get_precision("fp32"))
    lin, cells = t.select(t["cls"] == "linear"), t.select(t["cls"] == "elem")
    assert len(lin) == 2 + 6 * 2  # projections, then per step and direction
    assert len(cells) == 6 * 2 + 1  # cells, and the Relu
    assert sorted(set(lin["m"])) == [3.0, 18.0]  # batch rows per step; seq x batch per projection
    assert lin["flops"].sum() == 2 * 6 * 3 * 2 * 64 * (8 + 16)  # the gate GEMMs of recurrent_flops


@pytest.mark.parametrize("model_name", ["learned", "prior"])
def test_a_longer_sequence_costs_more_sequential_steps_on_the_gpu(model_name):
    short, long = (api.predict([_lstm()], device="h100-sxm", model=model_name, input_shapes={"x": (s, 4, 8)})[0]
                   for s in (10, 40))
    ratio = long["metrics"]["latency_ms"]["value"] / short["metrics"]["latency_ms"]["value"]
    assert 2.5 < ratio <= 4.0  # launch-bound steps: nearly 4x the steps, nearly 4x the time


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
