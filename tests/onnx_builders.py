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


def one_iteration_list_loop() -> onnx.ModelProto:
    """MViT's TorchScript export: a list started empty, filled by a Loop of
    one iteration (its counter declared [1]) slicing by the counter, then
    appended to and read back (tensor pooling's ``[cls, pooled]``)."""
    i1 = helper.make_tensor_value_info("i", TensorProto.INT64, [1])
    body = helper.make_graph(
        [helper.make_node("Gather", ["bounds", "i"], ["start"], axis=0),
         helper.make_node("Add", ["i", "one"], ["i1"]),
         helper.make_node("Gather", ["bounds", "i1"], ["end"], axis=0),
         helper.make_node("Slice", ["x", "start", "end", "ax1"], ["piece"]),
         helper.make_node("SequenceInsert", ["acc_in", "piece"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [i1, helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_sequence_value_info("acc_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("acc_out", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
        helper.make_node("Loop", ["trips", "cond", "empty"], ["listed"], body=body),
        helper.make_node("Slice", ["x", "one", "six", "ax1"], ["rest"]),
        helper.make_node("SequenceInsert", ["listed", "rest"], ["both"]),
        helper.make_node("SequenceAt", ["both", "z0"], ["cls"]),
        helper.make_node("SequenceAt", ["both", "one0"], ["others"]),
        helper.make_node("Concat", ["cls", "others"], ["joined"], axis=1),
        helper.make_node("Relu", ["joined"], ["y"]),
    ]
    inits = [const("trips", (1,), [1], dtype=np.int64), const("cond", (), True, dtype=np.bool_),
             const("bounds", (2,), [0, 1], dtype=np.int64), const("one", (1,), [1], dtype=np.int64),
             const("six", (1,), [6], dtype=np.int64), const("ax1", (1,), [1], dtype=np.int64),
             const("z0", (), 0, dtype=np.int64), const("one0", (), 1, dtype=np.int64)]
    return model(nodes, [("x", ["N", 6, 8])], [("y", None)], inits, opset=17)
