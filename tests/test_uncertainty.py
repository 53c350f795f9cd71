"""Intervals, the distance score and memory parts: the runtime math
(perfseer_rt/predict/uncertainty.py), its calibration in training
(training/seernet/uncertainty.py) and the shipped report's end to end path."""

import json
import os

import numpy as np
import pytest

from perfseer_rt import extract
from perfseer_rt.graph import layout
from perfseer_rt.predict import uncertainty as ru
from perfseer_rt.predict.manifest import ManifestError, MemoryParts, MetricInterval, parse_manifest, parse_section
from tests.manifest_versions import as_version
from tests.test_extract import conv_chain

torch = pytest.importorskip("torch")

from training.seernet import data  # noqa: E402
from training.seernet import uncertainty as unc  # noqa: E402
from training.seernet.report import main as report_main  # noqa: E402
from training.seernet.synthetic import write_synthetic_dataset  # noqa: E402


def test_conformal_quantiles_hold_their_coverage_on_new_draws():
    rng = np.random.default_rng(0)
    held = []
    for _ in range(200):  # exchangeable calibration and test draws
        cal, new = rng.standard_t(3, size=200), rng.standard_t(3, size=200)
        lo, hi = ru.conformal_quantiles(cal, 0.9)
        held.append(np.mean((new >= lo) & (new <= hi)))
    # split conformal guarantees >= 0.9 in expectation and at most 0.9 + 1/(n+1) + noise
    assert 0.895 <= np.mean(held) <= 0.915


def test_distance_score_is_zero_on_training_graphs_and_grows_away_from_them():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(50, 6))
    assert np.allclose(ru.distance_scores(ref[:5], ref, k=1), 0.0, atol=1e-6)
    near, far = ref[0] + 0.1, ref[0] + 5.0
    s = ru.distance_scores(np.stack([near, far]), ref, k=1)
    assert s[0] < s[1]


def test_features_read_globals_and_operator_mix_of_a_real_graph():
    g = extract(conv_chain(), batch=2)
    f = ru.features(g.x, g.u)
    assert f.shape == (len(ru.FEATURE_NAMES),) and np.isfinite(f).all()
    mix = f[len(layout.BASE_GLOBAL_COLUMNS):]
    assert mix.sum() == pytest.approx(1.0)  # every node has exactly one operator column


def test_threshold_separates_bad_from_good_configs():
    scores = np.array([0.1, 0.2, 0.3, 0.4, 1.0, 1.2, 1.5, 2.0])
    errors = np.array([2.0, 5.0, 8.0, 9.0, 40.0, 60.0, 30.0, 80.0])
    t = unc.choose_threshold(scores, errors)
    rates = unc.fire_rates(scores, errors, t)
    assert rates["fires_on_error_gt_25_pct"] == 100.0 and rates["fires_on_error_le_10_pct"] == 0.0


def test_intervals_are_calibrated_per_batch_group_and_looked_up_by_batch():
    rng = np.random.default_rng(5)
    n = 600
    batches = rng.choice([1, 4, 16, 64], n)
    spread = np.where(batches > 8, 0.4, 0.05)  # large batches err more, as memory does
    true = np.exp(rng.normal(0, spread))[:, None]
    s = unc.PredictionSet("val", true, np.ones((n, 1)), np.full(n, 0.1), batches)
    section = unc.calibrate([s], ["peak_mem_mb"])
    iv = parse_section(MetricInterval, section["intervals"]["peak_mem_mb"], "iv")
    assert [b.max_batch for b in iv.bins] == 2 * list(ru.BATCH_GROUPS)  # per score bin
    small, mid, large = (ru.bin_interval(iv, 0.1, b) for b in (1, 4, 32))
    assert large.hi - large.lo > 4 * (small.hi - small.lo) and large.hi - large.lo > 4 * (mid.hi - mid.lo)
    held = unc.evaluate(section, unc.PredictionSet(
        "new", np.exp(rng.normal(0, spread))[:, None], np.ones((n, 1)), np.full(n, 0.1), batches),
        ["peak_mem_mb"])["coverage"]["peak_mem_mb"]["by_batch"]
    assert min(held.values()) >= 80  # each batch keeps about the stated 90 % on a new draw


