"""The campaign loop and store with a fake worker: resume, duplicates, OOM
labels, references, the guards against mixed methods and CPUs."""

from __future__ import annotations

import json

import pytest

from tests.campaign_fakes import CPU, FakeWorker
from training.campaign import loop
from training.campaign.plan import FixedPlan
from training.campaign.store import MixedCpuError, MixedMethodsError, Store, iter_records
from training.campaign.zoo_cases import ZOO_ENV
from training.seernet.data import load_samples


@pytest.fixture(autouse=True)
def stub_zoo(monkeypatch):
    monkeypatch.setenv(ZOO_ENV, "tests.stub_zoo")


def plan(count=5, **kw):
    return FixedPlan(seed=1, count=count, families=["mlp", "wide"], batches=(1, 2, 4, 8),
                     batches_per_arch=2, reference_count=1, **kw)


def pairs(out):
    return [(r["arch_id"], r["batch"]) for r in iter_records(out) if not r["reference"]]


def planned(p):
    return {(it.arch_id, b) for it in p.items() for b in it.batches}


def test_runs_resumes_and_never_duplicates(tmp_path):
    out, p = tmp_path / "ds", plan()
    loop.run(p, Store(out, shard_size=3), loop.LocalExecutor(FakeWorker()), target=4,
             reference_every=2, progress=False)
    first = pairs(out)
    assert len(first) >= 4 and len(set(first)) == len(first)
    stats = loop.run(p, Store(out, shard_size=3), loop.LocalExecutor(FakeWorker()), target=10,
                     reference_every=2, progress=False)
    done = pairs(out)
    assert len(done) == len(set(done)) == 10 and set(done) == planned(p)
    assert stats.written - stats.references == 10 - len(first)
    refs = [r for r in iter_records(out) if r["reference"]]
    assert len(refs) >= 3 and {r["arch_id"] for r in refs} == {next(p.items()).arch_id}
    # every ok record finds its graph; repeated reference records share one
    assert len(load_samples(out)) == len({r["graph_key"] for r in iter_records(out)})
    assert not list(out.rglob("*.tmp"))
    assert json.loads((out / "campaign.json").read_text())["state"] == "done"


def test_a_result_sent_twice_is_written_once(tmp_path):
    store = Store(tmp_path / "ds")
    item = next(plan().items())
    [(rec, g), _] = FakeWorker().run(item)
    assert store.write(rec, g) and not store.write(dict(rec), g)
    assert len(pairs(tmp_path / "ds")) == 1


def test_oom_is_a_label(tmp_path):
    out = tmp_path / "ds"
    loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker(oom_from=4)), target=10,
             reference=False, progress=False)
    recs = list(iter_records(out))
    assert {r["status"] for r in recs if r["batch"] >= 4} == {"oom"}
    assert all(r["metrics"] == {} for r in recs if r["status"] == "oom")
    assert {s.batch for s in load_samples(out)} <= {1, 2}  # training reads ok records only


def test_mixed_peak_memory_methods_are_refused(tmp_path):
    out = tmp_path / "ds"
    loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker(method="vmhwm")), target=2,
             reference=False, progress=False)
    before = sorted(p.name for p in (out / "records").glob("*"))
    with pytest.raises(MixedMethodsError, match="as vmhwm, this run as vmhwm\\+mmap64k"):
        loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker()), target=6,
                 reference=False, progress=False)
    assert sorted(p.name for p in (out / "records").glob("*")) == before


def test_mixed_cpus_are_refused_and_old_records_compare_what_they_have(tmp_path):
    out = tmp_path / "ds"
    old_env = {"cpu_model": "AMD EPYC"}  # the first builder's records: no vendor/family/model id
    loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker(env=old_env)), target=2,
             reference=False, progress=False)
    loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker(env=CPU)), target=4,
             reference=False, progress=False)  # same model name, more detail: accepted
    other = {**CPU, "cpu_model_id": "1"}
    with pytest.raises(MixedCpuError, match="cpu_model_id '17' vs '1'"):
        loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker(env=other)), target=6,
                 reference=False, progress=False)
    # a GPU target's records do not carry the host CPU into the guard
    loop.run(plan(), Store(out), loop.LocalExecutor(FakeWorker(env=other, target="cuda-inference")),
             target=6, reference=False, progress=False)
    assert len(pairs(out)) == 6


def test_resume_folders_count_as_done_and_shards_do_not_collide(tmp_path):
    a, b, p = tmp_path / "a", tmp_path / "b", plan()
    loop.run(p, Store(a, shard_size=2), loop.LocalExecutor(FakeWorker()), target=4,
             reference=False, progress=False)
    loop.run(p, Store(b, resume=[tmp_path / "a"], shard_size=2), loop.LocalExecutor(FakeWorker()),
             target=10, reference=False, progress=False)
    names_a = {f.name for f in (a / "records").glob("*")}
    names_b = {f.name for f in (b / "records").glob("*")}
    assert not names_a & names_b
    assert set(pairs(a)) | set(pairs(b)) == planned(p) and not set(pairs(a)) & set(pairs(b))


def test_time_budget_stops_cleanly(tmp_path):
    import time

    out = tmp_path / "ds"
    t0 = time.monotonic()
    stats = loop.run(plan(count=50), Store(out), loop.LocalExecutor(FakeWorker(delay_s=0.05)),
                     target=100, reference_every=4, time_budget_s=0.5, progress=False)
    elapsed = time.monotonic() - t0
    assert stats.stopped_by_budget and 0 < len(pairs(out)) < 100
    # the item running at the limit finishes, nothing starts after it (unbounded: >= 5 s)
    assert elapsed < 3.0
    assert json.loads((out / "campaign.json").read_text())["state"] == "stopped"


def test_an_export_process_that_dies_costs_one_record_not_the_campaign(stub_zoo):
    """A crash inside the exporter kills the export process (seen on a real
    campaign: BrokenProcessPool ended it). The item is tried once more in a
    fresh process, then recorded as an export error; the next item exports."""
    from training.campaign.plan import Item
    from training.campaign.targets import TargetSpec
    from training.campaign.worker import DeviceWorker

    def item(family):
        cfg = {"family": family, "params": {"width": 8, "depth": 1}}
        return Item(config=cfg, arch_id=family * 2, family=family, spec=None, group=family,
                    batches=(1,))

    worker = DeviceWorker(TargetSpec("cpu-inference", {}), zoo="tests.stub_zoo")
    try:
        with pytest.raises(RuntimeError, match="died twice"):
            worker._export(item("crash"))
        worker.prefetch(item("crash"))  # dies in the background ...
        assert worker._export(item("mlp")).endswith(".onnx")  # ... and costs nothing here
    finally:
        worker.close()
