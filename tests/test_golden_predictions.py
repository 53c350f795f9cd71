"""The shipped predictors' outputs are pinned: refactors must not change them.

``tests/data/golden_predictions.json`` was recorded with the code at commit
80fb96b (before the typed manifest and the shared ``concat_graphs``):
every shipped device x model on ``examples/resnet18.onnx`` at batch 1 and 8
and on four zoo PerfGraphs (resnet, nb201, mobilenetv2 at batch 4, gpt at
batch 2) taken from the CPU campaign's shards into
``tests/data/golden_graphs.npz``. A deliberate retraining re-records its
device (``python -m tests.record_golden DEVICE``): cpu-amd-epyc-1t was
re-recorded when it was retrained on the re-measured dataset (issue 17); cpu-amd-epyc-1t and the
two NAS-Bench-201 devices were re-recorded when their weights were stored in float16 / int8
(2026-11-27, ``training/seernet/compact_weights.py``; docs/install.md "Size"). Pinned: every seernet predictor (the ONNX
GNNs); the GPU priors (kind ``gpu-prior``, no ONNX predictor) are covered by
tests/test_gpu_prior.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfseer_rt.graph import extract
from perfseer_rt.predict.registry import predictors
from perfseer_rt.predict.seernet_run import run_predictor
from training.seernet.data import read_graph_shard

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parents[1]
GOLDEN = json.loads((DATA / "golden_predictions.json").read_text())


class _Arrays:
    """A shard's graph as the predictor sees it."""

    def __init__(self, arrays):
        self.x, self.edge_index, self.edge_attr, self.u = arrays

    @property
    def num_nodes(self) -> int:
        return len(self.x)


def load_graphs() -> dict:
    """The pinned graphs by name."""
    out = {f"examples/resnet18.onnx@b{b}": extract(ROOT / "examples/resnet18.onnx", batch=b)
           for b in (1, 8)}
    out.update({k: _Arrays(v) for k, v in read_graph_shard(DATA / "golden_graphs.npz").items()})
    return out


@pytest.fixture(scope="module")
def graphs():
    return load_graphs()


def test_every_shipped_model_is_pinned():
    shipped = {f"{d}/{m}" for d, p in predictors().items() if p.kind == "seernet"
               for m in p.model_names}
    assert shipped == set(GOLDEN)


@pytest.mark.parametrize("entry", sorted(GOLDEN))
def test_predictions_unchanged(entry, graphs):
    device, model = entry.split("/")
    pred = predictors()[device]
    names = list(GOLDEN[entry])
    got = run_predictor(pred, [graphs[n] for n in names], model)
    want = np.array([GOLDEN[entry][n] for n in names])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
