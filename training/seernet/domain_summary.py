"""Write a device's ``domain.json``: the sizes its training graphs covered
(:mod:`perfseer_rt.predict.domain` reads it beside the manifest).

From dataset folders (the records a predictor was trained on and their
stored graphs)::

    python -m training.seernet.domain_summary --manifest exported_models/cpu-amd-epyc-1t/manifest.json \\
        --dataset data/cpu-amd-epyc-1t/inference data/cpu-amd-epyc-1t/inference-b16-64 ...

or, for the NAS-Bench-201 devices trained on HELP's latencies (no stored
graphs), from the HELP pool's cells (``--nb201-csv``: the rows the devices
drew their 720 training networks from, exported and extracted at batch 1)::

    python -m training.seernet.domain_summary --manifest exported_models/nb201-pixel3/manifest.json \\
        --nb201-csv ../shared/external/help-nb201/nb201_latency.csv --rows 900 --sample 120

Written next to the manifest (``--out`` to write elsewhere): FLOPs, node
count, weights (MiB), the largest activation tensor (elements) and the
attention key length (tokens) as ``{"min", "max"}`` over the graphs used,
the number of graphs with attention, the batch sizes and the op types
(the manifest's ``training_data.ops`` where it has them, else counted on
the graphs). The command is recorded in the file.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from tqdm import tqdm

from perfseer_rt.graph import extract
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.domain import DOMAIN_FILE, GraphSizes, graph_sizes, ops_of_onehot, sizes_of
from training.seernet.data import dataset_dirs, read_graph_shard, read_records


def _span(values: Iterable[float]) -> dict[str, float] | None:
    v = [float(x) for x in values]
    return {"min": min(v), "max": max(v)} if v else None


def summarize(sizes: Sequence[GraphSizes], ops: dict[str, int], source: str) -> dict[str, Any]:
    """The ``domain.json`` document of these graphs."""
    att = [s.attention_length for s in sizes if s.attention_length > 0]
    return {"format": "perfseer-rt-domain", "version": 1, "source": source,
            "created": datetime.date.today().isoformat(), "graphs": len(sizes),
            "flops_total": _span(s.flops_total for s in sizes), "nodes": _span(s.nodes for s in sizes),
            "weight_mb": _span(s.weight_mb for s in sizes),
            "tensor_elems": _span(s.tensor_elems for s in sizes),
            "attention_length": _span(att), "attention_graphs": len(att),
            "batch_sizes": sorted({s.batch for s in sizes}), "ops": ops}


def dataset_sizes(folders: Sequence[Path]) -> tuple[list[GraphSizes], Counter[str]]:
    """Sizes of every measured graph of the folders, and op types (from the
    one-hot columns: ops outside the vocabulary count as ``other``)."""
    graphs: dict[str, tuple[Any, ...]] = {}
    for d in dataset_dirs(folders):
        for shard in sorted((d / "graphs").glob("*.npz")):
            graphs.update(read_graph_shard(shard))
    keys = sorted({r["graph_key"] for r in read_records(folders)
                   if r.get("graph_key") in graphs and r.get("status", "ok") == "ok"})
    sizes, ops = [], Counter[str]()
    for k in tqdm(keys, desc="graphs", unit="graph"):
        x, ei, ea, u = graphs[k]
        names = ops_of_onehot(x)
        sizes.append(sizes_of(names, x, ei, ea, u))
        ops.update(set(names))
    return sizes, ops


def nb201_sizes(csv_path: Path, rows: int, sample: int, seed: int) -> tuple[list[GraphSizes], Counter[str]]:
    """Sizes and op types of ``sample`` cells drawn with ``seed`` from the
    first ``rows`` rows of HELP's NAS-Bench-201 table, exported at batch 1."""
    from training.zoo import export_onnx, parse_spec  # lazy: torch, only for this route

    with open(csv_path) as f:
        cells = [r["arch_str"] for r in csv.DictReader(f)][:rows]
    picked = random.Random(seed).sample(cells, min(sample, len(cells)))
    sizes, ops = [], Counter[str]()
    with tempfile.TemporaryDirectory() as tmp:
        for i, cell in enumerate(tqdm(picked, desc="nb201", unit="cell")):
            path = export_onnx(parse_spec(f"nb201:{cell}"), Path(tmp) / f"{i}.onnx", batch=1, structure_only=True)
            g = extract(path, batch=1)
            sizes.append(graph_sizes(g))
            ops.update(set(g.node_ops))
    return sizes, ops


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.domain_summary", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--dataset", nargs="*", type=Path, default=[])
    ap.add_argument("--nb201-csv", type=Path, default=None)
    ap.add_argument("--rows", type=int, default=900, help="HELP rows the training networks were drawn from")
    ap.add_argument("--sample", type=int, default=120, help="cells exported from those rows")
    ap.add_argument("--seed", type=int, default=20261127)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    manifest = json.loads(args.manifest.read_text())
    if args.dataset:
        sizes, counted = dataset_sizes(args.dataset)
        source = f"{len(sizes)} stored training graphs of " + ", ".join(map(str, args.dataset))
    elif args.nb201_csv:
        sizes, counted = nb201_sizes(args.nb201_csv, args.rows, args.sample, args.seed)
        source = (f"{len(sizes)} NAS-Bench-201 cells drawn with random.Random({args.seed}) from the first "
                  f"{args.rows} rows of {args.nb201_csv.name} (the pool of the 720 training networks), batch 1")
    else:
        raise SystemExit("error: give --dataset folders or --nb201-csv")
    ops = (manifest.get("training_data") or {}).get("ops") or dict(counted.most_common())
    doc = summarize(sizes, ops, source)
    doc["command"] = "python -m training.seernet.domain_summary " + " ".join(sys.argv[1:] if argv is None else argv)
    out = args.out or args.manifest.parent / DOMAIN_FILE
    atomic_write_bytes(out, (json.dumps(doc, indent=1) + "\n").encode())
    print(f"wrote {out}: {len(sizes)} graphs; " + ", ".join(
        f"{k} {doc[k]['min']:.4g}..{doc[k]['max']:.4g}" for k in ("flops_total", "nodes", "weight_mb",
                                                                  "tensor_elems", "attention_length") if doc[k]))


if __name__ == "__main__":
    main()
