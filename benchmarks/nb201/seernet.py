"""The NAS-Bench-201 benchmark: HELP's 19-device latencies, HELP's protocol.

``python -m benchmarks.nb201 seernet --csv FILE --out reports/nb201`` runs three parts and
writes ``README.md`` and ``results.json`` into ``--out``:

- ``flops``: FLOPs alone. Spearman of the graph's total FLOPs against the
  latency on the trimmed test set (the baseline HELP and BRP-NAS quote), and
  for MAPE a log-log line fitted on the trimmed pool.
- ``single``: per device, one SeerNet trained on the device's trimmed pool
  (the "900 samples" setting of BRP-NAS: 900 pool architectures, 720 after
  the 10..90 % trim), scored on the trimmed test set.
- ``fewshot``: one multi-device SeerNet pre-trained on the pool data of every
  device except the held-out ones (:mod:`benchmarks.nb201.seernet_multi`), then each
  held-out device fitted from k = 10, 20, 50, 100 and all (720) of its
  trimmed-pool samples; also SeerNet trained from scratch on the same k
  samples, to show what pre-training buys.

Every device/part result is kept in ``<cache>/nb201-runs/`` under a key of
its settings, so a cut-off run resumes where it stopped and a finished one
rebuilds the report in seconds.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from benchmarks.nb201 import protocol
from benchmarks.nb201.help_data import DEVICES, HelpData, device_batch, load_help, parse_batches
from perfseer_rt.graph import layout
from training.byod.errors import ByodError
from training.byod.graphs import GraphCache, graphs_for, resolve
from training.seernet.sample import GraphSample, from_perfgraph
from training.seernet.train import TrainConfig

METRIC = "latency_ms"
SHOTS = (10, 20, 50, 100, 900)
#: Held out of pre-training by default: a GPU at batch 1, a GPU at batch
#: 256, a desktop CPU and two phones.
HELD_OUT = ("titanxp_1", "titanxp_256", "gold_6240", "pixel3", "samsung_s7")


class Samples:
    """GraphSample templates of every architecture at every batch size needed."""

    def __init__(self, data: HelpData, batches: Sequence[int], cache: GraphCache, graphs: str = "eager"):
        prefix = {"eager": "nb201-eager:", "zoo": "nb201:"}[graphs]
        self.batch = data.batch
        self.variant = graphs
        refs = [resolve(prefix + c, Path(".")) for c in data.cells]
        self.by_batch: dict[int, list[GraphSample]] = {}
        for b in sorted(set(batches)):
            built = graphs_for(refs, [b] * len(refs), cache, f"{prefix} graphs, batch {b}")
            self.by_batch[b] = [
                from_perfgraph(replace(g, x=g.x.astype(np.float32), edge_attr=g.edge_attr.astype(np.float32),
                                       u=g.u.astype(np.float32)), {}, arch_id=r.arch_id, family="nb201",
                               batch=b, key=f"nb201/{i}/b{b}")
                for i, (g, r) in enumerate(zip(built, refs))]

    def for_device(self, idx: Sequence[int], device: str, latency: np.ndarray) -> list[GraphSample]:
        """Samples of architectures ``idx`` with the device's latency as target."""
        base = self.by_batch[self.batch[device]]
        return [replace(base[i], targets={METRIC: float(latency[i])}) for i in idx]

    def flops(self, idx: Sequence[int], device: str) -> np.ndarray:
        col = layout.GLOBAL_COLUMNS.index("flops_total")
        base = self.by_batch[self.batch[device]]
        return np.array([base[i].u[col] for i in idx], dtype=np.float64)