def test_disagreement_scales_intervals_and_warns_where_the_two_models_part():
    """Errors that grow with the gap between the blend's two models: the
    calibration ships gap-scaled intervals (narrower on average than plain
    ones, and covering both where the models agree and where they do not on
    a new draw) and a warning on the gap; plain residuals keep plain bins."""
    rng = np.random.default_rng(7)
    n = 900

    def draw():
        gap = rng.exponential(0.1, n)
        return np.exp(rng.normal(0, 0.02 + 1.5 * gap))[:, None], gap[:, None]

    true, gap = draw()
    ones, score, batch = np.ones((n, 1)), np.full(n, 0.1), np.full(n, 4)
    section = unc.calibrate([unc.PredictionSet("val", true, ones, score, batch, gap)], ["peak_mem_mb"],
                            gap_model="seernet_gbm")
    iv = parse_section(MetricInterval, section["intervals"]["peak_mem_mb"], "iv")
    assert iv.scale == "disagreement" and iv.floor in unc.FLOORS
    widths = section["disagreement"]["calibration"]["mean_interval_width"]["peak_mem_mb"]
    assert widths[f"floor {iv.floor:g}"] < widths["plain"]
    assert section["disagreement"]["model"] == "seernet_gbm" and "peak_mem_mb" in section["disagreement"]["thresholds"]
    narrow, wide = ru.metric_interval(iv, 0.1, 4, 0.01), ru.metric_interval(iv, 0.1, 4, -0.5)
    assert wide.hi - wide.lo > 5 * (narrow.hi - narrow.lo)  # |gap| sets the width, whatever its sign
    assert ru.metric_interval(iv, 0.1, 4, None) is None  # a scaled interval needs the gap
    new_true, new_gap = draw()
    new = unc.PredictionSet("new", new_true, ones, score, batch, new_gap)
    held = unc.evaluate(section, new, ["peak_mem_mb"])
    assert held["coverage"]["peak_mem_mb"]["held"] >= 85
    far = new_gap[:, 0] > np.quantile(new_gap, 0.8)
    part = unc.evaluate(section, unc.PredictionSet("far", new_true[far], ones[far], score[far], batch[far],
                                                   new_gap[far]), ["peak_mem_mb"])
    assert part["coverage"]["peak_mem_mb"]["held"] >= 80  # where the models part, too
    assert held["any_warning"]["fires_on_error_gt_25_pct"] > held["any_warning"]["fires_on_error_le_10_pct"]
    plain = unc.calibrate([unc.PredictionSet("val", np.exp(rng.normal(0, 0.1, (n, 1))), ones, score, batch,
                                             gap)], ["peak_mem_mb"], gap_model="seernet_gbm")
    assert plain["intervals"]["peak_mem_mb"]["scale"] == "none"  # the gap says nothing here


def test_peak_gap_is_that_of_the_larger_phase():
    metrics = ["peak_mem_mb", "load_peak_mb", "run_peak_mb"]
    mem = MemoryParts("peak_mem_mb", "load_peak_mb", "run_peak_mb", "max", None, "")
    values = np.array([[80.0, 80.0, 60.0], [70.0, 20.0, 70.0]])
    gap = np.array([[0.9, 0.1, 0.2], [0.9, 0.3, 0.4]])
    assert ru.phase_gaps(gap, values, metrics, mem)[:, 0].tolist() == [0.1, 0.4]
    direct = MemoryParts("peak_mem_mb", "load_peak_mb", "run_peak_mb", "direct", None, "")
    assert ru.phase_gaps(gap, values, metrics, direct)[:, 0].tolist() == [0.9, 0.9]


