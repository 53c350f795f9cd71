"""GPU devices end to end: spec sheets as devices, the one predictor
interface (learned layer and prior), precision, layout, optimizer, MIG slices,
power cap, and the CLI (perfseer_rt/gpu/predictor.py, entries.py)."""

import json
import math

import onnx
import pytest
from click.testing import CliRunner

from perfseer_rt.cli import main
from perfseer_rt.errors import DeviceError, MetricError, PerfSeerError
from perfseer_rt.gpu.entries import ALIASES
from perfseer_rt.gpu.layouts import ATTENTION
from perfseer_rt.gpu.spec_store import shipped_gpu_specs
from perfseer_rt.predict import api, check, fit, registry
from perfseer_rt.predict.implementations import implementation
from tests.gpu_models import transformer

CNN = "examples/resnet18.onnx"


@pytest.fixture(scope="module")
def tfm_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "tfm.onnx"
    onnx.save(transformer(), path)
    return str(path)


def _run(*args):
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


def _value(r, metric="latency_ms"):
    return r["metrics"][metric]["value"]


def test_every_shipped_spec_sheet_is_a_device_and_old_names_still_work():
    found = registry.predictors()
    for name in shipped_gpu_specs():
        assert found[name].kind == "gpu"
    for old, new in ALIASES.items():
        assert registry.get_predictor(old).device == new
    assert registry.get_predictor(None).kind != "gpu"  # a GPU is used only when named


@pytest.mark.parametrize("model_name", ["learned", "prior", "blend"])
def test_every_gpu_model_answers_every_metric_with_units_and_meanings(tfm_path, model_name):
    (r,) = api.predict(tfm_path, batch=8, device="h100-sxm", model=model_name)
    assert r["predictor"]["model"] == model_name and r["predictor"]["runtime"] == "pytorch-eager"
    for name in ("latency_ms", "peak_mem_mb", "sm_util_pct", "energy_mj", "power_w"):
        m = r["metrics"][name]
        assert m["value"] > 0 and m["unit"] and m["meaning"]
    lat = r["metrics"]["latency_ms"]
    rounding = 0.5e-4 * (len(lat["parts"]) + 1)  # each part and the total are rounded to 1e-4 ms
    assert sum(lat["parts"].values()) == pytest.approx(lat["gpu_busy_ms"], rel=1e-3, abs=rounding)
    assert lat["value"] >= max(lat["gpu_busy_ms"], lat["host_ms"]) - 1e-3
    assert r["mig"]["profile"] and len(r["mig"]["profiles"]) == 6  # H100's MIG table
    assert isinstance(implementation(registry.get_predictor("h100-sxm"), model_name).predict, object)


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_every_gpu_model_states_an_interval_from_its_own_errors_on_the_public_labels(tfm_path, mode):
    """Each of learned, prior and blend answers with the interval its own
    10th-90th percentile of measured / predicted spans in that mode, as the
    learned layer's report recorded it; the prior's (never fitted on those
    labels) too, where before it gave none."""
    layer = registry.get_predictor("h100-sxm").folder / "_gpu_learned" / "learned.json"
    by_mode = json.loads(layer.read_text())["accuracy"]["by_mode"][mode]
    for m in ("learned", "prior", "blend"):
        (r,) = api.predict(tfm_path, batch=8, device="h100-sxm", model=m, mode=mode)
        lat = r["metrics"]["step_ms" if mode == "train" else "latency_ms"]
        lo, hi = by_mode[m]["log_q"]
        assert lat["interval"] == pytest.approx([lat["value"] * math.exp(lo), lat["value"] * math.exp(hi)],
                                                rel=1e-3), m
        assert lat["coverage"] == 0.8


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_the_blend_is_the_geometric_mean_of_learned_and_prior(tfm_path, mode):
    """``--model blend``: the step and the host time are learned^(1-w) x
    prior^w of the two models' own answers (w = BLEND_PRIOR_WEIGHT)."""
    from perfseer_rt.gpu.predictor import BLEND_PRIOR_WEIGHT as W

    metric = "step_ms" if mode == "train" else "latency_ms"
    got = {m: api.predict(tfm_path, batch=16, device="a100-40gb-sxm", mode=mode, model=m)[0]["metrics"][metric]
           for m in ("learned", "prior", "blend")}
    assert got["learned"]["value"] != pytest.approx(got["prior"]["value"], rel=1e-3)
    for key in ("value", "host_ms"):
        want = got["learned"][key] ** (1 - W) * got["prior"][key] ** W
        assert got["blend"][key] == pytest.approx(want, rel=1e-3)


