"""The dataset format: graph shards, records, load_samples, splits, batching."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfseer_rt.graph import layout
from training.seernet import collate, concat_graphs, data
from training.seernet.synthetic import random_graph, write_synthetic_dataset


def _graphs(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return [random_graph(rng, k) for k in (1, 2, 7, 3, 12)[:n]]


def test_graph_shard_round_trip(tmp_path):
    graphs = _graphs()
    keys = [f"g{i}" for i in range(len(graphs))]
    data.write_graph_shard(tmp_path / "s.npz", keys, graphs)
    back = data.read_graph_shard(tmp_path / "s.npz")
    assert list(back) == keys
    for k, g in zip(keys, graphs):
        x, ei, ea, u = back[k]
        assert np.allclose(x, g.x.astype(np.float32)) and np.array_equal(ei, g.edge_index)
        assert ea.shape == (g.num_edges, len(layout.EDGE_COLUMNS)) and np.allclose(u, g.u.astype(np.float32))
    assert back["g0"][1].shape == (2, 0)  # a single node, no edges


def test_graph_shard_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "s.npz"
    data.write_graph_shard(path, ["a"], _graphs(1))
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        data.write_graph_shard(path, ["b", "c"], _graphs(2, seed=1))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.npz"]  # no temp file left


def test_graph_shard_rejects_duplicates_and_mismatch(tmp_path):
    with pytest.raises(ValueError, match="duplicate"):
        data.write_graph_shard(tmp_path / "s.npz", ["a", "a"], _graphs(2))
    with pytest.raises(ValueError, match="2 keys for 1"):
        data.write_graph_shard(tmp_path / "s.npz", ["a", "b"], _graphs(1))


def test_load_samples_and_splits(tmp_path):
    root = write_synthetic_dataset(tmp_path / "ds", num_archs=12, batches=(1, 2), max_nodes=8)
    samples = data.load_samples(root)
    assert len(samples) == 24  # the failed record is skipped
    assert {s.batch for s in samples} == {1, 2}
    assert set(samples[0].targets) == {"latency_ms", "peak_mem_mb"}
    arch = data.split_samples(samples, "arch")
    assert [len(arch[k]) for k in data.SPLITS] == [12, 6, 6]
    for a, b in (("train", "test"), ("train", "val"), ("val", "test")):
        assert not {s.arch_id for s in arch[a]} & {s.arch_id for s in arch[b]}
    fam = data.split_samples(samples, "family")
    assert {s.family for s in fam["test"]} == {"fam0"}
    assert fam["val"] and not {s.arch_id for s in fam["val"]} & {s.arch_id for s in fam["train"]}
    assert data.load_samples(root, metrics=["latency_ms"])[0].targets.keys() == {"latency_ms"}
    summary = data.dataset_summary(samples, ["latency_ms"])
    assert summary["configurations"] == 24 and summary["metrics"]["latency_ms"]["count"] == 24


def test_several_folders_read_as_one(tmp_path):
    """A campaign and its extension (here: other batch sizes of the same
    architectures) pool their records; each record finds its graph in its own
    folder's shards, and the one-memory-method guard spans the folders."""
    a = write_synthetic_dataset(tmp_path / "a", num_archs=6, batches=(1,), max_nodes=8)
    b = write_synthetic_dataset(tmp_path / "b", num_archs=6, batches=(2,), max_nodes=8)
    both = data.load_samples([a, b])
    assert len(both) == len(data.load_samples(a)) + len(data.load_samples(b)) == 12
    assert {s.batch for s in both} == {1, 2}
    assert len(data.read_records([a, b])) == len(data.read_records(a)) + len(data.read_records(b))
    with pytest.raises(data.DatasetError, match="no dataset folder"):
        data.load_samples([])
    for root, method in ((a, "vmhwm"), (b, "vmhwm+mmap64k+fresh")):
        part = root / "records" / "part0000.jsonl"
        recs = [json.loads(line) for line in part.read_text().splitlines()]
        for r in recs:
            r.setdefault("quality", {})["peak_mem_method"] = method
        part.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(data.DatasetError, match="more than one method"):
        data.load_samples([a, b])
    assert len(data.load_samples([a, b], metrics=["latency_ms"])) == 12


