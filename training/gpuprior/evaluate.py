"""Leave-one-GPU-out evaluation of the prior against the two baselines.

For every family and every GPU with rows in it: fit on the other GPUs, test
on this one (its spec sheet is all the model sees of it). The held-out
GPU's prior predictions also stand in for "our own records" in the
calibration check: a correction (:mod:`perfseer_rt.gpu.calibrate`) is
fitted on ``n`` random rows of the held-out GPU and tested on the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from perfseer_rt.gpu import features as F
from perfseer_rt.gpu.calibrate import fit_correction
from training.gpuprior import models as M
from training.gpuprior.data import Family

CALIBRATION_SHOTS = (10, 50)
CALIBRATION_REPEATS = 5


def scores(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    ape = np.abs(pred - meas) / meas * 100.0
    return {"mape": round(float(ape.mean()), 2), "median_ape": round(float(np.median(ape)), 2),
            "within_10": round(float((ape <= 10).mean() * 100), 1),
            "within_25": round(float((ape <= 25).mean() * 100), 1),
            "bias_pct": round(float(np.median((pred - meas) / meas) * 100), 1),
            "count": int(meas.size)}


def fold(fam: Family, held: str, steps: int, seed: int = 0) -> dict:
    """One leave-one-GPU-out fold: scores of prior, roofline, kernel-additive."""
    train, test = fam.subset(fam.devices != held), fam.subset(fam.devices == held)
    s_tr, s_te = train.spec(), test.spec()
    x_tr = F.features(fam.name, train.shape, s_tr)
    x_te = F.features(fam.name, test.shape, s_te)
    roof_tr = M.roofline(train.shape["flops"], train.shape["bytes"], s_tr)
    roof_te = M.roofline(test.shape["flops"], test.shape["bytes"], s_te)
    mlp = M.fit_mlp(x_tr, np.log(train.latency_ms / roof_tr), seed=seed, steps=steps)
    mlp_ms = roof_te * np.exp(M.predict_mlp(mlp, x_te))
    coef = M.fit_additive(train.shape["flops"], train.shape["bytes"], s_tr, train.latency_ms)
    additive = M.predict_additive(coef, test.shape["flops"], test.shape["bytes"], s_te)
    prior = M.blend(mlp_ms, additive, roof_te)
    meas = test.latency_ms
    out: dict[str, Any] = {"family": fam.name, "held_out": held, "train_rows": len(train),
           "prior": scores(prior, meas), "mlp": scores(mlp_ms, meas), "roofline": scores(roof_te, meas),
           "kernel_additive": scores(additive, meas), "calibration": {}}
    rng = np.random.default_rng(seed)
    for n in CALIBRATION_SHOTS:
        if len(test) < 2 * n:
            continue
        after = []
        for _ in range(CALIBRATION_REPEATS):
            pick = rng.permutation(len(test))
            cal, rest = pick[:n], pick[n:]
            corr = fit_correction(prior[cal], meas[cal])
            after.append(scores(corr.apply(prior[rest]), meas[rest])["mape"])
        out["calibration"][str(n)] = {"mape_calibrated": round(float(np.mean(after)), 2),
                                      "repeats": CALIBRATION_REPEATS}
    return out


def leave_one_gpu_out(families: dict[str, Family], steps: int, cache: Path | None = None) -> list[dict]:
    """Every fold, resuming from ``cache`` (a JSON list of finished folds with
    the same ``steps``)."""
    done = {}
    if cache and cache.exists():
        for row in json.loads(cache.read_text()):
            if row.get("steps") == steps:
                done[(row["family"], row["held_out"])] = row
    jobs = [(f, d) for f, fam in families.items() for d in sorted(set(fam.devices))]
    out = []
    for f, d in tqdm(jobs, desc="leave-one-GPU-out"):
        row = done.get((f, d))
        if row is None:
            row = done[(f, d)] = fold(families[f], d, steps) | {"steps": steps}
            if cache:
                cache.write_text(json.dumps(list(done.values()), indent=1))
        out.append(row)
    return out
