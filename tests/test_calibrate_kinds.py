"""Calibration per kind of work and per thread count
(perfseer_rt.calibrate.kinds / fit / threads): mechanisms on synthetic data,
the work split on real graphs, and the thread-count rules."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from perfseer_rt.calibrate import kinds
from perfseer_rt.calibrate.fit import fit_correction, fit_ratios, nnls
from perfseer_rt.calibrate.threads import check_threads, onnxruntime_default_threads
from perfseer_rt.cli import main
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import extract
from perfseer_rt.predict.correction import Correction
from tests.test_domain import EXAMPLE

K = len(kinds.KINDS)
TRUE = np.array([0.5, 1.6, 1.0, 2.0, 3.0])  # this machine over the base, per kind


def synthetic(n: int, seed: int, noise: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Base predictions, measurements, work and theta for ``n`` graphs whose
    shares vary (the per-kind truth :data:`TRUE`)."""
    rng = np.random.default_rng(seed)
    theta = np.array([1e-8, 2e-8, 1e-8, 2e-8, 1e-3])
    shares = rng.dirichlet(np.full(K, 0.6), size=n)
    p = np.exp(rng.uniform(0, 5, n))
    works = shares * p[:, None] / theta
    y = p * (shares @ TRUE) * np.exp(rng.normal(0, noise, n))
    return p, y, works, theta


def test_nnls_is_exact_and_non_negative():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(nnls(a, np.array([1.0, 2.0, 3.0])), [1.0, 2.0], atol=1e-12)
    x = nnls(a, np.array([1.0, -2.0, -1.0]))  # the free solution would be negative in column 1
    assert np.all(x >= 0) and x[1] == 0.0


def test_ratios_are_recovered_and_a_missing_kind_keeps_the_common_factor():
    p, y, works, theta = synthetic(40, 0, 0.0)
    r = fit_ratios(p, y, kinds.shares(works, theta), ridge=1e-6)
    np.testing.assert_allclose(r, TRUE, rtol=1e-3)
    s = kinds.shares(works, theta)
    s[:, 2] = 0.0  # no reference holds attention
    s /= s.sum(axis=1, keepdims=True)
    r = fit_ratios(p, p * (s @ TRUE), s, ridge=0.02)
    common = np.exp(np.mean(np.log(s @ TRUE)))
    assert r[2] == pytest.approx(common, rel=1e-6)


def test_the_fit_takes_kinds_when_machines_differ_per_kind_and_one_factor_when_not():
    p, y, works, theta = synthetic(30, 1, 0.02)
    c = fit_correction("latency_ms", p, y, works, theta, threads=2, ridge=1e-3)
    assert c.kind == "kinds" and c.cv_mape < 3 and c.threads == 2
    np.testing.assert_allclose([c.ratios[k] for k in kinds.KINDS], TRUE, rtol=0.05)
    assert set(c.ratios) == set(kinds.KINDS) and c.theta_ms["nodes"] == pytest.approx(1e-3)
    one = fit_correction("latency_ms", p, 1.7 * p * np.exp(np.random.default_rng(2).normal(0, 0.03, 30)),
                         works, theta)
    assert one.kind in ("scale", "power")
    assert fit_correction("latency_ms", p[:5], y[:5], works[:5], theta).kind != "kinds"  # too few for 5 ratios


def test_a_kinds_correction_applies_per_graph_and_round_trips():
    resnet = extract(EXAMPLE, batch=1)
    theta = {k: 1e-8 for k in kinds.KINDS} | {"nodes": 1e-3}
    c = Correction("latency_ms", "kinds", 0.0, 1.0, 10, 1.0, 100.0, 5.0,
                   ratios={"dense": 2.0, "depthwise": 1.0, "attention": 1.0, "memory": 1.0, "nodes": 1.0},
                   theta_ms=theta)
    s = kinds.shares(kinds.graph_work(resnet)[None], np.array([theta[k] for k in kinds.KINDS]))[0]
    assert float(c.apply(10.0, [resnet])[0]) == pytest.approx(10.0 * (1.0 + s[0]))
    assert Correction.from_dict(c.to_dict()) == c
    with pytest.raises(PerfSeerError, match="needs the graphs"):
        c.apply(10.0)


