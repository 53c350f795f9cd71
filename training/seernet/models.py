"""The model registry: names -> how to build each predictor.

Plain data in code: :data:`MODELS` maps a name to a builder that takes the
problem (metrics, normalization, training graphs) and returns the module and
the keyword config that rebuilds it (stored in checkpoints).
"""

from __future__ import annotations

import importlib
from typing import Callable, Sequence

import numpy as np
from torch import nn

from perfseer_rt.graph import layout
from training.seernet.normalization import Normalization
from training.seernet.sample import GraphSample
from training.seernet.seernet import SeerNet, SeerNetConfig
from training.seernet.seernet_multi import SeerNetMulti

FN, FE, FG = len(layout.NODE_COLUMNS), len(layout.EDGE_COLUMNS), len(layout.GLOBAL_COLUMNS)

#: Display names, in report order.
DISPLAY = {
    "seernet": "SeerNet", "seernet_multi": "SeerNet-Multi", "mlp_node": "MLP-Node",
    "pmgns": "PMGNS", "eagle": "Eagle", "kernel_additive": "nn-Meter-style (kernel-additive)",
    "gbm": "Global GBM",
}
MODEL_NAMES: tuple[str, ...] = tuple(DISPLAY)
#: Models trained on all metrics at once (the others: one model per metric).
MULTI_METRIC = frozenset({"seernet_multi"})
#: Models that are not torch modules.
NON_TORCH = frozenset({"gbm"})


def default_config(name: str, metrics: Sequence[str], norm: Normalization,
                   train: Sequence[GraphSample]) -> dict:
    """Constructor keywords of model ``name`` for this problem."""
    m = len(metrics)
    if name in ("seernet", "seernet_multi"):
        return SeerNetConfig(FN, FE, FG, 256, m).to_dict()
    if name == "mlp_node":
        nodes = np.array([s.num_nodes for s in train])
        return dict(node_dim=FN, max_nodes=int(min(nodes.max(), 512)), num_outputs=m)
    if name == "pmgns":
        return dict(node_dim=FN, global_dim=FG, num_outputs=m)
    if name == "eagle":
        return dict(node_dim=FN, num_outputs=m)
    if name == "kernel_additive":
        return dict(node_dim=FN, target_mean=[norm.target_mean[k] for k in metrics],
                    target_std=[norm.target_std[k] for k in metrics],
                    init_nodes=float(np.mean([s.num_nodes for s in train])))
    if name == "gbm":
        return {}
    raise KeyError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")


def build(name: str, config: dict) -> nn.Module:
    """The torch module ``name`` from its config (see :func:`default_config`)."""
    builders: dict[str, Callable[..., nn.Module]] = {
        "seernet": lambda **c: SeerNet(SeerNetConfig(**c)),
        "seernet_multi": lambda **c: SeerNetMulti(SeerNetConfig(**c)),
        "mlp_node": _lazy("training.seernet.baselines.mlp_node", "MLPNode"),
        "pmgns": _lazy("training.seernet.baselines.pmgns", "PMGNS"),
        "eagle": _lazy("training.seernet.baselines.eagle", "Eagle"),
        "kernel_additive": _lazy("training.seernet.baselines.kernel_additive", "KernelAdditive"),
    }
    if name not in builders:
        raise KeyError(f"{name!r} is not a torch model; torch models: {', '.join(builders)}")
    return builders[name](**config)


def _lazy(module: str, cls: str) -> Callable[..., nn.Module]:
    def make(**config):  # lazy: sklearn / torch_geometric baselines load when named
        return getattr(importlib.import_module(module), cls)(**config)
    return make
