"""Ablations of the learned layer on one held-out GPU: is a held-out GPU's
error a matter of the fit (seeds), of features that move with the device,
or of the data?

    python -m training.gpulearned.ablate --cache DIR --hold rtx-4090 \\
        --variants base seed:1 seed:2 drop:log10_tc_us+log10_tm_us add:clock add:l2fit

Variants (each fits on every label but the held-out GPU's, as ``cv`` does):

* ``base``: the shipped features and fit (seed 0);
* ``seed:N``: the same with seed ``N`` (the spread of the fit itself);
* ``drop:A+B``: without the named feature columns
  (:func:`perfseer_rt.gpu.learned_features.names`; ``FitConfig.drop``, as
  ``--drop`` of ``cv`` and ``export``);
* ``add:clock``: plus log2 of the GPU's boost clock (GHz), a device-level
  input the shipped layer does not have;
* ``add:l2fit``: plus the share of a kernel's bytes that fit in L2,
  ``min(1, L2 / bytes)``.
* ``transposes``: the kernel data rebuilt with cuDNN's NCHW <-> NHWC
  transposes around half-precision convolutions in NCHW steps
  (:func:`perfseer_rt.gpu.step.layout_transposes`; the prior's answers
  with them too, reported as ``prior``);
* ``A,B``: variant ``A``, then ``B`` on its result (``groups:0.5,drop:log2_bytes_over_l2``);
* ``groups:P``: labels weighted ``1 / n ** P`` by the size ``n`` of their
  (source, GPU, mode) group (:class:`training.gpulearned.fit.FitConfig`'s
  ``group_power``; the shipped fit: 1, every group the same);
* ``l2share:A``: the roofline's memory side with ``A`` in place of
  :data:`perfseer_rt.gpu.learned_features.L2_SHARE` (``l2share:0``: DRAM
  only, the roofline before the L2 entered it), the roofline and its two
  time features recomputed (:func:`training.gpulearned.dataset.retime_memory`).

Writes ``OUT/ablation.json`` (MAPE and median signed error in % per
variant, held-out GPU and mode, and per mode and layout as ``"MODE LAYOUT"``;
``prior``: the kernel prior on the same labels); the README of ``OUT``
quotes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from perfseer_rt.gpu import learned_features as LF
from perfseer_rt.gpu.prior import load_prior
from perfseer_rt.gpu.spec_store import shipped_sheet
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.gpulearned import dataset, report
from training.gpulearned import fit as FT
from training.gpulearned import tables as T
from training.gpulearned.tables import Label, LabelData

REPO = Path(__file__).resolve().parents[2]

Extra = Callable[[np.ndarray, GpuSpec], np.ndarray]


def _clock(x: np.ndarray, spec: GpuSpec) -> np.ndarray:
    return np.full((len(x), 1), np.log2(spec.clock_mhz / 1000.0))


def _l2fit(x: np.ndarray, spec: GpuSpec) -> np.ndarray:
    col = LF.names().index("log2_bytes_over_l2")
    return np.asarray(2.0 ** (-np.maximum(x[:, col:col + 1], 0.0)))


EXTRAS: dict[str, Extra] = {"clock": _clock, "l2fit": _l2fit}


Rebuilt = Callable[[], list[LabelData]]


def variant_data(name: str, labels: list[Label], data: list[LabelData],
                 epochs: int, transposed: Rebuilt | None = None) -> tuple[list[LabelData], FT.FitConfig]:
    """The kernel data and fit of variant ``name`` (module doc); variants
    joined by ``,`` apply one after the other (``groups:0.5,drop:A``);
    ``transposed``: gives the labels' data with the layout transposes."""
    cfg = FT.FitConfig(epochs=epochs)
    for part in name.split(","):
        data, cfg = _one_variant(part, labels, data, cfg, transposed)
    return data, cfg


def _one_variant(name: str, labels: list[Label], data: list[LabelData],
                 cfg: FT.FitConfig, transposed: Rebuilt | None = None) -> tuple[list[LabelData], FT.FitConfig]:
    kind, _, arg = name.partition(":")
    if kind == "base":
        return data, cfg
    if kind == "transposes" and transposed is not None:
        return transposed(), cfg
    if kind == "seed":
        return data, replace(cfg, seed=int(arg))
    if kind == "groups":
        return data, replace(cfg, group_power=float(arg))
    if kind == "drop":
        cfg = replace(cfg, drop=cfg.drop + tuple(arg.split("+")))
        FT.columns(cfg, len(LF.names()))  # refuses an unknown name
        return data, cfg
    if kind == "l2share":
        specs = {g: shipped_sheet(g).to_gpu_spec() for g in {lab.gpu for lab in labels}}
        return [dataset.retime_memory(d, specs[lab.gpu], float(arg)) for lab, d in zip(labels, data)], cfg
    if kind == "add" and arg in EXTRAS:
        specs = {g: shipped_sheet(g).to_gpu_spec() for g in {lab.gpu for lab in labels}}
        return [replace(d, x=np.concatenate([d.x, EXTRAS[arg](d.x, specs[lab.gpu])], 1).astype(np.float32))
                for lab, d in zip(labels, data)], cfg
    raise ValueError(f"unknown variant {name!r} (base, seed:N, groups:P, drop:A+B, add:{'|'.join(EXTRAS)}, "
                     "l2share:A, transposes)")


