"""training/gpuprior on NeuSight's real kernel rows: loader, baselines, one
leave-one-GPU-out fold, and the ONNX export the runtime relies on."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from perfseer_rt.gpu import features as F  # noqa: E402
from training.gpuprior import models as M  # noqa: E402
from training.gpuprior.data import data_root, load_family, load_specs  # noqa: E402
from training.gpuprior.evaluate import fold  # noqa: E402

# The NeuSight rows live in ../shared beside every checkout (CI's too): missing
# data is a failure (data_root's FileNotFoundError names where it looked), not a skip.
ROOT = data_root()

FIVE = {"NVIDIA A100-PCIE-40GB", "Tesla P100-PCIE-16GB", "Tesla P4", "Tesla T4",
        "Tesla V100-PCIE-32GB"}


@pytest.fixture(scope="module")
def ln():
    return load_family("ln", ROOT, load_specs(ROOT))


def test_loader_reads_every_row_of_five_gpus(ln):
    assert set(ln.devices) == FIVE and len(ln) == 1505
    assert (ln.latency_ms > 0).all()
    # bytes of a LayerNorm row: read + write of B x H fp32, plus scale and bias
    b, h = ln.shape["rows"][0], ln.shape["cols"][0]
    assert ln.shape["bytes"][0] == 4 * (2 * b * h + 2 * h)


def test_spec_sheets_include_the_unmeasured_gpus():
    specs = load_specs(ROOT)
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA L4", "NVIDIA A100 80GB PCIe"} <= set(specs)
    assert specs["NVIDIA H100 80GB HBM3"].sms == 132


def test_additive_fit_recovers_its_own_coefficients(ln):
    spec = ln.spec()
    true = {"a_ms": 0.02, "inv_eff_compute": 0.0, "inv_eff_memory": 1.4}
    lat = M.predict_additive(true, ln.shape["flops"], ln.shape["bytes"], spec)
    got = M.fit_additive(ln.shape["flops"], ln.shape["bytes"], spec, lat)
    assert got["a_ms"] == pytest.approx(0.02, rel=1e-6)
    assert got["inv_eff_memory"] == pytest.approx(1.4, rel=1e-6)


def test_one_fold_beats_the_roofline_on_the_held_out_gpu(ln):
    out = fold(ln, "Tesla V100-PCIE-32GB", steps=60)
    assert out["prior"]["count"] == 301 and out["train_rows"] == 1204
    assert out["prior"]["mape"] < out["roofline"]["mape"]
    assert out["roofline"]["bias_pct"] < 0  # the bound is below every real kernel


def test_exported_onnx_matches_torch(ln):
    import onnxruntime as ort

    spec = ln.spec()
    x = F.features("ln", ln.shape, spec)
    y = np.log(ln.latency_ms / F.roofline_ms(ln.shape["flops"], ln.shape["bytes"], spec))
    model = M.fit_mlp(x, y, steps=20)
    sess = ort.InferenceSession(M.export_onnx(model, x.shape[1]), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"features": x})[0]
    assert np.allclose(got, M.predict_mlp(model, x), atol=1e-4)