def test_a_faster_gpu_and_a_smaller_batch_are_faster(tfm_path):
    (h100,), (t4,) = (api.predict(tfm_path, batch=32, device=d) for d in ("h100-sxm", "t4"))
    assert _value(h100) < _value(t4)
    (small,) = api.predict(tfm_path, batch=2, device="h100-sxm")
    assert _value(small) < _value(h100)


def test_half_precision_is_faster_than_fp32_on_tensor_cores(tfm_path):
    fp32, amp, half = (api.predict(tfm_path, batch=64, device="a100-40gb-sxm", precision=p)[0]
                       for p in ("fp32-strict", "amp-fp16", "fp16"))
    assert _value(half) < _value(amp) < _value(fp32)
    assert "autocast" in amp["assumptions"][0]
    assert _value(half, "peak_mem_mb") < _value(fp32, "peak_mem_mb")


def test_bf16_on_a_gpu_without_bf16_is_refused(tfm_path):
    with pytest.raises(PerfSeerError, match="no bf16"):
        api.predict(tfm_path, device="t4", precision="amp-bf16")
    code, _, err = _run("predict", tfm_path, "--device", "v100", "--precision", "bf16")
    assert code == 2 and err.count("\n") == 1 and "bf16" in err


def test_a_training_step_answers_step_ms_per_optimizer(tfm_path):
    steps = {o: api.predict(tfm_path, batch=8, device="a100-40gb-sxm", mode="train", optimizer=o)[0]
             for o in ("sgd", "adamw")}
    sgd, adamw = steps["sgd"], steps["adamw"]
    assert sgd["mode"] == "train" and set(sgd["metrics"]["step_ms"]["phases"]) == {
        "forward", "loss", "backward", "optimizer"}
    assert _value(adamw, "step_ms") > _value(sgd, "step_ms")
    assert adamw["metrics"]["peak_mem_mb"]["parts"]["optimizer_state"] > 0
    assert sgd["metrics"]["peak_mem_mb"]["parts"]["optimizer_state"] == 0
    # one kernel model for both (the defaults differ per mode): backward adds about twice the forward's work
    (inf,) = api.predict(tfm_path, batch=8, device="a100-40gb-sxm", model="prior")
    (step_,) = api.predict(tfm_path, batch=8, device="a100-40gb-sxm", model="prior", mode="train", optimizer="sgd")
    assert step_["metrics"]["step_ms"]["gpu_busy_ms"] > 2 * inf["metrics"]["latency_ms"]["gpu_busy_ms"]
    assert _value(step_, "step_ms") > _value(inf)
    with pytest.raises(PerfSeerError, match="optimizer applies to --mode train"):
        api.predict(tfm_path, device="a100-40gb-sxm", optimizer="sgd")


def test_a_mig_slice_is_slower_than_the_whole_gpu(tfm_path):
    (whole,) = api.predict(tfm_path, batch=16, device="a100-80gb-sxm")
    (slice_,) = api.predict(tfm_path, batch=16, device="a100-80gb-sxm", mig_profile="1g.10gb")
    assert slice_["device"].endswith("[1g.10gb]") and _value(slice_) > _value(whole)
    rows = {p["profile"]: p for p in whole["mig"]["profiles"]}
    assert rows["1g.10gb"]["latency_ms"] == pytest.approx(_value(slice_), rel=1e-6)
    assert {"sm_util_pct", "energy_mj", "power_w"} <= set(rows["1g.10gb"])
    with pytest.raises(DeviceError, match="MIG profile '9g.99gb'"):
        api.predict(tfm_path, device="a100-80gb-sxm", mig_profile="9g.99gb")
    with pytest.raises(DeviceError, match="has no MIG"):
        api.predict(tfm_path, device="rtx-4090", mig_profile="1g.10gb")


def test_a_power_cap_that_binds_slows_the_step_and_caps_the_power(tfm_path):
    (free,) = api.predict(tfm_path, batch=256, device="rtx-4090", precision="amp-fp16")
    p = _value(free, "power_w")
    (capped,) = api.predict(tfm_path, batch=256, device="rtx-4090", precision="amp-fp16",
                            power_limit_w=0.8 * p)
    assert _value(capped, "power_w") == pytest.approx(0.8 * p, rel=1e-3)
    assert _value(capped) > _value(free)


