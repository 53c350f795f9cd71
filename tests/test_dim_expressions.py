"""Input dims named by an expression of other dims (optimum's
``past_sequence_length + sequence_length``, Whisper's
``encoder_sequence_length / 2``, dynamo's ``s0 + 1``): they take their
value from the dims the user names (:mod:`perfseer_rt.graph.dim_expressions`).
optimum's GPT-2 and LLaMA exports with a KV cache could not be extracted
without naming the expression itself."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from perfseer_rt import extract
from perfseer_rt.errors import ShapeError
from perfseer_rt.graph.dim_expressions import MAX_EXPRESSION_CHARS, evaluate, names
from tests.onnx_builders import const, model


@settings(max_examples=40, deadline=None)
@given(a=st.integers(0, 10**6), b=st.integers(1, 10**6), k=st.integers(1, 64))
def test_integer_arithmetic_of_named_dims(a, b, k):
    dims = {"past_sequence_length": a, "sequence_length": b}
    assert evaluate("past_sequence_length + sequence_length", dims) == a + b
    assert evaluate("sequence_length - 1", dims) == b - 1
    assert evaluate(f"{k}*sequence_length", dims) == k * b
    assert evaluate(f"(past_sequence_length + sequence_length) // {k}", dims) == (a + b) // k
    assert evaluate(f"sequence_length % {k}", dims) == b % k
    # "/" only where it divides exactly
    assert evaluate(f"{k} * sequence_length / {k}", dims) == b
    assert evaluate(f"sequence_length / {k}", dims) == (b // k if b % k == 0 else None)


def test_what_is_not_integer_arithmetic_of_given_names_has_no_value():
    dims = {"s0": 4}
    for expr in ("s0 + s1",            # a name not given
                 "s0 / 3",             # not exact
                 "s0 / 0", "s0 // 0",  # no value
                 "s0 ** 2", "s0 + 1.5", "s0 << 1", "-s0 if s0 else 1",
                 "__import__('os').getcwd() + s0", "f(s0) + 1", "s0.real + 1",
                 "s0", "batch",        # plain names are looked up as they are, not here
                 "Reshape/c/Reshape_3_output_0_dim_0",  # torch's generated names
                 "(" * 300 + "s0" + ")" * 300, "s0 + " * 100 + "1"):
        assert evaluate(expr, dims) is None, expr
    assert len("s0 + " * 100 + "1") > MAX_EXPRESSION_CHARS
    assert names("past_sequence_length + sequence_length") == ["past_sequence_length",
                                                               "sequence_length"]
    assert names("batch") == []


def _cached_decoder():
    """A decoder step as optimum exports it: the mask spans the past and the
    new tokens."""
    nodes = [helper.make_node("Concat", ["past", "new"], ["keys"], axis=1),
             helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mask_f", "two"], ["m3"]),
             helper.make_node("Mul", ["keys", "m3"], ["y"])]
    return model(nodes, [("past", ["batch_size", "past_sequence_length", 8]),
                      ("new", ["batch_size", "sequence_length", 8]),
                      ("mask", ["batch_size", "past_sequence_length + sequence_length"],
                       TensorProto.INT64)],
              [("y", None)], [const("two", (1,), [2], dtype=np.int64)], opset=17)


def test_a_mask_over_past_and_new_tokens_takes_their_sum():
    g = extract(_cached_decoder(), batch=2, dims={"past_sequence_length": 15,
                                                  "sequence_length": 1})
    assert g.input_shapes["mask"] == (2, 16)
    shapes = dict(zip(g.edge_tensors, g.edge_shapes))
    assert shapes["keys"] == (2, 16, 8)


def test_the_error_names_the_dims_an_expression_needs_not_the_expression():
    with pytest.raises(ShapeError) as err:
        extract(_cached_decoder(), batch=2, dims={"sequence_length": 1})
    message = str(err.value)
    assert "--dim past_sequence_length=N" in message
    assert "--dim past_sequence_length + sequence_length" not in message