def test_load_samples_errors_name_the_problem(tmp_path):
    with pytest.raises(data.DatasetError, match="no records"):
        data.load_samples(tmp_path)
    root = write_synthetic_dataset(tmp_path / "ds", num_archs=4, batches=(1,))
    with open(root / "records" / "part0001.jsonl", "w") as fh:
        fh.write(json.dumps({"arch_id": "x", "status": "ok", "batch": 1, "metrics": {"latency_ms": 1},
                             "graph_key": "nope"}) + "\n")
    with pytest.raises(data.DatasetError, match="'nope'"):
        data.load_samples(root)


def test_non_positive_metrics_are_treated_as_missing(tmp_path):
    root = write_synthetic_dataset(tmp_path / "ds", num_archs=4, batches=(1,))
    lines = (root / "records" / "part0000.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["metrics"] = {"latency_ms": 0.0, "peak_mem_mb": float("nan")}
    lines[0] = json.dumps(rec)
    (root / "records" / "part0000.jsonl").write_text("\n".join(lines) + "\n")
    assert data.load_samples(root)[0].targets == {}


def test_collate_offsets_edges_and_builds_node_batch():
    graphs = _graphs(3)
    b = collate(graphs, ["latency_ms"])
    assert b.num_graphs == 3 and b.x.shape[0] == sum(g.num_nodes for g in graphs)
    assert b.node_batch.tolist() == [0] + [1] * 2 + [2] * 7
    assert b.edge_index[:, :1].tolist() == [[1], [2]]  # graph 1's edge 0 -> 1, shifted by 1
    assert (b.node_batch[b.edge_index[0]] == b.node_batch[b.edge_index[1]]).all()
    assert b.y.shape == (3, 1)
    with pytest.raises(ValueError, match="no nodes"):
        concat_graphs([np.zeros((0, 3))], [np.zeros((2, 0))], [np.zeros((0, 6))], [np.zeros(19)])


def test_repeated_measurements_become_one_sample(tmp_path):
    root = write_synthetic_dataset(tmp_path / "ds", num_archs=4, batches=(1,))
    first = json.loads((root / "records" / "part0000.jsonl").read_text().splitlines()[0])
    with open(root / "records" / "part0001.jsonl", "w") as fh:
        for lat in (1.0, 2.0, 30.0):
            fh.write(json.dumps({**first, "reference": True, "metrics": {"latency_ms": lat}}) + "\n")
    samples = data.load_samples(root)
    assert len(samples) == 4
    merged = next(s for s in samples if s.key == first["graph_key"])
    assert merged.extra["repeats"] == 4
    assert merged.targets["latency_ms"] == float(np.median([first["metrics"]["latency_ms"], 1.0, 2.0, 30.0]))
    assert merged.targets["peak_mem_mb"] == first["metrics"]["peak_mem_mb"]


def _as_train_records(root, methods):
    """Rewrite a synthetic dataset as CPU training-step records (step_ms,
    peak_mem_mb) whose peak memory was read with ``methods[i % len(methods)]``."""
    path = root / "records" / "part0000.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for i, r in enumerate(recs):
        r["kind"] = "train"
        r["metrics"] = {"step_ms": r["metrics"].get("latency_ms", 1.0) * 3,
                        "peak_mem_mb": r["metrics"].get("peak_mem_mb", 1.0)} if r["metrics"] else {}
        r["quality"] = {"optimizer": "sgd", "peak_mem_method": methods[i % len(methods)]}
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_trainer_refuses_training_step_records_of_mixed_memory_methods(tmp_path):
    root = write_synthetic_dataset(tmp_path / "ds", num_archs=6, batches=(1, 2))
    _as_train_records(root, ["vmhwm", "vmhwm+mmap64k"])
    with pytest.raises(data.DatasetError, match=r"vmhwm \(\d+ records\), vmhwm\+mmap64k"):
        data.load_samples(root)
    with pytest.raises(data.DatasetError, match="more than one method"):
        data.load_samples(root, metrics=["step_ms", "peak_mem_mb"])
    # time alone does not depend on how memory was read
    assert {tuple(s.targets) for s in data.load_samples(root, metrics=["step_ms"])} == {("step_ms",)}


def test_trainer_accepts_training_step_records_of_one_memory_method(tmp_path):
    root = write_synthetic_dataset(tmp_path / "ds", num_archs=6, batches=(1, 2))
    _as_train_records(root, ["vmhwm"])
    samples = data.load_samples(root)
    assert len(samples) == 12 and all(set(s.targets) == {"step_ms", "peak_mem_mb"} for s in samples)
