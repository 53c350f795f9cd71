"""A predictor's domain (perfseer_rt.predict.domain): a graph far outside what
a device was trained on is refused with a reason, unless an extrapolation is
asked for; predictions are finite positive numbers or an error."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfseer_rt.errors import DomainError
from perfseer_rt.graph import PerfGraph, extract
from perfseer_rt.predict import predict
from perfseer_rt.predict.domain import (
    FAR_FACTOR,
    UNSEEN_FAR_SHARE,
    Domain,
    GraphSizes,
    check_values,
    extrapolation_factor,
    far_reasons,
    graph_sizes,
    of_predictor,
    ops_of_onehot,
)
from perfseer_rt.predict.registry import shipped_predictors
from perfseer_rt.predict.train_mode import predictor_for
from training.seernet.data import read_graph_shard

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "resnet18.onnx"
GOLDEN = ROOT / "tests" / "data" / "golden_graphs.npz"

DOMAIN = Domain.from_summary({"flops_total": {"min": 1e7, "max": 1e9}, "nodes": {"min": 50, "max": 200},
                              "batch_sizes": [1, 2, 4], "ops": {"Conv": 10, "Relu": 10, "Add": 5}},
                             {"weight_mb": {"min": 1.0, "max": 10.0}, "tensor_elems": {"min": 1e3, "max": 1e5},
                              "attention_length": None, "attention_graphs": 0})


def sizes(**kw) -> GraphSizes:
    base = dict(flops_total=1e8, nodes=100, weight_mb=5.0, tensor_elems=1e4, attention_length=0.0, batch=1,
                op_shares={"Conv": (0.9, 0.5), "Relu": (0.05, 0.3), "Add": (0.05, 0.2)})
    return GraphSizes(**{**base, **kw})


def test_inside_is_not_far_and_just_beyond_is_not_far_either():
    assert far_reasons(DOMAIN, sizes()) == []
    assert far_reasons(DOMAIN, sizes(flops_total=1e9 * FAR_FACTOR * 0.99, nodes=40)) == []


@pytest.mark.parametrize("kw, word", [
    ({"flops_total": 1e9 * FAR_FACTOR * 1.01}, "FLOPs"),
    ({"nodes": 1000}, "node count"),
    ({"tensor_elems": 1e6}, "largest activation tensor"),
    ({"weight_mb": 100.0}, "weights"),
    ({"batch": 32}, "batch 32"),
    ({"attention_length": 128.0}, "attention"),
    ({"op_shares": {"Conv": (0.5, 0.5), "MatMul": (0.5, 0.5)}}, "MatMul"),
])
def test_each_far_size_is_named(kw, word):
    reasons = far_reasons(DOMAIN, sizes(**kw))
    assert len(reasons) == 1 and word in reasons[0]
    assert math.isfinite(extrapolation_factor(DOMAIN, sizes(**kw)))


def test_small_graphs_are_not_far_and_a_small_unseen_share_is_not_far():
    assert far_reasons(DOMAIN, sizes(weight_mb=0.0, nodes=3, tensor_elems=10.0, flops_total=1.0)) == []
    small = UNSEEN_FAR_SHARE * 0.9
    assert far_reasons(DOMAIN, sizes(op_shares={"Conv": (1 - small, 1 - small), "Erf": (small, small)})) == []


def test_an_unseen_op_of_a_seen_cost_kind_counts_as_seen():
    # Sub is element-wise like Add (perfseer_rt.graph.ops.cost_kind)
    assert far_reasons(DOMAIN, sizes(op_shares={"Conv": (0.5, 0.5), "Sub": (0.5, 0.5)})) == []


def test_attention_length_is_bounded_both_ways():
    dom = Domain.from_summary({"ops": {"MatMul": 1, "Softmax": 1}}, {"attention_length": {"min": 64, "max": 512},
                                                                      "attention_graphs": 10})
    shares = {"MatMul": (1.0, 1.0)}
    assert far_reasons(dom, sizes(attention_length=1024.0, op_shares=shares)) == []
    assert "attention length 8" in far_reasons(dom, sizes(attention_length=8.0, op_shares=shares))[0]
    assert "attention length 4096" in far_reasons(dom, sizes(attention_length=4096.0, op_shares=shares))[0]


def test_extrapolation_factor_is_how_far_outside_at_least_two():
    assert extrapolation_factor(DOMAIN, sizes()) == 2.0
    assert extrapolation_factor(DOMAIN, sizes(flops_total=2e10)) == pytest.approx(20.0)


def test_values_must_be_finite_and_positive():
    check_values(np.array([[1.0, 2.0]]), ["latency_ms", "peak_mem_mb"], ["m"])
    for bad in (np.nan, np.inf, 0.0, -1.0):
        with pytest.raises(DomainError, match="m: the predictor gave peak_mem_mb"):
            check_values(np.array([[1.0, bad]]), ["latency_ms", "peak_mem_mb"], ["m"])


# ---------------------------------------------------------- every shipped device
def _seernet_devices() -> list[tuple[str, str]]:
    out = [(d, "inference") for d, p in sorted(shipped_predictors().items()) if p.kind == "seernet"]
    for d, _ in list(out):
        try:
            if predictor_for(d, "train").folder != shipped_predictors()[d].folder:
                out.append((d, "train"))
        except Exception:  # noqa: BLE001 - no training-step predictor for this device
            pass
    return out


def _golden_graph(name: str) -> PerfGraph:
    x, ei, ea, u = read_graph_shard(GOLDEN)[name]
    ops = ops_of_onehot(x)
    return PerfGraph(node_names=[f"n{i}" for i in range(len(x))], node_ops=ops, x=x.astype(np.float64),
                     edge_index=ei.astype(np.int64), edge_attr=ea.astype(np.float64),
                     edge_tensors=[f"t{i}" for i in range(ei.shape[1])],
                     edge_shapes=[() for _ in range(ei.shape[1])], u=u.astype(np.float64))


def _inside_graph(device: str) -> PerfGraph:
    if device.startswith("nb201"):
        return _golden_graph(next(k for k in read_graph_shard(GOLDEN) if k.startswith("nb201")))
    return extract(EXAMPLE, batch=1)


DEVICES = _seernet_devices()


def test_every_shipped_seernet_device_has_a_domain_with_ops_and_sizes():
    assert {d for d, _ in DEVICES} >= {"cpu-amd-epyc-1t", "nb201-pixel3", "nb201-gold_6240"}
    for device, mode in DEVICES:
        pred = predictor_for(device, mode)
        dom = of_predictor(pred.manifest, pred.folder)
        assert dom is not None and dom.ops and dom.flops_total and dom.nodes and dom.tensor_elems, device
        assert dom.batch_sizes, device


@pytest.mark.parametrize("device, mode", DEVICES)
def test_inside_the_domain_is_predicted_finite_and_positive(device, mode):
    graph = _inside_graph(device)
    pred = predictor_for(device, mode)
    assert far_reasons(of_predictor(pred.manifest, pred.folder), graph_sizes(graph)) == []
    res = predict([graph], device=device, mode=mode)[0]
    assert all(math.isfinite(m["value"]) and m["value"] > 0 for m in res["metrics"].values())
    assert "extrapolated" not in res


@pytest.mark.parametrize("device, mode", DEVICES)
def test_far_batch_is_refused_and_extrapolated_only_when_asked(device, mode):
    graph = _inside_graph(device)
    pred = predictor_for(device, mode)
    far_batch = int(max(of_predictor(pred.manifest, pred.folder).batch_sizes) * FAR_FACTOR * 2)
    big = extract(EXAMPLE, batch=far_batch) if not device.startswith("nb201") else None
    if big is None:  # the NAS-Bench-201 graph at a far batch: re-extracting needs its ONNX; scale the globals
        big = graph
        u = big.u.copy()
        u[list(big.global_columns).index("batch_size")] = far_batch
        big = PerfGraph(**{**big.__dict__, "u": u})
    with pytest.raises(DomainError, match=f"far outside what device '{device}' was trained on: .*batch {far_batch}"):
        predict([big], device=device, mode=mode)
    res = predict([big], device=device, mode=mode, extrapolate=True)[0]
    for m in res["metrics"].values():
        assert math.isfinite(m["value"]) and m["value"] > 0
        lo, hi = m["interval"]
        assert lo < m["value"] < hi and m["coverage"] is None
        assert hi / m["value"] >= FAR_FACTOR
    assert any("extrapolated far outside" in w for w in res["warnings"])


@pytest.mark.parametrize("device", ["nb201-pixel3", "nb201-gold_6240"])
def test_resnet18_on_a_nas_bench_201_device_exits_2_with_one_line(device):
    res = subprocess.run([sys.executable, "-m", "perfseer_rt.cli", "predict", str(EXAMPLE), "--device", device],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "far outside" in lines[0] and "FLOPs" in lines[0] and device in lines[0]


def test_extrapolate_flag_gives_a_prediction_with_its_interval():
    res = subprocess.run([sys.executable, "-m", "perfseer_rt.cli", "predict", str(EXAMPLE), "--device",
                          "nb201-pixel3", "--extrapolate", "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)[0]
    m = out["metrics"]["latency_ms"]
    assert math.isfinite(m["value"]) and m["interval"][0] < m["value"] < m["interval"][1]
    assert out["extrapolated"]["factor"] > FAR_FACTOR


def test_keep_going_names_the_far_model_and_predicts_the_others(tmp_path):
    res = subprocess.run([sys.executable, "-m", "perfseer_rt.cli", "predict", str(EXAMPLE),
                          "--batch", "1,1024", "--device", "cpu-amd-epyc-1t", "--keep-going", "--json"],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "batch 1024" in res.stderr and "far outside" in res.stderr
    assert [r["batch"] for r in json.loads(res.stdout)] == [1]
