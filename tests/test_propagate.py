"""perfseer_rt.graph.propagate: the Python shape pass gives onnx's shapes.

Three levels: each rule against onnx's whole-graph inference of a one-node
model (random shapes and attributes around the valid region), each value
function against onnx's reference evaluator, and whole extractions with the
pass against extractions with onnx's inference only (real models, built
graphs, fuzzed ones).
"""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from benchmarks.extract_golden import diff, run_graph
from benchmarks.fuzz_extract import built_seeds, file_seeds, make_case
from perfseer_rt import extract
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph import propagate, shape_rules
from perfseer_rt.graph.inputs import resolve_inputs
from perfseer_rt.graph.limits import Deadline
from perfseer_rt.graph.prepared import PreparedModel
from perfseer_rt.graph.reshape_rules import MOVEMENT_RULES
from perfseer_rt.graph.shape_rules import COMPUTE_RULES
from tests import propagate_cases
from tests.onnx_builders import model

ROOT = Path(__file__).resolve().parents[1]
#: Real models the pass is meant to give up on (onnx's path extracts them,
#: tests/test_data_dependent.py, tests/test_moe_routing.py): sizes that depend
#: on the data, control flow.
GIVES_UP = {"ssdlite_detection", "mixtral_moe"}
MODELS = [p for p in sorted((ROOT / "tests/models").glob("*.onnx"))
          + sorted((ROOT / "examples").glob("*.onnx")) if p.stem not in GIVES_UP]


def test_rules_give_onnx_shapes():
    total, decided, bad = propagate_cases.check(3000, seed=0)
    assert not bad, bad[:5]
    assert decided > 2000  # the rules decide most cases; the rest go to onnx


def test_values_equal_the_reference_evaluator():
    total, computed, bad = propagate_cases.check_values(1500, seed=0)
    assert not bad, bad[:5]
    assert computed > 800


def _both(data, kw, monkeypatch):
    """(extraction with the pass, extraction with onnx's inference only)."""
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


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_real_models_take_the_pass_and_match_onnx(path, monkeypatch):
    data = path.read_bytes()
    dims = {"seq": 16, "past_seq": 4, "total_seq": 20,  # GenAI's names next (kv_cache_dim given:
            "sequence_length": 16, "past_sequence_length": 4,  # onnx's path cannot imply it)
            "total_sequence_length": 20, "kv_cache_dim": 64}
    st = PreparedModel(onnx.ModelProto.FromString(data), path.name, 10**6)
    inputs = resolve_inputs(st.proto, 2, None, dims, st.weights)
    assert st.propagate(inputs, Deadline(None, "x")) is not None
    for kw in ({"batch": 2, "dims": dims}, {"batch": 1, "dims": dims}):
        fast, slow = _both(data, kw, monkeypatch)
        assert "error" not in fast
        assert diff(slow, fast) == []


def test_built_and_fuzzed_graphs_match_onnx(monkeypatch):
    seeds = built_seeds() + file_seeds()
    cases = [(b, {"batch": 4}) for b in built_seeds()]
    cases += [(d, {"batch": batch}) for d, batch, _ in (make_case(seeds, 5, i) for i in range(150))]
    for data, kw in cases:
        fast, slow = _both(data, kw, monkeypatch)
        assert diff(slow, fast) == [], kw


def test_gives_up_on_custom_ops_and_control_flow():
    custom = model([helper.make_node("MyOp", ["x"], ["y"], domain="com.example")],
                   [("x", [1, 4])], [("y", None)], domains=("com.example",))
    st = PreparedModel(custom, "m", 100)
    assert st.propagate({"x": (1, 4)}, None) is None
    assert extract(custom).num_nodes == 1  # onnx's path still extracts it


def test_a_value_that_disagrees_with_its_inferred_type_gives_up():
    pr = propagate.Propagation([], set(), {}, {}, set(), onnx.ModelProto(), 17)
    pr.shapes["c"] = (7, (2,))
    pr.producer["c"] = 0
    pr.folded = {0}
    # 3 values where the type says 2
    pr.table = [("Constant", "", "", (), ("c",), {"value_ints": [1, 2, 3]}, {}, [], False)]
    with pytest.raises(propagate.GiveUp):
        pr.value("c")


