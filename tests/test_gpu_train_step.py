"""`predict --mode train` on a gpu-prior device: the training step priced
from the forward kernels (perfseer_rt/gpu/train_step.py, predict_train.py)."""

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from perfseer_rt import extract
from perfseer_rt.cli import main
from perfseer_rt.errors import DeviceError, MetricError
from perfseer_rt.gpu import train_step
from perfseer_rt.gpu.calibrate import KERNEL_FAMILIES, Correction
from perfseer_rt.gpu.kernels import Kernels, map_graph
from perfseer_rt.predict import api, registry
from tests.gpu_models import transformer

CNN = "examples/resnet18.onnx"


@pytest.fixture(scope="module")
def tfm_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "tfm.onnx"
    onnx.save(transformer(), path)
    return str(path)


def test_each_gemm_gets_its_two_gradient_gemms(tfm_path):
    fwd = map_graph(extract(tfm_path, batch=4))
    bwd = train_step.backward(fwd, 4.0)
    for fam in ("linear", "bmm"):
        f, b = fwd.shapes[fam], bwd.shapes[fam]
        n = len(f["m"])
        assert len(b["m"]) == 2 * n and list(bwd.nodes[fam]) == list(fwd.nodes[fam]) * 2
        # dX = dY W^T: [m, n] @ [n, k]; dW = X^T dY: [k, m] @ [m, n]: same FLOPs as forward
        assert np.array_equal(b["n"][:n], f["k"]) and np.array_equal(b["k"][:n], f["n"])
        assert np.array_equal(b["m"][n:], f["k"]) and np.array_equal(b["k"][n:], f["m"])
        assert np.allclose(b["flops"], np.concatenate([f["flops"], f["flops"]]))
    assert len(bwd.nodes["ln"]) == 2 * len(fwd.nodes["ln"])
    assert bwd.shapes["elem"]["binary"].min() == 1.0


@pytest.mark.parametrize("device", ["h100", "v100"])  # uncalibrated, calibrated
def test_a_training_step_adds_its_phases_and_its_memory_parts(tfm_path, device):
    (inf,) = api.predict(tfm_path, batch=8, device=device)
    (r,) = api.predict(tfm_path, batch=8, device=device, mode="train")
    assert r["mode"] == "train" and set(r["metrics"]) == {"step_ms", "peak_mem_mb"}
    step = r["metrics"]["step_ms"]
    assert set(step["parts"]) == {"forward", "loss", "backward", "optimizer"}
    # the parts are the prior's; the value carries the entry's calibration, as in inference
    # (the test transformer has no conv: a calibration covers all its kernels, not their launches)
    cal = registry.get_predictor(device).manifest["calibration"]

    def shipped(prior: float, launches: float) -> float:
        return float(Correction(**cal).apply(prior - launches)) + launches if cal else prior

    launches = step["launch_overhead_ms"]
    assert set(launches) == set(step["parts"])
    assert step["value"] == pytest.approx(shipped(sum(step["parts"].values()), sum(launches.values())),
                                          abs=1e-3)
    assert (cal is None) == ("calibration" not in step["meaning"])
    lat = inf["metrics"]["latency_ms"]
    assert step["parts"]["forward"] == pytest.approx(sum(lat["parts"].values()), abs=1e-3)
    assert launches["forward"] == pytest.approx(lat["launch_overhead_ms"], abs=1e-3)
    assert lat["value"] == pytest.approx(shipped(sum(lat["parts"].values()), lat["launch_overhead_ms"]),
                                         abs=1e-3)
    assert step["parts"]["backward"] > 1.5 * step["parts"]["forward"]
    mem = r["metrics"]["peak_mem_mb"]
    parts = mem["parts"]
    assert mem["value"] == pytest.approx(sum(parts.values()), abs=0.05)
    assert parts["gradients"] == parts["weights"]
    params = extract(tfm_path, batch=8).globals["params_total"]  # fp32: 4 bytes each
    assert parts["weights"] == pytest.approx(4 * params / 2**20, abs=0.01)
    assert parts["optimizer_state"] == pytest.approx(8 * params / 2**20, abs=0.01)
    assert mem["value"] > inf["metrics"]["peak_mem_mb"]["value"]


def test_the_step_grows_with_the_batch(tfm_path):
    small, big = (api.predict(tfm_path, batch=b, device="a100-40gb", mode="train")[0]["metrics"]
                  for b in (2, 32))
    assert big["step_ms"]["value"] > small["step_ms"]["value"]
    assert big["peak_mem_mb"]["parts"]["activations"] > 8 * small["peak_mem_mb"]["parts"]["activations"]
    # the optimizer update depends on the weights only
    assert big["step_ms"]["parts"]["optimizer"] == pytest.approx(small["step_ms"]["parts"]["optimizer"])


