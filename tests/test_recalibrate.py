"""Widening shipped intervals with real-model checks (training.seernet.recalibrate)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from perfseer_rt.predict.explain import predictor_info
from perfseer_rt.predict.manifest import parse_manifest
from perfseer_rt.predict.registry import Predictor
from perfseer_rt.predict.uncertainty import conformal_quantiles
from training.seernet import recalibrate as rc

SHIPPED = Path(__file__).resolve().parents[1] / "exported_models" / "cpu-amd-epyc-1t"


def _rows(log_ratios, scores, version="v"):
    return [{"latency_ms": {"measured": float(np.exp(r)), "predicted": 1.0}, "distance_score": float(s),
             "predictor_version": version} for r, s in zip(log_ratios, scores)]


def _intervals(lo=-0.1, hi=0.1, threshold=0.5):
    return {"latency_ms": {"coverage": 0.9, "bins": [
        {"max_score": threshold, "lo": lo, "hi": hi, "count": 100},
        {"max_score": None, "lo": 2 * lo, "hi": 2 * hi, "count": 100}]}}


def test_wider_real_residuals_widen_their_bin_and_narrow_ones_leave_it():
    rng = np.random.default_rng(0)
    wide = rng.normal(0.2, 0.3, 200)  # real models err more, and biased
    rows = _rows(wide, np.full(200, 0.1))  # all inside the threshold
    out = rc.widen(_intervals(), rows)
    inner, outer = out["intervals"]["latency_ms"]["bins"]
    lo, hi = conformal_quantiles(wide, 0.9)
    assert (inner["lo"], inner["hi"]) == pytest.approx((min(-0.1, lo), max(0.1, hi))) and inner["hi"] > 0.5
    assert outer["hi"] >= hi  # a bin without 30 checks takes all of the metric's
    assert out["record"]["latency_ms"][1]["pooled"] and not out["record"]["latency_ms"][0]["pooled"]
    held = np.mean([(inner["lo"] <= r <= inner["hi"]) for r in rng.normal(0.2, 0.3, 2000)])
    assert held >= 0.87  # the widened bin holds its coverage on new draws of the checks' kind

    narrow = _rows(rng.normal(0, 0.01, 100), np.full(100, 0.1))
    same = rc.widen(_intervals(), narrow)["intervals"]["latency_ms"]["bins"]
    assert [(b["lo"], b["hi"]) for b in same] == [(-0.1, 0.1), (-0.2, 0.2)]

    few = rc.widen(_intervals(), _rows(wide[:10], np.full(10, 0.1)))
    assert few["intervals"] == _intervals() and "left" in few["record"]["latency_ms"]


def test_recalibrate_rewrites_a_valid_manifest_once_and_refuses_stale_checks(tmp_path):
    # the shipped CPU predictor is part of the repository: a real exported manifest
    folder = tmp_path / "cpu"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("train"))
    doc = json.loads((folder / "manifest.json").read_text())
    # as exported: without an earlier widening (the shipped one may have been widened already)
    doc["seernet"]["uncertainty"]["calibration"].pop("real_models", None)
    (folder / "manifest.json").write_text(json.dumps(doc))
    version = predictor_info(Predictor(doc["device"]["name"], folder, doc, schema=parse_manifest(doc)))["version"]
    unc = doc["seernet"]["uncertainty"]
    before = unc["intervals"]["peak_mem_mb"]["bins"]
    rng = np.random.default_rng(1)
    rows = [{"spec": f"timm:model=m{i % 20},res=224", "distance_score": 0.0, "predictor_version": version,
             "peak_mem_mb": {"measured": float(np.exp(r)), "predicted": 1.0}}
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