# ---------------------------------------------------------------- result store
class RunStore:
    """JSON results keyed by (part, device, settings) for resuming."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, part: str, name: str, settings: dict) -> Path:
        key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return self.root / f"{part}__{name}__{key}.json"

    def get(self, part: str, name: str, settings: dict) -> dict | None:
        p = self._path(part, name, settings)
        return json.loads(p.read_text()) if p.is_file() else None

    def put(self, part: str, name: str, settings: dict, result: dict) -> None:
        from perfseer_rt.graph.perfgraph import atomic_write_bytes

        atomic_write_bytes(self._path(part, name, settings), json.dumps(result, indent=1).encode())


def log(msg: str) -> None:
    print(f"[nb201 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ parts
def run_flops(data: HelpData, samples: Samples, devices: Sequence[str]) -> dict:
    """FLOPs-only Spearman, and a log-log line fitted on the trimmed pool."""
    out = {}
    for d in devices:
        pool, test = protocol.protocol_sets(data.latency[d])
        fp, ft = samples.flops(pool, d), samples.flops(test, d)
        slope, icept = np.polyfit(np.log(fp), np.log(data.latency[d][pool]), 1)
        pred = np.exp(icept + slope * np.log(ft))
        acc = protocol.accuracy(pred, data.latency[d][test])
        acc["spearman"] = protocol.spearman(ft, data.latency[d][test])
        out[d] = acc
    return out


def run_single(data: HelpData, samples: Samples, devices: Sequence[str], cfg: TrainConfig,
               store: RunStore, export: Sequence[str] = (), hidden: int = 256) -> dict:
    """One SeerNet per device on its trimmed pool, scored on its trimmed test set."""
    from training.byod.fit import fit_seernet

    settings = {"cfg": {k: v for k, v in cfg.to_dict().items() if k not in ("progress", "threads")},
                "hidden": hidden, "feature_version": layout.FEATURE_VERSION, "graphs": samples.variant, "v": 1}
    out = {}
    for n, d in enumerate(devices, start=1):
        cached = store.get("single", d, settings)
        if cached and d not in export:
            out[d] = cached
            log(f"single {d}: cached (Spearman {cached['spearman']:.3f})")
            continue
        pool, test = protocol.protocol_sets(data.latency[d])
        t0 = time.perf_counter()
        fitted = fit_seernet(samples.for_device(pool, d, data.latency[d]), [METRIC], cfg, hidden=hidden,
                             desc=f"single {d}")
        test_s = samples.for_device(test, d, data.latency[d])
        pred = fitted.predict(test_s)[:, 0]
        acc = protocol.accuracy(pred, data.latency[d][test])
        best, run = fitted.epochs[METRIC]
        acc.update({"train": fitted.counts["train"], "val": fitted.counts["val"], "best_epoch": best,
                    "epochs": run, "seconds": time.perf_counter() - t0})
        store.put("single", d, settings, acc)
        out[d] = acc
        log(f"single {d} ({n}/{len(devices)}): Spearman {acc['spearman']:.3f}, MAPE {acc['mape']:.2f} %, "
            f"+-10 % {acc['within_10']:.1f} %, {run} epochs, {acc['seconds']:.0f} s")
        if d in export:
            _export_device(d, fitted, samples, data, acc)
    return out


def _export_device(device: str, fitted, samples: Samples, data: HelpData, acc: dict) -> None:
    """Ship the device's 900-sample SeerNet as ``exported_models/nb201-<device>/``."""
    from training.seernet.data import dataset_summary
    from training.seernet.export import export_seernet
    from training.seernet.manifest import model_entry, write_manifest

    out = Path("exported_models") / f"nb201-{device}"
    pool, _ = protocol.protocol_sets(data.latency[device])
    # int8 weights (training/seernet/compact_weights.py): on HELP's test graphs the
    # predictions moved 1.1e-3 at most against float32 (docs/install.md, "Size")
    path = export_seernet(fitted.model, fitted.norm, out / "seernet.onnx", fitted.metrics, storage="int8")
    entry = model_entry(path, "seernet", fitted.metrics, fitted.parameters, kind="SeerNet")
    summary = dataset_summary(samples.for_device(pool, device, data.latency[device]), fitted.metrics)
    summary.update({"source": "HELP NAS-Bench-201 latencies (HayeonLee/HELP), architectures 0..899 "
                              "trimmed to the 10..90 % latency band",
                    "domain": "NAS-Bench-201 CIFAR-10 networks only"})
    write_manifest(out / "manifest.json", device=f"nb201-{device}",
                   description=f"{DEVICES.get(device, ('', 0, device))[2]}; "
                               "latencies measured by others (HELP / BRP-NAS), "
                               "PyTorch NAS-Bench-201 networks",
                   metrics=fitted.metrics, normalization=fitted.norm, models=[entry],
                   training_data=summary,
                   accuracy={"test": {"seernet": {METRIC: {k: acc[k] for k in
                                                           ("mape", "within_10", "spearman", "count")}}}},
                   report={"command": "python -m benchmarks.nb201 seernet --csv FILE --export-device " + device,
                           "protocol": "HELP: pool 0..899, test 900..1899, 10..90 % trim"})
    write_device_report(out, device, acc)
    log(f"exported {out}")