def test_bad_gpu_options_are_one_line_errors(tfm_path):
    for args, word in ((["--precision", "fp8"], "fp8"), (["--layout", "nwhc"], "nwhc"),
                       (["--mode", "train", "--optimizer", "lamb"], "lamb")):
        code, _, err = _run("predict", tfm_path, "--device", "h100", *args)
        assert code == 2 and word in err and "Traceback" not in err
    with pytest.raises(MetricError, match="energy_j"):
        api.predict(tfm_path, device="h100", metrics=["energy_j"])
    with pytest.raises(PerfSeerError, match="GPU devices only"):
        api.predict(CNN, device="cpu-amd-epyc-1t", optimizer="sgd")


def test_materialised_attention_writes_the_scores_and_costs_more(tfm_path):
    """--attention materialised: the model computes softmax(q k^T) v itself
    (HF eager attention, DeepLearningExamples' BERT): the score matrix is
    written, read by the softmax and read again, in time and in memory."""
    kw = dict(batch=16, device="a100-80gb-sxm", mode="train", optimizer="adam", precision="fp16")
    (fused,) = api.predict(tfm_path, **kw)
    (mat,) = api.predict(tfm_path, attention="materialised", **kw)
    assert (fused["attention"], mat["attention"]) == ("fused", "materialised")
    assert _value(mat, "step_ms") > _value(fused, "step_ms")
    assert mat["metrics"]["step_ms"]["parts"].get("softmax", 0) > fused["metrics"]["step_ms"]["parts"].get(
        "softmax", 0)
    assert _value(mat, "peak_mem_mb") > _value(fused, "peak_mem_mb")
    assert any("attention materialised" in a for a in mat["assumptions"])
    (cnn_fused,), (cnn_mat,) = (api.predict(CNN, batch=8, device="l4", attention=a) for a in ATTENTION)
    assert _value(cnn_fused) == _value(cnn_mat)  # no attention pattern: nothing changes
    code, out, err = _run("predict", tfm_path, "--device", "h100", "--attention", "materialised", "--json")
    assert code == 0 and json.loads(out)[0]["attention"] == "materialised", err
    code, _, err = _run("predict", tfm_path, "--device", "h100", "--attention", "flash")
    assert code == 2 and "flash" in err and "Traceback" not in err
    with pytest.raises(PerfSeerError, match="GPU devices only"):
        api.predict(CNN, device="cpu-amd-epyc-1t", attention="materialised")
    # the budget commands and the MIG rows price what was asked too
    verdicts = [check(tfm_path, "a100-80gb-sxm", max_memory_mb=1e6, batch=16, mode="train", attention=a)
                for a in ATTENTION]
    assert _value(verdicts[1]["prediction"], "step_ms") > _value(verdicts[0]["prediction"], "step_ms")
    rows = [{p["profile"]: p for p in r["mig"]["profiles"]} for r in (fused, mat)]
    assert rows[1]["1g.10gb"]["peak_mem_mb"]["value"] > rows[0]["1g.10gb"]["peak_mem_mb"]["value"]
    fits = [fit(tfm_path, "a100-80gb-sxm", max_memory_mb=4000, mode="train", attention=a)["value"]
            for a in ATTENTION]
    assert fits[1] <= fits[0]


def test_each_mode_defaults_to_the_model_with_the_lowest_held_out_error(tmp_path, monkeypatch, tfm_path):
    """A GPU entry's default model per mode is the one of learned, prior and
    blend whose held-out (GPU held out) error in that mode is lowest, as the
    learned layer's record states it; a named model is always the one asked for."""
    import shutil

    src = registry.models_root()
    for folder in ("_gpu_learned", "_gpu_prior"):
        shutil.copytree(src / folder, tmp_path / folder)
    doc = json.loads((tmp_path / "_gpu_learned" / "learned.json").read_text())
    doc["accuracy"]["by_mode"] = {"inference": {"learned": {"mape": 15.0}, "prior": {"mape": 40.0}},
                                  "train": {"learned": {"mape": 30.0}, "prior": {"mape": 20.0}}}
    (tmp_path / "_gpu_learned" / "learned.json").write_text(json.dumps(doc))
    monkeypatch.setattr(registry, "models_root", lambda: tmp_path)
    pred = registry.predictors()["l4"]
    assert (pred.default_model_for("inference"), pred.default_model_for("train")) == ("learned", "prior")
    (inf,) = api.predict(tfm_path, batch=4, device="l4")
    (train,) = api.predict(tfm_path, batch=4, device="l4", mode="train")
    (asked,) = api.predict(tfm_path, batch=4, device="l4", mode="train", model="learned")
    assert (inf["predictor"]["model"], train["predictor"]["model"], asked["predictor"]["model"]) == (
        "learned", "prior", "learned")
    code, out, _ = _run("devices")
    assert code == 0 and "default learned; train: prior" in out
    del doc["accuracy"]["by_mode"]  # a record without per-mode figures: one default for both
    (tmp_path / "_gpu_learned" / "learned.json").write_text(json.dumps(doc))
    assert registry.predictors()["l4"].default_model_for("train") == "learned"
    doc["accuracy"]["by_mode"] = {"train": {"learned": {"mape": 30.0}, "prior": {"mape": 20.0},
                                            "blend": {"mape": 15.0}}}
    (tmp_path / "_gpu_learned" / "learned.json").write_text(json.dumps(doc))
    assert registry.predictors()["l4"].default_model_for("train") == "blend"


