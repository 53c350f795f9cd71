"""Export a trained SeerNet (or SeerNet-Multi, or per-metric SeerNets stacked)
to ONNX with the normalization baked in.

The ONNX predictor's contract (what ``perfseer_rt.predict`` feeds it):

    inputs   x          float32[N, Fn]   raw PerfGraph node features, graphs concatenated
             edge_index int64[2, E]      global node ids (shifted per graph)
             edge_attr  float32[E, Fe]   raw edge features
             u          float32[G, Fg]   raw global features, one row per graph
             node_batch int64[N]         graph id of every node, in [0, G)
    output   y          float32[G, M]    metrics in their units (manifest order)

``N``, ``E`` and ``G`` are dynamic; every graph needs at least one node;
run it with ``INTRA_OP_THREADS`` (1; the runtime reads it from the manifest):
its row scatters (``ScatterND`` with a reduction) are not thread-safe in
onnxruntime, which gives run-to-run different sums with several threads
(onnxruntime issue #18048). The names, the thread setting and the builder of
these arrays (``concat_graphs``) are the runtime's contract,
:mod:`perfseer_rt.predict.manifest`, imported here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import Tensor, nn

from perfseer_rt.predict.manifest import INPUT_NAMES, INTRA_OP_THREADS, OUTPUT_NAMES
from training.seernet.compact_weights import DEFAULT_STORAGE, compact_file
from training.seernet.normalization import ColumnStats, Normalization
from training.seernet.onnx_rewrite import scatter_rows
from training.seernet.seernet import StackedPredictor
from training.seernet.train import load_checkpoint

__all__ = ["INPUT_NAMES", "OUTPUT_NAMES", "NormalizedPredictor", "export_seernet",
           "export_checkpoints", "run_onnx"]


class _Standardize(nn.Module):
    """``(slog1p(x) if log column else x - mean) / std`` per column."""

    log_mask: Tensor  # buffers, one entry per column
    mean: Tensor
    std: Tensor

    def __init__(self, stats: ColumnStats):
        super().__init__()
        self.register_buffer("log_mask", torch.tensor(stats.log1p, dtype=torch.bool))
        self.register_buffer("mean", torch.tensor(stats.mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(stats.std, dtype=torch.float32))

    def forward(self, x: Tensor) -> Tensor:
        slog = torch.sign(x) * torch.log1p(torch.abs(x))
        return (torch.where(self.log_mask, slog, x) - self.mean) / self.std


class NormalizedPredictor(nn.Module):
    """A model that takes raw PerfGraph arrays and returns metric units:
    feature normalization -> ``model`` -> ``exp(t * std + mean)``.

    Shapes: see the module doc; output ``[G, M]``.
    """

    y_mean: Tensor  # buffers: the log-target stats, one per metric
    y_std: Tensor

    def __init__(self, model: nn.Module, norm: Normalization, metrics: Sequence[str]):
        super().__init__()
        self.model = model
        self.metrics = tuple(metrics)
        self.node, self.edge, self.glob = _Standardize(norm.node), _Standardize(norm.edge), \
            _Standardize(norm.glob)
        self.register_buffer("y_mean", torch.tensor([norm.target_mean[m] for m in metrics],
                                                    dtype=torch.float32))
        self.register_buffer("y_std", torch.tensor([norm.target_std[m] for m in metrics],
                                                   dtype=torch.float32))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u: Tensor,
                node_batch: Tensor) -> Tensor:
        t = self.model(self.node(x), edge_index, self.edge(edge_attr), self.glob(u), node_batch)
        return torch.exp(t * self.y_std + self.y_mean)


#: Relative difference from torch allowed on the export's sample batch, by
#: weight storage (:mod:`training.seernet.compact_weights`): float32 is exact
#: up to summation order; the others must stay far below the predictors'
#: errors (~10 %): on the shipped predictors float16 moved predictions by
#: 4e-4 at most, int8 by 3e-3 (training step) to 8e-3 (CPU inference, not
#: shipped so) (docs/install.md, "Size").
CHECK_RTOL = {None: 1e-4, "float16": 5e-3, "int8": 5e-2}


def export_seernet(model: nn.Module, normalization: Normalization, path: str | os.PathLike,
                   metrics: Sequence[str] | None = None, opset: int = 18, check: bool = True,
                   storage: str | None = DEFAULT_STORAGE) -> Path:
    """Write ``model`` with ``normalization`` baked in to ``path`` (ONNX).

    Args:
        model: a trained SeerNet, SeerNetMulti or StackedPredictor whose outputs
            are ``metrics`` in standardized log space.
        normalization: the one the model was trained with.
        metrics: output order (default: ``normalization.metrics``).
        opset: ONNX opset, at least 18 (ScatterElements with max reduction).
        check: run the file in onnxruntime on a sample batch and compare with
            torch (relative :data:`CHECK_RTOL` of ``storage``).
        storage: the weight matrices' storage in the file, ``"float16"`` or
            ``"int8"`` (:func:`training.seernet.compact_weights.compact_weights`;
            computed in float32 either way), or None for float32.
    """
    if opset < 18:
        raise ValueError(f"opset {opset} < 18: ScatterElements max reduction needs opset 18")
    metrics = tuple(metrics or normalization.metrics)
    wrapped = NormalizedPredictor(model, normalization, metrics).eval()
    args = _example_inputs(normalization)
    n, e, g = torch.export.Dim("num_nodes"), torch.export.Dim("num_edges"), torch.export.Dim("num_graphs")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with warnings.catch_warnings(), torch.no_grad(), _quiet_torch_onnx():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapped, args, str(tmp), input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
            dynamic_shapes={"x": {0: n}, "edge_index": {1: e}, "edge_attr": {0: e},
                            "u": {0: g}, "node_batch": {0: n}},
            opset_version=opset, external_data=False, verbose=False)
    _rows_scatter(tmp)
    if storage is not None:
        compact_file(tmp, storage)
    os.replace(tmp, path)
    if check:
        got = run_onnx(path, *[a.numpy() for a in args])
        with torch.no_grad():
            want = wrapped(*args).numpy()
        if not np.allclose(got, want, rtol=CHECK_RTOL[storage], atol=0):
            raise RuntimeError(f"{path}: onnxruntime output differs from torch "
                               f"(max rel {np.max(np.abs(got - want) / np.abs(want)):.2e}, "
                               f"weights stored as {storage or 'float32'})")
    return path


def _rows_scatter(path: Path) -> None:
    """Rewrite the exporter's element scatters as row scatters (same result,
    ~20x faster in onnxruntime; :mod:`training.seernet.onnx_rewrite`)."""
    model = onnx.load(str(path))
    if scatter_rows(model):
        onnx.save(model, str(path))


@contextlib.contextmanager
def _quiet_torch_onnx():
    """Silence the exporter's progress lines and its torchvision notices."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._export", "torch.export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            yield
        finally:
            for lg, lvl in zip(loggers, levels):
                lg.setLevel(lvl)


