"""Small hand-built ONNX models for the GPU-prior tests (no torch needed)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.onnx_builders import const, model


def transformer(seq: int = 128, dim: int = 256, heads: int = 4, layers: int = 2):
    """A pre-LN encoder: LayerNorm, Q/K/V/O MatMuls with weights, head
    reshapes, Q@K^T, Softmax, @V, residual Adds, a ReLU MLP (4x); input
    ``x`` of shape ``(batch, seq, dim)`` with a dynamic batch."""
    dh = dim // heads
    nodes, inits = [], [const("ln_s", [dim]), const("ln_b", [dim]),
                        const("scale", [], np.sqrt(dh)),
                        const("heads_shape", [4], [0, seq, heads, dh], np.int64),
                        const("merge_shape", [3], [0, seq, dim], np.int64)]
    x = "x"
    for i in range(layers):
        p = f"l{i}_"
        for w, shape in (("wq", [dim, dim]), ("wk", [dim, dim]), ("wv", [dim, dim]),
                         ("wo", [dim, dim]), ("w1", [dim, 4 * dim]), ("w2", [4 * dim, dim])):
            inits.append(const(p + w, shape))
        n = helper.make_node
        nodes += [
            n("LayerNormalization", [x, "ln_s", "ln_b"], [p + "h"], axis=-1),
            *[n("MatMul", [p + "h", p + w], [p + w + "_o"]) for w in ("wq", "wk", "wv")],
            *[n("Reshape", [p + w + "_o", "heads_shape"], [p + w + "_r"]) for w in ("wq", "wk", "wv")],
            n("Transpose", [p + "wq_r"], [p + "q"], perm=[0, 2, 1, 3]),
            n("Transpose", [p + "wk_r"], [p + "kt"], perm=[0, 2, 3, 1]),
            n("Transpose", [p + "wv_r"], [p + "v"], perm=[0, 2, 1, 3]),
            n("MatMul", [p + "q", p + "kt"], [p + "s"]),
            n("Div", [p + "s", "scale"], [p + "ss"]),
            n("Softmax", [p + "ss"], [p + "a"], axis=-1),
            n("MatMul", [p + "a", p + "v"], [p + "c"]),
            n("Transpose", [p + "c"], [p + "ct"], perm=[0, 2, 1, 3]),
            n("Reshape", [p + "ct", "merge_shape"], [p + "cm"]),
            n("MatMul", [p + "cm", p + "wo"], [p + "o"]),
            n("Add", [x, p + "o"], [p + "r1"]),
            n("LayerNormalization", [p + "r1", "ln_s", "ln_b"], [p + "h2"], axis=-1),
            n("MatMul", [p + "h2", p + "w1"], [p + "f1"]),
            n("Relu", [p + "f1"], [p + "f1a"]),
            n("MatMul", [p + "f1a", p + "w2"], [p + "f2"]),
            n("Add", [p + "r1", p + "f2"], [p + "out"]),
        ]
        x = p + "out"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    return model(nodes, [("x", ["batch", seq, dim])], [("y", ["batch", seq, dim])], inits)


def shared_weight_chain():
    """y = (x @ W) @ W with one shared 64x64 initializer (16 KiB once)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("MatMul", ["a", "w"], ["y"])]
    return model(nodes, [("x", [8, 64])], [("y", [8, 64])], [const("w", [64, 64])])


__all__ = ["transformer", "shared_weight_chain"]


def conv_pair(bias0: str | None, bias1: str | None, rules: tuple[str, str] | None = None):
    """x -> Conv -> Relu -> Conv -> y as torch writes it (producer
    ``pytorch``), each Conv with the bias named ``bias0`` / ``bias1`` (None:
    none); ``rules``: a dynamo export, each Conv carrying those rewriter
    rules in its metadata (None: a TorchScript export)."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"] + ([bias0] if bias0 else []), ["c0"], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1]),
             n("Relu", ["c0"], ["r"]),
             n("Conv", ["r", "w1"] + ([bias1] if bias1 else []), ["y"], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1])]
    if rules is not None:
        for node, rule in zip((nodes[0], nodes[2], nodes[1]), (*rules, "")):
            helper.set_metadata_props(node, {"pkg.torch.onnx.name_scopes": "['']",
                                             **({"pkg.onnxscript.rewriter.rule_name": rule} if rule else {})})
    inits = [const("w0", [8, 8, 3, 3]), const("w1", [8, 8, 3, 3])]
    inits += [const(b, [8]) for b in (bias0, bias1) if b]
    proto = model(nodes, [("x", ["batch", 8, 16, 16])], [("y", ["batch", 8, 16, 16])], inits)
    proto.producer_name = "pytorch"
    return proto
