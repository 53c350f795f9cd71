"""Widening shipped intervals with real-model checks (training.seernet.recalibrate)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from perfseer_rt.calibrate.reference import references
from perfseer_rt.graph import extract
from perfseer_rt.predict import seernet_run
from perfseer_rt.predict.explain import predictor_info
from perfseer_rt.predict.manifest import ManifestError, parse_manifest
from perfseer_rt.predict.registry import Predictor
from perfseer_rt.predict.uncertainty import conformal_quantiles
from tests.manifest_versions import as_version
from training.seernet import recalibrate as rc

SHIPPED = Path(__file__).resolve().parents[1] / "exported_models" / "cpu-amd-epyc-1t"


def _rows(log_ratios, scores, version="v", batch=1):
    return [{"latency_ms": {"measured": float(np.exp(r)), "predicted": 1.0}, "distance_score": float(s),
             "predictor_version": version, "batch": batch} for r, s in zip(log_ratios, scores)]


def _intervals(lo=-0.1, hi=0.1, threshold=0.5):
    return {"latency_ms": {"coverage": 0.9, "bins": [
        {"max_score": threshold, "max_batch": None, "lo": lo, "hi": hi, "count": 100},
        {"max_score": None, "max_batch": None, "lo": 2 * lo, "hi": 2 * hi, "count": 100}]}}


def test_wider_real_residuals_widen_their_bin_and_narrow_ones_leave_it():
    rng = np.random.default_rng(0)
    wide = rng.normal(0.2, 0.3, 200)  # real models err more, and biased
    rows = _rows(wide, np.full(200, 0.1))  # all inside the threshold
    out = rc.widen(_intervals(), rows)
    inner, outer = out["intervals"]["latency_ms"]["bins"]
    lo, hi = conformal_quantiles(wide, 0.9)
    assert (inner["lo"], inner["hi"]) == pytest.approx((min(-0.1, lo), max(0.1, hi))) and inner["hi"] > 0.5
    assert outer["hi"] >= hi  # a bin without 30 checks takes all of the metric's
    assert out["record"]["latency_ms"][1]["pooled"] == "all" and out["record"]["latency_ms"][0]["pooled"] == "none"
    held = np.mean([(inner["lo"] <= r <= inner["hi"]) for r in rng.normal(0.2, 0.3, 2000)])
    assert held >= 0.87  # the widened bin holds its coverage on new draws of the checks' kind

    narrow = _rows(rng.normal(0, 0.01, 100), np.full(100, 0.1))
    same = rc.widen(_intervals(), narrow)["intervals"]["latency_ms"]["bins"]
    assert [(b["lo"], b["hi"]) for b in same] == [(-0.1, 0.1), (-0.2, 0.2)]

    few = rc.widen(_intervals(), _rows(wide[:10], np.full(10, 0.1)))
    assert few["intervals"] == _intervals() and "left" in few["record"]["latency_ms"]


def test_a_disagreement_scaled_metric_widens_with_residuals_over_its_unit():
    intervals = {"latency_ms": {"coverage": 0.9, "scale": "disagreement", "floor": 0.05, "bins": [
        {"max_score": None, "max_batch": None, "lo": -1.0, "hi": 1.0, "count": 100}]}}
    rng = np.random.default_rng(2)
    gaps = rng.exponential(0.2, 200)
    rows = _rows(rng.normal(0, 1.0, 200) * 2 * (0.05 + gaps), np.zeros(200))
    for row, g in zip(rows, gaps):
        row["latency_ms"]["gap"] = float(-g if g > 0.2 else g)  # |gap| counts, not its sign
    out = rc.widen(intervals, rows)
    [b] = out["intervals"]["latency_ms"]["bins"]
    want = conformal_quantiles(np.array([np.log(r["latency_ms"]["measured"]) / (0.05 + g)
                                         for r, g in zip(rows, gaps)]), 0.9)
    assert (b["lo"], b["hi"]) == pytest.approx((min(-1.0, want[0]), max(1.0, want[1])))
    assert out["intervals"]["latency_ms"]["scale"] == "disagreement"
    del rows[3]["latency_ms"]["gap"]
    with pytest.raises(rc.RecalibrationError, match="no latency_ms gap"):
        rc.widen(intervals, rows)


def test_real_model_rows_choose_the_disagreement_warning_and_keep_it_only_where_it_adds():
    rng = np.random.default_rng(3)
    gaps = rng.exponential(0.15, 300)
    rows = []
    for g, noise in zip(gaps, rng.normal(0, 1, 300)):
        mem = np.exp(noise * (0.03 + 0.8 * g))  # memory errs where the models part
        rows.append({"distance_score": 0.1, "batch": 4,
                     "latency_ms": {"measured": 1.0, "predicted": float(np.exp(rng.normal(0, 0.05))), "gap": float(g)},
                     "peak_mem_mb": {"measured": 1.0, "predicted": float(mem), "gap": float(-g)}})
    unc = {"threshold": 0.5, "intervals": {"latency_ms": {}, "peak_mem_mb": {}},
           "disagreement": {"thresholds": {"latency_ms": 0.01, "peak_mem_mb": 0.9}}}
    out = rc.real_model_warnings(unc, rows)
    assert set(out["thresholds"]) == {"peak_mem_mb"}  # latency errors do not follow the gap: no warning
    rec = out["record"]["peak_mem_mb"]
    assert rec["kept"] and rec["fires_on_error_gt_25_pct"] > 2 * rec["fires_on_error_le_10_pct"]
    assert out["record"]["latency_ms"]["kept"] is False
    assert rc.real_model_warnings({**unc, "disagreement": None}, rows) is None


def test_check_rows_widen_the_bin_of_their_batch_size_only():
    bins = [{"max_score": 0.5, "max_batch": b, "lo": -0.1, "hi": 0.1, "count": 100} for b in (1, 8, None)]
    bins += [{"max_score": None, "max_batch": None, "lo": -0.2, "hi": 0.2, "count": 100}]
    intervals = {"latency_ms": {"coverage": 0.9, "bins": bins}}
    rng = np.random.default_rng(4)
    rows = (_rows(rng.normal(0, 0.01, 40), np.full(40, 0.1), batch=1)
            + _rows(rng.normal(0, 0.01, 40), np.full(40, 0.1), batch=4)
            + _rows(rng.normal(0, 0.5, 40), np.full(40, 0.1), batch=16))
    out = rc.widen(intervals, rows)
    new = out["intervals"]["latency_ms"]["bins"]
    assert [(b["lo"], b["hi"]) for b in new[:2]] == [(-0.1, 0.1), (-0.1, 0.1)]  # batch 1 and 2-8: narrow checks
    assert new[2]["hi"] > 0.5 and new[2]["lo"] < -0.5  # batch > 8: the wide ones
    assert [r["checks"] for r in out["record"]["latency_ms"]] == [40, 40, 40, 0]
    assert out["record"]["latency_ms"][3]["pooled"] == "all"  # no row beyond the threshold: all rows


def test_recalibrate_rewrites_a_valid_manifest_once_and_refuses_stale_checks(tmp_path):
    folder, doc = _shipped_copy(tmp_path)
    version = predictor_info(Predictor(doc["device"]["name"], folder, doc, schema=parse_manifest(doc)))["version"]
    unc = doc["seernet"]["uncertainty"]
    before = unc["intervals"]["peak_mem_mb"]["bins"]
    rng = np.random.default_rng(1)
    rows = [{"spec": f"timm:model=m{i % 20},res=224", "distance_score": 0.0, "predictor_version": version,
             "batch": 1,
             "peak_mem_mb": {"measured": float(np.exp(r)), "predicted": 1.0, "gap": 0.05}}
            for i, r in enumerate(rng.normal(0.3, 0.3, 60))]
    rows += [{**rows[0], "spec": "timm:model=seen,res=256"}] * 5  # trained on: left out
    check = tmp_path / "check.json"
    check.write_text(json.dumps({"rows": rows}))
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"rows": [{**r, "predictor_version": "2020-01-01 sha256:0"} for r in rows]}))
    with pytest.raises(rc.RecalibrationError, match="--repredict"):
        rc.recalibrate(folder, [stale])
    data = tmp_path / "data" / "records"
    data.mkdir(parents=True)
    (data / "part-0.jsonl").write_text(json.dumps({"spec": "timm:model=seen,res=224", "status": "ok"}) + "\n")
    assert rc.main([str(folder), "--checks", str(check), "--training-data", str(data.parent)]) == 0
    after = json.loads((folder / "manifest.json").read_text())
    parse_manifest(after)  # still the strict schema
    bins = after["seernet"]["uncertainty"]["intervals"]["peak_mem_mb"]["bins"]
    assert bins[0]["hi"] > before[0]["hi"] and bins[0]["lo"] <= before[0]["lo"]
    assert after["seernet"]["uncertainty"]["intervals"]["latency_ms"] == unc["intervals"]["latency_ms"]
    real = after["seernet"]["uncertainty"]["calibration"]["real_models"]
    assert real["rows"] == 60 and real["left_out_models"] == ["timm:model=seen"]
    assert rc.main([str(folder), "--checks", str(check)]) == 2  # once: from the export's own calibration


# ------------------------------------------------------------------ field scale
def _source(ratios):
    return [{"latency_ms": {"measured": float(r), "predicted": 1.0}} for r in ratios]


def test_a_field_scale_is_kept_only_where_it_helps_the_check_file_left_out():
    rng = np.random.default_rng(2)
    shifted = {f"c{i}": _source(0.93 * np.exp(rng.normal(0, 0.05, 20))) for i in range(3)}
    fit = rc.fit_field_scale(shifted, ["latency_ms", "peak_mem_mb"], "test rows")
    kept = fit["kept"]["latency_ms"]
    assert kept["factor"] == pytest.approx(0.93, abs=0.02) and kept["rows"] == 60
    assert kept["loo_mape_after"] < kept["loo_mape_before"]
    assert "peak_mem_mb" not in fit["kept"] and not fit["record"]["peak_mem_mb"]["kept"]  # no rows
    # two files shifted in opposite directions: each one's factor, fitted on the other, makes it worse
    opposite = {"up": _source(np.full(20, 1.1)), "down": _source(np.full(20, 0.9))}
    assert rc.fit_field_scale(opposite, ["latency_ms"], "test rows")["kept"] == {}
    unshifted = {f"c{i}": _source(np.exp(rng.normal(0, 0.1, 20))) for i in range(3)}
    record = rc.fit_field_scale(unshifted, ["latency_ms"], "test rows")["record"]["latency_ms"]
    assert not record["kept"] and record["loo_mape_after"] > record["loo_mape_before"] - rc.MIN_GAIN
    one_file = {"c0": shifted["c0"] + shifted["c1"]}
    assert rc.fit_field_scale(one_file, ["latency_ms"], "test rows")["kept"] == {}  # no file to leave out


def _shipped_copy(tmp_path):
    """The shipped CPU predictor (part of the repository: a real exported
    manifest) as exported: without its widening and field scale."""
    folder = tmp_path / "cpu"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("train"))
    doc = json.loads((folder / "manifest.json").read_text())
    doc["seernet"]["uncertainty"]["calibration"].pop("real_models", None)  # as exported
    doc["seernet"]["field_scale"] = None
    (folder / "manifest.json").write_text(json.dumps(doc))
    return folder, doc


def test_a_field_scale_scales_the_reported_value_and_both_memory_phases(tmp_path):
    folder, doc = _shipped_copy(tmp_path)
    plain = Predictor(doc["device"]["name"], folder, doc, schema=parse_manifest(doc))
    entry = {"rows": 40, "sources": ["a", "b"], "measured": "test", "loo_mape_before": 9.0,
             "loo_mape_after": 6.0}
    doc["seernet"]["field_scale"] = {"latency_ms": {**entry, "factor": 0.5},
                                     "peak_mem_mb": {**entry, "factor": 2.0}}
    scaled = Predictor(doc["device"]["name"], folder, doc, schema=parse_manifest(doc))
    graphs = [extract(r.path, batch=r.batch) for r in references()[:3]]
    raw = seernet_run.run_predictor(plain, graphs)
    col = {n: j for j, n in enumerate(plain.outputs)}
    before, after = seernet_run.reported(plain, raw), seernet_run.reported(scaled, raw)
    mem = plain.memory
    assert after[:, col["latency_ms"]] == pytest.approx(0.5 * before[:, col["latency_ms"]])
    for name in (mem.peak, mem.load, mem.run):
        assert after[:, col[name]] == pytest.approx(2.0 * before[:, col[name]])
    info = predictor_info(scaled)
    assert "latency_ms x0.500" in info["provenance"]
    assert info["version"] == predictor_info(plain)["version"] + " field-scale:latency_msx0.5000,peak_mem_mbx2.0000"
    doc["seernet"]["field_scale"]["latency_ms"]["factor"] = 0.0
    with pytest.raises(ManifestError, match="factor"):
        parse_manifest(doc)


def test_recalibrate_fits_the_field_scale_and_widens_against_the_scaled_prediction(tmp_path):
    folder, doc = _shipped_copy(tmp_path)
    version = predictor_info(Predictor(doc["device"]["name"], folder, doc, schema=parse_manifest(doc)))["version"]
    rng = np.random.default_rng(3)
    files = []
    for i in range(3):
        rows = [{"spec": f"timm:model=m{i}_{j},res=224", "distance_score": 0.0, "predictor_version": version,
                 "batch": 1,
                 "latency_ms": {"measured": float(0.9 * np.exp(rng.normal(0, 0.02))), "predicted": 1.0, "gap": 0.0}}
                for j in range(20)]
        files.append(tmp_path / f"check{i}.json")
        files[-1].write_text(json.dumps({"rows": rows, "environment": {"measured_with": "test"}}))
    rec = rc.recalibrate(folder, files, field_checks=files)
    after = parse_manifest(json.loads((folder / "manifest.json").read_text()))
    assert after.seernet.field_scale["latency_ms"].factor == pytest.approx(0.9, abs=0.01)
    assert after.seernet.field_scale["latency_ms"].measured.endswith(": test")
    lo, hi = rec["bins"]["latency_ms"][0]["checks_quantiles"]
    iv = doc["seernet"]["uncertainty"]["intervals"]["latency_ms"]
    unit = iv["floor"] if iv["scale"] == "disagreement" else 1.0  # gap 0: residuals over the floor
    assert lo < 0 < hi and (hi - lo) * unit < 0.1  # residuals against 0.9 x predicted: centred, not at log(0.9)
    with pytest.raises(rc.RecalibrationError, match="already"):
        rc.recalibrate(folder, files, field_checks=files)


def test_a_version_3_manifest_reads_as_version_4_without_a_field_scale():
    doc = json.loads((SHIPPED / "manifest.json").read_text())
    v3 = as_version(doc, 3)
    assert parse_manifest(v3).seernet.field_scale is None
    with pytest.raises(ManifestError, match="not in schema version 3"):
        parse_manifest({**v3, "seernet": {**v3["seernet"], "field_scale": None}})
