"""Tiny hand-made ONNX graphs for the extractor tests (no torch needed)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


def const(name: str, shape, value=None, dtype=np.float32) -> onnx.TensorProto:
    """An initializer; random-free deterministic values."""
    if value is None:
        value = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) % 7
    return numpy_helper.from_array(np.asarray(value, dtype=dtype).reshape(shape), name)


def model(nodes, inputs, outputs, inits=(), opset=18, domains=()) -> onnx.ModelProto:
    """A model from a node list, ``(name, shape[, elem_type])`` inputs,
    ``(name, shape)`` outputs (shapes may hold strings for dynamic dims) and
    initializers."""
    ins = [helper.make_tensor_value_info(spec[0], spec[2] if len(spec) > 2 else F32, spec[1])
           for spec in inputs]
    outs = [helper.make_tensor_value_info(n, F32, s) for n, s in outputs]
    graph = helper.make_graph(nodes, "g", ins, outs, initializer=list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(graph, opset_imports=imports)
    m.ir_version = 9
    return m


def single_op(op: str, x_shape, inits=(), attrs=None, extra_inputs=(), out_shape=None,
              n_outputs=1, opset=18) -> onnx.ModelProto:
    """One node ``op(x, *extra_inputs)`` with initializers ``inits``."""
    names = ["x", *extra_inputs]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    return model([node], [("x", list(x_shape))], [(o, out_shape) for o in outs],
                 inits, opset=opset)
