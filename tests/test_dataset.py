"""The CPU dataset on the campaign engine: real (tiny) measurements, the old
command line, resume of a folder the first builder wrote, splits, the card."""

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from tests.campaign_fakes import FakeWorker
from training.campaign import loop
from training.campaign.plan import CpuPlan
from training.campaign.store import Store, iter_records
from training.campaign.targets import TargetSpec
from training.campaign.worker import DeviceWorker
from training.dataset.__main__ import translate
from training.dataset.splits import HELD_OUT_FAMILIES, split_arch, split_family
from training.seernet.data import load_samples, read_records

#: The first two shards of the first CPU dataset (``data/cpu_inference``, written
#: by the first builder, seed 0; the whole dataset is in git history, last at
#: commit ff3c6ce), kept as input for the resume test.
FIRST_BUILDER = Path(__file__).parent / "data" / "first_builder"
TINY = {"min_runs": 3, "min_time_s": 0.02, "max_time_s": 1.0, "warmup_runs": 1,
        "warmup_time_s": 0.0, "max_runs": 100000}


def check_consistent(out: Path):
    records = read_records(out)
    keys = [(r["arch_id"], r["batch"]) for r in records if not r["reference"]]
    assert len(keys) == len(set(keys)), "a configuration was measured twice"
    assert not list(out.rglob("*.tmp")), "a temporary file was left behind"
    samples = load_samples(out)  # every ok record finds its graph (repeats merged)
    assert len(samples) == len({r["graph_key"] for r in records if r["status"] == "ok"})
    return records


def test_old_command_line_maps_to_the_campaign():
    assert translate(["--out", "d", "--target", "2400", "--device", "cpu-x", "--min-time", "0.25",
                      "--max-latency", "600"]) == \
        ["--target", "cpu-inference", "--out", "d", "--configs", "2400", "--device", "cpu-x",
         "--min-time", "0.25", "--max-latency", "600"]
    assert translate(["--kind=train", "--target=3", "--out", "d"])[:4] == \
        ["--target", "cpu-train", "--configs", "3"]


def test_resumes_a_folder_of_the_first_builder_without_remeasuring(tmp_path):
    """Two shards the first builder wrote (seed 0; :data:`FIRST_BUILDER`) are
    resumed: the stream skips their architectures and new shards follow them."""
    out = tmp_path / "ds"
    for sub, ext in (("records", "jsonl"), ("graphs", "npz")):
        (out / sub).mkdir(parents=True)
        for i in (0, 1):
            shutil.copy(FIRST_BUILDER / sub / f"part-0000{i}.{ext}", out / sub)
    old = [(r["arch_id"], r["batch"]) for r in iter_records(out) if not r["reference"]]
    store = Store(out)
    assert store.count == len(old) and store.index == 2
    worker = FakeWorker(env={"cpu_model": "AMD EPYC"}, method="vmhwm")
    loop.run(CpuPlan(seed=0), store, loop.LocalExecutor(worker), target=len(old) + 6,
             reference=False, progress=False)
    new = [(r["arch_id"], r["batch"]) for r in iter_records(out) if not r["reference"]][len(old):]
    assert len(new) == 6 and not set(new) & set(old)
    assert {f.name for f in (out / "records").glob("*")} == {f"part-0000{i}.jsonl" for i in range(3)}
    olds = {a for a, _ in old}
    assert not {a for a, _ in new} & olds  # no old architecture is measured again


@pytest.mark.slow
def test_cpu_inference_measures_resumes_and_keeps_whole_shards(tmp_path):
    out = tmp_path / "ds"
    plan = CpuPlan(seed=0, families=["mobilenetv3"], max_latency_ms=50.0,
                   reference_specs=("mobilenetv3:variant=small,width=0.35,res=32",))
    spec = TargetSpec("cpu-inference", TINY)

    class Interrupt(DeviceWorker):
        calls = 0

        def run(self, item, upcoming=None, deadline=None):
            Interrupt.calls += 1
            if Interrupt.calls == 3:
                raise KeyboardInterrupt
            return super().run(item, upcoming, deadline)

    with pytest.raises(KeyboardInterrupt):
        loop.run(plan, Store(out, shard_size=3), loop.LocalExecutor(Interrupt(spec)), target=50,
                 reference_every=1, progress=False)
    first = check_consistent(out)
    assert first and json.loads((out / "campaign.json").read_text())["state"] == "interrupted"
    loop.run(plan, Store(out, shard_size=3), loop.LocalExecutor(DeviceWorker(spec)),
             target=len([r for r in first if not r["reference"]]) + 2, reference_every=1,
             progress=False)
    records = check_consistent(out)
    ok = [r for r in records if r["status"] == "ok"]
    assert ok and all(r["metrics"]["latency_ms"] > 0 and r["metrics"]["peak_mem_mb"] > 0 for r in ok)
    # every configuration measured in a fresh child, as `perfseer-rt profile` measures
    assert {r["quality"]["peak_mem_method"] for r in ok} == {"vmhwm+mmap64k+fresh"}
    assert all(r["env"]["cpu_model"] for r in ok)
    # the record fields the first builder gained: architecture group, the published-models
    # split, and the profiler's load/run memory parts (peak = the larger of the two peaks)
    assert all(r["group"] == "mobilenetv3" and r["split_real"] in ("train", "val") for r in records)
    for r in ok:
        q = r["quality"]
        assert q["loaded_mb"] <= q["load_peak_mb"]
        assert r["metrics"]["peak_mem_mb"] == pytest.approx(max(q["load_peak_mb"], q["run_peak_mb"]))
    refs = [r for r in records if r["reference"]]
    assert len(refs) >= 3 and len({r["graph_key"] for r in refs}) == 1

    # the data card: reference configurations counted apart, their spread per metric shown
    from training.dataset.card import card, drift

    [d] = drift(records, "latency_ms")
    assert d["count"] == len(refs) and set(d["cv_pct"]) == {"latency_ms", "peak_mem_mb"}
    text = card(out)
    main = [r for r in records if not r["reference"]]
    assert f"- {len(main)} configurations" in text
    assert f"1 reference configurations re-measured {len(refs)} times" in text


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
