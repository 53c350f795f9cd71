"""Few-shot latency prediction for a new device from k measurements (HELP protocol).

Pre-training. A small multi-device network maps an architecture's encoding
(:func:`encode`: the one-hot operation on each of the cell's 6 edges, the
count of each operation, whether ``none`` edges cut the cell and how many dead
operations it runs) to the standardized log latency of every pre-training
device, one output per device. It learns from the pool architectures
(0..899) of the pre-training devices only; an ensemble of ``seeds`` networks
is averaged. The outputs are the architecture's *device profile*: where it
ranks on each known device.

Two views. Every pre-training device runs a cell as written (PyTorch's eager
cell: dead operations included), but a device whose runtime drops dead code
runs less. With ``pruned_twins`` each cell is also profiled as its pruned cell
(:func:`protocol.pruned_cell`), and every fit on k samples first chooses the
view with the lower leave-one-out error (:func:`choose_view`).

Adaptation. A new device is seen only through k measured architectures:
either random ones from its trimmed pool (HELP's protocol) or the first k of
a *reference set* chosen from the pre-training devices alone
(:mod:`benchmarks.nb201.reference`). Three adapters map the device profile to
the new device's log latency, all fitted in milliseconds:

- ``similarity`` (HELP's idea of a hardware embedding: a device is what its
  latencies on some architectures are): each pre-training device is weighted
  by ``exp(t * rho)``, ``rho`` the Spearman correlation of its profile with
  the k measured latencies; the weighted profile is fitted to the k log
  latencies by a line. The temperature ``t`` is chosen by leave-one-out
  error on the k samples.
- ``ridge``: log latency = a + b * mean profile + c . (profile - mean profile),
  ridge penalty on ``c`` only (shrinks toward "an average device", not toward
  a constant), penalty chosen by leave-one-out error on the k samples.
- ``simridge-A``: as ``ridge``, but centred on the similarity-weighted profile
  ``g`` instead of the mean: a + b * g + c . (profile - g), fixed penalty A on
  ``c``. It can leave the span of "one known device, rescaled" when the k
  samples ask for it, which a device unlike every pre-training device needs.

Which adapter serves which k, for random and for reference samples, is chosen
on *validation folds* of the non-test devices (never a test device): each
validation device held out of a pre-training on the other non-test devices
(leave one device out), and each kind of device (GPU, CPU, phone) held out
together (leave one kind out: a device unlike every pre-training device). The
adapter with the best mean Spearman over the two families, scored on each
held-out device's trimmed pool outside the k samples, is chosen. The test
devices are then held out of the final pre-training and scored on HELP's
trimmed test set (900..1899).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import torch

from benchmarks.nb201 import protocol
from benchmarks.nb201.help_data import HelpData

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
SHOTS = (10, 20, 50, 100, 900)
ALPHAS = np.logspace(-3, 3, 13)
TEMPERATURES = (1.0, 3.0, 10.0, 30.0)


def encode(cell: str) -> np.ndarray:
    """An NB201 cell string -> 37 features: one-hot op per edge (6 x 5), op
    counts (5), cut by ``none`` edges (1), dead operations (1)."""
    ops = [tok.split("~")[0] for part in cell.strip().split("+") for tok in part.split("|") if tok]
    if len(ops) != 6 or any(o not in OPS for o in ops):
        raise ValueError(f"not a NAS-Bench-201 cell: {cell!r}")
    x = np.zeros((6, len(OPS)))
    for i, o in enumerate(ops):
        x[i, OPS.index(o)] = 1.0
    p = protocol.cell_paths(cell)
    return np.r_[x.ravel(), x.sum(0), float(p["cut"]), float(p["dead_ops"])]


@dataclass(frozen=True)
class PretrainConfig:
    """Settings of the multi-device network (chosen once, before any test device was scored)."""

    hidden: int = 128
    epochs: int = 600
    lr: float = 3e-3
    weight_decay: float = 1e-3
    seeds: int = 3
    #: also profile each cell as a runtime that drops dead code runs it
    #: (:func:`protocol.pruned_cell`): one "pruned twin" column per device
    pruned_twins: bool = True


def pretrain(data: HelpData, devices: Sequence[str], cfg: PretrainConfig,
             cache: Path | None = None) -> tuple[np.ndarray, float]:
    """Device profiles ``[architectures, devices]`` of every architecture in
    ``data``, from a network trained on the pool (0..899) of ``devices``, and
    the seconds that training took; with ``cfg.pruned_twins`` ``[architectures,
    2 * devices]``, the second half the profiles of the pruned cells. Cached
    under ``cache`` by (settings, devices, their pool latencies)."""
    pool = np.asarray(protocol.POOL)
    y = np.stack([np.log(data.latency[d][pool]) for d in devices], 1)
    key = hashlib.sha256(json.dumps([cfg.__dict__, list(devices), data.cells[:900]]).encode()
                         + y.tobytes()).hexdigest()[:16]
    path = cache / f"profiles-{key}.npy" if cache else None
    cached = load_cached(path)
    if cached is not None:
        return _same_where_nothing_dead(cached[0], data.cells, cfg), cached[1]
    t0 = time.perf_counter()
    x_all = torch.tensor(np.stack([encode(c) for c in data.cells]), dtype=torch.float32)
    x_twin = torch.tensor(np.stack([encode(protocol.pruned_cell(c)) for c in data.cells]), dtype=torch.float32)
    yz = torch.tensor((y - y.mean(0)) / y.std(0), dtype=torch.float32)
    xs = x_all[pool]
    outs = []
    for seed in range(cfg.seeds):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(torch.nn.Linear(x_all.shape[1], cfg.hidden), torch.nn.ReLU(),
                                  torch.nn.Linear(cfg.hidden, cfg.hidden), torch.nn.ReLU(),
                                  torch.nn.Linear(cfg.hidden, len(devices)))
        opt = torch.optim.Adam(net.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
        for _ in range(cfg.epochs):  # full batch: 900 architectures
            opt.zero_grad()
            loss = ((net(xs) - yz) ** 2).mean()
            loss.backward()
            opt.step()
        with torch.no_grad():
            out = net(x_all)
            if cfg.pruned_twins:
                out = torch.cat([out, net(x_twin)], 1)
            outs.append(out.numpy().astype(np.float64))
    z = _same_where_nothing_dead(np.mean(outs, 0), data.cells, cfg)
    seconds = time.perf_counter() - t0
    if path is not None:
        save_cached(path, z, seconds)
    return z, seconds


def load_cached(path: Path | None) -> tuple[np.ndarray, float] | None:
    """An array and the seconds it took to compute, from :func:`save_cached`; None when absent."""
    if path is None or not path.is_file() or not path.with_suffix(".json").is_file():
        return None
    return np.load(path), float(json.loads(path.with_suffix(".json").read_text())["seconds"])


def save_cached(path: Path, array: np.ndarray, seconds: float) -> None:
    """``path`` (.npy) and its .json with the seconds; the .npy last, so its presence means the pair is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps({"seconds": seconds}))
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, array)
    tmp.replace(path)