def test_the_shipped_cpu_predictor_reports_its_gap_and_scales_intervals_and_warnings_with_it():
    from perfseer_rt.predict import api, registry

    pred = registry.get_predictor("cpu-amd-epyc-1t")
    unc = pred.uncertainty
    assert unc.disagreement is not None and unc.disagreement.model == pred.default_model
    results = api.predict(["examples/resnet18.onnx", conv_chain()], device="cpu-amd-epyc-1t", batch=4)
    for r in results:
        for name, m in r["metrics"].items():
            gap = m["disagreement"]
            assert np.isfinite(gap)
            want = ru.metric_interval(unc.intervals[name], r["distance"]["score"], 4, gap)
            assert m["interval"] == pytest.approx(want.around(m["value"]))
            limit = unc.disagreement.thresholds.get(name)
            warned = any(w.startswith(f"{ru.DISAGREEMENT_WARNING} on {name} ") for w in r["warnings"])
            assert warned == (limit is not None and abs(gap) > limit)
    [alone] = api.predict("examples/resnet18.onnx", device="cpu-amd-epyc-1t", batch=4, model="seernet")
    # SeerNet alone: no gap, and no interval (they were calibrated on the default model's errors)
    assert all("disagreement" not in m and m.get("interval") is None for m in alone["metrics"].values())


def test_memory_combination_takes_the_larger_phase():
    metrics = ["latency_ms", "peak_mem_mb", "load_peak_mb", "run_peak_mb"]
    pred = np.array([[1.0, 50.0, 80.0, 60.0], [1.0, 50.0, 20.0, 70.0]])
    assert unc.combine_memory(pred, metrics, "max")[:, 1].tolist() == [80.0, 70.0]
    assert unc.combine_memory(pred, metrics, "direct")[:, 1].tolist() == [50.0, 50.0]


def _v3(doc):
    doc = json.loads(json.dumps(doc))
    doc["metrics"] += [{"name": m, "unit": "MB"} for m in ("load_peak_mb", "run_peak_mb")
                       if m not in [x["name"] for x in doc["metrics"]]]
    for e in doc["seernet"]["models"]:
        e["outputs"] = [m["name"] for m in doc["metrics"]]
    doc["seernet"]["memory"] = {"peak": "peak_mem_mb", "load": "load_peak_mb", "run": "run_peak_mb",
                                "combine": "max", "baseline_mb": 80.0, "baseline": "measured"}
    return doc


def test_manifest_memory_and_interval_sections_are_checked():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = json.loads((root / "exported_models/cpu-amd-epyc-1t/manifest.json").read_text())
    m = parse_manifest(_v3(doc))
    assert m.seernet.memory.combine == "max"
    bad = _v3(doc)
    bad["seernet"]["memory"]["combine"] = "sum"
    with pytest.raises(ManifestError, match="seernet.memory.combine"):
        parse_manifest(bad)
    bad = _v3(doc)
    bad["seernet"]["memory"]["run"] = "nope_mb"
    with pytest.raises(ManifestError, match="seernet.memory.run"):
        parse_manifest(bad)
    bad = _v3(doc)
    del bad["seernet"]["memory"]["baseline"]
    with pytest.raises(ManifestError, match="seernet.memory.baseline is missing"):
        parse_manifest(bad)
    v2 = as_version(doc, 2)  # a version-2 document reads as the current one without the sections
    assert "memory" not in v2["seernet"] and parse_manifest(v2).seernet.memory is None