def test_cli_json_for_a_gpu_carries_the_request(tfm_path):
    code, out, err = _run("predict", tfm_path, "--device", "rtx-3090", "--batch", "4", "--precision",
                          "amp-fp16", "--layout", "nhwc", "--mode", "train", "--optimizer", "sgd-momentum",
                          "--json")
    assert code == 0, err
    (r,) = json.loads(out)
    assert (r["precision"], r["layout"], r["optimizer"], r["mode"]) == ("amp-fp16", "nhwc", "sgd-momentum",
                                                                        "train")


def test_check_and_fit_read_step_ms_in_train_mode(tfm_path):
    verdict = check(tfm_path, "h100", max_latency_ms=1e6, batch=4, mode="train")
    assert verdict["ok"] and verdict["checks"][0]["metric"] == "step_ms"
    ans = fit(tfm_path, "h100", max_memory_mb=4000, max_value=1024, mode="train")
    assert ans["value"] is not None and ans["value"] >= 1


def test_a_mig_slice_is_a_budget_for_check_and_fit(tfm_path):
    small = check(tfm_path, "a100-80gb-sxm", batch=4, mig_profile="1g.10gb", max_latency_ms=1e6)
    (mem,) = [c for c in small["checks"] if c["metric"] == "peak_mem_mb"]
    assert mem["limit"] == pytest.approx(10 * 1024 * 0.95) and small["prediction"]["device"].endswith("[1g.10gb]")
    one, seven = (fit(tfm_path, "a100-80gb-sxm", max_memory_mb=None, mig_profile=p, max_value=1 << 20)["value"]
                  for p in ("1g.10gb", "7g.80gb"))
    assert one is not None and seven > one
    code, out, err = _run("fit", tfm_path, "--device", "a100-80gb-sxm", "--mig-profile", "2g.20gb", "--json")
    assert code == 0, err
    assert json.loads(out)["limits"]["peak_mem_mb"] == pytest.approx(20 * 1024 * 0.95)
    with pytest.raises(DeviceError, match="MIG profile"):
        check(tfm_path, "rtx-4090", mig_profile="1g.10gb", max_latency_ms=1.0)


def test_a_user_gpu_from_its_spec_sheet_answers_every_command(tmp_path, tfm_path):
    sheet = json.loads(next(p for n, (p, _) in shipped_gpu_specs().items() if n == "l4").read_text())
    sheet["name"] = "My downclocked L4"
    sheet["memory_bandwidth_gbs"] = 150.0
    sheet["l2_cache_mb"] = 1.0  # so that the small model's tensors do not all stay in L2
    spec = tmp_path / "mine.json"
    spec.write_text(json.dumps(sheet))
    code, out, err = _run("devices", "add-gpu", "my-l4", "--spec", str(spec))
    assert code == 0, err
    assert registry.get_predictor("my-l4").user
    (mine,), (l4,) = (api.predict(tfm_path, batch=16, device=d) for d in ("my-l4", "l4"))
    assert _value(mine) > _value(l4)  # a tenth of the bandwidth, a 48th of the L2
    code, out, _ = _run("check", tfm_path, "--device", "my-l4", "--max-latency-ms", "1e6")
    assert code == 0 and "PASS" in out
    code, out, _ = _run("devices", "--json")
    assert any(r["device"] == "my-l4" and r["user_entry"] for r in json.loads(out))
