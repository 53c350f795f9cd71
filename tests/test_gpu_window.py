"""The GPU window (training/campaigns/gpu_window), rehearsed on the CPU.

The same program as on the GPU (``--device cpu --plan dry``: tiny models, short
runs): a run cut off with SIGKILL leaves whole records on disk; a new process
resumes after them; injected out-of-memory, error and fatal-CUDA failures go
through the real failure paths (an OOM masks the larger batches of its
setting; a fatal error ends the process with exit 3 and the next resumes);
records have the campaign format the lead's learned GPU layer reads; ingest
puts them under ``<data>/<gpu>/<setup>/records/``. The plan itself: ordered,
unique, spread over families, its timm models taken from the public records.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from training.campaigns.gpu_window import estimate, preflight
from training.campaigns.gpu_window.__main__ import main
from training.campaigns.gpu_window.archs import HF_TIER1, HF_TIER2, archs
from training.campaigns.gpu_window.ingest import ingest
from training.campaigns.gpu_window.label_fields import label_fields
from training.campaigns.gpu_window.measure import Stepper, Timing
from training.campaigns.gpu_window.plan import PHASES, dry_plan, window_plan
from training.campaigns.gpu_window.rebuilds import export_all
from training.campaigns.gpu_window.shards import ShardsFull, ShardWriter, read_records
from training.gpulearned.labels import our_labels

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = "resnet,bert"  # the zoo's tiny dry-run models: no timm / transformers import
ZOO_PLAN = [c for c in dry_plan() if c.arch.family in FAMILIES.split(",")]
RESNET = "resnet:depth=18,width=0.125,res=32"
BERT = "vocab=101"
RECORD_KEYS = {"kind", "target", "arch_id", "family", "group", "arch_kind", "spec", "config", "batch",
               "device", "status", "error", "metrics", "quality", "input_shapes", "split_arch",
               "split_family", "split_real", "env", "setup", "measured_at", "measured_by", "provenance",
               "onnx", "key", "record_id", "rebuild", "gpu_state"}
#: the fields of training.gpulearned.tables.Label (the lead's learned layer), dims aside
LABEL_FIELDS = {"onnx", "batch", "gpu", "precision", "layout", "mode", "optimizer", "sdpa", "ms", "group",
                "kind", "source"}


def _run(out: Path, *extra: str) -> int:
    return main(["run", "--out", str(out), "--device", "cpu", "--plan", "dry", "--families", FAMILIES,
                 "--budget-s", "300", "--quiet", *extra])


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def window(tmp_path_factory) -> Path:
    """A dry window killed mid-run, then resumed: with an injected fatal error (exit 3), then to the end."""
    out = tmp_path_factory.mktemp("gpu-window") / "OUT"
    slow = f"{RESNET}|train|fp32|nchw|sgd-momentum|b2=slow"  # the 3rd configuration sleeps: killed there
    proc = subprocess.Popen(
        [sys.executable, "-m", "training.campaigns.gpu_window", "run", "--out", str(out), "--device", "cpu",
         "--plan", "dry", "--families", FAMILIES, "--budget-s", "300", "--quiet", "--inject", slow],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    shard = out / "records-00.jsonl"
    t_end = time.time() + 240
    while time.time() < t_end and proc.poll() is None:
        if shard.is_file() and len(_lines(shard)) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:] if proc.stdout else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed = _lines(shard)
    (out.parent / "killed.json").write_text(json.dumps({"lines": killed}))
    inject = [f"{RESNET}|inference|fp32|nchw|-|b4=oom", f"{BERT}|inference|amp-bf16=error",
              f"{BERT}|train|fp32=fatal"]
    rc_fatal = _run(out, *sum((["--inject", i] for i in inject), []))
    rc_end = _run(out)
    (out.parent / "rcs.json").write_text(json.dumps([rc_fatal, rc_end]))
    return out


def test_a_killed_run_leaves_only_whole_records(window):
    killed = json.loads((window.parent / "killed.json").read_text())["lines"]
    assert len(killed) == 2  # cut off inside the third configuration's slow step
    assert all(isinstance(json.loads(ln), dict) for ln in killed)
    first = json.loads(window.joinpath("window.json").read_text())["processes"][0]
    assert first["state"] == "running"  # it never got to say it was done


def test_resumed_processes_finish_the_plan_once(window):
    assert json.loads((window.parent / "rcs.json").read_text()) == [3, 0]
    recs, torn = read_records(window)
    assert torn == 0
    keys = Counter(r["key"] for r in recs)
    assert set(keys) == {c.key for c in ZOO_PLAN} and max(keys.values()) == 1
    assert [p.name for p in sorted(window.glob("records-*.jsonl"))] == [
        "records-00.jsonl", "records-01.jsonl", "records-02.jsonl"]
    procs = json.loads(window.joinpath("window.json").read_text())["processes"]
    assert [p["state"] for p in procs] == ["running", "fatal", "done"]
    assert procs[2]["resumed_with"] + sum(procs[2]["counts"].values()) == len(recs)


def test_failures_are_labels_through_the_real_paths(window):
    recs = {r["key"]: r for r in read_records(window)[0]}
    oom = recs[f"{RESNET}|inference|fp32|nchw|-|b4"]
    assert oom["status"] == "oom" and oom["quality"]["injected"] and "OutOfMemoryError" in oom["error"]
    masked = recs[f"{RESNET}|inference|fp32|nchw|-|b8"]  # the larger batch of the same setting: not run
    assert masked["status"] == "oom" and masked["quality"]["oom_masked_by"] == 4
    assert recs[f"{RESNET}|inference|fp32|nhwc|-|b2"]["status"] == "ok"  # another ladder runs on
    err = next(r for k, r in recs.items() if BERT in k and "|inference|amp-bf16|" in k)
    assert err["status"] == "error" and "injected failure" in err["error"]
    fatal = next(r for k, r in recs.items() if BERT in k and "|train|fp32|" in k)
    assert fatal["status"] == "error" and "illegal memory access" in fatal["error"]
    assert all(r["status"] == "ok" for r in recs.values() if not r["quality"].get("injected")
               and not r["quality"].get("oom_masked_by"))


def test_records_have_the_campaign_format(window):
    recs = read_records(window)[0]
    for r in recs:
        assert RECORD_KEYS <= set(r), RECORD_KEYS - set(r)
        assert r["measured_by"] == "us" and r["provenance"]["dry_run"] is True
        assert r["provenance"]["code_sha256"] and r["env"]["torch_version"]
        assert r["setup"]["runtime"] == "PyTorch eager" and r["device"] == "cpu"
    ok = [r for r in recs if r["status"] == "ok"]
    for r in ok:
        metric = "latency_ms" if r["kind"] == "inference" else "step_ms"
        assert r["metrics"][metric] > 0 and r["quality"]["runs"] >= 2
        assert r["quality"]["timing"] == "perf_counter" and r["quality"]["statistic"] == "median"
        stem = metric[:-3]
        assert r["metrics"][f"{stem}_min_ms"] <= r["metrics"][metric] <= r["metrics"][f"{stem}_p90_ms"]
    energy = [r for r in ok if r["setup"]["energy_window"]]
    assert energy and all("no NVML" in " ".join(r["notes"]) for r in energy)  # CPU: said, not faked
    assert all(r["metrics"].get("energy_mj") is None for r in ok)
    text = next(r for r in ok if r["family"] == "bert")
    assert text["input_shapes"] == {"input_ids": [text["batch"], 8]} and text["setup"]["layout"] == "n/a"
    built = [json.loads(ln) for ln in _lines(window / "archs.jsonl")]
    assert {b["spec"] for b in built} == {c.arch.spec for c in ZOO_PLAN}
    assert all(b["how"].startswith("training.zoo.build_model") for b in built)


def test_ingest_places_records_for_the_learned_layer(window, tmp_path, capsys):
    assert main(["ingest", str(window)]) == 2  # dry-run records never go to data/gpu
    assert "dry run" in capsys.readouterr().err
    data = tmp_path / "data-gpu"
    doc = ingest(window, data, allow_dry_run=True)
    recs = read_records(window)[0]
    injected = sum(1 for r in recs if r["quality"].get("injected"))
    assert doc["skipped"]["injected failure (dry run)"] == injected
    assert sum(doc["added"].values()) == len(recs) - injected
    assert sum(ingest(window, data, allow_dry_run=True)["added"].values()) == 0  # idempotent
    assert (data / "cpu" / "README.md").is_file() and list((data / "cpu" / "runs").iterdir())
    # what training/gpulearned/labels.py's records() reads: **/records/*.jsonl, status ok
    seen = 0
    for path in sorted(data.glob("**/records/*.jsonl")):
        assert path.parent.parent.parent.name == "cpu"
        for line in _lines(path):
            r = json.loads(line)
            if r["status"] != "ok":
                continue
            seen += 1
            mode = r["setup"]["mode"]
            layout = "" if r["setup"]["layout"] == "n/a" else "-" + r["setup"]["layout"]
            assert path.parent.parent.name.startswith(f"{mode}-{r['setup']['precision']}{layout}")
            assert r["metrics"]["step_ms" if mode == "train" else "latency_ms"] > 0
            assert "gpu_name" in r["env"] and r["batch"] >= 1 and r["group"] and r["arch_kind"]
            assert "onnx" in r and r["input_shapes"]
    assert seen == sum(1 for r in recs if r["status"] == "ok" and not r["quality"].get("injected"))


def test_records_become_learned_layer_labels_with_rebuilds(window, tmp_path):
    from perfseer_rt.gpu.backward import OPTIMIZERS
    from perfseer_rt.gpu.precision import get_precision
    from perfseer_rt.graph import extract

    data, cache = tmp_path / "data", tmp_path / "cache"
    ingest(window, data, allow_dry_run=True)
    assert export_all(data, cache) == {"exported": 2, "present": 0, "failed": 0}  # the two zoo architectures
    assert export_all(data, cache)["present"] == 2  # resumable
    ok = [r for r in read_records(window)[0] if r["status"] == "ok" and not r["quality"].get("injected")]
    for r in ok:
        f = label_fields(r)
        assert set(f) == LABEL_FIELDS and f["source"] == "ours" and f["gpu"] == "cpu"
        get_precision(f["precision"])
        assert f["optimizer"] is None if f["mode"] == "inference" else f["optimizer"] in OPTIMIZERS
        assert extract(str(cache / f["onnx"]), batch=f["batch"]).num_nodes > 0
    with pytest.raises(ValueError):
        label_fields(next(r for r in read_records(window)[0] if r["status"] == "oom"))
    labels, skipped = our_labels(data, cache)  # what `python -m training.gpulearned --ours` trains on
    assert labels and all(lab.source == "ours" and Path(lab.onnx).is_file() for lab in labels)
    assert len(labels) + skipped["ours: no rebuild yet"] == len(ok)  # timm rebuilds are not in this cache


def test_shards_rotate_stop_at_the_file_limit_and_skip_a_torn_line(tmp_path):
    w = ShardWriter(tmp_path, max_bytes=200, max_files=2)
    with pytest.raises(ShardsFull):
        for i in range(100):
            w.write({"key": f"k{i}", "pad": "x" * 60, "nan": float("nan")})
    w.close()
    assert [p.name for p in sorted(tmp_path.glob("records-*"))] == ["records-00.jsonl", "records-01.jsonl"]
    recs, torn = read_records(tmp_path)
    assert len(recs) == w.written and all(r["nan"] is None for r in recs) and torn == 0
    with open(tmp_path / "records-01.jsonl", "a") as fh:
        fh.write('{"key": "cut off mid-wri')
    assert read_records(tmp_path) == (recs, 1)


def test_bad_command_lines_are_one_line_exit_2(tmp_path, capsys):
    for args in (["--inject", "nothing"], ["--families", "nope"], ["--max-shards", "0"]):
        assert main(["run", "--out", str(tmp_path / "o"), "--device", "cpu", "--plan", "dry", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("gpu_window: error:")
    assert not (tmp_path / "o").exists()
    assert main(["ingest", str(tmp_path)]) == 2
    assert "no records-NN.jsonl" in capsys.readouterr().err


def test_the_wrapper_restarts_after_a_fatal_exit_and_keeps_the_deadline(tmp_path):
    """gpu_window.sh with a stand-in python: exit 3 once, then 0."""
    fake = tmp_path / "fake-python"
    calls = tmp_path / "calls"
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {calls}\n'
                    f'[ $(wc -l < {calls}) -ge 2 ] && exit 0 || exit 3\n')
    fake.chmod(0o755)
    out = tmp_path / "OUT"
    t0 = int(time.time())
    res = subprocess.run(["bash", str(ROOT / "training/campaigns/gpu_window.sh"), "--plan", "dry"],
                         env={**os.environ, "PYTHON": str(fake), "OUT": str(out), "GPU_WINDOW_BUDGET_S": "100"},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        args = line.split()
        assert args[:3] == ["-m", "training.campaigns.gpu_window", "run"] and args[-2:] == ["--plan", "dry"]
        deadline = int(args[args.index("--deadline") + 1])
        assert t0 + 100 <= deadline <= t0 + 102 and args[args.index("--out") + 1] == str(out)
    assert "attempt 1 exit 0" in (out / "log.txt").read_text()


def test_the_window_plan_is_ordered_unique_and_spread():
    from perfseer_rt.gpu.backward import OPTIMIZERS
    from perfseer_rt.gpu.precision import PRECISIONS

    plan = window_plan()
    assert len({c.key for c in plan}) == len(plan)
    assert [c.phase for c in plan] == sorted((c.phase for c in plan), key=PHASES.index)
    first = plan[:150]  # the first minutes hold every source and kind
    assert {c.arch.family for c in first} >= {"timm", "hf", "perfseer"}
    assert {c.arch.kind for c in first} >= {"cnn", "mobile-cnn", "vit", "transformer"}
    for c in plan:
        s = c.setting
        assert s.precision in PRECISIONS and (s.optimizer in OPTIMIZERS) == (s.mode == "train")
        assert s.layout != "nhwc" or c.arch.conv
        assert (s.layout == "n/a") == c.arch.text
    assert sum(c.setting.energy for c in plan) >= 300


def test_timm_models_come_from_the_public_records_and_hf_from_the_zoo():
    from training.zoo.real.hf_text import ARCHITECTURES

    public = {}
    for path in (ROOT / "data/public-gpu/timm").glob("*/*/records/*.jsonl"):
        for line in _lines(path):
            r = json.loads(line)
            p = r["config"]["params"]
            public[(p["model"], p["res"])] = (r["group"], r["arch_kind"])
    timm = [a for tier in (1, 2) for a in archs(tier) if a.family == "timm"]
    assert len(timm) >= 80
    for a in timm:
        assert public.get((a.params["model"], a.params["res"])) == (a.group, a.kind), a.spec
    for model, _, group in HF_TIER1 + HF_TIER2:
        assert ARCHITECTURES[model][0] == group


def test_the_estimate_follows_the_stepper_rules(monkeypatch):
    """estimate.config_s counts the steps measure.Stepper takes (a fake clock, no sleeping)."""
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(time, "perf_counter_ns", lambda: int(clock[0] * 1e9))
    st = Stepper(__import__("torch").device("cpu"))
    t = Timing()
    for step_s in (2.0**-11, 2.0**-8, 2.0**-6, 2.0**-4, 0.5, 4.0):  # exact in binary: no rounding
        for cfg in (window_plan()[0], window_plan()[4]):  # an energy and a time-only configuration
            def step(dt=step_s):
                clock[0] += dt
            clock[0] = 0.0
            st.warm_up(step, t, cfg.setting.energy)
            ms, _ = st.timed(step, t, cfg.setting.energy)
            expect = estimate.config_s(cfg, step_s, t) - estimate.OVERHEAD_S - estimate.FIRST_STEP_S
            assert clock[0] == pytest.approx(expect, rel=1e-6), (step_s, cfg.setting)


@pytest.mark.slow
def test_dry_run_of_timm_and_hf_models(tmp_path):
    """The timm and Hugging Face builders (imports both libraries)."""
    out = tmp_path / "OUT"
    assert main(["run", "--out", str(out), "--device", "cpu", "--plan", "dry", "--families", "timm,hf",
                 "--budget-s", "300", "--quiet", "--limit", "12"]) == 0
    recs = read_records(out)[0]
    assert len(recs) == 12 and all(r["status"] == "ok" for r in recs)
    timm = next(r for r in recs if r["family"] == "timm")
    assert timm["onnx"] == "torchscript/test_vit@160.onnx" and timm["setup"]["attention"] == "timm-default"
    hf = next(r for r in recs if r["family"] == "hf")
    assert hf["setup"]["attention"] == "sdpa" and hf["onnx"] is None


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_dry_plan_on_a_gpu(tmp_path):
    """On a GPU machine: the CUDA paths (events, NVML memory, the energy window)."""
    out = tmp_path / "OUT"
    assert main(["run", "--out", str(out), "--device", "cuda", "--plan", "dry", "--families", FAMILIES,
                 "--budget-s", "120", "--quiet"]) == 0
    recs = read_records(out)[0]
    assert {r["key"] for r in recs} == {c.key for c in ZOO_PLAN}
    ok = [r for r in recs if r["status"] == "ok"]
    assert len(ok) == len(recs) and all(r["quality"]["timing"] == "cuda_events" for r in ok)
    assert all(r["metrics"]["torch_max_allocated_mb"] > 0 and r["metrics"]["peak_mem_process_mb"] > 0
               for r in ok)
    assert all(r["env"]["gpu_name"] and r["device"] != "cpu" for r in recs)
    energy = [r for r in ok if r["setup"]["energy_window"]]
    assert energy and all(r["metrics"].get("sm_util_pct") is not None for r in energy)


def test_slim_leaves_data_behind_without_touching_files_and_restore_undoes_it(tmp_path):
    """preflight --slim: data/ and exported_models/ leave what travels (git's
    tracked + untracked-unignored files); the files stay on disk; --restore
    gives back a clean checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout

    git("init", "-q")
    for rel in ("training/a.py", "data/big.jsonl", "exported_models/m.onnx", "README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel * 100)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    assert {n for n, _ in preflight.travelling_files(tmp_path)} == {
        "training/a.py", "data/big.jsonl", "exported_models/m.onnx", "README.md"}
    preflight.slim(tmp_path)
    assert {n for n, _ in preflight.travelling_files(tmp_path)} == {"training/a.py", "README.md"}
    assert (tmp_path / "data" / "big.jsonl").read_text() == "data/big.jsonl" * 100
    preflight.restore(tmp_path)
    assert git("status", "--porcelain") == ""
    assert len(preflight.travelling_files(tmp_path)) == 4
    assert preflight.MARK not in (tmp_path / ".git" / "info" / "exclude").read_text()


