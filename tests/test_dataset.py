"""Dataset builder: real (tiny) measurements, atomic shards, resume, splits."""

import json
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("torch")

from perfseer_rt.profile import ProfileWorker  # noqa: E402
from training.dataset.build import Builder, Settings, existing  # noqa: E402
from training.dataset.splits import HELD_OUT_FAMILIES, split_arch, split_family  # noqa: E402
from training.seernet.data import load_samples, read_records  # noqa: E402

FAMILY = ("mobilenetv3",)


def settings(out, target):
    return Settings(out=str(out), target=target, min_runs=3, min_time_s=0.02,
                    families=FAMILY, reference=False, shard_size=3)


@pytest.fixture(scope="module")
def worker():
    with ProfileWorker("cpu") as w:
        yield w


def check_consistent(out: Path):
    records = read_records(out)
    keys = [(r["arch_id"], r["batch"]) for r in records if not r["reference"]]
    assert len(keys) == len(set(keys)), "a configuration was measured twice"
    assert not list(out.rglob("*.tmp")), "a temporary file was left behind"
    samples = load_samples(out)  # every ok record finds its graph (repeats merged)
    assert len(samples) == len({r["graph_key"] for r in records if r["status"] == "ok"})
    return records


def test_build_resume_and_records(tmp_path, worker):
    out = tmp_path / "ds"
    n = Builder(settings(out, 2), worker, log=lambda *_: None).run()
    assert n >= 2
    first = check_consistent(out)
    ok = [r for r in first if r["status"] == "ok"]
    assert ok, [r["error"] for r in first]
    r = ok[0]
    assert r["metrics"]["latency_ms"] > 0 and r["metrics"]["peak_mem_mb"] > 0
    assert r["quality"]["runs"] >= 3 and r["quality"]["latency_cv"] is not None
    assert r["env"]["onnxruntime_version"] and r["provider"]["provider_used"] == "CPUExecutionProvider"
    assert r["flops"] > 0 and r["graph_key"]

    # resume: a larger target continues the same stream without repeating
    n2 = Builder(settings(out, n + 2), worker, log=lambda *_: None).run()
    assert n2 >= n + 2
    second = check_consistent(out)
    assert [x["graph_key"] for x in second[: len(first)]] == [x["graph_key"] for x in first]
    done, count, _ = existing(out)
    assert count == n2 and len(done) == n2


def test_resume_refuses_another_memory_method(tmp_path, worker):
    """Records whose peak memory was read another way (e.g. before glibc's
    mmap threshold was fixed) are not extended with new ones."""
    from training.dataset.build import MixedMethodsError

    out = tmp_path / "ds"
    Builder(settings(out, 1), worker, log=lambda *_: None).run()
    [part] = sorted((out / "records").glob("part-*.jsonl"))
    records = [json.loads(line) for line in part.read_text().splitlines()]
    assert {r["quality"]["peak_mem_method"] for r in records} == {"vmhwm+mmap64k"}
    for r in records:
        r["quality"]["peak_mem_method"] = "vmhwm"  # as an older campaign wrote them
    part.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = sorted(p.name for p in (out / "records").glob("*"))
    with pytest.raises(MixedMethodsError, match="as vmhwm, this run as vmhwm\\+mmap64k"):
        Builder(settings(out, len(records) + 1), worker, log=lambda *_: None).run()
    assert sorted(p.name for p in (out / "records").glob("*")) == before


def test_interrupted_build_leaves_whole_shards(tmp_path, worker):
    out = tmp_path / "ds"

    class Flaky:
        calls = 0

        def measure(self, *a, **k):
            Flaky.calls += 1
            if Flaky.calls == 3:
                raise KeyboardInterrupt
            return worker.measure(*a, **k)

    with pytest.raises(KeyboardInterrupt):
        Builder(settings(out, 10), Flaky(), log=lambda *_: None).run()
    before = check_consistent(out)
    assert 1 <= len(before) <= 2  # 2 calls: one or two records (a noisy one is re-measured)
    for f in (out / "records").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            json.loads(line)  # every line whole
    n = Builder(settings(out, 4), worker, log=lambda *_: None).run()
    assert n >= 4
    check_consistent(out)


def test_splits_never_leak_architectures():
    ids = [f"{i:016x}" for i in range(4000)]
    by_split = defaultdict(set)
    for a in ids:
        by_split[split_arch(a)].add(a)
    assert set(by_split) == {"train", "val", "test"}
    assert not (by_split["train"] & by_split["test"]) and not (by_split["val"] & by_split["test"])
    shares = {k: len(v) / len(ids) for k, v in by_split.items()}
    assert shares["train"] == pytest.approx(0.5, abs=0.04)
    assert shares["val"] == pytest.approx(0.25, abs=0.04)
    for fam in HELD_OUT_FAMILIES:
        assert {split_family(a, fam) for a in ids[:50]} == {"test"}
    assert {split_family(a, "resnet") for a in ids} == {"train", "val"}


def test_training_step_records(tmp_path):
    from training.profile_train import TrainWorker

    out = tmp_path / "train"
    s = settings(out, 2)
    s.kind = "train"
    with TrainWorker("cpu") as w:
        n = Builder(s, w, log=lambda *_: None).run()
    assert n >= 2
    records = check_consistent(out)
    ok = [r for r in records if r["status"] == "ok"]
    assert ok and all(r["kind"] == "train" for r in records)
    assert ok[0]["metrics"]["step_ms"] > 0 and ok[0]["metrics"]["peak_mem_mb"] > 0
    assert ok[0]["quality"]["step_cv"] is not None


def test_reference_set_remeasured_in_one_shard(tmp_path, worker, monkeypatch):
    """Reference architectures are measured at the start, every N records and
    at the end; their repeated graphs share one entry of a shard."""
    from training.dataset import build

    monkeypatch.setattr(build, "REFERENCE_SPECS", ("mobilenetv3:variant=small,width=0.35,res=32",))
    out = tmp_path / "ds"
    s = settings(out, 2)
    s.reference, s.reference_every, s.shard_size = True, 1, 50
    Builder(s, worker, log=lambda *_: None).run()
    records = check_consistent(out)
    refs = [r for r in records if r["reference"]]
    assert len(refs) >= 3 and len({r["graph_key"] for r in refs}) == 1

    # the data card: reference configurations counted apart, their spread per metric shown
    from training.dataset.card import card, drift

    [d] = drift(records, "latency_ms")
    assert d["count"] == len(refs) and set(d["cv_pct"]) == {"latency_ms", "peak_mem_mb"}
    assert all(v >= 0 for v in d["cv_pct"].values())
    text = card(out)
    main = [r for r in records if not r["reference"]]
    assert f"- {len(main)} configurations" in text
    assert f"1 reference configurations re-measured {len(refs)} times" in text
    assert f"so it sees {len(main) + 1} configurations" in text
    assert f"{d['cv_pct']['peak_mem_mb']:.1f} %" in text
