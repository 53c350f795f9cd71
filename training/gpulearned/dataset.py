"""The learned layer's training set: every label's kernel data
(:mod:`training.gpulearned.tables`) on its GPU's spec sheet, built once and
kept in ``--cache`` (one ``.npz`` per label, keyed by the label and the
feature version), so a rerun resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu.prior import Prior
from perfseer_rt.gpu.spec_store import shipped_sheet
from training.gpulearned import labels as LB
from training.gpulearned.tables import Label, LabelData, extrapolate, label_data


def _key(label: Label, extra: str = "") -> str:
    doc = json.dumps({**asdict(label), "ms": None, "v": LF.FEATURE_VERSION, "x": extra}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:20]


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


def build(root: Path, cache: Path, prior: Prior, progress: bool = True, ours: Path | None = None
          ) -> tuple[list[Label], list[LabelData], dict[str, int]]:
    """Labels and their kernel data (cached); counts of what was skipped.
    ``root``: the public records (measured by others); ``ours``: our own
    GPU records (``data/gpu``), added as source ``"ours"`` when given."""
    timm, neusight, skipped = LB.load(root, cache)
    if ours is not None:
        mine, skipped_ours = LB.our_labels(ours, cache)
        timm += mine
        skipped.update(skipped_ours)
    folder = cache / "gpulearned" / LF.FEATURE_VERSION
    folder.mkdir(parents=True, exist_ok=True)
    out_labels: list[Label] = []
    out_data: list[LabelData] = []
    jobs = [(lab, None) for lab in timm] + [(lab, m) for lab, m in neusight]
    for lab, model in tqdm(jobs, desc="label kernels", disable=not progress):
        spec = shipped_sheet(lab.gpu).to_gpu_spec()
        path = folder / f"{_key(lab, model.name if model else '')}.npz"
        data = _load(path)
        if data is None:
            try:
                if model is None:
                    data = label_data(lab, spec, prior)
                else:
                    exports = LB.layer_exports(model, lab.mode, cache)
                    one, two = (label_data(LB.with_onnx(lab, exports[k]), spec, prior) for k in (1, 2))
                    data = extrapolate(one, two, model.layers)
            except PerfSeerError as exc:
                skipped[f"extraction failed: {type(exc).__name__}"] = skipped.get(
                    f"extraction failed: {type(exc).__name__}", 0) + 1
                continue
            _save(path, data)
        if model is not None:
            lab = LB.with_onnx(lab, f"neusight:{model.name}x{model.layers}")
        out_labels.append(lab)
        out_data.append(data)
    return out_labels, out_data, dict(skipped)
