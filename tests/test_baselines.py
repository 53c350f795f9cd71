"""The baselines: shapes, and the properties that define each of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perfseer_rt.graph import layout
from training.seernet import collate
from training.seernet.baselines import GlobalGBM, KernelAdditive, MLPNode
from training.seernet.baselines.gbm import FLOPS_COLUMN
from training.seernet.synthetic import random_graph

FN, FG = len(layout.NODE_COLUMNS), len(layout.GLOBAL_COLUMNS)


def _graphs(sizes=(4, 1, 9), seed=0):
    rng = np.random.default_rng(seed)
    return [random_graph(rng, n) for n in sizes]


def _batch(sizes=(4, 1, 9), seed=0):
    return collate(_graphs(sizes, seed))


def _normalize(b):
    b.x = torch.log1p(b.x.abs())
    b.edge_attr = torch.log1p(b.edge_attr.abs())
    b.u = torch.log1p(b.u.abs())
    return b


@pytest.mark.parametrize("name", ["pmgns", "eagle"])
def test_pyg_baselines_shapes(name):
    pytest.importorskip("torch_geometric")
    from training.seernet.baselines import PMGNS, Eagle
    model = (PMGNS(FN, FG, num_outputs=2) if name == "pmgns" else Eagle(FN, num_outputs=2)).eval()
    b = _normalize(_batch())
    out = model(*b.inputs())
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    # graphs in one batch do not interact
    alone = torch.cat([model(*_normalize(collate([g])).inputs()) for g in _graphs()])
    assert torch.allclose(out, alone, atol=1e-5)


def test_mlp_node_pads_and_truncates():
    torch.manual_seed(0)
    model = MLPNode(FN, max_nodes=5, num_outputs=1).eval()
    b = _normalize(_batch((4, 1, 9)))
    out = model(*b.inputs())
    assert out.shape == (3, 1)
    # the 9-node graph is cut to its first 5 nodes
    nine = _normalize(_batch((9,)))
    first5 = nine.x[:5], nine.edge_index[:, :0], nine.edge_attr[:0], nine.u, torch.zeros(5, dtype=torch.long)
    assert torch.allclose(model(*nine.inputs()), model(*first5), atol=1e-6)


def test_kernel_additive_sums_node_costs():
    model = KernelAdditive(FN, target_mean=[0.0], target_std=[1.0]).eval()
    b = _normalize(_batch((6,)))
    one = model(*b.inputs())
    # the same nodes twice in one graph cost twice as much: log(2 y)
    x2 = torch.cat([b.x, b.x])
    two = model(x2, b.edge_index, b.edge_attr, b.u, torch.zeros(12, dtype=torch.long))
    assert torch.allclose(two, one + np.log(2.0), atol=1e-5)
    costs = torch.exp(model.kernel(b.x)).sum()
    assert torch.allclose(one[0, 0], torch.log(costs), atol=1e-5)


def test_global_gbm_learns_a_function_of_the_globals():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(300, FG))
    t = np.stack([u[:, 3] * 2 + u[:, 18], np.where(rng.random(300) < 0.2, np.nan, u[:, 0])], axis=1)
    gbm = GlobalGBM(max_iter=60, learning_rate=0.2).fit(u[:200], t[:200], u[200:250], t[200:250])
    pred = gbm.predict(u[250:])
    assert pred.shape == (50, 2)
    assert np.corrcoef(pred[:, 0], t[250:, 0])[0, 1] > 0.9
    assert gbm.num_parameters() > 0


def test_global_gbm_extrapolates_time_per_flop_beyond_the_largest_model():
    """Trees alone cannot predict past the largest training target; with the
    per-FLOP offset a model 10x larger than any seen gets ~10x the time."""
    rng = np.random.default_rng(0)
    u = np.abs(rng.normal(size=(400, FG)))
    u[:, FLOPS_COLUMN] = 10 ** rng.uniform(7, 9, 400)          # training: 1e7..1e9 FLOPs
    t = np.log(u[:, [FLOPS_COLUMN]] * 1e-9 * (1 + 0.1 * u[:, [0]]))  # log ms, ~1 ms per GFLOP
    big = u[:50].copy()
    big[:, FLOPS_COLUMN] = 1e10                                 # 10x the largest seen
    truth = np.log(big[:, [FLOPS_COLUMN]] * 1e-9 * (1 + 0.1 * big[:, [0]]))
    plain = GlobalGBM(max_iter=200).fit(u, t)
    per_flop = GlobalGBM(max_iter=200, offset_scale=[1.0]).fit(u, t)
    assert np.abs(per_flop.predict(big) - truth).max() < 0.1     # within ~10 %
    assert (truth - plain.predict(big)).min() > 1.5                # stuck near 1e9: > 4x too low
    with pytest.raises(ValueError, match="offset_scale"):
        GlobalGBM(offset_scale=[1.0, 0.0]).fit(u, t)


def test_global_gbm_learns_memory_per_byte_of_weights_and_live_activations():
    """Peak memory scales with weights plus the activations alive at once
    (SCALES): a model with 10x the bytes of any seen gets ~10x the memory,
    and time keeps its per-FLOP scale in the same GBM."""
    rng = np.random.default_rng(0)
    w_col, a_col = layout.GLOBAL_COLUMNS.index("weight_total"), layout.GLOBAL_COLUMNS.index("act_live_peak")
    u = np.abs(rng.normal(size=(400, FG)))
    u[:, FLOPS_COLUMN] = 10 ** rng.uniform(7, 9, 400)
    u[:, w_col] = 10 ** rng.uniform(6, 8, 400)          # 1-100 MB of weights
    u[:, a_col] = 10 ** rng.uniform(5, 8, 400)
    mem = (1.5 * u[:, w_col] + 2.0 * u[:, a_col]) / 2 ** 20 * (1 + 0.1 * u[:, 0])   # MiB
    t = np.log(np.stack([u[:, FLOPS_COLUMN] * 1e-9, mem], 1))
    big = u[:50].copy()
    big[:, w_col] = big[:, a_col] = 1e9                   # 10x the largest seen
    truth = np.log((1.5 * big[:, w_col] + 2.0 * big[:, a_col]) / 2 ** 20 * (1 + 0.1 * big[:, 0]))
    gbm = GlobalGBM(max_iter=200, offset_scale=[1.0, 1.0], metrics=["latency_ms", "peak_mem_mb"]).fit(u, t)
    assert np.abs(gbm.predict(big)[:, 1] - truth).max() < 0.15   # within ~15 %
    plain = GlobalGBM(max_iter=200).fit(u, t)
    assert (truth - plain.predict(big)[:, 1]).min() > 1.5        # trees alone: > 4x too low
