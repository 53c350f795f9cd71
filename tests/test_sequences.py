"""Sequence values (SplitToSequence, SequenceAt, ConcatFromSequence...), as
scripted exports write Python lists: carried as one tensor ``(L, *S)``
(:mod:`perfseer_rt.graph.sequences`). The tensors around them are checked
against onnxruntime running the same graph; the extraction failed before."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from perfseer_rt import extract
from perfseer_rt.graph import sequences
from tests.onnx_builders import const, model

I64 = TensorProto.INT64


def _list_model(split: list[int] | None) -> object:
    """x [N, 6, 8] -> split along axis 1 (chunks of 1, or ``split``) -> the
    second piece, the length, and the pieces stacked back and concatenated;
    a list built from two tensors with one more inserted and one erased."""
    split_in = ["r"] + (["sizes"] if split is not None else [])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("SplitToSequence", split_in, ["seq"], axis=1),
        helper.make_node("SequenceAt", ["seq", "one"], ["piece"]),
        helper.make_node("SequenceLength", ["seq"], ["n"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
        helper.make_node("ConcatFromSequence", ["seq"], ["stack"], axis=1, new_axis=1),
        helper.make_node("SequenceConstruct", ["r", "r"], ["pair"]),
        helper.make_node("SequenceInsert", ["pair", "r"], ["three"]),
        helper.make_node("SequenceErase", ["three"], ["two"]),
        helper.make_node("ConcatFromSequence", ["two"], ["both"], axis=2),
        helper.make_node("MatMul", ["cat", "w"], ["y"]),
        *[helper.make_node("Relu", [t], [f"{t}_r"]) for t in ("piece", "stack", "both")],
        helper.make_node("Cast", ["n"], ["n_f"], to=TensorProto.FLOAT),
    ]
    inits = [const("one", (), 1, dtype=np.int64), const("w", (8, 4))]
    if split is not None:
        inits.append(const("sizes", (len(split),), split, dtype=np.int64))
    outs = [("y", None), ("piece_r", None), ("stack_r", None), ("both_r", None), ("n_f", None)]
    return model(nodes, [("x", ["N", 6, 8])], outs, inits, opset=17)


def _tensor_shapes(m, feeds) -> dict:
    """Shapes of the tensor-valued node outputs when onnxruntime runs ``m``."""
    full = type(m)()
    full.CopyFrom(m)
    have = {o.name for o in full.graph.output}
    seqs = {o for n in m.graph.node if n.op_type in sequences.PRODUCERS for o in n.output}
    for n in m.graph.node:
        full.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in n.output
                                 if o not in have and o not in seqs)
    sess = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {k: tuple(v.shape) for k, v in zip(names, sess.run(None, feeds))}


@pytest.mark.parametrize("split", [None, [3, 3]])
def test_list_ops_shapes_match_onnxruntime(split):
    m = _list_model(split)
    g = extract(m, batch=3)
    ours = {t: tuple(s) for t, s in zip(g.edge_tensors, g.edge_shapes)}
    assert not g.unknown_ops
    pieces = 6 if split is None else 2
    width = 1 if split is None else 3
    assert ours["seq"] == (pieces, 3, width, 8)
    ran = _tensor_shapes(m, {"x": np.ones((3, 6, 8), np.float32)})
    for t in ("piece", "cat", "stack", "both"):
        assert ours[t] == ran[t], t


def test_sequence_rules_refuse_what_they_cannot_shape():
    no_values = lambda pos: None  # noqa: E731
    # split sizes only known at run time
    assert sequences.sequence_shapes("SplitToSequence", [(1, (2, 6)), (I64, (2,))], {"axis": 1},
                                     1, no_values) is None
    assert sequences.sequence_shapes("ConcatFromSequence", [(1, (4, 2, 3))], {"axis": 5}, 1,
                                     no_values) is None
    assert sequences.sequence_shapes("SequenceEmpty", [], {}, 1, no_values) == [(1, (0,))]
    # unequal pieces: each dim its largest (an upper bound)
    assert sequences.sequence_shapes("SplitToSequence", [(1, (2, 6)), (I64, (2,))], {"axis": 1},
                                     1, lambda pos: [2, 4]) == [(1, (2, 2, 4))]
    assert sequences.sequence_shapes("SplitToSequence", [(1, (2, 7)), (I64, ())], {"axis": 1}, 1,
                                     lambda pos: [3]) == [(1, (3, 2, 3))]  # 3 + 3 + 1


def test_a_model_reading_a_sequence_input_is_refused_clearly():
    seq_in = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
                              "g", [seq_in], [helper.make_tensor_value_info("y", 1, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from perfseer_rt.errors import ShapeError
    with pytest.raises(ShapeError, match="not a tensor"):
        extract(m)
