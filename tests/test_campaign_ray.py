"""The campaign on a local Ray: two workers, one killed mid-way, then resumed;
no configuration is lost or recorded twice."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.campaign_fakes import FakeFactory  # noqa: E402
from training.campaign import loop  # noqa: E402
from training.campaign.distributed import RayExecutor  # noqa: E402
from training.campaign.plan import FixedPlan  # noqa: E402
from training.campaign.store import Store, iter_records  # noqa: E402
from training.campaign.zoo_cases import ZOO_ENV  # noqa: E402

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield
    ray.shutdown()


@pytest.mark.slow
def test_two_workers_one_killed_then_resumed(local_ray, tmp_path, monkeypatch):
    monkeypatch.setenv(ZOO_ENV, "tests.stub_zoo")
    plan = FixedPlan(seed=2, count=12, families=["mlp", "wide"], batches=(1, 2, 4, 8),
                     batches_per_arch=2, reference_count=1)
    want = {(it.arch_id, b) for it in plan.items() for b in it.batches}
    out = tmp_path / "ds"

    executor = RayExecutor(FakeFactory(delay_s=0.05), 2)
    # both actors up before the first item: on a loaded machine the second
    # one started late and the first measured everything (a flaky run)
    ray.get([actor.__ray_ready__.remote() for actor in executor.actors], timeout=600)
    killed = []

    def kill_once(record):
        records = list(iter_records(out))
        if not killed and not record["reference"] and len(records) >= 5 \
                and len({r["worker_pid"] for r in records}) == 2:  # both have measured
            executor.kill(0)
            killed.append(record["worker_pid"])

    stats = loop.run(plan, Store(out, shard_size=4), executor, target=14, reference_every=6,
                     progress=False, on_record=kill_once)
    got = [(r["arch_id"], r["batch"]) for r in iter_records(out) if not r["reference"]]
    assert killed and stats.lost == 1  # the killed worker's item went to the other one
    assert len(got) == len(set(got)) and len(got) >= 14
    assert len({r["worker_pid"] for r in iter_records(out)}) == 2  # both workers measured

    # resume with fresh workers: the rest of the plan, nothing twice
    loop.run(plan, Store(out, shard_size=4), RayExecutor(FakeFactory(), 2), target=len(want),
             reference_every=6, progress=False)
    got = [(r["arch_id"], r["batch"]) for r in iter_records(out) if not r["reference"]]
    assert len(got) == len(set(got)) and set(got) == want