def test_a_hung_configuration_is_recorded_and_the_process_ends(tmp_path):
    """The watchdog: a configuration that runs past --watchdog-s (an injected
    30 s step against a 2 s limit) is written as a hung record and the
    process exits 3 at once; a resumed process skips it and goes on."""
    out = tmp_path / "OUT"
    first = ZOO_PLAN[0].key
    proc = subprocess.run(
        [sys.executable, "-m", "training.campaigns.gpu_window", "run", "--out", str(out), "--device", "cpu",
         "--plan", "dry", "--families", FAMILIES, "--budget-s", "300", "--quiet", "--watchdog-s", "2",
         "--inject", f"{first}=slow"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs, torn = read_records(out)
    assert torn == 0 and [r["key"] for r in recs] == [first]
    assert recs[0]["status"] == "error" and "watchdog" in recs[0]["error"]
    assert "watchdog" in proc.stdout
    assert _run(out, "--limit", "1") == 0
    again, _ = read_records(out)
    assert [r["key"] for r in again] == [first, ZOO_PLAN[1].key]


def test_a_build_out_of_memory_is_tried_again_once(tmp_path, monkeypatch):
    """An architecture whose build runs out of memory is built again for its
    next setting (what the last one left may have been the cause); after
    BUILD_OOM_TRIES failures its other settings are recorded without a try."""
    import torch

    from training.campaigns.gpu_window import build as B
    from training.campaigns.gpu_window import runner

    calls = []

    def no_memory(arch, device):
        calls.append(arch.build_key)
        raise torch.OutOfMemoryError("CUDA out of memory (test)")

    monkeypatch.setattr(B, "build_module", no_memory)
    first = ZOO_PLAN[0].arch.build_key
    n = sum(c.arch.build_key == first for c in ZOO_PLAN)
    assert n > runner.BUILD_OOM_TRIES
    assert _run(tmp_path / "OUT", "--limit", str(n)) == 0
    recs, _ = read_records(tmp_path / "OUT")
    mine = [r for r in recs if r["key"].startswith(ZOO_PLAN[0].key.split("|")[0] + "|")]
    assert calls.count(first) == runner.BUILD_OOM_TRIES
    assert len(mine) == n and all(r["status"] == "oom" and "build failed" in r["error"] for r in mine)