def _same_where_nothing_dead(z: np.ndarray, cells: Sequence[str], cfg: PretrainConfig) -> np.ndarray:
    """Twin profiles equal to the as-written ones, bit for bit, where the cell
    has no dead code (the network's two batched passes may differ in the last
    bits), so that samples without dead code tie in :func:`choose_view`."""
    if not cfg.pruned_twins:
        return z
    j = z.shape[1] // 2
    same = np.array([protocol.pruned_cell(c) == c for c in cells])
    z = z.copy()
    z[same, j:] = z[same, :j]
    return z


# ------------------------------------------------------------------- adapters
def _loo(n: int, fit: Callable, predict: Callable, f: np.ndarray, y: np.ndarray) -> float:
    err = 0.0
    for i in range(n):
        m = np.ones(n, bool)
        m[i] = False
        err += float((predict(fit(f[m], y[m]), f[i:i + 1])[0] - y[i]) ** 2)
    return err / n


@dataclass
class SimilarityHead:
    """Weighted device profile, then a line; see the module doc."""

    weights: np.ndarray
    line: np.ndarray  # [intercept, slope]
    temperature: float

    def predict_log(self, profiles: np.ndarray) -> np.ndarray:
        return self.line[0] + self.line[1] * (profiles @ self.weights)


def _sim_fit(f: np.ndarray, y: np.ndarray, t: float) -> SimilarityHead:
    ry = protocol.rankdata(y)
    rf = protocol.rankdata(f, axis=0)
    ry, rf = ry - ry.mean(), rf - rf.mean(0)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant column: no correlation
        rho = np.nan_to_num((rf * ry[:, None]).sum(0) / np.sqrt((rf ** 2).sum(0) * (ry ** 2).sum()))
    w = np.exp(t * (rho - rho.max()))
    w /= w.sum()
    g = f @ w
    line = np.linalg.lstsq(np.c_[np.ones(len(g)), g], y, rcond=None)[0]
    return SimilarityHead(w, line, t)