def write_device_report(out: Path, device: str, acc: dict) -> None:
    """The short ``report.md`` beside a shipped ``nb201-<device>`` predictor."""
    (out / "report.md").write_text(
        f"# Predictor for `nb201-{device}`\n\n{DEVICES.get(device, ('', 0, device))[2]}. "
        "SeerNet (paper 001) trained on the 720 "
        "trimmed pool architectures (0..899) of HELP's NAS-Bench-201 latencies, measured by others with "
        "NAS-Bench-201's PyTorch networks; graphs as that code executes them (`nb201-eager:<cell>`).\n\n"
        f"Test (architectures 900..1899, 10..90 % trim, {acc['count']} networks): Spearman "
        f"{acc['spearman']:.3f}, MAPE {acc['mape']:.2f} %, {acc['within_10']:.1f} % within +-10 %.\n\n"
        "Domain: NAS-Bench-201 CIFAR-10 networks only. Full report: `reports/nb201/README.md`; rebuild: "
        f"`python -m benchmarks.nb201 seernet --csv FILE --parts single --devices {device} --export-device {device} "
        f"--out /tmp/nb201-{device}` (leaves reports/nb201 alone).\n")


def run_fewshot(data: HelpData, samples: Samples, devices: Sequence[str], held_out: Sequence[str],
                cfg: TrainConfig, store: RunStore, hidden: int = 256, draws: int = 5) -> dict:
    """Pre-train on the pool of every device but ``held_out``; adapt each held-out device."""
    from benchmarks.nb201 import seernet_multi as fewshot

    pre_devs = [d for d in devices if d not in held_out]
    if not pre_devs:
        raise ByodError("few-shot: every device is held out; keep some for pre-training")
    settings = {"cfg": {k: v for k, v in cfg.to_dict().items() if k not in ("progress", "threads")},
                "hidden": hidden, "pre": pre_devs, "feature_version": layout.FEATURE_VERSION,
                "graphs": samples.variant, "v": 1}
    metrics = [f"{d}_ms" for d in pre_devs]
    ckpt = store._path("pretrain", "model", settings).with_suffix(".pt")
    info = store.get("pretrain", "model", settings)
    pre_samples = _pretrain_samples(data, samples, pre_devs)
    if info and ckpt.is_file():
        model = fewshot.SeerNetMulti(fewshot.SeerNetConfig(hidden=hidden, num_outputs=len(metrics)))
        state = torch_load(ckpt)
        model.load_state_dict(state["state_dict"])
        model.eval()
        pre = fewshot.Pretrained(model, fewshot.Normalization.from_dict(state["normalization"]),
                                 tuple(metrics), info)
        log(f"pre-training: cached ({info['epochs']} epochs)")
    else:
        log(f"pre-training on {len(pre_devs)} devices, {len(pre_samples)} graphs ...")
        pre = fewshot.pretrain(pre_samples, metrics, cfg, hidden)
        import torch

        torch.save({"state_dict": pre.model.state_dict(), "normalization": pre.norm.to_dict()}, ckpt)
        store.put("pretrain", "model", settings, pre.info)
        log(f"pre-training done: {pre.info['epochs']} epochs (best {pre.info['best_epoch']}), "
            f"{pre.info['seconds']:.0f} s")
    out = {"pretrain_devices": pre_devs, "held_out": list(held_out), "pretrain": pre.info,
           "draws": draws, "devices": {}}
    for h in held_out:
        lat = data.latency[h]
        pool, test = protocol.protocol_sets(lat)
        base = samples.by_batch[data.batch[h]]
        heads, emb = pre.features([base[i] for i in range(len(base))])
        same = [j for j, d in enumerate(pre_devs) if data.batch[d] == data.batch[h]]
        feats = heads[:, same] if same else heads
        out.setdefault("selection", {})[h] = _selection(heads, emb, feats, base, lat, pool, h, draws)
        curve = {}
        for k in SHOTS:
            runs = []
            for seed in range(draws if k < len(pool) else 1):
                idx = protocol.draw(pool, k, h, seed)
                head = fewshot.fit_ridge(feats[idx], lat[idx])
                pred = np.exp(head.predict_log(feats[test]))
                acc = protocol.accuracy(pred, lat[test])
                rest = np.setdiff1d(pool, idx)
                if len(rest):
                    acc["pool_rest_spearman"] = protocol.spearman(np.exp(head.predict_log(feats[rest])),
                                                                  lat[rest])
                acc.update({"k": len(idx), "alpha": head.alpha})
                runs.append(acc)
            curve[str(k)] = _mean_runs(runs)
            if k < len(pool):
                curve[str(k)]["scratch"] = _scratch(data, samples, h, k, cfg, store, settings)
        out["devices"][h] = curve
        out.setdefault("features", {})[h] = [pre_devs[j] for j in same] if same else pre_devs
        log(f"few-shot {h}: " + ", ".join(f"k={k} {c['spearman']:.3f}" for k, c in curve.items()))
    return out


