"""The learned layer's training set: every label's kernel data
(:mod:`training.gpulearned.tables`) on its GPU's spec sheet, built once and
kept in ``--cache`` (one ``.npz`` per label, keyed by the label and the
feature version), so a rerun resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu.prior import Prior
from perfseer_rt.gpu.spec_store import shipped_sheet
from perfseer_rt.gpu.specs import GpuSpec
from training.gpulearned import labels as LB
from training.gpulearned.tables import Label, LabelData, extrapolate, label_data


def _key(label: Label, extra: str = "", version: str = LF.FEATURE_VERSION) -> str:
    doc = json.dumps({**asdict(label), "ms": None, "v": version, "x": extra}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:20]


def retime_memory(d: LabelData, spec: GpuSpec, share: float = LF.L2_SHARE) -> LabelData:
    """``d`` with its memory roofline recomputed by
    :func:`perfseer_rt.gpu.learned_features.memory_ms` at ``share`` (the
    bytes from ``log2_bytes_over_l2``; the two time features and the
    roofline follow)."""
    names = LF.names()
    ic, im, it, ib = (names.index(n) for n in ("log10_tc_us", "log10_tm_us", "log2_tc_over_tm",
                                                 "log2_bytes_over_l2"))
    x64 = d.x.astype(np.float64)
    # below 1e-3 us the compute time is kept only in its ratio to the memory time
    tc_us = np.where(x64[:, ic] > -3.0, 10.0 ** x64[:, ic],
                     2.0 ** x64[:, it] * np.maximum(10.0 ** x64[:, im], 1e-6))
    tm_us = LF.memory_ms(2.0 ** x64[:, ib] * spec.l2_mb * 1e6, spec, share) * 1e3
    x = d.x.copy()
    x[:, im] = np.log10(np.maximum(tm_us, 1e-3))
    x[:, it] = np.clip(np.log2(np.maximum(tc_us, 1e-6) / np.maximum(tm_us, 1e-6)), -20, 20)
    roof = np.maximum(np.maximum(tc_us, tm_us) * 1e-3, 1e-6)
    return replace(d, x=x.astype(np.float32), roof=roof)


def _load(path: Path) -> LabelData | None:
    if not path.is_file():
        return None
    z = np.load(path)
    return LabelData(z["x"], z["roof"], z["count"], float(z["launches"]), float(z["host_ms"]),
                     float(z["prior_ms"]))


def _save(path: Path, d: LabelData) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, x=d.x, roof=d.roof, count=d.count, launches=d.launches, host_ms=d.host_ms,
                        prior_ms=d.prior_ms)
    tmp.replace(path)


def build(root: Path, cache: Path, prior: Prior, progress: bool = True, ours: Path | None = None,
          transposes: bool = False) -> tuple[list[Label], list[LabelData], dict[str, int]]:
    """Labels and their kernel data (cached); counts of what was skipped.
    ``root``: the public records (measured by others); ``ours``: our own
    GPU records (``data/gpu``), added as source ``"ours"`` when given;
    ``transposes``: kernels with the NCHW layout transposes
    (:func:`perfseer_rt.gpu.step.layout_transposes`; cached apart)."""
    timm, neusight, skipped = LB.load(root, cache)
    if ours is not None:
        mine, skipped_ours = LB.our_labels(ours, cache)
        timm += mine
        skipped.update(skipped_ours)
    folder = cache / "gpulearned" / (LF.FEATURE_VERSION + ("+transposes" if transposes else ""))
    folder.mkdir(parents=True, exist_ok=True)
    jobs = [(lab, None) for lab in timm] + [(lab, m) for lab, m in neusight]
    paths = [folder / f"{_key(lab, model.name if model else '')}.npz" for lab, model in jobs]
    # Missing ones are built model by model (the extraction of a model at a
    # batch is shared by its labels: every layout, framework version and GPU).
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i][0].onnx, jobs[i][0].batch, jobs[i][0].dims))
    got: dict[int, LabelData] = {}
    for i in tqdm(order, desc="label kernels", disable=not progress):
        (lab, model), path = jobs[i], paths[i]
        data = _load(path)
        if data is None:
            spec = shipped_sheet(lab.gpu).to_gpu_spec()
            try:
                if model is None:
                    data = label_data(lab, spec, prior, transposes)
                else:
                    exports = LB.layer_exports(model, lab.mode, cache)
                    one, two = (label_data(LB.with_onnx(lab, exports[k]), spec, prior, transposes)
                                for k in (1, 2))
                    data = extrapolate(one, two, model.layers)
            except PerfSeerError as exc:
                why = f"extraction failed: {type(exc).__name__}"
                skipped[why] = skipped.get(why, 0) + 1
                continue
            _save(path, data)
        got[i] = data
    out_labels: list[Label] = []
    out_data: list[LabelData] = []
    for i, (lab, model) in enumerate(jobs):
        if i not in got:
            continue
        if model is not None:
            lab = LB.with_onnx(lab, f"{lab.source}:{model.name}x{model.layers}")
        out_labels.append(lab)
        out_data.append(got[i])
    return out_labels, out_data, dict(skipped)
