"""The HELP evaluation protocol on NAS-Bench-201 latencies (Lee et al., 2021).

Exactly as HELP's ``loader.py``: architectures ``0..899`` are the pool a
predictor may learn from, ``900..1899`` the test set; each set is trimmed
*per device* by sorting it by that device's latency and keeping sorted
positions ``int(0.1 n) .. int(0.9 n) - 1`` (pool: 720 of 900, test: 800 of
1000). Ties are broken by index (a stable sort), which matters on devices
stored in whole milliseconds. Accuracy is Spearman's rank correlation on the
trimmed test set; we add MAPE and the share within +-10 %
(:func:`training.seernet.evaluate.score`).

Few-shot samples are drawn from the device's trimmed pool with a generator
seeded by ``(seed, device name, k)``: the same command draws the same subsets.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
from scipy.stats import rankdata as _rankdata

POOL = range(0, 900)
TEST = range(900, 1900)
TRIM = (0.1, 0.9)


def trim(indices: Sequence[int], latency: np.ndarray, lo: float = TRIM[0], hi: float = TRIM[1]) -> np.ndarray:
    """``indices`` whose ``latency`` lies in the ``lo``..``hi`` quantile band,
    HELP-style: sort by latency (stable), keep positions ``int(lo n):int(hi n)``.
    Returned in ascending index order."""
    idx = np.asarray(indices, dtype=np.int64)
    order = np.argsort(np.asarray(latency, dtype=np.float64)[idx], kind="stable")
    n = len(idx)
    return np.sort(idx[order[int(n * lo):int(n * hi)]])


def protocol_sets(latency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(trimmed pool, trimmed test)`` indices for one device's latency column."""
    return trim(POOL, latency), trim(TEST, latency)


def draw(pool: Sequence[int] | np.ndarray, k: int, device: str, seed: int = 0) -> np.ndarray:
    """``k`` indices drawn without replacement from ``pool``, deterministically
    in ``(seed, device, k)``; all of ``pool`` when ``k >= len(pool)``."""
    idx = np.asarray(pool, dtype=np.int64)
    if k >= len(idx):
        return idx.copy()
    digest = hashlib.sha256(f"{seed}|{device}|{k}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return np.sort(rng.choice(idx, size=k, replace=False))


def rankdata(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Average ranks (1-based) with ties sharing their mean rank; along
    ``axis`` (each column for 0), or of the flattened array for None."""
    return _rankdata(np.asarray(a, dtype=np.float64), method="average", axis=axis)


def spearman(pred: np.ndarray, true: np.ndarray) -> float:
    """Spearman's rho: Pearson correlation of average ranks (as scipy.stats.spearmanr)."""
    rp, rt = rankdata(pred), rankdata(true)
    rp, rt = rp - rp.mean(), rt - rt.mean()
    denom = np.sqrt((rp ** 2).sum() * (rt ** 2).sum())
    return float((rp * rt).sum() / denom) if denom > 0 else float("nan")


def accuracy(pred: np.ndarray, true: np.ndarray) -> dict:
    """Spearman, MAPE (%), share within +-10 % (%) and count."""
    from training.seernet.evaluate import score

    s = score(pred, true)
    return {"spearman": spearman(pred, true), "mape": s["mape"], "within_10": s["within_10"],
            "count": s["count"]}


# ------------------------------------------------------- NAS-Bench-201 cells
def cell_paths(cell: str) -> dict:
    """What an NB201 cell string computes: ``cut`` (no path of non-``none``
    edges from the cell input to its output: the output is all zeros) and
    ``dead_ops`` (non-``none`` operations whose result never reaches the
    output; PyTorch's eager cell still runs them, an exported graph drops
    them)."""
    nodes = [[tok.split("~")[0] for tok in part.split("|") if tok] for part in cell.strip().split("+")]
    reach = [True]  # reach[j]: node j depends on the cell input
    for ops in nodes:
        reach.append(any(op != "none" and reach[i] for i, op in enumerate(ops)))
    used = [False] * (len(nodes) + 1)  # used[j]: node j feeds the output
    used[-1] = True
    for j in range(len(nodes), 0, -1):
        if used[j]:
            for i, op in enumerate(nodes[j - 1]):
                if op != "none":
                    used[i] = True
    dead = sum(1 for j, ops in enumerate(nodes, start=1) for op in ops
               if op not in ("none", "skip_connect") and not used[j])
    return {"cut": not reach[-1], "dead_ops": dead}


def pruned_cell(cell: str) -> str:
    """The cell as a runtime that drops dead code runs it: every operation
    whose result never reaches the output becomes ``none``; a cut cell (its
    output is all zeros) becomes all ``none``."""
    nodes = [[tok.split("~")[0] for tok in part.split("|") if tok] for part in cell.strip().split("+")]
    used = [False] * (len(nodes) + 1)
    used[-1] = not cell_paths(cell)["cut"]
    for j in range(len(nodes), 0, -1):
        if used[j]:
            for i, op in enumerate(nodes[j - 1]):
                if op != "none":
                    used[i] = True
    return "+".join("|" + "|".join(f"{op if used[j] else 'none'}~{i}" for i, op in enumerate(ops)) + "|"
                    for j, ops in enumerate(nodes, start=1))
