"""The training loop shared by SeerNet, SeerNet-Multi and the torch baselines.

Paper 001's settings by default (section 4.1): Adam, learning rate 1e-3,
batch 128 graphs, MSE on standardized log targets, learning rate halved
after 5 epochs without validation improvement down to 1e-6, at most 500
epochs. We also stop early after ``early_stop`` epochs without improvement
and keep the best-validation weights.
"""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from training.seernet import models
from training.seernet.normalization import Normalization
from training.seernet.pcgrad import MultiTask, pcgrad_backward
from training.seernet.sample import GraphBatch, GraphSample, collate


@dataclass
class TrainConfig:
    epochs: int = 500           # at most (paper: 500)
    batch_size: int = 128       # graphs per step (paper: 128)
    lr: float = 1e-3            # Adam initial learning rate (paper)
    lr_factor: float = 0.5      # ReduceLROnPlateau: halve ...
    lr_patience: int = 5        # ... after 5 epochs without val improvement
    min_lr: float = 1e-6        # ... down to 1e-6
    early_stop: int = 40        # stop after this many epochs without val improvement
    weight_decay: float = 0.0
    pcgrad: bool = False        # PCGrad over metrics (SeerNet-Multi)
    seed: int = 0
    threads: int | None = None  # torch intra-op threads; None = leave as is
    eval_batch_size: int = 512
    progress: bool = True       # a tqdm bar per model on stderr

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PreparedSet:
    """Normalized samples plus their targets in standardized log space."""

    samples: list[GraphSample]
    metrics: tuple[str, ...]
    targets: np.ndarray  # [S, M], NaN = missing
    _eval_batches: list[GraphBatch] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.samples)

    def batch(self, idx: Sequence[int] | np.ndarray) -> GraphBatch:
        b = collate([self.samples[i] for i in idx], ())
        b.y = torch.from_numpy(self.targets[np.asarray(idx)]).float()
        b.metrics = self.metrics
        return b

    def select(self, metrics: Sequence[str]) -> "PreparedSet":
        """Only ``metrics``, and only the samples that have at least one of them."""
        cols = [self.metrics.index(m) for m in metrics]
        t = self.targets[:, cols]
        keep = np.isfinite(t).any(axis=1)
        return PreparedSet([s for s, k in zip(self.samples, keep) if k], tuple(metrics), t[keep])

    def eval_batches(self, size: int) -> list[GraphBatch]:
        """Fixed, cached batches in sample order (for validation and prediction)."""
        if self._eval_batches is None:
            self._eval_batches = [self.batch(range(i, min(i + size, len(self))))
                                  for i in range(0, len(self), size)]
        return self._eval_batches


