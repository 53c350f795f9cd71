"""Fitting the learned layer (:mod:`training.gpulearned.model`) on labels'
kernel data (:mod:`training.gpulearned.tables`), and cross-validation.

Loss: the mean squared log error of the step time over labels, each label
weighted by ``1 / n ** group_power`` where ``n`` is the labels of its
(source, GPU, mode) group: at 1 every group counts the same in all (the
large timm files would otherwise drown the few transformer runs), at 0
every label does.
Adam, full batch over labels in chunks, a fixed number of epochs, weight
decay; seeds fixed.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpulearned.model import KernelMLP, LayerConfig, StepModel
from training.gpulearned.tables import LabelData


@dataclass
class FitConfig:
    epochs: int = 300
    lr: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0
    #: exponent of the group weighting (module doc)
    group_power: float = 1.0
    layer: LayerConfig = field(default_factory=LayerConfig)
    #: feature columns the layer does not see (names of
    #: :func:`perfseer_rt.gpu.learned_features.names`)
    drop: tuple[str, ...] = ()


def columns(cfg: FitConfig, width: int) -> list[int]:
    """Indices of the columns a fit with ``cfg`` reads from kernel data
    ``width`` columns wide: the named features less ``cfg.drop``, and any
    columns past the named ones (an ablation's extras).

    Raises:
        ValueError: ``cfg.drop`` names no feature.
    """
    names = LF.names()
    unknown = [d for d in cfg.drop if d not in names]
    if unknown:
        raise ValueError(f"no feature named {', '.join(unknown)}; features: {', '.join(names)}")
    return [i for i, n in enumerate(names) if n not in cfg.drop] + list(range(len(names), width))


@dataclass
class Packed:
    x: torch.Tensor
    roof: torch.Tensor
    count: torch.Tensor
    seg: torch.Tensor
    launches: torch.Tensor
    host: torch.Tensor


def pack(data: Sequence[LabelData], cols: Sequence[int] | None = None) -> Packed:
    """The labels' kernel data as one set of tensors (``seg``: label index
    of each kernel row; ``cols``: the feature columns kept, default all)."""
    seg = np.concatenate([np.full(len(d.roof), i) for i, d in enumerate(data)])
    x = np.concatenate([d.x for d in data])
    return Packed(torch.from_numpy(x if cols is None else np.ascontiguousarray(x[:, cols])).float(),
                  torch.from_numpy(np.concatenate([d.roof for d in data])).double(),
                  torch.from_numpy(np.concatenate([d.count for d in data])).double(),
                  torch.from_numpy(seg).long(),
                  torch.tensor([d.launches for d in data], dtype=torch.float64),
                  torch.tensor([d.host_ms for d in data], dtype=torch.float64))


def group_weights(groups: Sequence[str], power: float = 1.0) -> np.ndarray:
    """1 / (labels in the label's group) ** ``power``, normalised to mean 1."""
    n = Counter(groups)
    w = np.array([float(n[g]) ** -power for g in groups])
    return w / w.mean()


def fit(data: Sequence[LabelData], y_ms: np.ndarray, groups: Sequence[str], cfg: FitConfig,
        progress: bool = False) -> StepModel:
    """A :class:`StepModel` fitted on ``data`` with measured ``y_ms``."""
    torch.manual_seed(cfg.seed)
    cols = columns(cfg, data[0].x.shape[1])
    p = pack(data, cols)
    mean, std = p.x.mean(0), p.x.std(0)
    model = StepModel(KernelMLP(p.x.shape[1], cfg.layer, mean, std), cols)
    y = torch.log(torch.tensor(y_ms, dtype=torch.float64))
    w = torch.tensor(group_weights(groups, cfg.group_power), dtype=torch.float64)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    decay = [q for n, q in model.named_parameters() if "weight" in n]
    x = p.x
    steps = tqdm(range(cfg.epochs), desc="fit", disable=not progress)
    for _ in steps:
        opt.zero_grad()
        pred = model.step_ms(x, p.roof, p.count, p.seg, p.launches, p.host)
        loss = (w * (torch.log(pred) - y) ** 2).mean() + cfg.weight_decay * sum((q ** 2).sum() for q in decay)
        loss.backward()
        opt.step()
        if progress:
            steps.set_postfix(loss=float(loss))
    return model


def predict(model: StepModel, data: Sequence[LabelData]) -> np.ndarray:
    """Step ms of each label's kernel data (the columns ``model`` was fitted on)."""
    p = pack(data, model.columns)
    with torch.no_grad():
        return model.step_ms(p.x, p.roof, p.count, p.seg, p.launches, p.host).numpy()


def fold_key(cfg: FitConfig, ids: Sequence[str], y_ms: np.ndarray, train: np.ndarray, test: np.ndarray) -> str:
    """A fold's identity: the fit setting, and which labels (``ids``, with
    their measured ms) it trains on and predicts."""
    setting = asdict(cfg)
    if not setting["drop"]:
        del setting["drop"]  # folds kept before the setting existed stay valid
    doc = {"cfg": setting,
           "train": sorted(f"{i}={v:.6g}" for i, v, t in zip(ids, y_ms, train) if t),
           "test": [i for i, t in zip(ids, test) if t]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def cross_validate(data: Sequence[LabelData], y_ms: np.ndarray, groups: Sequence[str],
                   folds: Sequence[str], cfg: FitConfig, progress: bool = True,
                   store: Path | None = None, ids: Sequence[str] | None = None) -> np.ndarray:
    """Out-of-fold predictions: for each distinct value of ``folds``, fit on
    the labels of the other values and predict that value's labels.

    With ``store`` (and ``ids``, one stable name per label), each fold's
    predictions are kept there under :func:`fold_key`, so a cut-off run
    resumes and another run with the same fold reuses it."""
    if store is not None and (ids is None or len(ids) != len(data)):
        raise ValueError("a fold store needs one id per label")
    out = np.full(len(data), np.nan)
    keys = sorted(set(folds))
    for key in tqdm(keys, desc="folds", disable=not progress):
        test = np.array([f == key for f in folds])
        train = ~test
        if not train.any():
            continue
        path = store / f"{fold_key(cfg, ids, y_ms, train, test)}.npy" if store is not None and ids else None
        if path is not None and path.is_file():
            out[test] = np.load(path)
            continue
        tr = [d for d, t in zip(data, train) if t]
        model = fit(tr, y_ms[train], [g for g, t in zip(groups, train) if t], cfg)
        out[test] = predict(model, [d for d, t in zip(data, test) if t])
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            np.save(buf, out[test])
            atomic_write_bytes(path, buf.getvalue())
    return out
