"""Rebuild one timm model structure-only as ONNX (run in a child process).

``python -m training.publicgpu.export_one MODEL IMG_SIZE EXPORTER OUT.onnx
[--batch B]`` builds ``timm.create_model(MODEL, pretrained=False)`` (timm's own
random initialisation, eval mode, default head: what timm's ``benchmark.py``
timed), exports it at batch :data:`TRACE_BATCH` with a dynamic ``batch``
dimension on input and output, strips every tensor of 1 KiB or more to a
dangling external reference (:func:`training.zoo.export.strip_weights`: dims,
dtypes and names stay; the data is gone), writes ``OUT.onnx`` and then checks
that ``perfseer_rt.extract`` reads it at batch 1 and at ``B`` (a label batch).
It prints one JSON line (the fields of an ``exports.jsonl`` entry, see
:mod:`training.publicgpu.exports`) and exits 0, or exits non-zero with the
reason on the last line of stderr.

Exporters: ``torchscript`` (``torch.onnx.export(dynamo=False)``, opset
:data:`OPSET`, constant folding: BatchNorm folded into the convolution before
it) and ``dynamo`` (``dynamo=True``, torch's default exporter and its default
opset). Models whose pretrained config fixes the input size at another
resolution than the label's are built with ``img_size=IMG_SIZE`` (timm's
ViT-style models take it).

Run from the command line it is a debugging aid; the export run
(:mod:`training.publicgpu.exports`) calls :func:`export` and
:func:`check_extract` in its long-lived export process instead.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import onnx
import onnx.external_data_helper
import torch

from perfseer_rt.graph.extract import extract_batches
from training.publicgpu.cache import EXPORTERS, TMP_PREFIX
from training.zoo.export import strip_weights
from training.zoo.real.torchvision_compat import import_timm

#: Batch size the model is traced at (> 1 avoids batch-1 specialisations).
TRACE_BATCH = 2
#: Opset of the TorchScript exporter.
OPSET = 17


def op_histogram(proto) -> dict[str, int]:
    """Op type -> count over the main graph (``domain::Op`` outside the default domain)."""
    hist: collections.Counter[str] = collections.Counter()
    for node in proto.graph.node:
        hist[f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type] += 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def depthwise_convs(proto) -> int:
    """Conv nodes whose ``group`` equals their input channels (weight dim 1 is 1)."""
    shapes = {t.name: list(t.dims) for t in proto.graph.initializer}
    count = 0
    for node in proto.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        w = shapes.get(node.input[1])
        if group > 1 and w is not None and len(w) >= 2 and w[1] == 1:
            count += 1
    return count


def build(name: str, img_size: int):
    """The eval-mode timm model, whether ``img_size`` had to be passed to it, and
    its default (test) input side."""
    timm = import_timm()
    cfg = timm.models.get_pretrained_cfg(name) if "." in name else None
    model = timm.create_model(name, pretrained=False)
    pcfg = getattr(model, "pretrained_cfg", None) or (cfg.to_dict() if cfg else {})
    default = int((pcfg.get("test_input_size") or pcfg.get("input_size") or (3, 224, 224))[-1])
    fixed = bool(pcfg.get("fixed_input_size", False))
    passed = False
    if fixed and img_size not in (default, int((pcfg.get("input_size") or (3, 224, 224))[-1])):
        del model
        model = timm.create_model(name, pretrained=False, img_size=img_size)
        passed = True
    return model.eval(), passed, default


@torch.no_grad()
def share_parameters(model: torch.nn.Module, seed: int = 0) -> int:
    """Make every parameter a view into one shared random buffer (``lean`` exports).

    Parameter ``i`` (in module order) becomes ``buf[i : i + numel]`` viewed at its
    shape: no two parameters are equal (the exporter would merge equal
    initializers), every shape and dtype stays, and the parameters take the
    memory of the largest one instead of all of them, so the exporter's own
    copies are what is left. Tied parameters stay tied. Values are random
    normal (not timm's initialisation): only the structure is kept anyway.
    Returns the bytes freed.
    """
    mods = [(m, leaf, p) for m in model.modules() for leaf, p in m._parameters.items() if p is not None]
    olds: dict[int, torch.nn.Parameter] = {id(p): p for _, _, p in mods}
    biggest = max((p.numel() for p in olds.values()), default=0)
    gen = torch.Generator().manual_seed(seed)
    buf = torch.randn(biggest + len(olds), generator=gen)
    new: dict[int, torch.nn.Parameter] = {}
    for i, (pid, p) in enumerate(olds.items()):
        new[pid] = torch.nn.Parameter(buf[i:i + p.numel()].view(p.shape).to(p.dtype), requires_grad=False)
    freed = sum(p.numel() * p.element_size() for p in olds.values())
    for m, leaf, p in mods:
        m._parameters[leaf] = new[id(p)]
    return freed


def export(name: str, img_size: int, exporter: str, out: Path, lean: bool = False) -> dict:
    """Export ``name`` at ``img_size`` to ``out`` structure-only; the entry's export
    fields. ``lean``: :func:`share_parameters` first (large models)."""
    timm = import_timm()
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model, passed, default = build(name, img_size)
    params = int(sum(p.numel() for p in model.parameters()))
    if lean:
        share_parameters(model)
    x = torch.randn(TRACE_BATCH, 3, img_size, img_size)
    out.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings(), \
            tempfile.TemporaryDirectory(dir=out.parent, prefix=TMP_PREFIX) as tmp:
        warnings.simplefilter("ignore")
        raw = Path(tmp) / "model.onnx"
        if exporter == "torchscript":
            torch.onnx.export(model, (x,), str(raw), dynamo=False, opset_version=OPSET,
                              do_constant_folding=True, input_names=["input"],
                              output_names=["logits"],
                              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
        else:
            program = torch.onnx.export(model, (x,), dynamo=True, input_names=["input"],
                                        output_names=["logits"], verbose=False,
                                        dynamic_shapes=({0: torch.export.Dim("batch", min=1)},))
            if program is None:
                raise RuntimeError("the dynamo exporter returned no program")
            program.save(str(raw))
            del program
        del model
        # weights stay on disk when torch wrote them as external data (models over 2 GB)
        proto = onnx.load(str(raw), load_external_data=False)
    export_s = time.perf_counter() - t0
    data_name = out.name + ".data"
    for t in proto.graph.initializer:  # external tensors: point them at the dangling name too
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            onnx.external_data_helper.set_external_data(
                t, data_name, int(info.get("offset", 0)), int(info.get("length", 0)))
    strip_weights(proto, data_name)
    for key, value in (("publicgpu.model", name), ("publicgpu.img_size", str(img_size)),
                       ("publicgpu.exporter", exporter), ("publicgpu.torch", torch.__version__),
                       ("publicgpu.timm", timm.__version__)):
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    blob = proto.SerializeToString()
    part = out.with_name(out.name + ".part")
    part.write_bytes(blob)
    os.replace(part, out)  # never a partial file under the final name
    return {"params": params, "default_res": default, "img_size_arg": passed, "lean": lean,
            "nodes": len(proto.graph.node), "ops": op_histogram(proto),
            "depthwise_convs": depthwise_convs(proto), "opset": proto.opset_import[0].version,
            "onnx_sha256": hashlib.sha256(blob).hexdigest(), "onnx_bytes": len(blob),
            "export_s": round(export_s, 2), "torch_version": torch.__version__,
            "timm_version": timm.__version__, "onnx_version": onnx.__version__}


def check_extract(path: Path, batch: int) -> dict:
    """Extract at batch 1 and ``batch``; FLOPs must scale with the batch (not baked in)."""
    t0 = time.perf_counter()
    try:
        g1, gb = extract_batches(str(path), [1, batch])
    except Exception as exc:  # noqa: BLE001 - recorded: the file does not extract
        return {"batch": batch, "status": "error",
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    f1, fb = float(g1.globals["flops_total"]), float(gb.globals["flops_total"])
    ratio = fb / (batch * f1) if f1 > 0 else None
    ok = ratio is not None and abs(ratio - 1.0) < 0.02
    return {"batch": batch, "status": "ok" if ok else "error",
            "error": None if ok else f"FLOPs at batch {batch} are {ratio} x batch x FLOPs at batch 1",
            "flops_b1": f1, "flops": fb, "nodes": int(gb.globals["num_nodes"]),
            "extract_s": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.publicgpu.export_one", description=__doc__)
    ap.add_argument("model")
    ap.add_argument("img_size", type=int)
    ap.add_argument("exporter", choices=EXPORTERS)
    ap.add_argument("out", type=Path)
    ap.add_argument("--batch", type=int, default=None, help="label batch to extract at")
    ap.add_argument("--lean", action="store_true", help="share one buffer among all parameters")
    args = ap.parse_args(argv)
    try:
        fields = export(args.model, args.img_size, args.exporter, args.out, lean=args.lean)
    except Exception as exc:  # noqa: BLE001 - the parent records the reason
        msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        print(f"{type(exc).__name__}: {msg}", file=sys.stderr)
        return 3
    if args.batch:
        fields["extract"] = check_extract(args.out, args.batch)
    print(json.dumps(fields, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