def fit_similarity(profiles: np.ndarray, latency: np.ndarray) -> SimilarityHead:
    """Fit on k samples (``profiles [k, D]``, latency in ms); temperature by leave-one-out."""
    y = np.log(latency)
    best = min(TEMPERATURES, key=lambda t: _loo(len(y), lambda f, yy: _sim_fit(f, yy, t),
                                                 lambda h, f: h.predict_log(f), profiles, y))
    return _sim_fit(profiles, y, best)


@dataclass
class RidgeHead:
    """a + b * mean profile + c . (profile - mean profile); see the module doc."""

    coef: np.ndarray
    alpha: float

    @staticmethod
    def design(profiles: np.ndarray) -> np.ndarray:
        m = profiles.mean(1, keepdims=True)
        return np.c_[np.ones(len(profiles)), m, profiles - m]

    def predict_log(self, profiles: np.ndarray) -> np.ndarray:
        return self.design(profiles) @ self.coef


def _ridge_fit(f: np.ndarray, y: np.ndarray, alpha: float) -> RidgeHead:
    d = RidgeHead.design(f)
    pen = np.eye(d.shape[1]) * alpha
    pen[0, 0] = pen[1, 1] = 0.0
    return RidgeHead(np.linalg.solve(d.T @ d + pen + 1e-9 * np.eye(d.shape[1]), d.T @ y), alpha)


def _ridge_loo(f: np.ndarray, y: np.ndarray, alpha: float) -> float:
    """Exact leave-one-out mean squared error of the ridge fit (hat matrix:
    the held-out residual is r_i / (1 - H_ii))."""
    d = RidgeHead.design(f)
    pen = np.eye(d.shape[1]) * alpha
    pen[0, 0] = pen[1, 1] = 0.0
    inv = np.linalg.inv(d.T @ d + pen + 1e-9 * np.eye(d.shape[1]))
    h = np.einsum("ij,jk,ik->i", d, inv, d)
    r = y - d @ (inv @ (d.T @ y))
    return float(np.mean((r / np.maximum(1.0 - h, 1e-9)) ** 2))


def fit_ridge(profiles: np.ndarray, latency: np.ndarray) -> RidgeHead:
    """Fit on k samples; penalty by (exact) leave-one-out error."""
    y = np.log(latency)
    best = min(ALPHAS, key=lambda a: _ridge_loo(profiles, y, float(a)))
    return _ridge_fit(profiles, y, float(best))


@dataclass
class SimRidgeHead:
    """a + b * g + c . (profile - g), g the similarity-weighted profile; see the module doc."""

    weights: np.ndarray
    coef: np.ndarray
    alpha: float

    @staticmethod
    def design(profiles: np.ndarray, weights: np.ndarray) -> np.ndarray:
        g = profiles @ weights
        return np.c_[np.ones(len(profiles)), g, profiles - g[:, None]]

    def predict_log(self, profiles: np.ndarray) -> np.ndarray:
        return self.design(profiles, self.weights) @ self.coef


def fit_simridge(profiles: np.ndarray, latency: np.ndarray, alpha: float,
                 weights: np.ndarray | None = None) -> SimRidgeHead:
    """Fit on k samples (latency in ms) with penalty ``alpha``; ``weights``:
    the similarity weights when already fitted on the same samples."""
    w = fit_similarity(profiles, latency).weights if weights is None else weights
    d = SimRidgeHead.design(profiles, w)
    pen = np.r_[0.0, 0.0, np.full(profiles.shape[1], alpha)]
    coef = np.linalg.solve(d.T @ d + np.diag(pen) + 1e-9 * np.eye(d.shape[1]), d.T @ np.log(latency))
    return SimRidgeHead(w, coef, alpha)


class Head(Protocol):
    def predict_log(self, profiles: np.ndarray) -> np.ndarray: ...


SIMRIDGE_ALPHAS = (0.3, 1.0, 3.0, 10.0, 30.0)
ADAPTERS = ("similarity", "ridge", *(f"simridge-{a:g}" for a in SIMRIDGE_ALPHAS))
MODES = ("random", "reference")  # how the k samples are picked


