"""Smaller exported predictors: SeerNet's weight matrices stored in fewer bits.

An exported SeerNet (:func:`training.seernet.export.export_seernet`) keeps
every weight matrix as float32: 7 of the 7.3 MB of the CPU predictor's
``seernet.onnx``. :func:`compact_weights` stores each float32 matrix of at
least :data:`MIN_ELEMENTS` values in a smaller type and puts the conversion
back to float32 in the graph, under the tensor's old name, so that every
consumer (a ``Gemm``) reads float32 as before:

- ``float16``: the matrix rounded to half precision, then ``Cast`` to float32.
  Half the bytes; each weight changes by at most 2**-11 of its value
  (relative 4.9e-4).
- ``int8``: per output channel (a row of a ``Gemm``'s transposed ``B``, a
  column of a ``MatMul``'s ``B``) ``w = scale * q`` with ``q`` in
  [-127, 127] and ``scale = max|w| / 127`` of that channel: ``Cast`` of ``q``
  to float32, then ``Mul`` by ``scale``. A quarter of the bytes; each weight
  changes by at most ``scale / 2``.

onnxruntime folds these constant nodes at session load (constant folding,
on at every optimization level above ``ORT_DISABLE_ALL``), so the predictor
computes in float32, on weights that differ from the trained ones by the
rounding above. Plain ``Cast``/``Mul`` rather than ``DequantizeLinear``:
onnxruntime's quantization fusions would turn a ``DequantizeLinear`` feeding
a ``Gemm`` into an integer kernel.

The conversion is deterministic (the same float32 matrix always gives the
same bytes), so a blend built from the compacted ``seernet.onnx``
(:func:`training.seernet.ensemble.export_blend`) holds the same bytes and
:func:`training.seernet.shared_weights.share_weights` still finds them.

Run on a predictor folder already exported: ``python -m
training.seernet.compact_weights exported_models/nb201-pixel3``
(:func:`compact_predictor`: every ONNX file of the folder, the weight sharing
redone, the manifest's ``sha256`` fields updated).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from training.seernet.shared_weights import share_weights
from training.seernet.tree_ensemble import convert_model

#: Storage types: half precision, or 8-bit integers with a float32 scale per output channel.
STORAGES = ("float16", "int8")
#: The default for exported SeerNets (see the module doc and docs/install.md).
DEFAULT_STORAGE = "float16"
#: Smallest matrix (values) stored compactly; biases, normalization statistics
#: and the blend's constants stay float32.
MIN_ELEMENTS = 1024


def _channel_axis(graph: onnx.GraphProto, name: str) -> int:
    """The output-channel axis of the 2-D weight ``name``: 0 where every
    consumer is a ``Gemm`` reading it as a transposed ``B``, else 1 (a
    ``MatMul`` or untransposed ``Gemm`` ``B``; the last axis otherwise)."""
    rows = True
    for node in graph.node:
        for i, x in enumerate(node.input):
            if x != name:
                continue
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            rows = rows and node.op_type == "Gemm" and i == 1 and trans_b == 1
    return 0 if rows else 1


def _int8(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)`` with ``w ~= q * scale``: ``q`` int8 in [-127, 127],
    ``scale`` float32, one per slice along ``axis`` (kept as a size-1 dim of
    the other axis, so that it broadcasts)."""
    other = 1 - axis
    peak = np.max(np.abs(w), axis=other, keepdims=True)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def compact_weights(model: onnx.ModelProto, storage: str = DEFAULT_STORAGE,
                    min_elements: int = MIN_ELEMENTS) -> int:
    """Store ``model``'s float32 2-D initializers of at least ``min_elements``
    values as ``storage`` (one of :data:`STORAGES`), in place; a ``Cast`` (and
    for int8 a ``Mul`` by the scales) gives each consumer the float32 tensor
    under its old name. Returns how many tensors were converted (0 for a
    model already compacted)."""
    if storage not in STORAGES:
        raise ValueError(f"storage {storage!r}: expected one of {', '.join(STORAGES)}")
    graph = model.graph
    graph_inputs = {i.name for i in graph.input}
    kept, added, nodes = [], [], []
    for t in graph.initializer:
        if (t.data_type != TensorProto.FLOAT or len(t.dims) != 2 or int(np.prod(t.dims)) < min_elements
                or t.data_location == TensorProto.EXTERNAL or t.name in graph_inputs):
            kept.append(t)
            continue
        w = numpy_helper.to_array(t)
        name = t.name
        if storage == "float16":
            added.append(numpy_helper.from_array(w.astype(np.float16), f"{name}.float16"))
            nodes.append(helper.make_node("Cast", [f"{name}.float16"], [name], name=f"{name}.cast",
                                          to=TensorProto.FLOAT))
        else:
            q, scale = _int8(w, _channel_axis(graph, name))
            added += [numpy_helper.from_array(q, f"{name}.int8"),
                      numpy_helper.from_array(scale, f"{name}.scale")]
            nodes += [helper.make_node("Cast", [f"{name}.int8"], [f"{name}.int8_float"],
                                       name=f"{name}.cast", to=TensorProto.FLOAT),
                      helper.make_node("Mul", [f"{name}.int8_float", f"{name}.scale"], [name],
                                       name=f"{name}.dequantize")]
    if not nodes:
        return 0
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + rest)
    return len(added) if storage == "float16" else len(added) // 2


