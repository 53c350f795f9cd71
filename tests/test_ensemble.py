"""SeerNet blended with the GBM (training/seernet/ensemble.py): the blend,
the per-metric weight choice, and the trees exported to ONNX exactly."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from training.seernet.baselines.gbm import GlobalGBM
from training.seernet.ensemble import ML_DOMAIN, ML_OPSET, blend, choose_weights, float32_threshold, tree_nodes


def test_blend_is_geometric_per_metric():
    seer, gbm = np.array([[4.0, 10.0]]), np.array([[1.0, 1000.0]])
    np.testing.assert_allclose(blend(seer, gbm, [0.5, 1.0]), [[2.0, 10.0]])
    np.testing.assert_allclose(blend(seer, gbm, [0.0, 0.0]), gbm)


def test_weights_follow_the_better_predictor_on_validation():
    rng = np.random.default_rng(0)
    true = rng.uniform(1, 100, (200, 2))
    good = true * rng.uniform(0.97, 1.03, true.shape)
    bad = true * rng.uniform(0.5, 1.5, true.shape)
    # metric 0: SeerNet good, GBM bad; metric 1: the other way round
    seer = np.stack([good[:, 0], bad[:, 1]], 1)
    gbm = np.stack([bad[:, 0], good[:, 1]], 1)
    assert choose_weights(seer, gbm, true) == [1.0, 0.0]
    # two equally noisy, independent predictors: averaging beats either one
    other = true * rng.uniform(0.5, 1.5, true.shape)
    assert choose_weights(bad, other, true) == [0.5, 0.5]


@given(st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e30, max_value=1e30),
       st.floats(allow_nan=False, allow_infinity=False, width=32))
@settings(max_examples=300, deadline=None)
def test_float32_threshold_keeps_every_decision(t, x):
    x32 = np.float32(x)
    assert (float(x32) <= t) == (x32 <= np.float32(float32_threshold(t)))


def test_trees_in_onnx_reproduce_the_gbm():
    rng = np.random.default_rng(1)
    u = rng.lognormal(5, 3, (600, 4)).astype(np.float32)  # raw features over many decades
    u[:, 3] = rng.integers(1, 64, 600)
    t = np.stack([np.log(u[:, 0]) * 0.5 + np.sin(np.log(u[:, 1])), np.log(u[:, 2]) - u[:, 3] / 10], 1)
    gbm = GlobalGBM(max_iter=200).fit(u, t)
    nodes, outs, inits = tree_nodes(gbm, "u", "p_")
    assert {n.op_type for n in nodes} == {"TreeEnsemble", "Add"}
    graph = helper.make_graph(nodes + [helper.make_node("Concat", outs, ["y"], axis=1)], "trees",
                              [helper.make_tensor_value_info("u", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid(ML_DOMAIN, ML_OPSET)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"u": u})[0], gbm.predict(u), rtol=0, atol=1e-5)
