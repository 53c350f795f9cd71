"""Control flow at scale (``perfseer_rt/graph/control_flow.py``,
``subgraphs.py``, and the If nodes of ``propagate.py``).

A graph of thousands of If nodes had taken minutes: onnx's own inference of
an If copies every type of the enclosing graph into each branch (quadratic
in the graph's size), each If's cost scanned the whole graph for constants,
and each branch was extracted as a model of its own. The mechanisms tested
here: the Python shape pass types If nodes (equal to onnx's path), subgraph
FLOPs are kept per structure (names left out), and a model's constants are
read once. No timings (benchmarks/bench_extract_targets.py has the 20k-node
row).
"""

import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.extract_golden import diff, run_graph
from benchmarks.scale_graphs import if_chain
from perfseer_rt import extract
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import shaped, shapes, subgraphs
from perfseer_rt.graph.extract import clear_caches
from perfseer_rt.graph.limits import Deadline
from perfseer_rt.graph.prepared import PreparedModel


def _vi(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def _if_model(then_nodes, else_nodes, then_out, else_out, declared=None) -> bytes:
    """x (float [batch, 8]) -> If(flag) -> y, the branches reading x."""
    then = helper.make_graph(then_nodes, "then", [], [_vi(then_out, declared)])
    other = helper.make_graph(else_nodes, "else", [], [_vi(else_out, declared)])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
         helper.make_node("Relu", ["y"], ["z"])],
        "m", [_vi("x", ["batch", 8]), _vi("flag", [], TensorProto.BOOL)], [_vi("z", None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _both(data, monkeypatch, **kw):
    """(extraction with the Python pass, extraction with onnx's inference only)."""
    def run():
        try:
            return run_graph(extract(data, **kw))
        except PerfSeerError as exc:
            return {"error": type(exc).__name__, "message": str(exc)}
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(PreparedModel, "propagate", lambda self, inputs, deadline: None)
        slow = run()
    return fast, slow


def _takes_pass(data: bytes, batch: int = 2) -> bool:
    st = PreparedModel(onnx.ModelProto.FromString(data), "m", 10**6)
    inputs, _ = st.resolve(batch, None, None, Deadline(None, "m"))
    return st.propagate(inputs, Deadline(None, "m")) is not None


SAME = _if_model([helper.make_node("Relu", ["x"], ["t"])], [helper.make_node("Neg", ["x"], ["e"])],
                 "t", "e")
DIFFER = _if_model([helper.make_node("Relu", ["x"], ["t"])],
                   [helper.make_node("Concat", ["x", "x"], ["e"], axis=1)], "t", "e")
DECLARED = _if_model([helper.make_node("Relu", ["x"], ["t"])], [helper.make_node("Neg", ["x"], ["e"])],
                     "t", "e", declared=["b", 8])
WRONGLY_DECLARED = _if_model([helper.make_node("Relu", ["x"], ["t"])],
                             [helper.make_node("Neg", ["x"], ["e"])], "t", "e", declared=[2, 9])
OUTER = _if_model([], [helper.make_node("Neg", ["x"], ["e"])], "x", "e")  # a branch passes x through
CONSTANT = _if_model([helper.make_node("Constant", [], ["t"], value=helper.make_tensor("v", 1, [1, 8], [0.5] * 8))],
                     [helper.make_node("Neg", ["x"], ["e"])], "t", "e")


@pytest.mark.parametrize("data, passes", [
    (SAME, True), (DECLARED, True), (if_chain(30), True),
    (DIFFER, False),  # onnx merges differing dims; the documented rules size them
    (WRONGLY_DECLARED, False),  # onnx's inference rejects the branch's declared shape
    (OUTER, False),  # onnx's path does not type a branch output made outside the branch
    (CONSTANT, False),  # [1, 8] against [batch, 8]: differ at batch 2
], ids=["same", "declared", "chain", "differ", "wrongly_declared", "outer", "constant"])
def test_the_pass_types_if_nodes_as_onnx_does(data, passes, monkeypatch):
    assert _takes_pass(data) is passes
    for batch in (1, 3):
        fast, slow = _both(data, monkeypatch, batch=batch)
        assert diff(slow, fast) == []


def test_an_if_chain_never_runs_onnx_inference(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("onnx's whole-graph inference ran")
    monkeypatch.setattr(shapes, "_onnx_infer", refuse)
    g = extract(if_chain(100), batch=2)
    assert g.num_nodes == 100 and g.node_ops == ["If"] * 100


def test_each_distinct_branch_is_extracted_once(monkeypatch):
    extracted = []
    real = shaped._extract_flops
    monkeypatch.setattr(shaped, "_extract_flops", lambda *a: extracted.append(1) or real(*a))
    for n in (20, 200):
        clear_caches()
        extracted.clear()
        g = extract(if_chain(n), batch=4)
        assert len(extracted) == 2  # the then- and the else-branch, whatever the chain's length
        # each If costed as its heavier branch: Relu and Sigmoid of a [4, 64] tensor
        assert g.globals["flops_total"] == n * (4 * 64 + 4 * 64 * 4)
    clear_caches()
    uncached = extract(if_chain(20), batch=4)
    monkeypatch.setattr(subgraphs, "body_key", lambda *a: None)  # no key: every branch extracted
    clear_caches()
    same = extract(if_chain(20), batch=4)
    assert diff(run_graph(same), run_graph(uncached)) == []


def _body(names, op="Relu", declared=None):
    a, b = names
    return helper.make_graph([helper.make_node(op, [a], [b])], "g", [], [_vi(b, declared)])


def test_body_keys_leave_out_names_only():
    proto = onnx.ModelProto(ir_version=8)
    proto.opset_import.add(version=17)
    typed = {"x": (1, (2, 8)), "u": (1, (2, 8)), "w": (1, (3, 8))}
    key = subgraphs.body_key(_body(("x", "t")), {}, proto, typed)
    assert key is not None
    assert subgraphs.body_key(_body(("u", "v")), {}, proto, typed) == key  # renamed
    assert subgraphs.body_key(_body(("w", "t")), {}, proto, typed) != key  # another input shape
    assert subgraphs.body_key(_body(("x", "t"), "Neg"), {}, proto, typed) != key
    assert subgraphs.body_key(_body(("x", "t"), declared=[2, 8]), {}, proto, typed) != key
    # names that mark a parameter (a graph input named so is a weight) are kept apart
    assert subgraphs.body_key(_body(("x", "fc.weight")), {}, proto, typed) != key
    nested = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=_body(("x", "t")),
                                                 else_branch=_body(("x", "t")))], "g", [], [_vi("y", None)])
    assert subgraphs.body_key(nested, {}, proto, typed) is None  # may read the body's names


def test_a_models_constants_are_read_once_per_extraction(monkeypatch):
    built = []

    class Counting(subgraphs._Constants):
        def __new__(cls, *a):
            built.append(1)
            return super().__new__(cls, *a)

    monkeypatch.setattr(subgraphs, "_Constants", Counting)
    extract(if_chain(50), batch=2)
    assert len(built) == 1  # the outer model's, for all 50 Ifs
    assert subgraphs._CONSTANTS == {}  # nothing outlives the extraction