def _selection(heads, emb, feats, base, lat, pool, device: str, draws: int) -> dict:
    """How the adaptation recipe was chosen: mean Spearman, over the draws, on
    the device's trimmed pool outside the k samples (never the test set), of
    ridge heads on four feature sets."""
    from benchmarks.nb201 import seernet_multi as fewshot

    gi = layout.column_index(layout.GLOBAL_COLUMNS)
    u = np.stack([s.u for s in base]).astype(np.float64)
    glob = np.log1p(u[:, [gi["flops_total"], gi["num_nodes"], gi["mac_total"]]])
    variants = {"same_batch_heads": feats, "all_heads": heads, "all_heads_embedding": np.c_[heads, emb],
                "same_batch_heads_flops_nodes_mac": np.c_[feats, glob]}
    out: dict = {}
    for name, f in variants.items():
        for k in SHOTS[:-1]:
            sp = []
            for seed in range(draws):
                idx = protocol.draw(pool, k, device, seed)
                rest = np.setdiff1d(pool, idx)
                head = fewshot.fit_ridge(f[idx], lat[idx])
                sp.append(protocol.spearman(head.predict_log(f[rest]), lat[rest]))
            out.setdefault(name, {})[str(k)] = float(np.mean(sp))
    return out


def _scratch(data: HelpData, samples: Samples, device: str, k: int, cfg: TrainConfig, store: RunStore,
             settings: dict) -> dict:
    """SeerNet trained from scratch on the first draw of k samples (no pre-training)."""
    from training.byod.fit import fit_seernet

    key = {**settings, "k": k, "pre": None}
    cached = store.get("scratch", device, key)
    if cached:
        return cached
    lat = data.latency[device]
    pool, test = protocol.protocol_sets(lat)
    idx = protocol.draw(pool, k, device, 0)
    t0 = time.perf_counter()
    fitted = fit_seernet(samples.for_device(idx, device, lat), [METRIC], cfg, desc=f"scratch {device} k={k}")
    acc = protocol.accuracy(fitted.predict(samples.for_device(test, device, lat))[:, 0], lat[test])
    acc.update({"epochs": fitted.epochs[METRIC][1], "seconds": time.perf_counter() - t0})
    store.put("scratch", device, key, acc)
    return acc


