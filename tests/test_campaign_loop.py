"""The campaign loop's rules (training/campaigns/common.run_campaign) with scripted measure calls.

The "records" here are test inputs for the loop's bookkeeping (re-measure,
references, resume, budget), never data.
"""

from __future__ import annotations

import itertools

from training.campaigns import common


def _archs(n, batches=(1, 2)):
    out = []
    for i in range(n):
        cfg = {"family": "f", "params": {"i": i}, "arch_id": f"a{i}"}
        arch = common.Arch(f"a{i}", "f", cfg, None)
        arch.cases = [common.Case(f"a{i}", "f", b, cfg) for b in batches]
        out.append(arch)
    return out


def _run(tmp_path, measure, archs, budget=None, done=None, **kw):
    writer = common.RecordWriter(str(tmp_path), "loop")
    stats = common.run_campaign(
        archs, campaign="loop", measure=measure, prepare=lambda i: {"arch": i},
        release=lambda i, keep: None,
        finish=lambda rec, case: {**rec, "key": case.key, "campaign": "loop"},
        writer=writer, budget=budget or common.Budget(None, floor_s=0.0),
        done=set() if done is None else done, **kw)
    writer.close()
    return stats, list(common.iter_records([str(tmp_path)]))


def test_noisy_record_is_remeasured_once_and_flagged(tmp_path):
    cvs = itertools.chain([0.10, 0.01, 0.20, 0.09], itertools.repeat(0.01))

    def measure(case, prepared, timeout):
        return {"status": "ok", "latency_cv": next(cvs)}

    stats, recs = _run(tmp_path, measure, _archs(1), reference_count=0)
    assert [r["latency_cv"] for r in recs] == [0.01, 0.09]
    assert [r["remeasured"] for r in recs] == [True, True]
    assert [r["noisy"] for r in recs] == [False, True]
    assert [r["first_cv"] for r in recs] == [0.10, 0.20]
    assert stats.noisy == 1 and stats.remeasured == 2


def test_references_every_n_and_at_the_end(tmp_path):
    measure = lambda case, prepared, timeout: {"status": "ok", "latency_cv": 0.0}  # noqa: E731
    stats, recs = _run(tmp_path, measure, _archs(3), reference_count=2, reference_every=4)
    refs = [r for r in recs if r["reference"]]
    assert [r["key"] for r in refs] == ["a0/b1", "a1/b1"] * 2  # after 4 records, and at the end
    main = [r["key"] for r in recs if not r["reference"]]
    assert main == ["a0/b1", "a0/b2", "a1/b1", "a1/b2", "a2/b1", "a2/b2"]


def test_done_cases_are_skipped(tmp_path):
    measure = lambda case, prepared, timeout: {"status": "ok", "latency_cv": 0.0}  # noqa: E731
    stats, recs = _run(tmp_path, measure, _archs(2), done={"a0/b1", "a1/b2"},
                       reference_count=0)
    assert [r["key"] for r in recs] == ["a0/b2", "a1/b1"] and stats.skipped_done == 2


def test_failures_are_written_and_timeouts_cut_by_the_budget_are_not(tmp_path):
    calls = []

    def measure(case, prepared, timeout):
        calls.append(timeout)
        if case.key == "a0/b1":
            return {"status": "oom", "error": "CUDA failure 2: out of memory"}
        return {"status": "error", "error": "timeout: the measurement ran past 5 s"}

    budget = common.Budget(60.0, floor_s=0.0)  # 60 s left: timeouts are budget-limited
    stats, recs = _run(tmp_path, measure, _archs(1), budget=budget, reference_count=0)
    assert [(r["key"], r["status"]) for r in recs] == [("a0/b1", "oom")]
    assert stats.stopped_by_budget and stats.oom == 1 and calls[0] < 60


def test_prepare_stop_ends_the_run(tmp_path):
    writer = common.RecordWriter(str(tmp_path), "loop")
    stats = common.run_campaign(
        _archs(2), campaign="loop", measure=lambda *a: {"status": "ok"},
        prepare=lambda i: common.STOP, release=lambda i, keep: None,
        finish=lambda rec, case: rec, writer=writer, budget=common.Budget(None), done=set())
    assert stats.stopped_by_budget and stats.written == 0


def test_writer_starts_a_new_part_before_the_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "MAX_FILE_BYTES", 200)
    w = common.RecordWriter(str(tmp_path), "big", stamp="S")
    for i in range(5):
        w.write({"i": i, "pad": "x" * 80})
    w.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["big-S-part1.jsonl", "big-S-part2.jsonl", "big-S.jsonl"]  # 2 + 2 + 1
    assert sorted(r["i"] for r in common.iter_records([str(tmp_path)])) == list(range(5))
    assert all(p.stat().st_size <= 200 for p in tmp_path.iterdir())
