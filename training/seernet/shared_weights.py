"""One copy of each network in an exported predictor folder.

The blended predictor (``seernet_gbm.onnx``, :func:`training.seernet.ensemble.export_blend`)
is the exported SeerNet (``seernet.onnx``) with the GBM's trees and the blend
appended, so it held every SeerNet weight a second time (7 of its 10.9 MB).
:func:`share_weights` stores each such tensor as ONNX external data that
points at the same bytes inside ``seernet.onnx`` (a location, an offset and a
length: a tensor's ``raw_data`` is stored verbatim in the protobuf file).
onnxruntime and ``onnx.load`` read the tensors as if they were inline, so the
blend computes exactly what it did; the installed package carries each
network once.

Run on a folder already exported: ``python -m training.seernet.shared_weights
exported_models/cpu-amd-epyc-1t/seernet_gbm.onnx exported_models/cpu-amd-epyc-1t/seernet.onnx``
(then update the manifest's ``sha256`` of the blend; the export does both).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import onnx

#: Smallest tensor (raw bytes) stored as a reference into the other file;
#: smaller ones (biases of a few values, the blend's constants) stay inline.
MIN_SHARED_BYTES = 1024


def share_weights(path: str | os.PathLike, base_path: str | os.PathLike,
                  min_bytes: int = MIN_SHARED_BYTES) -> int:
    """Rewrite the ONNX file ``path`` in place: each initializer of at least
    ``min_bytes`` raw bytes whose bytes also occur in the file ``base_path``
    (in the same folder) becomes external data at that offset of
    ``base_path``. Returns how many tensors now point into ``base_path``."""
    path, base_path = Path(path), Path(base_path)
    if path.resolve().parent != base_path.resolve().parent:
        raise ValueError(f"{path} and {base_path} must be in one folder (external data is "
                         "read relative to the model)")
    base = base_path.read_bytes()
    model = onnx.load(str(path), load_external_data=False)
    shared = 0
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or not t.HasField("raw_data"):
            continue
        raw = t.raw_data
        at = base.find(raw) if len(raw) >= min_bytes else -1
        if at < 0:
            continue
        t.ClearField("raw_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in (("location", base_path.name), ("offset", str(at)), ("length", str(len(raw)))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        shared += 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return shared


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="the ONNX file to rewrite (the blend)")
    ap.add_argument("base", type=Path, help="the ONNX file whose bytes it reads (SeerNet)")
    args = ap.parse_args(argv)
    n = share_weights(args.model, args.base)
    print(f"{args.model}: {n} tensors read from {args.base.name}; {args.model.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
