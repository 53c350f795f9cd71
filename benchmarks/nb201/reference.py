"""Reference architectures: which NB201 cells a new device should be measured on.

HELP represents a device by its latencies on a fixed set of reference
architectures (its "hardware embedding"). Here the set is chosen from the
*pre-training devices only*, as the architectures that best identify a device
the predictor has not seen: a greedy, nested order over the pool, so that the
first k of it are the k architectures to measure, for any k.

Criterion. Each pre-training device j in turn plays the new device: its
standardized log latency on the pool (0..899) is predicted from the *other*
pre-training devices' profile columns by a ridge fit on the chosen
architectures, ``a + b * mean profile + c . (profile - mean profile)`` with
penalty ``alpha`` on ``c``. The next architecture is the candidate that
minimizes the mean squared error of those predictions over the whole pool,
summed over the devices j. (Adding a candidate is a rank-one update of each
device's normal equations, so one step scores all candidates at once.)

Candidates are the pool architectures that compute what they say (no
``none`` edges cutting the cell, no operation whose result never reaches the
output, skip connections included: such a cell's latency
depends on whether the device's runtime drops dead code, which PyTorch's
eager cell does not and an exported graph does, so no known device predicts
it for an unknown one) and lie inside the trimmed pool (10..90 % latency
band) of every pre-training device. A new device's own trim is unknown
before it is measured, so a reference may still fall outside it; the
benchmark reports how many do.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from benchmarks.nb201 import protocol

#: Penalty on the deviations from the mean profile in the criterion (profile units).
ALPHA = 1.0


def candidates(latency: Mapping[str, np.ndarray], cells: Sequence[str]) -> np.ndarray:
    """Pool architectures (0..899) whose cell (``cells[i]``) has no dead code
    (it is its own :func:`protocol.pruned_cell`: not cut, every operation
    reaches the output) and that lie inside the trimmed pool of every device
    in ``latency`` (device -> ms per architecture index), ascending."""
    keep = np.array([protocol.pruned_cell(cells[i]) == cells[i] for i in protocol.POOL])
    for lat in latency.values():
        inside = np.zeros(len(protocol.POOL), bool)
        inside[protocol.protocol_sets(lat)[0]] = True
        keep &= inside
    return np.flatnonzero(keep)


def _designs(profiles: np.ndarray) -> list[np.ndarray]:
    """Per device j: ``[1, mean, deviations]`` of the other devices' profile columns."""
    out = []
    for j in range(profiles.shape[1]):
        p = np.delete(profiles, j, 1)
        m = p.mean(1, keepdims=True)
        out.append(np.c_[np.ones(len(p)), m, p - m])
    return out


def order(profiles: np.ndarray, latency: Mapping[str, np.ndarray], cells: Sequence[str], k: int,
          alpha: float = ALPHA, seed: int | None = None) -> np.ndarray:
    """``k`` pool architecture indices, best first (see the module doc).

    Args:
        profiles: ``[architectures, J]`` device profiles from a pre-training on
            exactly the J devices of ``latency``, columns in its order.
        latency: pre-training device -> latency (ms) per architecture index;
            the only measurements read.
        cells: the NB201 cell string per architecture index.
        k: how many to choose (at most the number of candidates).
        alpha: ridge penalty of the criterion.
        seed: ``None`` chooses among all candidates; an integer among a random
            half of them (variants, to show how much the choice matters).
    """
    devices = list(latency)
    if profiles.shape[1] != len(devices) or len(devices) < 2:
        raise ValueError(f"profiles have {profiles.shape[1]} columns for {len(devices)} devices; "
                         "need one per pre-training device, at least 2")
    pool = np.asarray(protocol.POOL)
    cand = candidates(latency, cells)
    if seed is not None:
        rng = np.random.default_rng(seed)
        cand = np.sort(rng.choice(cand, len(cand) // 2, replace=False))
    k = min(k, len(cand))
    y = np.stack([np.log(latency[d][pool]) for d in devices], 1)
    yz = (y - y.mean(0)) / y.std(0)
    designs = [d[pool] for d in _designs(profiles[pool])]
    # squared error over the pool from the Gram matrices: |D c - y|^2 = c'Gc - 2 c'h + y'y
    grams = [dsg.T @ dsg for dsg in designs]
    rhs = [dsg.T @ yz[:, j] for j, dsg in enumerate(designs)]
    p = designs[0].shape[1]
    pen = np.r_[1e-6, 1e-6, np.full(p - 2, alpha)]  # intercept and mean all but free
    a_inv = [np.diag(1.0 / pen) for _ in devices]
    b = [np.zeros(p) for _ in devices]
    chosen: list[int] = []
    free = np.ones(len(cand), bool)
    for _ in range(k):
        err = np.zeros(len(cand))
        for j, dsg in enumerate(designs):
            dc = dsg[cand]                                  # [C, p]
            ad = dc @ a_inv[j]                              # A^-1 d per candidate
            bc = b[j][None, :] + dc * yz[cand, j][:, None]  # normal-equation right sides
            coef = bc @ a_inv[j] - ad * (np.einsum("cp,cp->c", ad, bc)
                                         / (1.0 + np.einsum("cp,cp->c", ad, dc)))[:, None]
            err += (np.einsum("cp,pq,cq->c", coef, grams[j], coef) - 2 * coef @ rhs[j]
                    + yz[:, j] @ yz[:, j]) / len(pool)
        err[~free] = np.inf
        i = int(np.argmin(err))
        free[i] = False
        chosen.append(int(cand[i]))
        for j, dsg in enumerate(designs):  # Sherman-Morrison update of A^-1, and b
            d = dsg[cand[i]]
            ad1 = a_inv[j] @ d
            a_inv[j] = a_inv[j] - np.outer(ad1, ad1) / (1.0 + d @ ad1)
            b[j] = b[j] + d * yz[cand[i], j]
    return np.array(chosen, dtype=np.int64)


def objective(profiles: np.ndarray, latency: Mapping[str, np.ndarray], idx: np.ndarray,
              alpha: float = ALPHA) -> float:
    """The criterion of :func:`order` for the set ``idx``, recomputed plainly
    (mean over devices of the pool MSE; for tests and reports)."""
    pool = np.asarray(protocol.POOL)
    devices = list(latency)
    y = np.stack([np.log(latency[d][pool]) for d in devices], 1)
    yz = (y - y.mean(0)) / y.std(0)
    err = []
    for j, dsg in enumerate(_designs(profiles[pool])):
        pen = np.r_[1e-6, 1e-6, np.full(dsg.shape[1] - 2, alpha)]
        di = dsg[idx]
        coef = np.linalg.solve(di.T @ di + np.diag(pen), di.T @ yz[idx, j])
        err.append(np.mean((dsg @ coef - yz[:, j]) ** 2))
    return float(np.mean(err))