def strip_metadata(model: onnx.ModelProto) -> int:
    """Drop the exporter's per-node and per-tensor ``metadata_props`` (torch's
    module path, class hierarchy and FX node text of each node: 0.29 MB of the
    CPU predictor's ``seernet.onnx``), in place; nothing reads them. Returns
    how many entries were dropped."""
    dropped = 0
    for item in [*model.graph.node, *model.graph.initializer]:
        dropped += len(item.metadata_props)
        del item.metadata_props[:]
    return dropped


def compact_file(path: str | os.PathLike, storage: str = DEFAULT_STORAGE) -> int:
    """:func:`compact_weights` on the ONNX file ``path``, rewritten in place
    (atomically; a self-contained file). Returns how many tensors were converted."""
    path = Path(path)
    model = onnx.load(str(path))
    n = compact_weights(model, storage)
    if n + strip_metadata(model):
        onnx.checker.check_model(model)
        atomic_write_bytes(path, model.SerializeToString())
    return n


def _external_base(model: onnx.ModelProto) -> str | None:
    """The one file ``model``'s external tensors are read from (None: self-contained)."""
    places = {e.value for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL
              for e in t.external_data if e.key == "location"}
    if len(places) > 1:
        raise ValueError(f"external data in several files {sorted(places)}; expected one")
    return next(iter(places), None)


def compact_predictor(folder: str | os.PathLike, storage: str = DEFAULT_STORAGE) -> dict[str, int]:
    """Compact every ``*.onnx`` of an exported predictor folder in place: each
    file is read whole first (a blend's tensors shared with ``seernet.onnx``
    included), compacted (:func:`compact_weights`, :func:`strip_metadata`, a
    blend's trees as ``TreeEnsemble``:
    :func:`training.seernet.tree_ensemble.convert_model`), written
    self-contained; a file that read tensors
    from another file reads them from it again
    (:func:`~training.seernet.shared_weights.share_weights`); the
    ``sha256`` of each changed model in ``manifest.json`` is updated. Returns
    file name -> tensors converted."""
    folder = Path(folder)
    paths = sorted(folder.glob("*.onnx"))
    models, bases = {}, {}
    for path in paths:  # all read before any is rewritten: a blend reads seernet.onnx's bytes
        bases[path.name] = _external_base(onnx.load(str(path), load_external_data=False))
        models[path.name] = onnx.load(str(path))
    done = {name: compact_weights(model, storage) for name, model in models.items()}
    changed = {name: done[name] + strip_metadata(model) + convert_model(model) for name, model in models.items()}
    for path in paths:
        if changed[path.name]:
            onnx.checker.check_model(models[path.name])
            atomic_write_bytes(path, models[path.name].SerializeToString())
    for name, base in bases.items():
        if base is not None and changed[name]:
            share_weights(folder / name, folder / base)
    manifest = folder / "manifest.json"
    if manifest.is_file() and any(changed.values()):
        doc = json.loads(manifest.read_text())
        for entry in (doc.get("seernet") or {}).get("models", []):
            if changed.get(entry["file"]):
                entry["sha256"] = hashlib.sha256((folder / entry["file"]).read_bytes()).hexdigest()
        atomic_write_bytes(manifest, (json.dumps(doc, indent=1) + "\n").encode())
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.seernet.compact_weights",
                                 description=(__doc__ or "").splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="+",
                    help="exported predictor folders (manifest.json and ONNX files), rewritten in place")
    ap.add_argument("--storage", choices=STORAGES, default=DEFAULT_STORAGE)
    args = ap.parse_args(argv)
    for folder in args.folders:
        for name, n in compact_predictor(folder, args.storage).items():
            print(f"{folder / name}: {n} weight matrices as {args.storage}; "
                  f"{(folder / name).stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
