"""The op types of a predictor's training data, written into its manifest
(``training_data.ops``: op type -> training architectures whose PerfGraph
holds a node of it), so that a prediction can say when a model's work sits
in ops the predictor never saw measured (:func:`perfseer_rt.predict.seernet_run.out_of_distribution`).

The stored graphs name the ops of the layout's vocabulary in their one-hot
columns; a node of any other op is ``op_other`` there, so the architectures
holding such nodes are exported again from their record's spec
(``training.zoo``, structure-only: the same graph) and extracted at their
smallest measured batch to name those ops.

    python -m training.seernet.training_ops --dataset data/cpu_train \\
        --manifest exported_models/cpu-amd-epyc-1t/train/manifest.json

Run it after a predictor is trained on the same ``--dataset`` folders its
report took; the manifest is rewritten atomically and parsed strictly first.
Progress on stderr (tqdm).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm import tqdm

from perfseer_rt import extract
from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.manifest import parse_manifest
from training.seernet.data import dataset_dirs, read_graph_shard, read_records
from training.zoo import export_onnx, parse_spec

#: The one-hot columns of the layout: column index -> op type.
OP_COLUMNS = {i: c[3:] for i, c in enumerate(layout.NODE_COLUMNS) if c.startswith("op_")}
OTHER = layout.NODE_COLUMNS.index("op_other")


def training_ops(folders: Sequence[Path], progress: bool = True) -> dict[str, int]:
    """op type -> architectures of ``folders`` whose graph holds it (sorted by
    count, then name)."""
    graphs: dict[str, tuple[np.ndarray, ...]] = {}
    for d in dataset_dirs(folders):
        for shard in sorted((d / "graphs").glob("*.npz")):
            graphs.update(read_graph_shard(shard))
    first: dict[str, tuple[str, int, str]] = {}  # arch -> (graph key, batch, spec) at its smallest batch
    for r in read_records(folders):
        key = r.get("graph_key")
        if key in graphs and (r["arch_id"] not in first or r["batch"] < first[r["arch_id"]][1]):
            first[r["arch_id"]] = (key, int(r["batch"]), r["spec"])
    counts: Counter[str] = Counter()
    others = []
    for arch, (key, _, _) in first.items():
        x = graphs[key][0]
        columns = sorted(OP_COLUMNS)
        held = {OP_COLUMNS[columns[int(j)]] for j in np.flatnonzero(x[:, columns].sum(axis=0) > 0)}
        counts.update(held - {"other"})
        if "other" in held:
            others.append(arch)
    with tempfile.TemporaryDirectory(prefix="perfseer-training-ops-") as tmp:
        for arch in tqdm(sorted(others), desc="name op_other", unit="arch", disable=not progress):
            _, batch, spec = first[arch]
            path = Path(tmp) / f"{arch}.onnx"
            export_onnx(parse_spec(spec), path, structure_only=True)
            g = extract(path, batch=batch)
            named = {op for op, one in zip(g.node_ops, g.x[:, OTHER]) if one}
            counts.update(named)
            path.unlink()
            Path(str(path) + ".data").unlink(missing_ok=True)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def write_ops(manifest: Path, ops: dict[str, int]) -> None:
    """Set ``training_data.ops`` of ``manifest`` (parsed strictly before it
    replaces the file)."""
    doc = json.loads(manifest.read_text())
    doc["training_data"]["ops"] = ops
    parse_manifest(doc)
    atomic_write_bytes(manifest, (json.dumps(doc, indent=1) + "\n").encode())


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.training_ops", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", nargs="+", required=True, type=Path)
    ap.add_argument("--manifest", required=True, type=Path)
    args = ap.parse_args(argv)
    ops = training_ops(args.dataset)
    write_ops(args.manifest, ops)
    print(f"{args.manifest}: {len(ops)} op types over the training architectures")


if __name__ == "__main__":
    main()
