"""Few-shot adaptation: pre-train on many devices, fit a new one from k samples.

Pre-training (multi-device SeerNet). One SeerNet-Multi
(:class:`training.seernet.seernet_multi.SeerNetMulti`): the GNPB init and the
SeerBlock are shared, every pre-training device has its own two-layer head
predicting its standardized log latency. A training graph is an
architecture at one batch size; it carries the latencies of the devices
measured at that batch (the others are missing and masked out of the loss,
:func:`training.seernet.train.metric_losses`). Loss: the mean over devices of
the per-device MSE (plain sum of the task losses; PCGrad with a dozen tasks
would cost a dozen backward passes per step). Early stopping on a 10 %
architecture slice of the pool.

Adaptation (a new device from k measurements). The pre-trained network is
frozen; an architecture is described by the outputs of the heads of the
pre-training devices measured at the new device's batch size (their
predicted standardized log latencies, on the graph at that batch size; all
heads when no pre-training device has that batch size). A ridge regression
from these to the new device's log latency is fitted on the k samples, its
penalty chosen by leave-one-out error on those k samples. No test data and
no other sample of the new device is used.

This recipe was chosen over three others (adding the 256-wide graph
embedding ``u'``, adding log FLOPs/nodes/MAC, using the heads of every
device) by the Spearman correlation on the held-out devices' *pool*
architectures outside the k samples, never on the test set; the embedding
hurt at k <= 20 and helped nowhere (``reports/nb201/README.md``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from training.byod.fit import split_validation
from training.seernet.normalization import Normalization
from training.seernet.sample import GraphSample
from training.seernet.seernet import SeerNetConfig
from training.seernet.seernet_multi import SeerNetMulti
from training.seernet.train import TrainConfig, prepare, set_seed, train_model

ALPHAS = np.logspace(-3, 4, 29)


@dataclass
class Pretrained:
    """A multi-device SeerNet and what it was trained on."""

    model: SeerNetMulti
    norm: Normalization
    metrics: tuple[str, ...]
    info: dict = field(default_factory=dict)

    @torch.no_grad()
    def features(self, samples: Sequence[GraphSample], batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
        """``(heads [S, D], embedding [S, hidden])`` of ``samples`` (frozen
        network; the embedding is kept for analysis)."""
        data = prepare(samples, self.norm, ())
        self.model.eval()
        heads, embs = [], []
        for b in data.eval_batches(batch_size):
            h = self.model.embed(*b.inputs())
            embs.append(h.numpy())
            heads.append(torch.cat([head(h) for head in self.model.head], dim=-1).numpy())
        return np.concatenate(heads).astype(np.float64), np.concatenate(embs).astype(np.float64)


def pretrain(samples: Sequence[GraphSample], metrics: Sequence[str], cfg: TrainConfig,
             hidden: int = 256) -> Pretrained:
    """Train one SeerNet-Multi on ``samples`` (targets: one metric per device)."""
    metrics = tuple(metrics)
    train, val = split_validation(samples, 0.1, cfg.seed)
    norm = Normalization.fit(train, metrics)
    set_seed(cfg.seed)
    model = SeerNetMulti(SeerNetConfig(hidden=hidden, num_outputs=len(metrics)))
    t0 = time.perf_counter()
    res = train_model(model, prepare(train, norm, metrics), prepare(val, norm, metrics),
                      TrainConfig(**{**cfg.to_dict(), "pcgrad": False}), desc="pre-train")
    return Pretrained(res.model, norm, metrics,
                      {"graphs_train": len(train), "graphs_val": len(val), "best_epoch": res.best_epoch,
                       "epochs": res.epochs_run, "best_val_loss": res.best_val,
                       "seconds": time.perf_counter() - t0,
                       "parameters": sum(p.numel() for p in res.model.parameters())})


@dataclass
class RidgeHead:
    """The adapted head: standardize the features, ridge, log latency out."""

    alpha: float
    loo_mse: float
    mu: np.ndarray
    sd: np.ndarray
    coef: np.ndarray
    intercept: float

    def predict_log(self, features: np.ndarray) -> np.ndarray:
        return ((features - self.mu) / self.sd) @ self.coef + self.intercept


def fit_ridge(features: np.ndarray, latency: np.ndarray) -> RidgeHead:
    """Fit the ridge head on k samples (``features [k, F]``, latency in its
    unit); the penalty is chosen by leave-one-out error over :data:`ALPHAS`."""
    from sklearn.linear_model import RidgeCV

    y = np.log(np.asarray(latency, dtype=np.float64))
    f = np.asarray(features, dtype=np.float64)
    mu, sd = f.mean(0), f.std(0)
    sd = np.where(sd < 1e-9, 1.0, sd)
    r = RidgeCV(alphas=ALPHAS, fit_intercept=True).fit((f - mu) / sd, y)
    return RidgeHead(float(r.alpha_), -float(r.best_score_), mu, sd, r.coef_.copy(), float(r.intercept_))
