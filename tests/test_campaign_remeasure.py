"""training.campaign.remeasure_memory: a dataset's memory labels measured again
the way ``perfseer-rt profile`` measures (a fresh child per model), latency
kept, graphs re-extracted, resumable; with the stand-in zoo, real measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfseer_rt.profile import hostmem, profile
from tests import stub_zoo
from training.campaign import remeasure_memory
from training.campaign.cli import main
from training.campaign.store import iter_records
from training.campaign.zoo_cases import ZOO_ENV
from training.seernet.data import load_samples

STUB = ["--plan", "fixed", "--zoo", "tests.stub_zoo", "--batches", "1,4", "--batches-per-arch", "2",
        "--reference-count", "1", "--reference-every", "3", "--quiet",
        "--min-time", "0.02"]


@pytest.fixture
def dataset(tmp_path, monkeypatch):
    """A small CPU inference dataset whose memory labels are made stale: the
    method of the records written before fresh children (``vmhwm+mmap64k``)
    and peaks 1.5x what was measured."""
    monkeypatch.setenv(ZOO_ENV, "")
    out = tmp_path / "ds"
    assert main(["--target", "cpu-inference", "--out", str(out), *STUB, "--families", "mlp,wide",
                 "--count", "3", "--spec", "mlp:width=16,depth=2"]) == 0
    monkeypatch.setenv(ZOO_ENV, "tests.stub_zoo")  # the re-measure's exporter
    for part in (out / "records").glob("*.jsonl"):
        rows = [json.loads(line) for line in part.read_text().splitlines()]
        for r in rows:
            if r["status"] == "ok":
                r["metrics"]["peak_mem_mb"] *= 1.5
                r["quality"]["peak_mem_method"] = "vmhwm+mmap64k"
        part.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.mark.slow
def test_memory_is_measured_again_in_fresh_children_and_latency_kept(dataset, tmp_path):
    # records are rewritten in place, in order (two reference re-measures of one
    # graph may share a measured_at second, so they are matched by position)
    before = list(iter_records(dataset))
    done = remeasure_memory.run(dataset, progress=False, flush_s=0)
    after = list(iter_records(dataset))
    ok = [r for r in after if r["status"] == "ok"]
    assert done == len(ok) and len(after) == len(before)
    for old, r in zip(before, after):
        assert (old["graph_key"], old["measured_at"]) == (r["graph_key"], r["measured_at"])
        if r["status"] != "ok":
            continue
        q = r["quality"]
        assert q["peak_mem_method"] == hostmem.CLI_METHOD
        assert q["memory_before"]["peak_mem_mb"] == old["metrics"]["peak_mem_mb"]
        assert q["memory_before"]["peak_mem_method"] == "vmhwm+mmap64k"
        assert r["metrics"]["latency_ms"] == old["metrics"]["latency_ms"]  # latency kept
        assert r["metrics"]["peak_mem_mb"] == pytest.approx(max(q["load_peak_mb"], q["run_peak_mb"]))
        assert q["memory_remeasured"]["settings"] == remeasure_memory.SETTINGS.to_dict()
    # the labels are the CLI's: one configuration profiled as a user would, in a
    # fresh child; fresh children read a model the same to ~0.1 MiB (hostmem)
    r = next(r for r in ok if not r["reference"])
    path = tmp_path / "again.onnx"
    stub_zoo.export_onnx(stub_zoo.ModelConfig.from_dict(r["config"]), str(path))
    cli = profile(str(path), batch=r["batch"])
    assert r["metrics"]["peak_mem_mb"] == pytest.approx(cli["peak_mem_mb"], abs=1.0)
    assert load_samples(dataset)  # every record still finds its (re-extracted) graph
    # resumable: nothing is left, a second run measures nothing
    assert remeasure_memory.run(dataset, progress=False) == 0
    assert not list(Path(dataset).rglob("*.tmp"))