def held_out(labels: list[Label], data: list[LabelData], gpu: str, cfg: FT.FitConfig
             ) -> dict[str, dict]:
    """Fit without ``gpu``'s labels; MAPE / median signed error on them, per mode."""
    y = np.array([lab.ms for lab in labels])
    groups = [f"{lab.source}/{lab.gpu}/{lab.mode}" for lab in labels]
    test = np.array([lab.gpu == gpu for lab in labels])
    model = FT.fit([d for d, t in zip(data, test) if not t], y[~test],
                   [g for g, t in zip(groups, test) if not t], cfg)
    kept = [d for d, t in zip(data, test) if t]
    pred = FT.predict(model, kept)
    prior = np.array([d.prior_ms for d in kept])
    modes = np.array([lab.mode for lab, t in zip(labels, test) if t])
    keys = np.array([f"{lab.mode} {lab.layout}" for lab, t in zip(labels, test) if t])
    out = {m: report.stats(pred[modes == m], y[test][modes == m]) for m in sorted(set(modes))}
    out.update({k: report.stats(pred[keys == k], y[test][keys == k]) for k in sorted(set(keys))})
    out["prior"] = {k: report.stats(prior[keys == k], y[test][keys == k]) for k in sorted(set(keys))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.gpulearned.ablate", description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=dataset.LB.DATA)
    ap.add_argument("--hold", nargs="+", default=["rtx-4090"], help="GPU keys held out, one at a time")
    ap.add_argument("--variants", nargs="+", default=["base"])
    ap.add_argument("--epochs", type=int, default=120)
    ap.add_argument("--out", type=Path, default=REPO / "reports" / "gpu-learned")
    args = ap.parse_args(argv)
    prior = load_prior(str(REPO / "exported_models" / "_gpu_prior"))
    labels, data, _ = dataset.build(args.data, args.cache, prior, ours=None)

    def transposed() -> list[LabelData]:
        again, tdata, _ = dataset.build(args.data, args.cache, prior, ours=None, transposes=True)
        if [T.label_id(a) for a in again] != [T.label_id(b) for b in labels]:
            raise ValueError("the labels rebuilt with the layout transposes are not the same labels")
        return tdata

    rows = []
    for name in tqdm(args.variants, desc="variants"):
        try:
            vdata, cfg = variant_data(name, labels, data, args.epochs, transposed)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        for gpu in args.hold:
            rows.append({"variant": name, "held_out": gpu,
                         **held_out(labels, vdata, gpu, cfg)})
            print(json.dumps(rows[-1]), flush=True)
    doc = {"command": "python -m training.gpulearned.ablate --cache DIR --hold " + " ".join(args.hold)
                      + " --variants " + " ".join(args.variants) + f" --epochs {args.epochs}",
           "labels": len(labels), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out / "ablation.json", (json.dumps(doc, indent=1) + "\n").encode())
    md = args.out / "ablation.md"
    atomic_write_bytes(md, spliced(md.read_text() if md.exists() else None, markdown(doc)).encode())
    return 0


#: The lines around the table ``main`` writes into ``ablation.md``; what the
#: file holds outside them (sections written by hand) is kept.
BEGIN = "<!-- generated by python -m training.gpulearned.ablate: it rewrites what lies up to the end mark -->"
END = "<!-- end of the generated part -->"


def spliced(old: str | None, table: str) -> str:
    """``ablation.md`` with ``table`` (between :data:`BEGIN` and :data:`END`)
    in place of the generated part of ``old``: between the marks, or, in a
    file without them, the text before its first ``## `` section. The rest
    of ``old`` is kept as it was."""
    block = f"{BEGIN}\n{table.rstrip()}\n{END}\n"
    if old is None:
        return block
    start, end = old.find(BEGIN), old.find(END)
    if start >= 0 and end > start:
        after = old[end + len(END):].lstrip("\n")
        return old[:start] + block + ("\n" + after if after else "")
    section = old.find("\n## ")
    rest = old[section + 1:] if section >= 0 else ""
    return block + ("\n" + rest if rest else "")


def markdown(doc: dict) -> str:
    """``ablation.md``: the variants' held-out error, one row per variant,
    held-out GPU and mode (and mode and layout, where the run split them:
    MAPE % and median signed error %, n labels; the prior's MAPE beside)."""
    lines = ["# The learned GPU layer with one GPU held out, under variants of the fit", "",
             f"Regenerate: `{doc['command']}` ({doc['labels']} labels, all measured by others; "
             "variants: training/gpulearned/ablate.py).", "",
             "| variant | held out | mode | labels | MAPE % | median signed % | within 20 % | prior MAPE % |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in doc["rows"]:
        groups = sorted(k for k, v in row.items() if k not in ("variant", "held_out", "prior")
                        and isinstance(v, dict))
        for mode in groups:
            st = row[mode]
            prior = (row.get("prior") or {}).get(mode) or {}
            if st.get("n"):
                lines.append(f"| {row['variant']} | {row['held_out']} | {mode} | {st['n']} | {st['mape']} | "
                             f"{st['median']:+} | {st['within_20']} | {prior.get('mape', '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
