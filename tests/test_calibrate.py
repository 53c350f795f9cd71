"""``perfseer-rt calibrate``: the correction fit, the entry it writes, predict
using it, and the local-CPU check of ``predict`` / ``devices``.

The end-to-end test profiles the three smallest bundled reference models for
real on this machine (about 10-20 s) and checks mechanics, not accuracy: a
loaded shared machine makes any accuracy figure meaningless here.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from perfseer_rt.calibrate.api import calibrate_from_measurements
from perfseer_rt.calibrate.fit import conformal_width, fit_correction
from perfseer_rt.calibrate.reference import materialize, references
from perfseer_rt.cli import main
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import extract
from perfseer_rt.predict import api, local_cpu, registry, uncertainty
from perfseer_rt.predict.correction import Correction

BASE = "cpu-amd-epyc-1t"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# ------------------------------------------------------------------ the fit
def test_fit_recovers_a_power_law_and_prefers_one_factor_when_enough():
    rng = np.random.default_rng(0)
    base = np.exp(rng.uniform(-1, 4, 16))
    power = fit_correction("latency_ms", base, 0.7 * base ** 1.2)
    # leave-one-out: only the two end models, predicted beyond the others' range (no slope there), miss
    assert power.kind == "power" and power.b == pytest.approx(1.2) and 0 < power.cv_mape < 1
    np.testing.assert_allclose(power.apply(base), 0.7 * base ** 1.2, rtol=1e-9)
    noisy = 1.4 * base * np.exp(rng.normal(0, 0.05, 16))
    scale = fit_correction("latency_ms", base, noisy)
    assert scale.kind == "scale" and np.exp(scale.a) == pytest.approx(1.4, rel=0.05)
    assert 0 < scale.cv_mape < 10 and scale.base_mape == pytest.approx(100 * np.mean(np.abs(base / noisy - 1)))


def test_a_power_fit_keeps_its_end_ratio_beyond_the_range_it_was_fitted_on():
    base = np.array([1.0, 2.0, 5.0, 10.0])
    power = fit_correction("latency_ms", base, 0.8 * base ** 1.1)
    assert power.kind == "power" and (power.fit_min, power.fit_max) == (1.0, 10.0)
    at = {v: float(power.apply(v)) / v for v in (0.01, 1.0, 10.0, 1000.0, 1e5)}
    assert at[1000.0] == pytest.approx(at[10.0]) and at[1e5] == pytest.approx(at[10.0])  # no slope beyond 10
    assert at[0.01] == pytest.approx(at[1.0]) and at[10.0] == pytest.approx(0.8 * 10 ** 0.1)
    # an entry written before the range was kept applies its fit everywhere, as it did
    old = Correction.from_dict({k: v for k, v in power.to_dict().items() if not k.startswith("fit_")})
    assert float(old.apply(1000.0)) == pytest.approx(0.8 * 1000 ** 1.1)


def test_a_falling_slope_is_not_kept_as_a_correction():
    base = np.array([1.0, 2.0, 4.0, 8.0])
    corr = fit_correction("latency_ms", base, np.array([8.0, 5.0, 3.0, 2.0]))
    assert corr.kind == "scale" and corr.b == 1.0


def test_a_calibrated_peak_memory_correction_reaches_the_peak_and_its_parts(home):
    """The peak a device reports is max(session creation, inference): the
    calibration fits its memory correction on that peak and predict applies
    it to both phases, so the peak and its parts move together."""
    refs = references()[:4]
    graphs = [extract(r.path, batch=r.batch) for r in refs]
    base = api.predict(graphs, device=BASE)
    rows = [{"latency_ms": 1.5 * b["metrics"]["latency_ms"]["value"],
             "peak_mem_mb": 2.0 * b["metrics"]["peak_mem_mb"]["value"]} for b in base]
    calibrate_from_measurements("twice", BASE, graphs, rows, home / "devices" / "twice", env="test rows")
    mine = api.predict(graphs, device="twice")
    for b, m in zip(base, mine):
        bm, mm = b["metrics"]["peak_mem_mb"], m["metrics"]["peak_mem_mb"]
        assert mm["value"] == pytest.approx(2.0 * bm["value"], rel=1e-4)
        for part in ("session_load_peak_mb", "inference_run_peak_mb"):
            assert mm["parts"][part] == pytest.approx(2.0 * bm["parts"][part], rel=1e-4)
        assert mm["value"] == pytest.approx(max(mm["parts"]["session_load_peak_mb"],
                                                mm["parts"]["inference_run_peak_mb"]), rel=1e-6)
        assert m["metrics"]["latency_ms"]["value"] == pytest.approx(1.5 * b["metrics"]["latency_ms"]["value"],
                                                                    rel=1e-4)


def test_the_width_kept_is_the_conformal_quantile_of_the_leave_one_out_log_errors():
    errs = np.arange(1, 31) / 100.0  # 0.01 .. 0.30
    assert conformal_width(errs[:16], 0.9) == pytest.approx(0.16)  # n=16: ceil(17 * 0.9) = 16th, the largest
    assert conformal_width(errs[::-1], 0.9) == pytest.approx(0.28)  # n=30: the 28th smallest, any order
    rng = np.random.default_rng(1)
    base = np.exp(rng.uniform(-1, 4, 16))
    corr = fit_correction("latency_ms", base, 1.3 * base * np.exp(rng.normal(0, 0.1, 16)))
    assert 0.05 < corr.cv_log_q90 < 0.4  # about the noise's 90 % |quantile| (0.16)
    assert corr.cv_log_q90 >= np.log1p(corr.cv_mape / 100) * 0.9  # a 90 % quantile is above the mean error


def test_a_calibrated_entry_widens_the_base_intervals_by_its_own_error(home):
    """The base's interval (its model error) and the calibration's
    leave-one-out error (this CPU's departure from one factor) combine in
    quadrature, around the corrected value; an entry written before widths
    were kept states no interval rather than the base's too narrow one."""
    refs = references()[:6]
    graphs = [extract(r.path, batch=r.batch) for r in refs]
    base = api.predict(graphs, device=BASE)
    noise = np.array([1.0, 1.25, 0.8, 1.1, 0.9, 1.05])
    rows = [{"latency_ms": 0.6 * n * b["metrics"]["latency_ms"]["value"],
             "peak_mem_mb": b["metrics"]["peak_mem_mb"]["value"]} for b, n in zip(base, noise)]
    res = calibrate_from_measurements("noisy", BASE, graphs, rows, home / "devices" / "noisy", env="test rows")
    q = res.corrections["latency_ms"].cv_log_q90
    assert q is not None and q > 0.1
    mine = api.predict(graphs, device="noisy")
    for b, m in zip(base, mine):
        bl, ml = b["metrics"]["latency_ms"], m["metrics"]["latency_ms"]
        lo, hi = np.log(np.array(bl["interval"]) / bl["value"])
        want = ml["value"] * np.exp([-np.hypot(min(lo, 0), q), np.hypot(max(hi, 0), q)])
        np.testing.assert_allclose(ml["interval"], want, rtol=1e-6)
        assert ml["coverage"] == bl["coverage"]
        assert m["distance"] == pytest.approx(b["distance"])  # the base's distance warning still applies

    manifest = home / "devices" / "noisy" / "manifest.json"
    doc = json.loads(manifest.read_text())
    del doc["calibration"]["corrections"]["latency_ms"]["cv_log_q90"]
    manifest.write_text(json.dumps(doc))
    [old] = api.predict(graphs[:1], device="noisy")
    assert old["metrics"]["latency_ms"].get("interval") is None
    assert len(old["metrics"]["peak_mem_mb"]["interval"]) == 2


def test_widening_keeps_a_side_that_does_not_reach_the_prediction_at_the_width():
    iv = uncertainty.widened(uncertainty.Interval(0.05, 0.3, 0.9), 0.4)
    assert (iv.lo, iv.hi, iv.coverage) == (pytest.approx(-0.4), pytest.approx(0.5), 0.9)


def test_fit_refuses_too_few_or_bad_values():
    with pytest.raises(PerfSeerError, match="at least 3"):
        fit_correction("latency_ms", np.ones(2), np.ones(2))
    with pytest.raises(PerfSeerError, match="positive"):
        fit_correction("latency_ms", np.array([1.0, 2.0, 3.0]), np.array([1.0, -2.0, 3.0]))


# --------------------------------------------------------- reference models
def test_reference_models_are_small_and_run_once_materialized():
    refs = references()
    assert len(refs) >= 12
    assert sum(p.stat().st_size for p in {r.path for r in refs}) < 2 * 2**20  # structure only, each file once
    ref = refs[0]
    sess = ort.InferenceSession(materialize(ref.path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [ref.batch if not isinstance(d, int) else d for d in inp.shape]
    out = sess.run(None, {inp.name: np.random.default_rng(0).random(shape, dtype=np.float32)})[0]
    assert np.isfinite(out).all()


def test_the_reference_set_spans_the_sizes_users_run():
    """One factor fitted on small models only was 15 % low on real models of
    another CPU (reports/cpu-intel-xeon): the set must reach real-model
    latencies, with small models first for a quick ``--models N``."""
    refs = references()
    preds = [api.predict(r.path, batch=r.batch, device=BASE)[0]["metrics"]["latency_ms"]["value"] for r in refs]
    assert min(preds[:3]) < 2.0 and max(preds) > 50.0
    assert sum(p > 20.0 for p in preds) >= 8  # several of them, of more than one family
    assert {r.spec.split(":")[0] for r, p in zip(refs, preds) if p > 20.0} >= {"timm", "hf"}


# ----------------------------------------------------------- end to end
@pytest.mark.slow
def test_calibrate_writes_an_entry_that_predict_uses(home):
    r = cli("calibrate", "--models", 3, "--name", "here", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output.strip().splitlines()[-1])
    entry = home / "devices" / "here"
    assert doc["folder"] == str(entry) and (entry / "manifest.json").is_file()
    assert [m["name"] for m in doc["models"]] == [x.name for x in references()[:3]]
    assert all(m["status"] == "ok" and m["latency_ms"] > 0 for m in doc["models"])
    lat = doc["corrections"]["latency_ms"]
    assert lat["count"] == 3 and np.isfinite(lat["cv_mape"])
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["device"]["base"] == BASE and manifest["device"]["description"]["cpu_family"] is not None

    # predict --device here = the base prediction through the fitted correction
    model = references()[5].path
    [base] = api.predict(model, device=BASE)
    [mine] = api.predict(model, device="here")
    want = Correction.from_dict(lat).apply(base["metrics"]["latency_ms"]["value"])
    assert mine["device"] == "here"
    assert mine["metrics"]["latency_ms"]["value"] == pytest.approx(want, rel=1e-5)
    assert not any("calibrate" in w for w in mine["warnings"])  # measured here: same CPU

    listed = cli("devices")
    assert "here:" in listed.output and "calibrated from cpu-amd-epyc-1t" in listed.output

    # a second run without --force refuses and leaves the entry as it was
    before = (entry / "manifest.json").read_text()
    again = cli("calibrate", "--models", 3, "--name", "here")
    assert again.exit_code == 2 and "pass --force" in again.output
    assert (entry / "manifest.json").read_text() == before


def test_calibrate_refuses_bad_names_before_profiling(home):
    for args, needle in ((("--name", BASE), "is a shipped device"),
                         (("--name", "bad name"), "device name 'bad name'"),
                         (("--base", "nosuch"), "unknown device 'nosuch'")):
        r = cli("calibrate", "--models", 3, *args)
        assert r.exit_code == 2 and needle in r.output, r.output
        assert r.output.count("\n") == 1
    assert not (home / "devices").exists() or not any((home / "devices").iterdir())


# ------------------------------------------------------- local CPU check
EPYC = {"cpu_model": "AMD EPYC", "cpu_vendor": "AuthenticAMD", "cpu_family": "25", "cpu_model_id": "17",
        "cpu_stepping": "1", "cpu_isa": "avx512_bf16"}
XEON = {"cpu_model": "Intel(R) Xeon(R) Platinum 8375C", "cpu_vendor": "GenuineIntel", "cpu_family": "6",
        "cpu_model_id": "106", "cpu_stepping": "6", "cpu_isa": "avx512_vnni"}


def _manifest(desc):
    return {"device": {"name": "d", "description": desc}}


def test_match_by_signature_or_by_name():
    assert local_cpu.matches_local(_manifest(EPYC), EPYC) is True
    assert local_cpu.matches_local(_manifest(EPYC), XEON) is False
    # a later stepping of the same model still matches
    assert local_cpu.matches_local(_manifest(EPYC), {**EPYC, "cpu_stepping": "2"}) is True
    # an older manifest with the model name only
    assert local_cpu.matches_local(_manifest({"cpu_model": "AMD EPYC"}), EPYC) is True
    assert local_cpu.matches_local(_manifest({"cpu_model": "AMD EPYC"}), XEON) is False
    # not a CPU device, or words only: the question does not apply
    assert local_cpu.matches_local(_manifest({"cpu_model": "AMD EPYC", "gpu_name": "H100"}), XEON) is None
    assert local_cpu.matches_local(_manifest("Intel Xeon Gold 6240, batch 1"), XEON) is None


def test_predict_warns_on_another_cpu(monkeypatch):
    model = references()[0].path
    monkeypatch.setattr(local_cpu, "local_cpu", lambda: XEON)
    [r] = api.predict(model, device=BASE)
    [w] = [w for w in r["warnings"] if "calibrate" in w]
    assert "cpu-amd-epyc-1t" in w and "Xeon" in w
    listed = cli("devices")
    assert "differs (run `perfseer-rt calibrate`)" in listed.output
    monkeypatch.setattr(local_cpu, "local_cpu",
                        lambda: {**local_cpu.device_environment(registry.get_predictor(BASE).manifest)})
    [r] = api.predict(model, device=BASE)  # the CPU the device was measured on: no warning
    assert not any("calibrate" in w for w in r["warnings"])


def test_busy_models_are_flagged_from_median_over_fastest():
    from perfseer_rt.calibrate.api import CalibrationResult

    res = CalibrationResult("x", None, BASE, {}, measured=[
        {"name": "quiet", "latency_min_ms": 10.0, "latency_ms": 10.5},
        {"name": "busy", "latency_min_ms": 10.0, "latency_ms": 30.0},
        {"name": "failed", "latency_min_ms": None, "latency_ms": None}])
    assert res.busy == ["busy"]
