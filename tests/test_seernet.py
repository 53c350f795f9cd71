"""SeerNet layers and model: shapes, invariances, SynMM, GNPB, PCGrad, normalization."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from perfseer_rt.graph import layout
from training.seernet import (
    GraphSample,
    Normalization,
    SeerNet,
    SeerNetConfig,
    SeerNetMulti,
    collate,
    count_parameters,
)
from training.seernet.pcgrad import pcgrad_backward, project_conflicting
from training.seernet.scatter import (
    scatter_logsumexp,
    scatter_max,
    scatter_mean,
    scatter_sum,
)
from training.seernet.seer_block import SeerBlock
from training.seernet.softmax_aggr import SoftmaxAggregation
from training.seernet.synmm import SynMM
from training.seernet.synthetic import random_graph

FN, FE, FG = len(layout.NODE_COLUMNS), len(layout.EDGE_COLUMNS), len(layout.GLOBAL_COLUMNS)


def _inputs(sizes=((5, 6), (3, 0), (1, 0)), seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, eis, eas = [], [], []
    offset = 0
    for n, e in sizes:
        xs.append(torch.randn(n, FN, generator=g))
        eis.append(torch.randint(0, n, (2, e), generator=g) + offset)
        eas.append(torch.randn(e, FE, generator=g))
        offset += n
    node_batch = torch.cat([torch.full((n,), i) for i, (n, _) in enumerate(sizes)])
    return (torch.cat(xs), torch.cat(eis, dim=1), torch.cat(eas), torch.randn(len(sizes), FG, generator=g),
            node_batch)


def test_scatter_reductions():
    src = torch.tensor([[1.0, -2.0], [3.0, 4.0], [5.0, 0.0]])
    index = torch.tensor([0, 0, 2])
    assert scatter_sum(src, index, 3).tolist() == [[4.0, 2.0], [0.0, 0.0], [5.0, 0.0]]
    assert scatter_mean(src, index, 3).tolist() == [[2.0, 1.0], [0.0, 0.0], [5.0, 0.0]]
    assert scatter_max(src, index, 3)[[0, 2]].tolist() == [[3.0, 4.0], [5.0, 0.0]]
    want = torch.logsumexp(src[:2], dim=0)
    assert torch.allclose(scatter_logsumexp(src, index, 3)[0], want)


def test_softmax_aggregation_matches_definition_and_pyg():
    x = torch.randn(7, 4)
    index = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    got = SoftmaxAggregation()(x, index, 3)
    for gid in range(3):
        xs = x[index == gid]
        assert torch.allclose(got[gid], (torch.softmax(xs, dim=0) * xs).sum(0), atol=1e-6)
    pyg = pytest.importorskip("torch_geometric.nn.aggr")
    assert torch.allclose(got, pyg.SoftmaxAggregation(t=1.0)(x, index, dim_size=3), atol=1e-6)


def test_synmm_is_max_or_mean_for_unit_coefficients():
    x = torch.randn(6, 3)
    index = torch.tensor([0, 0, 1, 1, 1, 2])
    agg = SynMM(3)
    with torch.no_grad():
        agg.weight.copy_(torch.tensor([[1.0] * 3, [0.0] * 3]))
    assert torch.allclose(agg(x, index, 3), scatter_max(x, index, 3))
    with torch.no_grad():
        agg.weight.copy_(torch.tensor([[0.0] * 3, [1.0] * 3]))
    assert torch.allclose(agg(x, index, 3), scatter_mean(x, index, 3))
    agg.reset_parameters()
    assert torch.allclose(agg(x, index, 3), 0.5 * scatter_max(x, index, 3) + 0.5 * scatter_mean(x, index, 3))
    assert repr(agg) == "SynMM(3)"


def test_seer_block_shapes_and_no_edge_mean_is_zero():
    block = SeerBlock(FN, FE, FG, hidden=32)
    x, ei, ea, u, nb = _inputs()
    z = torch.randn(3, FN)
    v, e, z2, u2 = block(x, ei, ea, u, z, nb)
    assert v.shape == (9, 32) and e.shape == (6, 32) and z2.shape == (3, 32) and u2.shape == (3, 32)
    assert "hidden=32" in repr(block)


@pytest.mark.parametrize("cls", [SeerNet, SeerNetMulti])
def test_seernet_shapes(cls):
    model = cls(SeerNetConfig(num_outputs=3)).eval()
    out = model(*_inputs())
    assert out.shape == (3, 3) and torch.isfinite(out).all()


def test_seernet_parameter_count_and_repr():
    model = SeerNet(SeerNetConfig())
    h = 256
    fn = FN - len(layout.OP_VOCAB) - 1  # the op one-hot block is not read (paper 001, 4.2)
    expected = ((FE + 2 * fn) * h + h          # MLP_e
                + (h + fn + FG) * h + h        # MLP_v
                + fn * h                       # W_z (z into the hidden space)
                + 2 * (h * h + h)              # MLP_z, two layers
                + 2 * h                        # SynMM coefficients
                + (2 * h + FG) * h + h         # MLP_u
                + (h * h + h) + (h + 1))       # two-layer head
    assert count_parameters(model) == expected
    assert repr(model).startswith("SeerNet(node_dim=")


def test_seernet_is_invariant_to_node_order_and_graph_order():
    torch.manual_seed(0)
    model = SeerNet(SeerNetConfig(num_outputs=2)).eval()
    x, ei, ea, u, nb = _inputs()
    want = model(x, ei, ea, u, nb)
    perm = torch.randperm(x.shape[0])
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm))
    got = model(x[perm], inv[ei], ea, u, nb[perm])
    assert torch.allclose(got, want, atol=1e-5)
    eperm = torch.randperm(ei.shape[1])
    assert torch.allclose(model(x, ei[:, eperm], ea[eperm], u, nb), want, atol=1e-5)


def test_seernet_graphs_in_a_batch_do_not_interact():
    model = SeerNet(SeerNetConfig()).eval()
    rng = np.random.default_rng(1)
    graphs = [random_graph(rng, n) for n in (4, 1, 9)]
    together = model(*collate(graphs).inputs())
    alone = torch.cat([model(*collate([g]).inputs()) for g in graphs])
    assert torch.allclose(together, alone, atol=1e-5)


def test_gnpb_uses_the_node_features():
    model = SeerNet(SeerNetConfig()).eval()
    x, ei, ea, u, nb = _inputs(((4, 3),))
    z = model.gnpb_init(x, nb, 1)
    assert torch.allclose(z[0], (torch.softmax(x, dim=0) * x).sum(0), atol=1e-6)


def test_seernet_ignores_op_onehot_unless_asked():
    x, ei, ea, u, nb = _inputs()
    k = len(layout.OP_VOCAB) + 1
    assert all(c.startswith("op_") for c in layout.NODE_COLUMNS[:k])
    x2 = x.clone()
    x2[:, :k] = torch.randn(x.shape[0], k)
    model = SeerNet(SeerNetConfig()).eval()
    assert torch.equal(model(x, ei, ea, u, nb), model(x2, ei, ea, u, nb))
    model = SeerNet(SeerNetConfig(drop_op_onehot=False)).eval()
    assert not torch.allclose(model(x, ei, ea, u, nb), model(x2, ei, ea, u, nb))
    with pytest.raises(ValueError, match="drop_op_onehot"):
        SeerNet(SeerNetConfig(node_dim=10))


def test_pcgrad_projects_only_conflicting_gradients():
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])  # dot = -1: conflict
    p1, p2 = project_conflicting([g1, g2], random.Random(0))
    assert torch.allclose(p1, torch.tensor([0.5, 0.5]))   # g1 - (-1/2) g2
    assert torch.allclose(p2, torch.tensor([0.0, 1.0]))   # g2 - (-1/1) g1
    assert abs(float(p1 @ g2)) < 1e-6 and abs(float(p2 @ g1)) < 1e-6
    a, b = torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0])  # no conflict: unchanged
    assert all(torch.equal(p, q) for p, q in zip(project_conflicting([a, b]), [a, b]))


def test_pcgrad_backward_fills_shared_and_head_grads():
    model = SeerNetMulti(SeerNetConfig(hidden=16, num_outputs=2))
    out = model(*_inputs())
    losses = [out[:, 0].pow(2).mean(), (out[:, 1] - 5).pow(2).mean()]
    pcgrad_backward(losses, model.shared_parameters(), model.task_parameters(), random.Random(0))
    assert all(p.grad is not None for p in model.parameters())
    # a head's gradient comes from its own task only
    model.zero_grad()
    out = model(*_inputs())
    out[:, 0].pow(2).mean().backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in model.head[1].parameters())


def _samples(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return [random_graph(rng, int(rng.integers(1, 15)), batch=int(rng.choice([1, 8]))) for _ in range(n)]


def test_normalization_round_trip_and_transform():
    samples = _samples()
    norm = Normalization.fit(samples, ["latency_ms", "peak_mem_mb"])
    again = Normalization.from_json(norm.to_json())
    s = samples[0]
    a, b = norm.apply(s), again.apply(s)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.u, b.u)
    assert np.array_equal(a.edge_attr, b.edge_attr)
    allx = np.concatenate([norm.apply(t).x for t in samples])
    varying = np.concatenate([t.x for t in samples]).std(0) > 0
    assert np.allclose(allx.mean(0), 0, atol=1e-4)
    assert np.allclose(allx.std(0)[varying], 1, atol=1e-3)
    y = np.array([[s.targets["latency_ms"], s.targets["peak_mem_mb"]] for s in samples])
    t = norm.encode_targets(y, ["latency_ms", "peak_mem_mb"])
    assert np.allclose(t.mean(0), 0, atol=1e-9)
    assert np.allclose(again.decode_targets(t, ["latency_ms", "peak_mem_mb"]), y, rtol=1e-12)
    i = layout.NODE_COLUMNS.index("flops")
    assert norm.node.log1p[i] and not norm.node.log1p[layout.NODE_COLUMNS.index("op_Conv")]


def test_normalization_constant_column_is_not_blown_up():
    samples = _samples()
    norm = Normalization.fit(samples, ["latency_ms"])
    j = layout.NODE_COLUMNS.index("pad_h")  # always 0 in the synthetic graphs
    assert norm.node.std[j] == 1.0
    s = samples[0]
    odd = GraphSample(s.x.copy(), s.edge_index, s.edge_attr, s.u, s.targets, "a", "f", 1)
    odd.x[:, j] = 3.0
    assert np.abs(norm.apply(odd).x[:, j]).max() <= 3.0
