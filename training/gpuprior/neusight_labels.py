"""NeuSight's published whole-model GPU latencies: copied into
``data/neusight-e2e/`` and read back (:mod:`training.gpuprior.neusight_e2e`).

``python -m training.gpuprior.neusight_e2e labels --repo GITDIR`` reads every
single-GPU inference and training label
(``scripts/asplos/label/<GPU>/<model>-<mode>-<seq>-<batch>.json``, fused and
multi-GPU runs left out) and the model configs from a clone of the artifact
(``git show``, no work tree needed), each row naming its source file and commit.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.publicgpu.gitrepo import files_under, head_commit, show

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "neusight-e2e"
OUT = REPO / "reports" / "gpu-prior"
SOURCE = "sitar-lab/NeuSight"
LABEL_DIR = "scripts/asplos/label"
CONFIG_DIR = "scripts/asplos/data/DLmodel_configs"
#: dense models with labels (the Switch MoE runs are left out: no MoE export here)
MODELS = ("bert_large", "gpt2_large", "gpt3_xl", "gpt3_27", "opt_13")
#: NeuSight's GPU folder -> our device entry
DEVICES = {"NVIDIA_H100_80GB_HBM3": "h100", "NVIDIA_L4": "l4", "NVIDIA_A100-PCIE-40GB": "a100-40gb",
           "NVIDIA_A100-SXM4-40GB": "a100-sxm4-40gb", "NVIDIA_A100_80GB_PCIe": "a100-80gb",
           "Tesla_V100-PCIE-32GB": "v100", "Tesla_T4": "t4", "Tesla_P100-PCIE-16GB": "p100",
           "Tesla_P4": "p4"}
#: GPUs whose single operators the prior was fitted on (the others are held out entirely)
KERNEL_GPUS = ("a100-40gb", "v100", "t4", "p100", "p4")
FIELDS = ("gpu", "device", "model", "mode", "seq", "batch", "num_layer", "e2e_ms", "fw_ms", "bw_ms",
          "source", "commit")
_NAME = re.compile(r"^(?P<model>[a-z0-9_]+)-(?P<mode>inf|train)-(?P<seq>\d+)-(?P<batch>\d+)\.json$")


def collect_labels(repo: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(label rows, model name -> config JSON text) from a clone's HEAD."""
    commit = head_commit(repo)
    rows = []
    for path in files_under(repo, LABEL_DIR):
        gpu, name = path.split("/")[-2:]
        m = _NAME.match(name)  # fused (-fusion) and multi-GPU (-dp4, -tp4, -pp4_1) runs do not match
        if m is None or m["model"] not in MODELS:
            continue
        doc = json.loads(show(repo, path))
        rows.append({"gpu": gpu, "device": DEVICES.get(gpu, ""), "model": m["model"],
                     "mode": "inference" if m["mode"] == "inf" else "train",
                     "seq": int(m["seq"]), "batch": int(m["batch"]), "num_layer": int(doc["num_layer"]),
                     "e2e_ms": float(doc["e2e_latency"]), "fw_ms": float(doc["fw_latency"]),
                     "bw_ms": float(doc["bwall_latency"]), "source": path, "commit": commit})
    configs = {m: show(repo, f"{CONFIG_DIR}/{m}.json") for m in MODELS}
    rows.sort(key=lambda r: (r["gpu"], r["model"], r["mode"], r["seq"], r["batch"]))
    return rows, configs


def write_labels(rows: list[dict[str, Any]], configs: dict[str, str], folder: Path = DATA) -> None:
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(folder / "labels.csv", buf.getvalue().encode())
    for name, text in configs.items():
        atomic_write_bytes(folder / "configs" / f"{name}.json", text.encode())


def read_labels(folder: Path = DATA) -> list[dict[str, Any]]:
    with open(folder / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("seq", "batch", "num_layer"):
            r[k] = int(r[k])
        for k in ("e2e_ms", "fw_ms", "bw_ms"):
            r[k] = float(r[k])
    return rows