def run_onnx(path: str | os.PathLike, x, edge_index, edge_attr, u, node_batch, *, output: str = "y") -> np.ndarray:
    """Run an exported predictor with onnxruntime on the CPU; its ``output``."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = INTRA_OP_THREADS  # ScatterND reductions race across threads
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = dict(zip(INPUT_NAMES, (np.asarray(x, np.float32), np.asarray(edge_index, np.int64),
                                   np.asarray(edge_attr, np.float32), np.asarray(u, np.float32),
                                   np.asarray(node_batch, np.int64))))
    return sess.run([output], feeds)[0]


def _example_inputs(norm: Normalization) -> tuple[Tensor, ...]:
    """Two small random graphs of raw-looking features (sizes > 1 so that no
    dimension is specialised during tracing)."""
    g = torch.Generator().manual_seed(0)
    fn, fe, fg = len(norm.node.columns), len(norm.edge.columns), len(norm.glob.columns)
    x = torch.rand(7, fn, generator=g) * 10
    edge_index = torch.tensor([[0, 1, 2, 4, 5], [1, 2, 3, 5, 6]])
    edge_attr = torch.rand(5, fe, generator=g) * 10
    u = torch.rand(2, fg, generator=g) * 10
    node_batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    return x, edge_index, edge_attr, u, node_batch


def export_checkpoints(checkpoints: Sequence[str | os.PathLike], path: str | os.PathLike,
                       opset: int = 18) -> Path:
    """Export SeerNet checkpoints (:func:`training.seernet.train.save_checkpoint`)
    to one ONNX file: one SeerNet-Multi, or several single-metric SeerNets
    trained with the same normalization, stacked in the given order."""
    loaded = [load_checkpoint(c) for c in checkpoints]
    norms = {json.dumps(n.to_dict(), sort_keys=True) for _, n, _, _ in loaded}
    if len(norms) != 1:
        raise ValueError("checkpoints were trained with different normalizations; export them "
                         "separately or retrain on one split")
    metrics = [m for _, _, ms, _ in loaded for m in ms]
    model = loaded[0][0] if len(loaded) == 1 else StackedPredictor([m for m, _, _, _ in loaded])
    return export_seernet(model, loaded[0][1], path, metrics, opset)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.seernet.export",
                                description="Export SeerNet checkpoints to one ONNX predictor.")
    p.add_argument("checkpoints", nargs="+", help="checkpoint files (.pt), outputs in this order")
    p.add_argument("--out", required=True, help="ONNX file to write")
    p.add_argument("--opset", type=int, default=18)
    a = p.parse_args(argv)
    print(export_checkpoints(a.checkpoints, a.out, a.opset))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
