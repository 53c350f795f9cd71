"""A fake measuring worker for tests of the campaign loop, store and Ray path.

It measures nothing: each configuration gets a record whose "latency" is a
deterministic function of its batch size and a small random PerfGraph-shaped
graph, so tests exercise resume, de-duplication, OOM labels and worker loss
quickly. Never used outside tests.
"""

from __future__ import annotations

import os
import time

import numpy as np

from perfseer_rt.graph import layout
from training.campaign.worker import graph_key

CPU = {"cpu_model": "AMD EPYC", "cpu_vendor": "AuthenticAMD", "cpu_family": "25",
       "cpu_model_id": "17"}


class FakeWorker:
    """``run(item, upcoming, deadline)`` like :class:`training.campaign.worker.DeviceWorker`.

    Args:
        delay_s: seconds per configuration (so a worker can be killed mid-way).
        oom_from: batch sizes from this one on are status "oom".
        env: the record's env block; method: its peak-memory method.
    """

    def __init__(self, index: int = 0, delay_s: float = 0.0, oom_from: int | None = None,
                 env: dict | None = None, method: str = "vmhwm+mmap64k", target: str = "cpu-inference"):
        self.index, self.delay_s, self.oom_from = index, delay_s, oom_from
        self.env, self.method, self.target = dict(env or CPU), method, target
        self.pid = os.getpid()

    def run(self, item, upcoming=None, deadline=None):
        out = []
        for batch in item.batches or (1, 2):
            if batch in item.skip:
                continue
            time.sleep(self.delay_s)
            oom = self.oom_from is not None and batch >= self.oom_from
            g = fake_graph(4 + batch % 5, batch)
            key = graph_key(item.family, item.arch_id, batch)
            out.append(({"arch_id": item.arch_id, "family": item.family, "batch": batch,
                         "kind": "inference", "target": self.target, "device": "fake",
                         "status": "oom" if oom else "ok", "reference": item.reference,
                         "metrics": {} if oom else {"latency_ms": 1.0 + batch, "peak_mem_mb": 2.0 * batch},
                         "quality": {"peak_mem_method": self.method}, "env": self.env,
                         "graph_key": key, "split_arch": "train", "split_family": "train",
                         "worker_pid": self.pid}, g))
        return out

    def close(self):
        pass


class _Graph:
    def __init__(self, n: int, batch: int):
        rng = np.random.default_rng(n * 100 + batch)
        self.x = rng.random((n, len(layout.NODE_COLUMNS)))
        self.edge_index = np.array([np.arange(n - 1), np.arange(1, n)], dtype=np.int64)
        self.edge_attr = rng.random((n - 1, len(layout.EDGE_COLUMNS)))
        self.u = rng.random(len(layout.GLOBAL_COLUMNS))
        self.u[layout.GLOBAL_COLUMNS.index("batch_size")] = batch


def fake_graph(n: int, batch: int) -> _Graph:
    """A chain of ``n`` nodes with random features (a PerfGraph's arrays)."""
    return _Graph(n, batch)


class FakeFactory:
    """Picklable ``index -> FakeWorker`` for the Ray executor."""

    def __init__(self, **kw):
        self.kw = kw

    def __call__(self, index: int) -> FakeWorker:
        return FakeWorker(index, **self.kw)
