"""A synthetic dataset in the on-disk format, for tests and timing only.

Graphs are random DAGs with random features; the targets are a smooth,
learnable function of the features (a FLOPs- and node-count-driven
"latency" and a weight- and batch-driven "memory"). They say nothing about
real hardware: use them to exercise the pipeline, never to judge accuracy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from perfseer_rt.graph import layout
from training.seernet.data import write_graph_shard
from training.seernet.sample import GraphSample

_N = layout.column_index(layout.NODE_COLUMNS)
_G = layout.column_index(layout.GLOBAL_COLUMNS)
_E = layout.column_index(layout.EDGE_COLUMNS)


def random_graph(rng: np.random.Generator, num_nodes: int, batch: int = 1) -> GraphSample:
    """A random DAG of ``num_nodes`` nodes with plausible-looking features and
    consistent global columns; targets ``latency_ms`` and ``peak_mem_mb``."""
    n = int(num_nodes)
    x = np.zeros((n, len(layout.NODE_COLUMNS)))
    ops = rng.integers(0, len(layout.OP_VOCAB) + 1, size=n)
    x[np.arange(n), ops] = 1.0
    flops = np.exp(rng.normal(14, 2, size=n)) * batch
    weight = np.where(rng.random(n) < 0.5, np.exp(rng.normal(10, 2, size=n)), 0.0)
    mac = flops / np.exp(rng.normal(3, 1, size=n)) + weight
    x[:, _N["flops"]], x[:, _N["weight"]], x[:, _N["mac"]] = flops, weight, mac
    x[:, _N["params"]] = weight / 4
    x[:, _N["ai"]] = flops / mac
    for col, total in (("flops_ratio", flops), ("mac_ratio", mac), ("weight_ratio", weight)):
        x[:, _N[col]] = total / max(total.sum(), 1.0)
    x[:, _N["kernel_h"]] = x[:, _N["kernel_w"]] = rng.choice([0, 1, 3, 5], size=n)
    x[:, _N["out_channels"]] = rng.choice([16, 32, 64, 128, 256], size=n)
    src = [i for i in range(n - 1)] + list(rng.integers(0, max(n - 1, 1), size=n // 3))
    dst = [i + 1 for i in range(n - 1)]
    dst += [int(rng.integers(s + 1, n)) if s + 1 < n else s for s in src[n - 1:]]
    keep = [k for k in range(len(src)) if src[k] < dst[k]]
    edge_index = np.array([[src[k] for k in keep], [dst[k] for k in keep]], dtype=np.int64).reshape(2, -1)
    e = edge_index.shape[1]
    edge_attr = np.zeros((e, len(layout.EDGE_COLUMNS)))
    shape = np.stack([np.full(e, batch), rng.choice([16, 64, 256], size=e),
                      rng.choice([7, 14, 28, 56], size=e), rng.choice([7, 14, 28, 56], size=e)], axis=1)
    edge_attr[:, 1:5] = shape
    edge_attr[:, _E["size"]] = shape.prod(axis=1)
    edge_attr[:, _E["dtype_bytes"]] = 4
    u = np.zeros(len(layout.GLOBAL_COLUMNS))
    u[_G["num_nodes"]], u[_G["num_edges"]] = n, e
    u[_G["density"]] = e / (n * (n - 1)) if n > 1 else 0.0
    for name, values in (("flops", flops), ("mac", mac), ("weight", weight)):
        u[_G[f"{name}_total"]], u[_G[f"{name}_mean"]] = values.sum(), values.mean()
        u[_G[f"{name}_median"]], u[_G[f"{name}_max"]] = np.median(values), values.max()
    u[_G["params_total"]] = weight.sum() / 4
    u[_G["edge_size_mean"]] = edge_attr[:, 0].mean() if e else 0.0
    u[_G["ai_model"]] = flops.sum() / mac.sum()
    u[_G["batch_size"]] = batch
    latency = 2e-9 * flops.sum() + 2e-10 * flops.max() * n ** 0.5 + 0.01 * n
    memory = weight.sum() / 1e6 + 0.5 * batch * np.sqrt(mac.max() / 1e6) + 20.0
    targets = {"latency_ms": float(latency), "peak_mem_mb": float(memory)}
    return GraphSample(x, edge_index, edge_attr, u, targets, arch_id="", family="", batch=batch)


def write_synthetic_dataset(root: str | os.PathLike, num_archs: int = 40, batches=(1, 4, 16),
                            min_nodes: int = 3, max_nodes: int = 30, families: int = 4,
                            graphs_per_shard: int = 500, seed: int = 0, phases: bool = False) -> Path:
    """Write a dataset folder (``records/``, ``graphs/``) of random graphs.

    Architectures are split 2:1:1 (``split_arch``) and family ``fam0`` is
    held out (``split_family = "test"``; val comes from the loader's hash rule).
    With ``phases``, records also carry the memory phases in ``quality``
    (``load_peak_mb``: batch-independent, from the weights; ``run_peak_mb``:
    the synthetic memory) and ``peak_mem_mb`` is their maximum, as the CPU
    profiler reports them.
    """
    rng = np.random.default_rng(seed)
    root = Path(root)
    (root / "records").mkdir(parents=True, exist_ok=True)
    (root / "graphs").mkdir(parents=True, exist_ok=True)
    records, keys, graphs = [], [], []
    for a in range(num_archs):
        arch_id, family = f"arch{a:05d}", f"fam{a % families}"
        split_arch = ("train", "train", "val", "test")[a % 4]
        num_nodes = int(rng.integers(min_nodes, max_nodes + 1))
        arch_seed = int(rng.integers(1 << 31))
        for b in batches:
            g = random_graph(np.random.default_rng(arch_seed), num_nodes, batch=b)
            key = f"{arch_id}/b{b}"
            keys.append(key)
            graphs.append(g)
            quality: dict = {"cv": 0.0}
            if phases:
                weights_mb = float(g.u[_G["weight_total"]]) / 1e6
                quality.update(load_peak_mb=10.0 + 2.5 * weights_mb, run_peak_mb=g.targets["peak_mem_mb"])
                g.targets["peak_mem_mb"] = max(quality["load_peak_mb"], quality["run_peak_mb"])
            records.append({"arch_id": arch_id, "family": family, "spec": {"nodes": num_nodes},
                            "batch": b, "device": "synthetic", "status": "ok", "metrics": g.targets,
                            "quality": quality, "env": {"note": "synthetic"},
                            "split_arch": split_arch,
                            "split_family": "test" if family == "fam0" else "train", "graph_key": key})
    records.append({"arch_id": "failed", "family": "fam1", "batch": 1, "device": "synthetic",
                    "status": "oom", "metrics": {}, "split_arch": "train", "split_family": "train",
                    "graph_key": "missing"})
    for i in range(0, len(keys), graphs_per_shard):
        write_graph_shard(root / "graphs" / f"shard{i // graphs_per_shard:04d}.npz",
                          keys[i:i + graphs_per_shard], graphs[i:i + graphs_per_shard])
    with open(root / "records" / "part0000.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return root