def prepare(samples: Sequence[GraphSample], norm: Normalization, metrics: Sequence[str]) -> PreparedSet:
    """Normalize features once and encode the targets."""
    y = np.array([[s.targets.get(m, np.nan) for m in metrics] for s in samples],
                 dtype=np.float64).reshape(len(samples), len(metrics))
    return PreparedSet([norm.apply(s) for s in samples], tuple(metrics),
                       norm.encode_targets(y, metrics))


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def metric_losses(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-metric MSE ``[M]`` over the graphs that have the metric."""
    mask = torch.isfinite(y)
    diff = torch.where(mask, pred - torch.nan_to_num(y), torch.zeros_like(pred))
    return diff.pow(2).sum(0) / mask.sum(0).clamp(min=1)


@dataclass
class TrainResult:
    model: nn.Module
    best_epoch: int
    best_val: float
    epochs_run: int
    seconds: float
    history: list[dict]


def train_model(model: nn.Module, train: PreparedSet, val: PreparedSet, cfg: TrainConfig,
                desc: str = "") -> TrainResult:
    """Train ``model`` on ``train``; keep the weights of the best ``val`` loss."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    task_rng = random.Random(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode="min", factor=cfg.lr_factor, patience=cfg.lr_patience, min_lr=cfg.min_lr)
    pcgrad = model if cfg.pcgrad and isinstance(model, MultiTask) and len(train.metrics) > 1 else None
    best = (float("inf"), 0, copy.deepcopy(model.state_dict()))
    history: list[dict] = []
    start = time.perf_counter()
    bar = tqdm(range(1, cfg.epochs + 1), desc=desc or type(model).__name__, file=sys.stderr,
               disable=not cfg.progress, leave=False, dynamic_ncols=True)
    for epoch in bar:
        t0 = time.perf_counter()
        model.train()
        total, steps = 0.0, 0
        for idx in _shuffled_batches(len(train), cfg.batch_size, rng):
            b = train.batch(idx)
            losses = metric_losses(model(*b.inputs()), b.y)
            present = torch.isfinite(b.y).any(0)
            if not present.any():
                continue
            opt.zero_grad(set_to_none=True)
            if pcgrad is not None:
                pcgrad_backward([losses[m] for m in range(len(losses)) if present[m]],
                                pcgrad.shared_parameters(), pcgrad.task_parameters(), task_rng)
            else:
                losses[present].mean().backward()
            opt.step()
            total += float(losses[present].mean().detach())
            steps += 1
        val_loss = evaluate_loss(model, val, cfg.eval_batch_size)
        sched.step(val_loss)
        lr = opt.param_groups[0]["lr"]
        history.append({"epoch": epoch, "train_loss": total / max(steps, 1), "val_loss": val_loss,
                        "lr": lr, "seconds": time.perf_counter() - t0})
        if val_loss < best[0]:
            best = (val_loss, epoch, copy.deepcopy(model.state_dict()))
        bar.set_postfix(train=f"{total / max(steps, 1):.4f}", val=f"{val_loss:.4f}", lr=f"{lr:.1e}")
        if epoch - best[1] >= cfg.early_stop:
            break
    bar.close()
    model.load_state_dict(best[2])
    model.eval()
    return TrainResult(model, best[1], best[0], len(history), time.perf_counter() - start, history)


def _shuffled_batches(n: int, size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    order = rng.permutation(n)
    for i in range(0, n, size):
        yield order[i:i + size]


@torch.no_grad()
def evaluate_loss(model: nn.Module, data: PreparedSet, batch_size: int = 512) -> float:
    """Mean over metrics of the MSE in standardized log space."""
    model.eval()
    pred = predict_z(model, data, batch_size)
    y = data.targets
    mask = np.isfinite(y)
    per_metric = [np.mean((pred[mask[:, m], m] - y[mask[:, m], m]) ** 2)
                  for m in range(y.shape[1]) if mask[:, m].any()]
    return float(np.mean(per_metric)) if per_metric else float("nan")


@torch.no_grad()
def predict_z(model: nn.Module, data: PreparedSet, batch_size: int = 512) -> np.ndarray:
    """Predictions ``[S, M]`` in standardized log space."""
    model.eval()
    outs = [model(*b.inputs()).numpy() for b in data.eval_batches(batch_size)]
    return np.concatenate(outs).astype(np.float64)


# ----------------------------------------------------------------- checkpoints
def save_checkpoint(path: str | os.PathLike, name: str, config: dict, model: nn.Module,
                    norm: Normalization, metrics: Sequence[str], train_cfg: TrainConfig,
                    **extra) -> None:
    """Weights plus everything needed to rebuild and use the model."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(path) + ".tmp")
    torch.save({"model": name, "config": config, "state_dict": model.state_dict(),
                "normalization": norm.to_dict(), "metrics": list(metrics),
                "train_config": train_cfg.to_dict(), **extra}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike) -> tuple[nn.Module, Normalization, list[str], dict]:
    """``(model, normalization, metrics, raw checkpoint)``; loads no pickled code."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model = models.build(ckpt["model"], ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    return model, Normalization.from_dict(ckpt["normalization"]), list(ckpt["metrics"]), ckpt