def fit_adapters(profiles: np.ndarray, latency: np.ndarray,
                 names: Sequence[str] = ADAPTERS) -> dict[str, Head]:
    """The named adapters fitted on the same k samples (``profiles [k, D]``,
    latency in ms); the similarity fit is shared."""
    out: dict[str, Head] = {}
    sim = fit_similarity(profiles, latency) if any(n != "ridge" for n in names) else None
    for n in names:
        if n == "ridge":
            out[n] = fit_ridge(profiles, latency)
        elif sim is not None and n == "similarity":
            out[n] = sim
        elif sim is not None and n.startswith("simridge-") and n in ADAPTERS:
            out[n] = fit_simridge(profiles, latency, float(n.split("-", 1)[1]), sim.weights)
        else:
            raise ValueError(f"unknown adapter {n!r}; known: {', '.join(ADAPTERS)}")
    return out


#: Penalty of the simridge fit whose leave-one-out error chooses the view.
VIEW_ALPHA = 1.0


def simridge_loo(profiles: np.ndarray, latency: np.ndarray, alpha: float) -> float:
    """Leave-one-out mean squared error (log latency) of :func:`fit_simridge`
    on k samples, the similarity weights held at their fit on all k (hat matrix)."""
    w = fit_similarity(profiles, latency).weights
    d = SimRidgeHead.design(profiles, w)
    pen = np.r_[0.0, 0.0, np.full(profiles.shape[1], alpha)]
    inv = np.linalg.inv(d.T @ d + np.diag(pen) + 1e-9 * np.eye(d.shape[1]))
    h = np.einsum("ij,jk,ik->i", d, inv, d)
    y = np.log(latency)
    r = y - d @ (inv @ (d.T @ y))
    return float(np.mean((r / np.maximum(1.0 - h, 1e-9)) ** 2))


def choose_view(profiles: np.ndarray, latency: np.ndarray) -> int:
    """For profiles with pruned twins (``[k, 2 J]``, see :class:`PretrainConfig`):
    1 when the k samples are fitted better (leave-one-out) by the pruned view
    (the device's runtime drops dead code), else 0. Samples without dead code
    tie, and tie to 0."""
    j = profiles.shape[1] // 2
    return int(simridge_loo(profiles[:, j:], latency, VIEW_ALPHA) < simridge_loo(profiles[:, :j], latency, VIEW_ALPHA))


def in_view(profiles: np.ndarray, view: int, twins: bool) -> np.ndarray:
    """The as-written (0) or pruned (1) half of twin profiles; all of them without twins."""
    if not twins:
        return profiles
    j = profiles.shape[1] // 2
    return profiles[:, view * j:(view + 1) * j]


# ------------------------------------------------------------------ protocol
@dataclass
class Fold:
    """A validation fold: ``held`` devices held out of a pre-training on
    ``pretrain``; ``profiles`` from that pre-training; ``reference`` the
    reference order chosen from the ``pretrain`` devices."""

    family: str  # "device" (leave one device out) or "kind" (leave one kind out)
    name: str
    held: list[str]
    pretrain: list[str]
    profiles: np.ndarray
    reference: np.ndarray
    twins: bool = False  # profiles carry pruned twins


def select(data: HelpData, folds: Sequence[Fold], draws: int, shots: Sequence[int] = SHOTS[:-1]) -> dict:
    """Mean Spearman of each adapter, per way of picking the samples and per k,
    on the held-out devices' trimmed pool outside the k samples: mean over the
    fold families of the mean over their (fold, device) pairs. Chooses the
    best adapter per (mode, k)."""
    acc: dict = {}
    for fold in folds:
        z = fold.profiles
        for dev in fold.held:
            lat = data.latency[dev]
            pool, _ = protocol.protocol_sets(lat)
            for k in shots:
                sets = [("random", protocol.draw(pool, k, dev, s)) for s in range(draws)]
                sets.append(("reference", fold.reference[:k]))
                for mode, idx in sets:
                    rest = np.setdiff1d(pool, idx)
                    zv = in_view(z, choose_view(z[idx], lat[idx]) if fold.twins else 0, fold.twins)
                    for name, head in fit_adapters(zv[idx], lat[idx]).items():
                        acc.setdefault((mode, name, str(k), fold.family), {}).setdefault(
                            (fold.name, dev), []).append(protocol.spearman(head.predict_log(zv[rest]), lat[rest]))
    families = sorted({f.family for f in folds})
    table: dict = {m: {a: {} for a in ADAPTERS} for m in MODES}
    by_family: dict = {m: {a: {} for a in ADAPTERS} for m in MODES}
    for (mode, name, k, fam), runs in acc.items():
        by_family[mode][name].setdefault(k, {})[fam] = float(np.mean([np.mean(v) for v in runs.values()]))
    for mode in MODES:
        for name in ADAPTERS:
            for k, fams in by_family[mode][name].items():
                table[mode][name][k] = float(np.mean([fams[f] for f in families]))
    chosen = {m: {str(k): max(ADAPTERS, key=lambda a: table[m][a][str(k)]) for k in shots} for m in MODES}
    return {"folds": [{"family": f.family, "name": f.name, "held": f.held, "pretrain": f.pretrain} for f in folds],
            "families": families, "spearman_pool_rest": table, "by_family": by_family, "chosen": chosen}