def _depthwise_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 56, 56])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 56, 56])
    w = helper.make_tensor("w", TensorProto.FLOAT, [32, 1, 3, 3], np.zeros(32 * 9, np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["c"], group=32, pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["c"], ["y"])
    return helper.make_model(helper.make_graph([node, relu], "dw", [x], [y], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_work_splits_by_kind():
    resnet = kinds.graph_work(extract(EXAMPLE, batch=1))
    assert resnet[0] > 0 and resnet[1] == 0 and resnet[2] == 0 and resnet[3] > 0 and resnet[4] > 10
    dw = kinds.graph_work(extract(_depthwise_model()))
    assert dw[0] == 0 and dw[1] == pytest.approx(2 * 32 * 9 * 56 * 56, rel=0.05) and dw[3] > 0 and dw[4] == 2


def test_the_shipped_base_has_per_kind_costs():
    theta = kinds.base_costs("cpu-amd-epyc-1t")
    assert theta.shape == (K,) and np.all(theta >= 0) and theta.sum() > 0
    with pytest.raises(PerfSeerError, match="no per-kind costs"):
        kinds.base_costs("nosuch")


def test_thread_counts():
    n = onnxruntime_default_threads()
    assert 1 <= n <= (os.cpu_count() or 1)
    assert check_threads(1) == 1
    for bad in (0, (os.cpu_count() or 1) + 1):
        with pytest.raises(PerfSeerError, match="--threads"):
            check_threads(bad)


def test_calibrate_refuses_more_threads_than_cpus_before_profiling(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path))
    r = CliRunner().invoke(main, ["calibrate", "--threads", str((os.cpu_count() or 1) + 1)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--threads" in r.output
    assert r.output.startswith("perfseer-rt: error: --threads")  # no progress bar before it
    assert not (tmp_path / "devices").exists()


def test_expected_error_on_real_models_adds_the_base_error_in_quadrature():
    from perfseer_rt.calibrate.api import expected_real_mape
    from perfseer_rt.predict.registry import get_predictor

    base = get_predictor("cpu-amd-epyc-1t")
    real = base.manifest["accuracy"]["real"][base.default_model]["latency_ms"]["mape"]
    c = Correction("latency_ms", "scale", 0.5, 1.0, 20, 6.0, 80.0, 40.0)
    got = expected_real_mape(c, base)
    assert got["base_real_mape"] == pytest.approx(real)
    assert got["expected_mape"] == pytest.approx(float(np.hypot(6.0, real)))


def test_round_spread_flags_a_machine_whose_speed_changed():
    from perfseer_rt.calibrate.api import ROUND_SPREAD_WARN, CalibrationResult

    steady = [{"latency_round_ms": [10.0 * (i + 1), 10.0 * (i + 1) * f]} for i, f in enumerate([1.0, 1.01, 0.99, 1.0])]
    jumpy = [{"latency_round_ms": [10.0, 10.0 * f]} for f in [1.0, 1.3, 0.8, 1.2]]
    assert CalibrationResult("x", None, "b", {}, measured=steady).round_spread < ROUND_SPREAD_WARN
    assert CalibrationResult("x", None, "b", {}, measured=jumpy).round_spread > ROUND_SPREAD_WARN
    assert CalibrationResult("x", None, "b", {}, measured=jumpy[:2]).round_spread is None


def test_a_calibrated_entry_keeps_the_base_domain(tmp_path, monkeypatch):
    from perfseer_rt.calibrate.api import calibrate_from_measurements
    from perfseer_rt.calibrate.reference import references
    from perfseer_rt.predict.domain import DOMAIN_FILE, of_predictor
    from perfseer_rt.predict.registry import get_predictor

    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path))
    refs = references()[:4]
    graphs = [extract(r.path, batch=r.batch) for r in refs]
    rows = [{"name": r.name, "latency_ms": 2.0 * (i + 1), "peak_mem_mb": 10.0 * (i + 1)} for i, r in enumerate(refs)]
    res = calibrate_from_measurements("mine", "cpu-amd-epyc-1t", graphs, rows, tmp_path / "devices" / "mine")
    assert (res.folder / DOMAIN_FILE).is_file()
    entry, base = get_predictor("mine"), get_predictor("cpu-amd-epyc-1t")
    mine, theirs = of_predictor(entry.manifest, entry.folder), of_predictor(base.manifest, base.folder)
    assert mine is not None and theirs is not None and mine.tensor_elems is not None
    for key in ("flops_total", "nodes", "weight_mb", "tensor_elems", "attention_length", "batch_sizes", "ops"):
        assert getattr(mine, key) == getattr(theirs, key), key