def test_trainer_refuses_mixed_memory_methods_and_cpus(tmp_path):
    ds = write_synthetic_dataset(tmp_path / "ds", num_archs=4, batches=(1,), max_nodes=6)
    path = ds / "records" / "part0000.jsonl"
    recs = [r for x in path.read_text().splitlines() if (r := json.loads(x))["status"] == "ok"]
    for i, r in enumerate(recs):
        r["quality"]["peak_mem_method"] = "vmhwm" if i == 0 else "vmhwm+mmap64k"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(data.DatasetError, match="more than one method"):
        data.load_samples(ds)
    for r in recs:
        r["quality"]["peak_mem_method"] = "vmhwm+mmap64k"
        r["env"] = {"cpu_vendor": "AuthenticAMD", "cpu_family": "25", "cpu_model_id": "17"}
    recs[1]["env"] = {"cpu_vendor": "GenuineIntel", "cpu_family": "6", "cpu_model_id": "85"}
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(data.DatasetError, match="mixes cpu"):
        data.load_samples(ds)


def test_loader_lifts_memory_phases_and_recomputes_the_real_split(tmp_path):
    ds = write_synthetic_dataset(tmp_path / "ds", num_archs=4, batches=(1, 4), max_nodes=6, phases=True)
    path = ds / "records" / "part0000.jsonl"
    recs = [r for x in path.read_text().splitlines() if (r := json.loads(x))["status"] == "ok"]
    for r in recs:  # a stale stored split must not win over the group's
        r.update(family="timm", group="convnext", split_real="train")
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    samples = data.load_samples(ds)
    assert all(s.split_real == "test" for s in samples)
    for s in samples:
        assert s.targets["peak_mem_mb"] == max(s.targets["load_peak_mb"], s.targets["run_peak_mb"])


@pytest.mark.slow
def test_report_ships_intervals_distance_and_memory_parts(tmp_path, monkeypatch):
    ds = write_synthetic_dataset(tmp_path / "ds", num_archs=48, batches=(1, 4), max_nodes=10, phases=True)
    out, exp = tmp_path / "report", tmp_path / "home" / "devices" / "synthetic"
    assert report_main(["--dataset", str(ds), "--out", str(out), "--epochs", "2", "--threads", "1",
                        "--export-dir", str(exp), "--quiet", "--models", "seernet"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["shipped"]["scheme"] == "arch"  # synthetic families are not published ones
    doc = json.loads((exp / "manifest.json").read_text())
    sec = doc["seernet"]
    assert sec["memory"]["peak"] == "peak_mem_mb" and sec["memory"]["combine"] in ("max", "direct")
    assert (exp / sec["uncertainty"]["reference_file"]).is_file()
    assert set(sec["uncertainty"]["intervals"]) >= {"latency_ms", "peak_mem_mb"}
    cov = report["shipped"]["held_out"]["coverage"]["latency_ms"]
    assert cov["count"] == report["splits"]["arch"]["sizes"]["test"] and 0 <= cov["held"] <= 100

    # the runtime reads it back: intervals around the value, parts, distance
    monkeypatch.setenv("PERFSEER_RT_HOME", str(tmp_path / "home"))
    from perfseer_rt.predict import api, registry

    registry.shipped_predictors.cache_clear()
    g = extract(conv_chain(), batch=2)
    [r] = api.predict(g, device="synthetic")
    assert set(r["metrics"]) == {"latency_ms", "peak_mem_mb"}  # phases are parts, not metrics
    for m in r["metrics"].values():
        lo, hi = m["interval"]
        assert lo <= m["value"] <= hi and m["coverage"] == 0.9
    parts = r["metrics"]["peak_mem_mb"]["parts"]
    assert parts["weights_mb"] == pytest.approx(g.globals["weight_total"] / 2**20)
    if sec["memory"]["combine"] == "max":
        assert r["metrics"]["peak_mem_mb"]["value"] == pytest.approx(
            max(parts["session_load_peak_mb"], parts["inference_run_peak_mb"]))
    assert r["distance"]["threshold"] == sec["uncertainty"]["threshold"]
    assert (r["distance"]["score"] > r["distance"]["threshold"]) == any(
        "far from the training data" in w for w in r["warnings"])
    assert os.listdir(exp)  # nothing else needed beside the manifest's files
