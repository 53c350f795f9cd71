"""Every target through the one campaign loop, on the CPU, with a stand-in zoo
(``tests/stub_zoo.py``: tiny MLPs and a family whose export fails):
CUDA inference and CUDA training as dry runs (the CPU stands in for the GPU),
a CPU training step for real; resume; the GPU commands of
``training/campaigns/README.md`` run as written (plus ``--dry-run``); and a
GPU-shaped record set trains and exports a predictor the runtime loads."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from training.campaign.cli import main
from training.campaign.plan import FixedPlan
from training.campaign.store import iter_records
from training.campaign.zoo_cases import ZOO_ENV

ROOT = Path(__file__).parents[1]
STUB = ["--zoo", "tests.stub_zoo", "--batches", "1,2,4", "--batches-per-arch", "2",
        "--reference-count", "1", "--reference-every", "3", "--quiet"]


@pytest.fixture(autouse=True)
def restore_zoo_env(monkeypatch):
    """``--zoo`` sets PERFSEER_CAMPAIGN_ZOO in this process; undo it after each test."""
    # setenv first: it records the variable's absence, so teardown removes what
    # the CLI sets (a bare delenv of an unset variable records nothing)
    monkeypatch.setenv(ZOO_ENV, "")
    monkeypatch.delenv(ZOO_ENV)


def main_records(out):
    return [r for r in iter_records(Path(out)) if not r["reference"]]


@pytest.mark.slow
def test_cuda_inference_dry_run_records_graphs_and_resume(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--target", "cuda-inference", "--dry-run", "--out", str(out), *STUB,
            "--families", "mlp,wide,broken", "--count", "4", "--spec", "mlp:width=16,depth=2"]
    assert main(args) == 0
    recs = main_records(out)
    keys = [(r["arch_id"], r["batch"]) for r in recs]
    assert len(keys) == len(set(keys)) == 10  # 5 architectures x 2 batch sizes
    refs = [r for r in iter_records(out) if r["reference"]]
    assert refs and {r["arch_id"] for r in refs} == {recs[0]["arch_id"]}
    assert recs[0]["spec"] == "mlp:depth=2,width=16"
    for r in recs:
        assert r["target"] == "cuda-inference" and r["device"] == "cpu-1t-dry-run"
        assert r["group"] == r["family"] and r["split_real"] in ("train", "val")
        if r["family"] == "broken":
            assert r["status"] == "error" and "cannot be exported" in r["error"]
            assert r["metrics"] == {} and r["graph_key"] is None
        else:
            assert r["status"] == "ok", r["error"]
            assert r["metrics"]["latency_ms"] > 0 and r["metrics"]["peak_mem_mb"] > 0
            assert r["provider"]["provider_used"] == "CPUExecutionProvider"
            assert r["input_shapes"]["x"][0] == r["batch"]
            assert r["graph_key"] == f"{r['family']}/{r['arch_id']}/b{r['batch']}"
    from training.seernet.data import load_samples
    assert len(load_samples(out)) == len({r["graph_key"] for r in recs if r["status"] == "ok"})
    # the same command again measures nothing new
    before = len(list(iter_records(out)))
    assert main(args + ["--reference-every", "0"]) == 0
    assert len(main_records(out)) == 10
    assert "10 configurations" in capsys.readouterr().out.splitlines()[-1]
    assert len(list(iter_records(out))) - before <= 1  # at most the opening reference


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cuda-train", "cpu-train"])
def test_training_step_targets(target, tmp_path):
    out = tmp_path / "out"
    dry = ["--dry-run"] if target == "cuda-train" else ["--min-runs", "3", "--min-time", "0.02"]
    assert main(["--target", target, *dry, "--out", str(out), *STUB, "--families", "mlp",
                 "--count", "2", "--noisy-cv", "10", "--plan", "fixed"]) == 0
    recs = main_records(out)
    assert len(recs) == 4
    for r in recs:
        assert r["status"] == "ok", r["error"] and r["kind"] == "train"
        assert r["metrics"]["step_ms"] > 0 and r["quality"]["step_cv"] is not None
        assert r["env"]["torch_version"] and r["graph_key"]  # training records name graphs too
    from training.seernet.data import load_samples
    assert {s.key for s in load_samples(out)} == {r["graph_key"] for r in recs}


def test_bad_spec_is_one_line_exit_2(tmp_path, capsys):
    rc = main(["--target", "cuda-inference", "--dry-run", "--out", str(tmp_path / "o"), *STUB,
               "--spec", "nope:width=1"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("campaign: error:")
    assert not (tmp_path / "o").exists()  # nothing written for a bad command line


def test_fixed_plan_is_deterministic_and_fixes_perfseer_resolution():
    a = [it.config for it in FixedPlan(seed=3, count=6, families=["perfseer", "resnet"]).items()]
    b = [it.config for it in FixedPlan(seed=3, count=6, families=["perfseer", "resnet"]).items()]
    assert a == b and len(a) == 6
    assert all(c["params"]["res"] == 224 for c in a if c["family"] == "perfseer")


def _readme_commands() -> list[list[str]]:
    text = (ROOT / "training/campaigns/README.md").read_text()
    found = re.findall(r"python3 -m training\.campaign (--target [^\n`]+)", text)
    return [shlex.split(c.replace("$OUT", "OUTDIR")) for c in found]


def test_the_readme_gpu_commands_are_there():
    targets = {c[c.index("--target") + 1] for c in _readme_commands()}
    assert targets == {"cuda-inference", "cuda-train"}


@pytest.mark.slow
@pytest.mark.parametrize("args", _readme_commands(), ids=lambda a: a[a.index("--target") + 1])
def test_the_readme_gpu_commands_dry_run(args, tmp_path, monkeypatch):
    """The exact GPU commands, with --dry-run and a small plan appended."""
    monkeypatch.chdir(tmp_path)  # --resume data/gpu: absent here, as on a first run
    args = [a.replace("OUTDIR", str(tmp_path / "OUT")) for a in args]
    assert main(args + ["--dry-run", *STUB, "--families", "mlp", "--count", "1",
                        "--noisy-cv", "10"]) == 0
    out = Path(args[args.index("--out") + 1])
    assert len(main_records(out)) == 2


@pytest.mark.slow
def test_gpu_shaped_records_train_a_predictor_the_runtime_loads(tmp_path, monkeypatch):
    """cuda-inference records (dry run) -> report --export-dir -> perfseer_rt predicts."""
    from perfseer_rt.predict import api, registry
    from training.seernet.report import main as report

    monkeypatch.setenv(ZOO_ENV, "tests.stub_zoo")
    ds = tmp_path / "ds"
    assert main(["--target", "cuda-inference", "--dry-run", "--out", str(ds), *STUB,
                 "--families", "mlp,wide", "--count", "12", "--no-reference"]) == 0
    exp = tmp_path / "models" / "dry-gpu"
    assert report(["--dataset", str(ds), "--out", str(tmp_path / "rep"), "--models", "seernet",
                   "--splits", "arch", "--epochs", "2", "--threads", "1", "--quiet",
                   "--device", "cpu-1t-dry-run", "--export-dir", str(exp)]) == 0
    manifest = json.loads((exp / "manifest.json").read_text())
    assert manifest["kind"] == "seernet" and manifest["training_data"]["configurations"] > 0
    monkeypatch.setattr(registry, "models_root", lambda: tmp_path / "models")
    registry.predictors.cache_clear()
    try:
        # ResNet-18 lies far outside the dry run's tiny generated models: predicted anyway, flagged
        [res] = api.predict(ROOT / "examples/resnet18.onnx", batch=2, device="cpu-1t-dry-run", extrapolate=True)
    finally:
        registry.predictors.cache_clear()
    assert res["metrics"]["latency_ms"]["value"] > 0 and res["metrics"]["peak_mem_mb"]["unit"]
