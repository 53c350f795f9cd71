"""NeuSight's whole-model labels (``data/neusight-e2e/labels.csv``) as records.

The CSV stays where it is (``training.gpuprior.neusight_e2e`` reads it); this
module turns each row into a campaign-format record (:mod:`training.publicgpu.record`)
under ``data/public-gpu/neusight-e2e/<device>/<mode>-fp32``. The
architecture is ``{"family": "neusight", "params": {"model", "seq"}}`` (the
model's Hugging Face config is ``data/neusight-e2e/configs/<model>.json``);
the provenance names the label file in NeuSight's repository and its commit.
How they measured: ``data/neusight-e2e/README.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

from training.gpuprior.neusight_labels import read_labels
from training.publicgpu.record import Provenance, Setup, campaign_record

SOURCE = "NeuSight artifact, measured by the NeuSight authors, not us"
REPOSITORY = "sitar-lab/NeuSight"
LICENCE = "MIT"
STEP = {"inference": "forward; fp32, TF32 off; no_grad",
        "train": "forward + CE loss + backward (no optimizer step); fp32, TF32 off"}
#: 25 timed runs (CUDA events), the mean of the fastest 5 (their neusight/Tracing/trace.py).
QUALITY = {"statistic": "mean of the fastest 5", "runs": 25}


def device_of(row: dict) -> str:
    """Our device name, or a slug of their GPU folder for GPUs we have no entry for."""
    return row["device"] or row["gpu"].lower().replace("_", "-")


def group_of(model: str, folder: Path) -> str:
    """The model's Hugging Face ``model_type`` (bert, gpt2, opt)."""
    return json.loads((folder / "configs" / f"{model}.json").read_text())["model_type"]


def records(folder: Path) -> list[dict]:
    """One record per row of ``folder/labels.csv``."""
    out = []
    for line, row in enumerate(read_labels(folder), start=2):
        setup = Setup(device=device_of(row), gpu_name=row["gpu"].replace("_", " "), framework="PyTorch",
                      framework_version="2.1", cuda_version=None, runtime="PyTorch eager",
                      precision="fp32", layout="n/a", mode=row["mode"], step=STEP[row["mode"]])
        prov = Provenance(source=SOURCE, repository=REPOSITORY, licence=LICENCE, file=row["source"],
                          line=0, commits=(row["commit"],))
        params = {"model": row["model"], "seq": row["seq"]}
        published = {"num_layer": row["num_layer"], "fw_ms": row["fw_ms"], "bw_ms": row["bw_ms"],
                     "e2e_ms": row["e2e_ms"], "gpu_folder": row["gpu"], "labels_csv_line": line}
        out.append(campaign_record(
            family="neusight", params=params, spec=f"neusight:model={row['model']},seq={row['seq']}",
            group=group_of(row["model"], folder), arch_kind="transformer", batch=row["batch"],
            time_ms=row["e2e_ms"], samples_per_s=None,
            input_shapes={"input_ids": [row["batch"], row["seq"]]}, setup=setup, provenance=prov,
            quality=QUALITY, published=published, onnx=None))
    return out


def folder_of(record: dict) -> str:
    return f"{record['device']}/{record['kind']}-fp32"
