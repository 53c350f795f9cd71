"""Train SeerNet for one device from a list of GraphSamples (paper settings).

One SeerNet per metric (paper 001), targets in standardized log space,
Adam 1e-3, ReduceLROnPlateau, early stopping on a validation slice of the
training rows: the architectures whose ``arch_id`` hash falls in the first
``val_fraction`` (stable across runs; every batch size of one architecture
lands on the same side). The best-validation weights are kept.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from training.seernet.normalization import Normalization
from training.seernet.sample import GraphSample
from training.seernet.seernet import SeerNet, SeerNetConfig, StackedPredictor, count_parameters
from training.seernet.train import TrainConfig, predict_z, prepare, set_seed, train_model


@dataclass
class FittedPredictor:
    """Trained per-metric SeerNets plus the normalization they expect.

    Attributes:
        model: a SeerNet (one metric) or a StackedPredictor (several).
        norm: fitted on the training part only.
        metrics: output order.
        epochs: metric -> (best epoch, epochs run).
        seconds: training wall time.
        counts: {"train": n, "val": n} graphs used.
    """

    model: torch.nn.Module
    norm: Normalization
    metrics: tuple[str, ...]
    epochs: dict[str, tuple[int, int]] = field(default_factory=dict)
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def parameters(self) -> int:
        return count_parameters(self.model)

    def predict(self, samples: Sequence[GraphSample], batch_size: int = 512) -> np.ndarray:
        """Predictions ``[S, M]`` in the metrics' units."""
        data = prepare(samples, self.norm, self.metrics)
        z = predict_z(self.model, data, batch_size)
        return self.norm.decode_targets(z, self.metrics)


def in_validation(arch_id: str, fraction: float, seed: int = 0) -> bool:
    """Whether ``arch_id`` is in the validation slice (hash below ``fraction``)."""
    h = hashlib.sha256(f"{seed}|{arch_id}".encode()).digest()
    return int.from_bytes(h[:4], "big") / 2 ** 32 < fraction


def split_validation(samples: Sequence[GraphSample], fraction: float = 0.1,
                     seed: int = 0) -> tuple[list[GraphSample], list[GraphSample]]:
    """``(train, val)`` by architecture hash. With fewer than 10 architectures
    there is no useful slice: every sample trains and validates (early
    stopping then watches the training loss)."""
    archs = {s.arch_id for s in samples}
    if len(archs) < 10 or fraction <= 0:
        return list(samples), list(samples)
    val = [s for s in samples if in_validation(s.arch_id, fraction, seed)]
    train = [s for s in samples if not in_validation(s.arch_id, fraction, seed)]
    if not val or not train:
        return list(samples), list(samples)
    return train, val


def fit_seernet(samples: Sequence[GraphSample], metrics: Sequence[str], cfg: TrainConfig,
                val_fraction: float = 0.1, hidden: int = 256, desc: str = "") -> FittedPredictor:
    """Fit the normalization and one SeerNet per metric on ``samples``."""
    metrics = tuple(metrics)
    train, val = split_validation(samples, val_fraction, cfg.seed)
    norm = Normalization.fit(train, metrics)
    t0 = time.perf_counter()
    nets, epochs = [], {}
    for m in metrics:
        tr = prepare(train, norm, metrics).select([m])
        va = prepare(val, norm, metrics).select([m])
        set_seed(cfg.seed)
        net = SeerNet(SeerNetConfig(hidden=hidden, num_outputs=1))
        res = train_model(net, tr, va, cfg, desc=desc or m)
        nets.append(res.model)
        epochs[m] = (res.best_epoch, res.epochs_run)
    model = nets[0] if len(nets) == 1 else StackedPredictor(nets)
    model.eval()
    return FittedPredictor(model, norm, metrics, epochs, time.perf_counter() - t0,
                           {"train": len(train), "val": len(val) if val is not train else 0})