def test_the_loss_is_priced_on_the_largest_output():
    g = extract(CNN, batch=16)
    k = train_step.loss(g, 4.0)
    assert k.shapes["softmax"]["cols"][0] == 1000.0 and k.shapes["softmax"]["rows"][0] == 16.0


def test_train_metrics_are_checked_and_cpu_devices_keep_their_rule(tfm_path):
    with pytest.raises(MetricError, match="step_ms, peak_mem_mb"):
        api.predict(tfm_path, device="h100", mode="train", metrics=["latency_ms"])
    with pytest.raises(DeviceError, match="unknown device|no such device|not a device"):
        api.predict(tfm_path, device="no-such-gpu", mode="train")


def test_cli_train_mode_on_a_gpu(tfm_path):
    res = CliRunner().invoke(main, ["predict", CNN, "--device", "h100", "--mode", "train",
                                    "--batch", "16", "--json"])
    assert res.exit_code == 0, res.output
    assert '"step_ms"' in res.stdout and '"optimizer_state"' in res.stdout
    bad = CliRunner().invoke(main, ["predict", CNN, "--device", "h100", "--mode", "train",
                                    "--metrics", "latency_ms"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_fit_answers_the_largest_training_batch_that_fits(tfm_path):
    from perfseer_rt.predict.budget import fit

    ans = fit(tfm_path, "h100", max_memory_mb=3000, mode="train", max_value=4096)
    assert ans["prediction"]["mode"] == "train" and ans["value"] is not None
    at = ans["prediction"]["metrics"]["peak_mem_mb"]["value"]
    nxt = ans["next"]["metrics"]["peak_mem_mb"]["value"]
    assert at <= 3000 < nxt and ans["next"]["batch"] == ans["value"] + 1
    # a training step needs more memory than inference: fewer samples fit
    inf = fit(tfm_path, "h100", max_memory_mb=3000, max_value=4096)
    assert inf["value"] is None or inf["value"] > ans["value"]


def test_cli_check_reads_step_ms_in_train_mode(tfm_path):
    ok = CliRunner().invoke(main, ["check", tfm_path, "--device", "h100", "--mode", "train",
                                   "--max-latency-ms", "1e6", "--json"])
    assert ok.exit_code == 0 and '"metric": "step_ms"' in ok.stdout.replace('":"', '": "')
    slow = CliRunner().invoke(main, ["check", tfm_path, "--device", "h100", "--mode", "train",
                                     "--max-latency-ms", "1e-6"])
    assert slow.exit_code == 1 and "step_ms" in slow.stdout


@given(st.lists(st.tuples(*(st.integers(1, 4096),) * 4), min_size=1, max_size=8),
       st.sampled_from(["linear", "bmm"]))
@settings(max_examples=100, deadline=None)
def test_gradient_gemms_double_the_forward_flops_for_any_shape(shapes, fam):
    m, n, k, b = (np.array(col, np.float64) for col in zip(*shapes))
    fwd = Kernels(shapes={fam: train_step._gemm(m, n, k, b, 4.0)}, nodes={fam: np.arange(len(m))})
    bwd = train_step.backward(fwd, 4.0).shapes[fam]
    assert bwd["flops"].sum() == pytest.approx(2 * fwd.shapes[fam]["flops"].sum())
    # each gradient GEMM reads its two operands and writes its result: all tensors the forward touched
    assert np.allclose(np.sort(bwd["bytes"]), np.sort(np.concatenate([fwd.shapes[fam]["bytes"]] * 2)))


@given(st.dictionaries(st.sampled_from(KERNEL_FAMILIES), st.floats(0.01, 1e4), min_size=1),
       st.floats(0.1, 10.0), st.floats(0.0, 1.0))
@settings(max_examples=200, deadline=None)
def test_a_scale_moves_only_covered_kernel_time(family_ms, scale, launch_share):
    covered = tuple(sorted(family_ms)[: max(1, len(family_ms) // 2)])
    c = Correction(float(np.log(scale)), 1.0, 3, 0.0, 0.0, covered)
    launches = {f: v * launch_share for f, v in family_ms.items()}
    body = sum(v - launches[f] for f, v in family_ms.items() if f in covered)
    rest = sum(v for f, v in family_ms.items() if f not in covered) + sum(launches[f] for f in covered)
    assert c.total(family_ms, launches) == pytest.approx(scale * body + rest, rel=1e-9, abs=1e-9)
    assert Correction(0.0, 1.0, 3, 0.0, 0.0, covered).total(family_ms, launches) == pytest.approx(
        sum(family_ms.values()), rel=1e-9)
