"""The on-disk dataset that training reads, and the helper that writes its graphs.

Layout of a dataset folder ``DIR`` (written by :mod:`training.campaign.store`)::

    DIR/records/*.jsonl   one JSON object per configuration (model x batch x device)
    DIR/graphs/*.npz      shards of PerfGraph arrays, many graphs per shard

A record holds at least::

    {"arch_id": "a1b2...", "family": "resnet", "batch": 8, "device": "cpu-1t",
     "status": "ok",                      # anything else = a failed run, skipped
     "metrics": {"latency_ms": 3.2, "peak_mem_mb": 151.0},
     "split_arch": "train",               # "train" | "val" | "test", by architecture
     "split_family": "train",             # "train" | "val" | "test"; held-out families = "test"
     "graph_key": "resnet/a1b2.../b8"}    # unique over all shards of DIR/graphs

and may carry anything else (``spec``, ``quality``, ``env``, ...). A metric
value that is missing, non-finite or ``<= 0`` is treated as absent for that
record. ``split_family`` may use only ``"train"``/``"test"``: a quarter of the
training architectures then becomes the validation set (by a hash of
``arch_id``, so it is stable). Records of the same ``device`` and
``graph_key`` (repeated measurements, e.g. a drift-reference set) are merged
into one sample with the median of each metric.

A graph shard (:func:`write_graph_shard`) is an ``.npz`` (no pickles) with::

    x           float32[sum N, Fn]   node features of all graphs, concatenated
    edge_index  int64[2, sum E]      LOCAL node ids (0..N_g-1 within each graph)
    edge_attr   float32[sum E, Fe]
    u           float32[G, Fg]
    node_offsets int64[G + 1]        graph g's nodes are x[node_offsets[g]:node_offsets[g+1]]
    edge_offsets int64[G + 1]        same for edge_index columns and edge_attr rows
    keys        str[G]               the graph_key of each graph
    feature_version, node_columns, edge_columns, global_columns   (layout check)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from perfseer_rt.graph import layout
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.graph.structure import upgrade_globals
from training.dataset.splits import split_real
from training.seernet.sample import GraphSample

SPLITS = ("train", "val", "test")
SCHEMES = ("arch", "family", "real")

#: Memory phases a CPU inference record may carry in ``quality`` (MiB over the
#: same baseline as ``peak_mem_mb``, which is their maximum): the peak while
#: the session is created (weights read, prepacked copies made) and the peak
#: while it runs (weights resident + activation arena). Lifted into the
#: sample's targets so a predictor can learn each part.
PHASE_METRICS = ("load_peak_mb", "run_peak_mb")
#: One dataset folder, or several read as one.
DatasetPaths = str | os.PathLike | Sequence[str | os.PathLike]

#: ``env`` keys that name a CPU model; records of one device must agree on them.
CPU_KEYS = ("cpu_vendor", "cpu_family", "cpu_model_id")


class DatasetError(ValueError):
    """The dataset folder is missing something or does not match the layout."""


# ---------------------------------------------------------------- graph shards
def write_graph_shard(path: str | os.PathLike, keys: Sequence[str], graphs: Sequence) -> None:
    """Write many graphs (PerfGraph or GraphSample: anything with ``x``,
    ``edge_index``, ``edge_attr``, ``u``) to one ``.npz`` shard, atomically
    (temp file + rename: readers never see a partial shard)."""
    keys = [str(k) for k in keys]
    if len(keys) != len(graphs):
        raise ValueError(f"write_graph_shard: {len(keys)} keys for {len(graphs)} graphs")
    if len(set(keys)) != len(keys):
        dup = next(k for k, c in Counter(keys).items() if c > 1)
        raise ValueError(f"write_graph_shard: duplicate key {dup!r}")
    fn, fe, fg = len(layout.NODE_COLUMNS), len(layout.EDGE_COLUMNS), len(layout.GLOBAL_COLUMNS)
    xs = [np.asarray(g.x, dtype=np.float32).reshape(-1, fn) for g in graphs]
    eis = [np.asarray(g.edge_index, dtype=np.int64).reshape(2, -1) for g in graphs]
    eas = [np.asarray(g.edge_attr, dtype=np.float32).reshape(-1, fe) for g in graphs]
    us = [np.asarray(g.u, dtype=np.float32).reshape(fg) for g in graphs]
    for k, g in zip(keys, graphs):
        version = getattr(g, "feature_version", layout.FEATURE_VERSION)
        if version != layout.FEATURE_VERSION:
            raise ValueError(f"graph {k!r} has layout {version!r}, expected {layout.FEATURE_VERSION!r}")
    node_offsets = np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)
    edge_offsets = np.concatenate([[0], np.cumsum([e.shape[1] for e in eis])]).astype(np.int64)
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        x=np.concatenate(xs) if xs else np.zeros((0, fn), np.float32),
        edge_index=np.concatenate(eis, axis=1) if eis else np.zeros((2, 0), np.int64),
        edge_attr=np.concatenate(eas) if eas else np.zeros((0, fe), np.float32),
        u=np.stack(us) if us else np.zeros((0, fg), np.float32),
        node_offsets=node_offsets, edge_offsets=edge_offsets,
        keys=np.array(keys, dtype=str),
        feature_version=np.array(layout.FEATURE_VERSION),
        node_columns=np.array(layout.NODE_COLUMNS), edge_columns=np.array(layout.EDGE_COLUMNS),
        global_columns=np.array(layout.GLOBAL_COLUMNS),
    )
    atomic_write_bytes(path, buf.getvalue())


def read_graph_shard(path: str | os.PathLike) -> dict[str, tuple[np.ndarray, ...]]:
    """``graph_key -> (x, edge_index, edge_attr, u)`` for every graph of a shard."""
    with np.load(path, allow_pickle=False) as z:
        version = str(z["feature_version"])
        if tuple(z["node_columns"]) != layout.NODE_COLUMNS or tuple(z["edge_columns"]) != layout.EDGE_COLUMNS \
                or tuple(z["global_columns"]) != layout.GLOBAL_COLUMNS_OF.get(version):
            raise DatasetError(f"{path}: feature layout {version!r} (or its columns) is not one this "
                               f"perfseer-rt reads ({', '.join(layout.GLOBAL_COLUMNS_OF)}); "
                               "rebuild the dataset's graphs")
        x, ei, ea, u = z["x"], z["edge_index"], z["edge_attr"], z["u"]
        no, eo, keys = z["node_offsets"], z["edge_offsets"], [str(k) for k in z["keys"]]
    out: dict[str, tuple[np.ndarray, ...]] = {}
    for g, k in enumerate(keys):  # an older layout's globals are upgraded (perfseer_rt.graph.structure)
        xg, eig, eag = x[no[g]:no[g + 1]], ei[:, eo[g]:eo[g + 1]], ea[eo[g]:eo[g + 1]]
        out[k] = (xg, eig, eag, upgrade_globals(version, xg, eig, eag, u[g]))
    return out


# --------------------------------------------------------------------- records
def dataset_dirs(dataset: DatasetPaths) -> list[Path]:
    """One dataset folder or several read as one (e.g. a campaign and its
    extension measured with the same method on the same device)."""
    dirs = [Path(dataset)] if isinstance(dataset, (str, os.PathLike)) else [Path(d) for d in dataset]
    if not dirs:
        raise DatasetError("no dataset folder given")
    return dirs


def read_records(dataset: DatasetPaths) -> list[dict]:
    """Every record of ``DIR/records/*.jsonl`` (files in name order; folders
    in the order given)."""
    records = []
    for d in dataset_dirs(dataset):
        records.extend(_read_folder_records(d))
    return records


def _read_folder_records(dataset_dir: Path) -> list[dict]:
    files = sorted(Path(dataset_dir, "records").glob("*.jsonl"))
    if not files:
        raise DatasetError(f"{dataset_dir}: no records/*.jsonl; is this a dataset folder?")
    records = []
    for f in files:
        with open(f) as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{f}:{n}: not JSON ({exc.msg})") from None
    return records


def load_samples(dataset_dir: DatasetPaths, metrics: Iterable[str] | None = None,
                 device: str | None = None) -> list[GraphSample]:
    """The successful records of a dataset joined with their graphs.

    Records of one configuration measured more than once (the same
    ``device`` and ``graph_key``, e.g. the reference set re-measured during a
    campaign to watch drift) become one sample whose metrics are the medians;
    ``extra["repeats"]`` says how many records it merged.

    Args:
        dataset_dir: the dataset folder (layout in the module doc), or several
            read as one: their records pool, as do their graph shards.
        metrics: keep only these metrics in ``targets`` (default: all).
        device: keep only records of this device (default: all).
    """
    dirs = dataset_dirs(dataset_dir)
    where = ", ".join(map(str, dirs))  # how errors name the dataset
    wanted = set(metrics) if metrics is not None else None
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in read_records(dirs):
        if r.get("status") == "ok" and (device is None or r.get("device") == device):
            groups.setdefault((str(r.get("device")), str(r.get("graph_key", ""))), []).append(r)
    if wanted is None or any(m.startswith("peak_mem") for m in wanted):
        check_one_memory_method(where, [r for rs in groups.values() for r in rs])
    graphs: dict[str, tuple[np.ndarray, ...]] = {}
    for folder in dirs:
        for shard in sorted(Path(folder, "graphs").glob("*.npz")):
            graphs.update(read_graph_shard(shard))
    _refuse_mixed(groups)
    samples = []
    for (dev, key), rs in groups.items():
        r = rs[0]
        if key not in graphs:
            raise DatasetError(f"{where}: record {r.get('arch_id')!r} batch {r.get('batch')} "
                               f"points to graph_key {key!r}, which no graphs/*.npz shard holds")
        x, ei, ea, u = graphs[key]
        values: dict[str, list[float]] = {}
        for rec in rs:
            quality = rec.get("quality") or {}
            found = dict(rec.get("metrics") or {})
            found.update({m: quality[m] for m in PHASE_METRICS if m in quality})
            for m, v in found.items():
                if (wanted is None or m in wanted) and _positive(v):
                    values.setdefault(m, []).append(float(v))
        samples.append(GraphSample(
            x=x, edge_index=ei, edge_attr=ea, u=u,
            targets={m: float(np.median(v)) for m, v in values.items()},
            arch_id=str(r["arch_id"]), family=str(r.get("family", "")), batch=int(r.get("batch", 0)),
            split_arch=str(r.get("split_arch", "")), split_family=str(r.get("split_family", "")),
            split_real=split_real(str(r["arch_id"]), str(r.get("family", "")), str(r.get("group") or "")),
            key=key, extra={"device": dev, "repeats": len(rs), "group": str(r.get("group") or "")}))
    return samples


def check_one_memory_method(where, records: Iterable[dict]) -> str | None:
    """The one peak-memory method (``quality.peak_mem_method``) of ``records``
    (None when none names one); the same guard as the campaign store's, for
    inference and training-step records alike: peaks read another way (e.g.
    ``vmhwm`` vs ``vmhwm+mmap64k``, see :mod:`perfseer_rt.profile.hostmem`)
    are other labels and never train one predictor.

    Raises:
        DatasetError: naming the methods and how many records use each.
    """
    methods = Counter((r.get("quality") or {}).get("peak_mem_method") for r in records)
    methods.pop(None, None)
    if len(methods) > 1:
        found = ", ".join(f"{m} ({n} records)" for m, n in sorted(methods.items()))
        raise DatasetError(f"{where}: peak memory was measured with more than one method ({found}); "
                           "they do not mix in one predictor: train on one method's records "
                           "(--metrics without peak_mem_mb trains on time alone)")
    return next(iter(methods), None)


# ---------------------------------------------------------------------- splits
def split_samples(samples: Sequence[GraphSample], scheme: str = "arch") -> dict[str, list[GraphSample]]:
    """``{"train", "val", "test"} -> samples`` from the ``split_<scheme>`` field.

    ``scheme`` is ``"arch"``, ``"family"`` or ``"real"``. Without any
    ``"val"`` record, the architectures whose ``arch_id`` hash falls in the
    first quarter move from train to val.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown split scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    field = f"split_{scheme}"
    out: dict[str, list[GraphSample]] = {s: [] for s in SPLITS}
    for s in samples:
        name = getattr(s, field)
        if name not in out:
            raise DatasetError(f"sample {s.key!r}: {field} = {name!r}, expected one of {list(SPLITS)}")
        out[name].append(s)
    if not out["val"]:
        out["val"] = [s for s in out["train"] if _hash_quarter(s.arch_id)]
        out["train"] = [s for s in out["train"] if not _hash_quarter(s.arch_id)]
    return out


def has_split(samples: Sequence[GraphSample], scheme: str) -> bool:
    """Whether every sample names its ``split_<scheme>`` and some are test."""
    names = [getattr(s, f"split_{scheme}") for s in samples]
    return bool(names) and all(n in SPLITS for n in names) and "test" in names


def available_metrics(samples: Sequence[GraphSample]) -> list[str]:
    """Metric names in order of first appearance."""
    seen: dict[str, None] = {}
    for s in samples:
        for m in s.targets:
            seen.setdefault(m, None)
    return list(seen)


def dataset_summary(samples: Sequence[GraphSample], metrics: Sequence[str]) -> dict:
    """Counts and ranges for the manifest and the report."""
    ci = layout.GLOBAL_COLUMNS.index("flops_total")
    flops = np.array([s.u[ci] for s in samples], dtype=np.float64)
    nodes = np.array([s.num_nodes for s in samples])
    summary: dict[str, Any] = {
        "configurations": len(samples),
        "architectures": len({s.arch_id for s in samples}),
        "families": dict(sorted(Counter(s.family for s in samples).items())),
        "batch_sizes": sorted({s.batch for s in samples}),
        "nodes": {"min": int(nodes.min()), "max": int(nodes.max())} if len(nodes) else {},
        "flops_total": {"min": float(flops.min()), "max": float(flops.max())} if len(flops) else {},
        "metrics": {},
    }
    for m in metrics:
        vals = np.array([s.targets[m] for s in samples if m in s.targets])
        summary["metrics"][m] = ({"count": int(len(vals)), "min": float(vals.min()),
                                  "median": float(np.median(vals)), "max": float(vals.max())}
                                 if len(vals) else {"count": 0})
    return summary


def _refuse_mixed(groups: dict[tuple[str, str], list[dict]]) -> None:
    """One CPU model per device, or :class:`DatasetError` (the memory method
    is :func:`check_one_memory_method`'s).

    A predictor learns the machine its labels were measured on: records of
    another CPU model (``env`` vendor/family/model id) would teach it another
    device. Records that do not state the CPU are not compared.
    """
    seen: dict[str, tuple[tuple, str]] = {}
    for (dev, key), rs in groups.items():
        for r in rs:
            env = r.get("env") or {}
            cpu = tuple(env.get(k) for k in CPU_KEYS)
            if any(v is None for v in cpu):
                continue
            first = seen.setdefault(dev, (cpu, key))
            if first[0] != cpu:
                raise DatasetError(
                    f"device {dev!r} mixes cpu {first[0]!r} (record {first[1]!r}) with {cpu!r} "
                    f"(record {key!r}); keep each CPU model in its own dataset/device")


def _positive(v) -> bool:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return False
    return bool(np.isfinite(f) and f > 0)


def _hash_quarter(arch_id: str) -> bool:
    return hashlib.sha256(arch_id.encode()).digest()[0] < 64