def chosen_adapter(selection: dict, mode: str, k: int) -> str:
    """The adapter chosen for ``mode`` at the largest validated k not above ``k``."""
    ks = sorted(int(x) for x in selection["chosen"][mode])
    return str(selection["chosen"][mode][str(max([x for x in ks if x <= k] or ks[:1]))])


def _row(runs: list[dict], secs: list[float], k: int, name: str) -> dict:
    row: dict = {m: float(np.mean([r[m] for r in runs])) for m in ("spearman", "mape", "within_10")}
    row.update({f"{m}_std": float(np.std([r[m] for r in runs])) for m in ("spearman", "mape", "within_10")})
    row.update({"spearman_min": float(np.min([r["spearman"] for r in runs])), "draws": len(runs), "k": k,
                "adapter": name, "fit_seconds": float(np.mean(secs)), "count": runs[0]["count"],
                "pruned_view": float(np.mean([r["pruned_view"] for r in runs]))})
    return row


def evaluate(data: HelpData, profiles: np.ndarray, device: str, selection: dict, draws: int,
             reference: np.ndarray, variants: Sequence[np.ndarray] = (), shots: Sequence[int] = SHOTS,
             twins: bool = False) -> dict:
    """Test metrics of ``device`` per mode and k. ``random``: mean and std over
    ``draws`` draws from its trimmed pool. ``reference``: the first k of
    ``reference``; ``variants`` (other reference orders) add the spread of
    the choice. k >= the trimmed pool: all of it, the same row in both modes.
    ``twins``: ``profiles`` carry pruned twins; each fit first chooses its view
    (``pruned_view``: the share of fits that chose the pruned one)."""
    lat = data.latency[device]
    pool, test = protocol.protocol_sets(lat)
    out: dict = {m: {} for m in MODES}

    def run(name: str, sets: list[np.ndarray]) -> tuple[list[dict], list[float]]:
        runs, secs = [], []
        for idx in sets:
            t0 = time.perf_counter()
            view = choose_view(profiles[idx], lat[idx]) if twins else 0
            zv = in_view(profiles, view, twins)
            head = fit_adapters(zv[idx], lat[idx], (name,))[name]
            secs.append(time.perf_counter() - t0)
            runs.append(protocol.accuracy(np.exp(head.predict_log(zv[test])), lat[test]) | {"pruned_view": view})
        return runs, secs

    for k in shots:
        if k >= len(pool):
            name = chosen_adapter(selection, "random", k)
            row = _row(*run(name, [pool]), len(pool), name)
            out["random"][str(k)] = out["reference"][str(k)] = row
            continue
        name = chosen_adapter(selection, "random", k)
        out["random"][str(k)] = _row(*run(name, [protocol.draw(pool, k, device, s) for s in range(draws)]), k, name)
        name = chosen_adapter(selection, "reference", k)
        row = _row(*run(name, [reference[:k]]), k, name)
        row["in_trimmed_pool"] = int(np.isin(reference[:k], pool).sum())
        if len(variants):
            sp = [r["spearman"] for r in run(name, [v[:k] for v in variants])[0]]
            row["variants"] = {"spearman": float(np.mean(sp)), "spearman_std": float(np.std(sp)),
                               "spearman_min": float(np.min(sp)), "count": len(sp), "spearman_each": sp}
        out["reference"][str(k)] = row
    return out