def test_broadcast_matches_numpy():
    for a, b in (((2, 1, 3), (4, 1)), ((), (5,)), ((0, 1), (1, 7))):
        assert shape_rules.broadcast((a, b)) == np.broadcast_shapes(a, b)
    with pytest.raises(propagate.GiveUp):
        shape_rules.broadcast(((2, 3), (4, 3)))


def test_rule_tables_name_each_op_once():
    """The pass's table joins the two rule modules' tables; none overrides the other."""
    assert not COMPUTE_RULES.keys() & MOVEMENT_RULES.keys()
    assert propagate.RULES == {**COMPUTE_RULES, **MOVEMENT_RULES}


@pytest.mark.parametrize("op", ["Relu", "Softmax", "Conv", "Reshape", "Concat"])
def test_a_node_without_inputs_is_left_to_onnx(op, monkeypatch):
    """Fuzz seed 1 cases 5516 and 7374: a Relu / Softmax whose inputs the
    mutations removed made a rule index past its (empty) input list."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node(op, [], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    data = model(nodes, [("x", [1, 4])], [("y", None)]).SerializeToString()
    fast, slow = _both(data, {}, monkeypatch)
    assert diff(slow, fast) == []
    assert fast.get("error") != "GraphError" or "please report" not in fast["message"]


@pytest.mark.parametrize("case", [5282, 5516, 7374])
def test_fuzz_cases_that_once_differed(case, monkeypatch):
    """Fuzz seed 1: 5282 put an unknown attribute on a folded Reshape (onnx's
    reference evaluator refuses it, so the pad sizes it feeds stay unknown and
    the model is refused; the pass must not compute that value either);
    5516 and 7374 left a Relu / Softmax without inputs."""
    seeds = built_seeds() + file_seeds()
    data, batch, _ = make_case(seeds, 1, case)
    fast, slow = _both(data, {"batch": batch}, monkeypatch)
    assert diff(slow, fast) == []


def _pass(path, monkeypatch, memo):
    """The pass over ``path`` at batch 2, seq 16: (shapes, values, values
    computed, values asked for), with the value memo on or off."""
    st = PreparedModel(onnx.ModelProto.FromString(path.read_bytes()), path.name, 10**6)
    inputs = resolve_inputs(st.proto, 2, None, {"seq": 16}, st.weights)
    typed_inits, input_elems, constants, late, opset = st.fast
    typed = dict(typed_inits)
    typed.update((n, (elem, inputs[n])) for n, elem in input_elems)
    pr = propagate.Propagation(st.table, st.folded, typed, constants, late, st.proto, opset,
                               st.akeys)
    calls = {"computed": 0, "asked": 0}
    compute, node_value = pr._compute_value, pr._node_value

    def counted_compute(*a):
        calls["computed"] += 1
        return compute(*a)

    def counted_node_value(row):
        calls["asked"] += 1
        return node_value(row)

    monkeypatch.setattr(pr, "_compute_value", counted_compute)
    monkeypatch.setattr(pr, "_node_value", counted_node_value)
    if not memo:
        monkeypatch.setattr(pr, "_value_key", lambda *a: None)
    shapes = pr.run(st.kept, None)
    return shapes, pr.values, calls["computed"], calls["asked"]


def test_the_value_memo_computes_a_layers_shape_vectors_once_and_changes_no_value(monkeypatch):
    path = ROOT / "tests/models/bert_base.onnx"  # 12 layers computing the same Reshape targets
    shapes, values, computed, asked = _pass(path, monkeypatch, memo=True)
    shapes0, values0, computed0, asked0 = _pass(path, monkeypatch, memo=False)
    assert computed0 == asked0 > 500
    assert computed < asked0 / 4  # most are looked up
    assert shapes == shapes0
    assert values.keys() == values0.keys()
    for name, v in values0.items():
        got = values[name]
        assert (got is None) == (v is None), name
        if v is not None:
            assert got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v), name