def torch_load(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def _mean_runs(runs: list[dict]) -> dict:
    keys = ("spearman", "mape", "within_10")
    out = {k: float(np.mean([r[k] for r in runs])) for k in keys}
    out.update({f"{k}_std": float(np.std([r[k] for r in runs])) for k in keys})
    out.update({"k": runs[0]["k"], "draws": len(runs), "count": runs[0]["count"],
                "alpha_median": float(np.median([r["alpha"] for r in runs]))})
    if "pool_rest_spearman" in runs[0]:
        out["pool_rest_spearman"] = float(np.mean([r["pool_rest_spearman"] for r in runs]))
    return out


def _pretrain_samples(data: HelpData, samples: Samples, devices: Sequence[str]) -> list[GraphSample]:
    """One graph per (architecture, batch) in some device's trimmed pool, with
    the latencies of that batch's devices whose trimmed pool holds it."""
    out = []
    for b in sorted({data.batch[d] for d in devices}):
        devs = [d for d in devices if data.batch[d] == b]
        pools = {d: set(protocol.protocol_sets(data.latency[d])[0].tolist()) for d in devs}
        for i in protocol.POOL:
            t = {f"{d}_ms": float(data.latency[d][i]) for d in devs if i in pools[d]}
            if t:
                out.append(replace(samples.by_batch[b][i], targets=t))
    return out


# ----------------------------------------------------------------------- driver
def run_benchmark(args, cfg: TrainConfig, cache: GraphCache, command: str) -> dict:
    """``python -m benchmarks.nb201 seernet`` (see the module doc)."""
    t_start = time.perf_counter()
    data = load_help(args.csv)
    devices = args.devices or data.devices
    unknown = [d for d in devices if d not in data.latency]
    if unknown:
        raise ByodError(f"unknown device(s) {unknown}; the CSV has {', '.join(data.devices)}")
    extra = parse_batches(args.batch)
    data.batch = {d: device_batch(d, extra) for d in devices}  # refuses a device of unknown batch
    held_out = [d for d in (args.held_out or HELD_OUT) if d in devices]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = RunStore(cache.root / "nb201-runs")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    samples = Samples(data, [data.batch[d] for d in devices], cache, args.graphs)
    timings["graphs"] = time.perf_counter() - t0
    log(f"graphs ready: {len(data.cells)} architectures at batch {sorted(samples.by_batch)} "
        f"({cache.exports} exported now, {cache.export_seconds:.0f} s)")
    results: dict = {"graphs": samples.variant, "protocol": {"pool": "architectures 0..899",  # noqa: E501
                                  "test": "architectures 900..1899",
                                  "trim": "per device and set: sorted positions int(0.1 n)..int(0.9 n)",
                                  "metric": "Spearman rank correlation on the trimmed test set; MAPE and "
                                            "share within +-10 % on the same set"},
                     "devices": {d: {"kind": DEVICES.get(d, ("?",))[0], "batch": data.batch[d],
                                     "description": DEVICES.get(d, ("", 1, d))[2]} for d in devices},
                     "data_notes": _data_notes(data, devices)}
    if "flops" in args.parts:
        results["flops"] = run_flops(data, samples, devices)
    if "fewshot" in args.parts and held_out:
        t0 = time.perf_counter()
        results["fewshot"] = run_fewshot(data, samples, devices, held_out, cfg, store)
        timings["fewshot"] = time.perf_counter() - t0
    if "single" in args.parts:
        t0 = time.perf_counter()
        results["single"] = run_single(data, samples, devices, cfg, store, args.export_device)
        timings["single"] = time.perf_counter() - t0
    if "ablation" in args.parts:
        t0 = time.perf_counter()
        abl = [d for d in (args.ablation_devices or held_out) if d in devices]
        zoo = samples if samples.variant == "zoo" else Samples(data, [data.batch[d] for d in abl], cache, "zoo")
        results["ablation_zoo"] = {"devices": abl, "flops": run_flops(data, zoo, abl),
                                   "single": run_single(data, zoo, abl, cfg, store)}
        timings["ablation"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    results["run"] = {"command": command, "train_config": cfg.to_dict(), "seconds_this_run": timings,
                      "python": platform.python_version(), "machine": platform.machine(),
                      "torch_threads": cfg.threads}
    from benchmarks.nb201.seernet_report import write_report

    write_report(out, results)
    log(f"wrote {out / 'README.md'} and results.json ({timings['total']:.0f} s)")
    return results


def _data_notes(data: HelpData, devices: Sequence[str]) -> dict:
    """How many architectures are cut by ``none`` edges or run dead operations,
    and how many of those survive the trim."""
    paths = [protocol.cell_paths(c) for c in data.cells]
    cut = np.array([p["cut"] for p in paths])
    dead = np.array([p["dead_ops"] > 0 for p in paths])
    test_cut = {}
    for d in devices:
        _, test = protocol.protocol_sets(data.latency[d])
        test_cut[d] = int(cut[test].sum())
    return {"cut_pool": int(cut[:900].sum()), "cut_test": int(cut[900:1900].sum()),
            "dead_ops_pool": int(dead[:900].sum()), "dead_ops_test": int(dead[900:1900].sum()),
            "cut_in_trimmed_test": test_cut}
