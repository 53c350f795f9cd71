"""training/gpuprior/records_check.py on a campaign dataset: a dry run with
the stand-in zoo (CPU latencies: the path is checked, not the accuracy)."""

from __future__ import annotations

import json
import math

import pytest

from perfseer_rt.predict import registry
from training.campaign.cli import main as campaign
from training.campaign.store import iter_records
from training.campaign.zoo_cases import ZOO_ENV
from training.gpuprior import records_check as R

STUB = ["--zoo", "tests.stub_zoo", "--batches", "1,2,4", "--batches-per-arch", "2",
        "--reference-count", "1", "--reference-every", "3", "--quiet"]


@pytest.fixture()
def dataset(tmp_path, monkeypatch):
    monkeypatch.setenv(ZOO_ENV, "")  # the campaign CLI sets it in this process: undone after
    monkeypatch.delenv(ZOO_ENV)
    out = tmp_path / "dry"
    assert campaign(["--target", "cuda-inference", "--dry-run", "--out", str(out), *STUB,
                     "--families", "mlp,wide,broken", "--count", "4"]) == 0
    return out


@pytest.mark.slow
def test_every_usable_record_is_predicted_by_the_prior_and_the_entry(dataset, tmp_path):
    records = list(iter_records(dataset))
    usable = R.usable(records)
    assert usable and len(usable) < len(records)  # errors and drift re-measures are left out
    rows = {}
    for device in ("h100", "v100"):  # uncalibrated, calibrated
        rows[device] = R.check(dataset, device, tmp_path / device, "tests.stub_zoo")
        assert [(r["arch_id"], r["batch"]) for r in rows[device]] == [(r["arch_id"], r["batch"])
                                                                        for r in usable]
        assert all(r["measured_ms"] > 0 and r["prior_ms"] > 0 for r in rows[device])
    assert all(r["shipped_ms"] == pytest.approx(r["prior_ms"], abs=1e-3) for r in rows["h100"])
    # the V100 entry's scale covers the stand-in's kernels' time, not their launches (the
    # stand-in's kernels are launch-bound: the scale barely shows)
    scale = math.exp(registry.get_predictor("v100").manifest["calibration"]["alpha"])
    for r in rows["v100"]:
        body = r["prior_ms"] - r["launch_ms"]
        assert body >= 0 and r["shipped_ms"] == pytest.approx(scale * body + r["launch_ms"], abs=3e-4)
    doc = R.write(rows["v100"], "v100", dataset, tmp_path / "out")
    assert doc["summary"]["all"]["n"] == len(usable)
    assert json.loads((tmp_path / "out" / "records_v100.json").read_text())["rows"] == rows["v100"]
    assert (tmp_path / "out" / "records_v100.md").read_text().startswith("# The GPU prior on our own records")
