"""Static shape propagation in Python for the ops real exporters emit.

One topological pass over the node table gives every tensor its element
type and static shape, with the rules of onnx's own shape inference
(``onnx/defs/*/defs.cc``) for the common ops, and onnx's inference of that
one node (``infer_node_outputs``) for any other standard op. Shape
subgraphs (``Shape -> Gather -> Concat -> Reshape``) are evaluated on
demand: a rule that needs a tensor's value (a Reshape target, Slice
bounds, Unsqueeze axes...) computes it from the folded nodes that produce
it, with the same numpy calls as onnx's reference evaluator.

The pass is an accelerator, not an authority: on anything it does not
model exactly (Loop and Scan, an If whose branches differ or read values,
custom domains, an attribute of an unexpected type, a rule's error case, an
unresolved tensor that the PerfGraph needs)
it gives up and :func:`perfseer_rt.graph.shapes.infer_shapes` (onnx's
whole-graph inference on the skeleton) decides, as before. Where it
succeeds its shapes equal onnx's; ``tests/test_propagate.py`` compares the
two on real models, built graphs and fuzzed ones, rule by rule and whole.
"""


from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer_rt.graph.limits import MAX_CONST_ELEMS, MAX_RANK, Deadline
from perfseer_rt.graph.nodes import CACHED_KEY_CHARS, Attrs, Row, attribute_keys, node_table
from perfseer_rt.graph.reshape_rules import MOVEMENT_KEEP_DIMS, MOVEMENT_RULES, reshaped, shape_slice
from perfseer_rt.graph.shape_rules import (
    BOOL,
    COMPUTE_KEEP_DIMS,
    COMPUTE_RULES,
    ELEM_TYPES,
    FLOAT,
    INT64,
    MAX_DIM_VALUE,
    NP_DTYPES,
    GiveUp,
    Result,
    Rule,
    Shape,
    TypedShape,
    Types,
    ValueOf,
)
from perfseer_rt.graph.value_rules import VALUES, long_1d, static_type, tensor_value, value_sources

__all__ = ["BOOL", "ELEM_TYPES", "FLOAT", "INT64", "NP_DTYPES", "RULES", "VALUES", "GiveUp",
           "Propagation", "Result", "Rule", "Shape", "TypedShape", "Types", "ValueOf",
           "clear_rule_cache", "long_1d", "reshaped", "schema_attribute_types", "schema_attributes",
           "static_type", "tensor_value", "value_sources"]

#: Rules whose output dims are dims of their inputs (already in range).
_KEEP_DIMS = COMPUTE_KEEP_DIMS | MOVEMENT_KEEP_DIMS
#: op -> (rule, lowest since_version of the op's schema the rule models).
RULES: dict[str, tuple[Rule, int]] = {**COMPUTE_RULES, **MOVEMENT_RULES}


# --------------------------------------------------------------------- the pass
_SCHEMAS: dict[tuple[str, int], Any] = {}


def _schema(op: str, version: int) -> Any:
    """onnx's schema of a standard op at an opset (cached; None if unknown)."""
    key = (op, version)
    if key not in _SCHEMAS:
        try:
            _SCHEMAS[key] = onnx.defs.get_schema(op, version, "")
        except Exception:  # noqa: BLE001 - SchemaError: not a standard op at this opset
            _SCHEMAS[key] = None
    return _SCHEMAS[key]


#: Most rule results kept between passes (emptied when full).
RULE_CACHE_SIZE = 16384
#: (op, attribute key, input types, number of outputs, opset) -> output
#: types, for rules that read no values (:meth:`Propagation.run`).
_RULE_RESULTS: dict[tuple[Any, ...], Sequence["TypedShape | None"]] = {}


def clear_rule_cache() -> None:
    """Empty the rule results kept between passes (they change speed only)."""
    _RULE_RESULTS.clear()


class Propagation:
    """One pass over a model's nodes (see the module docstring).

    Args:
        table: the graph's node table (:mod:`perfseer_rt.graph.nodes`).
        folded: indices of the nodes that fold to constants.
        typed: element type and static shape of every graph input and
            initializer (as the skeleton declares them); filled in place.
        constants: name -> TensorProto of the initializers whose values
            onnx's inference may read (see :func:`value_sources`).
        late: names among ``constants`` that only the per-node completion
            of :func:`perfseer_rt.graph.shapes.infer_shapes` reads.
        model: the model (for per-node onnx inference of other ops).
        opset: the model's default-domain opset.
        domain_rules: ``(domain, op) -> rule or None`` for ops of other
            domains (:func:`perfseer_rt.graph.contrib.contrib_rule`); the
            pass gives up on one without a rule.
        nodes: the NodeProtos of ``table`` (default: ``model``'s graph's),
            for onnx's inference of single nodes.
    """

    def __init__(self, table: list[Row], folded: set[int], typed: dict[str, TypedShape],
                 constants: dict[str, onnx.TensorProto], late: set[str],
                 model: onnx.ModelProto, opset: int, akeys: list[str | None] | None = None,
                 domain_rules: Callable[[str, str], Rule | None] | None = None,
                 nodes: Sequence[onnx.NodeProto] | None = None):
        self.table = table
        self.nodes = model.graph.node if nodes is None else nodes
        self.domain_rules = domain_rules
        self.akeys = attribute_keys(table) if akeys is None else akeys
        self.folded = folded
        self.shapes = typed
        self.constants = constants
        self.late = late
        self.model = model
        self.opset = opset
        self.values: dict[str, np.ndarray | None] = {}
        #: (op, attributes, input values, output type) -> the checked value
        #: (None: unknown) of a folded node's output, for this pass: a
        #: transformer's layers compute the same shape vectors layer after layer
        self.value_memo: dict[tuple[Any, ...], np.ndarray | None] = {}
        self.producer: dict[str, int] = {}
        self.used_late = False

    def run(self, kept: list[int], deadline: Deadline | None) -> dict[str, TypedShape]:
        """Shapes of every tensor the kept nodes touch (GiveUp otherwise)."""
        shapes = self.shapes
        kept_set = set(kept)
        producer = self.producer
        value = self.value
        rules = _rules_at(self.opset)
        akeys = self.akeys
        opset = self.opset
        # A rule that reads no values gives the same result for the same op,
        # attributes, input types and opset: computed once per such
        # signature, in this pass and later ones.
        memo = _RULE_RESULTS
        for k, row in enumerate(self.table):
            if deadline is not None and not k % 4096:
                deadline.check("shape inference")
            op, _, domain, ins, outs, attrs, tensors, other, loose = row
            if loose and not (op == "If" and not domain):
                raise GiveUp("attribute read by presence")
            for o in outs:
                if o:
                    if o in shapes or o in producer:
                        raise GiveUp(f"tensor {o!r} defined twice")
                    producer[o] = k
            if op == "If" and not domain:
                for o, branch_typed in zip(outs, self._if_node(row, deadline)):
                    shape = branch_typed[1]
                    if shape and (min(shape) < 0 or max(shape) >= MAX_DIM_VALUE or len(shape) > MAX_RANK):
                        raise GiveUp("dim out of range")
                    if o:
                        shapes[o] = branch_typed
                if k in kept_set and not all(t in shapes for t in ins if t):
                    raise GiveUp("an If's condition unresolved")
                continue
            if domain:
                domain_rule = self.domain_rules(domain, op) if self.domain_rules else None
                if domain_rule is None:
                    raise GiveUp(f"domain {domain!r}")
                self._domain_node(domain_rule, ins, outs, attrs, shapes)
                continue
            in_types = [shapes.get(i) if i else None for i in ins]
            result: Sequence[TypedShape | None] | None = None
            entry = rules.get(op)
            if entry is None:
                try:
                    entry = rules[op] = _rule_at(op, self.opset)
                except GiveUp:  # no onnx schema: onnxruntime registers a few such ops here
                    domain_rule = self.domain_rules(domain, op) if self.domain_rules else None
                    if domain_rule is None:
                        raise
                    self._domain_node(domain_rule, ins, outs, attrs, shapes)
                    continue
            rule, since = entry
            key = None
            checked = False  # the result's dims are known to be in range
            if rule is not None:
                akey = akeys[k]
                if not tensors and op not in _READS_VALUES and (
                        akey is None or len(akey) <= CACHED_KEY_CHARS):
                    key = (op, akey, tuple(in_types), len(outs), opset)
                    result = memo.get(key)
                    checked = result is not None  # only checked results are kept
                elif op == "Constant" and not attrs and len(tensors) == 1 and len(outs) == 1 \
                        and "value" in tensors:  # _constant's common case, inlined
                    tp = tensors["value"]
                    result = [(tp.data_type, tuple(tp.dims[:]))]
                if result is None:
                    if tensors:
                        attrs = {**attrs, **tensors}
                    try:
                        result = rule(in_types, _getter(value, ins) if op in _READS_VALUES
                                      else _no_values, attrs, len(outs), since)
                    except GiveUp:
                        raise
                    except (IndexError, KeyError, TypeError, ValueError, AttributeError,
                            ZeroDivisionError, OverflowError):
                        result = None  # a malformed node (e.g. no inputs): onnx decides
            if result is None:
                key = None
                result = self._onnx_node(k, op, ins, in_types)
            for o, typed in zip(outs, result):
                if o and typed is not None:
                    if not checked:
                        shape = typed[1]
                        if shape and rule not in _KEEP_DIMS and (
                                min(shape) < 0 or max(shape) >= MAX_DIM_VALUE or len(shape) > MAX_RANK):
                            raise GiveUp("dim out of range")
                    shapes[o] = typed
            if key is not None and not checked:
                if len(memo) >= RULE_CACHE_SIZE:
                    memo.clear()
                memo[key] = result
            if k in kept_set:
                for t in ins:
                    if t and t not in shapes:
                        raise GiveUp(f"tensor {t!r} of a kept node unresolved")
                for t in outs:
                    if t and t not in shapes:
                        raise GiveUp(f"tensor {t!r} of a kept node unresolved")
        if self.used_late and not self.folded:
            raise GiveUp("an initializer value onnx's first pass does not read")
        return shapes

    def _domain_node(self, rule: Rule, ins: tuple[str, ...], outs: tuple[str, ...], attrs: Attrs,
                     shapes: dict[str, TypedShape]) -> None:
        """Type the outputs of a node of another domain (its outputs already
        registered) with its rule (GiveUp where the rule cannot: onnx's
        whole-graph inference then decides)."""
        try:
            result = rule([shapes.get(i) if i else None for i in ins], _no_values, attrs,
                          len(outs), 1)
        except (IndexError, KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError,
                OverflowError):
            result = None
        if result is None or len(result) < max((i + 1 for i, o in enumerate(outs) if o), default=0):
            raise GiveUp("a node of another domain its rule cannot type")
        for o, typed in zip(outs, result):
            if o:
                shape = typed[1]
                if shape and (min(shape) < 0 or max(shape) >= MAX_DIM_VALUE or len(shape) > MAX_RANK):
                    raise GiveUp("dim out of range")
                shapes[o] = typed
        for t in ins:
            if t and t not in shapes:
                raise GiveUp(f"tensor {t!r} of a kept node unresolved")

    def _onnx_node(self, k: int, op: str, ins: tuple[str, ...],
                   in_types: list[TypedShape | None]) -> list[TypedShape | None]:
        """onnx's inference of one standard node (the rules' fallback)."""
        schema = _schema(op, self.opset)
        if schema is None:
            raise GiveUp(f"no schema for {op}")
        types, data = {}, {}
        for name, typed in zip(ins, in_types):
            if not name:
                continue
            if typed is None:
                return []
            types[name] = onnx.helper.make_tensor_type_proto(typed[0], list(typed[1]))
            v = self.value(name)
            if v is not None:
                data[name] = numpy_helper.from_array(v, name)
        node = self.nodes[k]
        try:
            res = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=list(self.model.opset_import),
                ir_version=self.model.ir_version)
        except Exception:  # noqa: BLE001 - onnx's inference failed on this node
            return []
        out: list[TypedShape | None] = []
        for o in node.output:
            tp = res.get(o) if o else None
            out.append(static_type(tp) if tp is not None else None)
        return out

    def _if_node(self, row: Row, deadline: Deadline | None) -> list[TypedShape]:
        """An If's output types where onnx's inference gives them static:
        each branch typed by a pass of its own that reads this graph's
        tensors' types and no values (nested subgraphs, branch inputs and
        sparse initializers give up), and the two alike, output by output,
        with the branches' declared types (GiveUp otherwise: onnx's
        inference and the documented rules decide). onnx's own inference of
        an If copies every type of the enclosing graph into each branch: a
        graph of 20,000 Ifs took it minutes."""
        _, _, _, _, outs, attrs, tensors, other, _ = row
        branches = {a.name: a.g for a in other if a.type == _GRAPH}
        if attrs or tensors or len(other) != 2 or branches.keys() != {"then_branch", "else_branch"}:
            raise GiveUp("an If's attributes")
        typed = [self._branch_types(branches[b], len(outs), deadline)
                 for b in ("then_branch", "else_branch")]
        if typed[0] != typed[1]:
            raise GiveUp("an If whose branches differ")
        return typed[0]

    def _branch_types(self, g: onnx.GraphProto, n_out: int, deadline: Deadline | None
                      ) -> list[TypedShape]:
        """The output types of an If branch (see :meth:`_if_node`)."""
        if len(g.input) or len(g.sparse_initializer) or len(g.output) != n_out:
            raise GiveUp("an If branch with inputs or sparse initializers")
        table = node_table(g)
        if any(row[7] for row in table):
            raise GiveUp("an If branch holding subgraphs")
        typed: dict[str, TypedShape] = {}
        for init in g.initializer:
            typed[init.name] = (init.data_type, tuple(init.dims[:]))
        made = {o for row in table for o in row[4]}
        for row in table:
            for i in row[3]:
                if i and i not in made and i not in typed:
                    found = self.shapes.get(i)
                    if found is None:
                        raise GiveUp(f"tensor {i!r} of an If branch unresolved")
                    typed[i] = found
        inner = Propagation(table, set(), typed, {}, set(), self.model, self.opset,
                            domain_rules=self.domain_rules, nodes=g.node)
        shapes = inner.run(list(range(len(table))), deadline)
        out = []
        for vi in g.output:  # each made by a node of the branch (onnx types no other)
            found = shapes.get(vi.name) if vi.name in made else None
            if found is None or not _declared_fits(vi.type, found):
                raise GiveUp("an If branch's output unresolved, not made in it or not as declared")
            out.append(found)
        return out

    def value(self, name: str) -> np.ndarray | None:
        """The value of a constant tensor, computed on first use (None when
        onnx's inference would not know it either)."""
        values = self.values
        if name in values:
            return values[name]
        stack = [name]
        while stack:
            t = stack[-1]
            if t in values:
                stack.pop()
                continue
            k = self.producer.get(t)
            if k is None or k not in self.folded:
                values[t] = self._initializer_value(t) if k is None else None
                stack.pop()
                continue
            row = self.table[k]
            op, ins = row[0], row[3]
            if op not in ("Shape", "Size", "Constant"):
                pending = [i for i in ins if i and i not in values]
                if pending:
                    if len(stack) > 10_000:
                        return None
                    stack.extend(pending)
                    continue
            stack.pop()
            self._node_value(row)
        return values[name]

    def _initializer_value(self, name: str) -> np.ndarray | None:
        t = self.constants.get(name)
        if t is None:
            return None
        v = tensor_value(t)
        if v is not None and name in self.late:
            self.used_late = True
        return v

    def _node_value(self, row: Row) -> None:
        """Compute (or mark unknown) the values of a folded node's outputs.
        A node whose op, attributes, output type and input values (or, for a
        Constant, its tensor; for Shape and Size its input's type) were seen
        in this pass takes the value computed then: the same numpy calls on
        the same numbers give the same array (values are never written to)."""
        op, _, _, ins, outs, attrs, tensors = row[:7]
        values = self.values
        for o in outs:
            values.setdefault(o, None)
        out = self.shapes.get(outs[0]) if len(outs) == 1 and outs[0] else None
        if out is None or math.prod(out[1]) > MAX_CONST_ELEMS:
            return
        key = self._value_key(op, ins, attrs, tensors, out)
        if key is not None:
            found = self.value_memo.get(key, _UNSEEN)
            if found is not _UNSEEN:
                if found is not None:
                    values[outs[0]] = found
                return
        self._compute_value(op, ins, outs, attrs, tensors, out)
        if key is not None:
            self.value_memo[key] = values[outs[0]]

    def _value_key(self, op: str, ins: tuple[str, ...], attrs: Attrs,
                   tensors: dict[str, onnx.TensorProto], out: TypedShape) -> tuple[Any, ...] | None:
        """The memo key of a folded node's value (None: not kept)."""
        if op == "Constant":
            tp = tensors.get("value") if tensors and not attrs and len(tensors) == 1 else None
            if tp is None or tp.data_location != onnx.TensorProto.DEFAULT \
                    or not tp.HasField("raw_data") or tp.HasField("segment"):
                return None
            return op, out, tp.data_type, tp.raw_data
        if tensors:
            return None
        akey = repr(attrs) if attrs else None
        if op in ("Shape", "Size"):
            return op, akey, out, self.shapes.get(ins[0]) if ins and ins[0] else None
        values = self.values
        args: list[Any] = [op, akey, out]
        for i in ins:
            if not i:  # an optional input left out
                args.append(None)
                continue
            a = values.get(i)
            if a is None:  # unknown: _compute_value gives up at once
                return None
            args.append((a.dtype.str, a.shape, a.tobytes()))
        return tuple(args)

    def _compute_value(self, op: str, ins: tuple[str, ...], outs: tuple[str, ...], attrs: Attrs,
                       tensors: dict[str, onnx.TensorProto], out: TypedShape) -> None:
        """The value of a folded node's (one) output, into ``self.values``
        where it is known (see :meth:`_node_value`)."""
        val: np.ndarray | None
        try:
            if op == "Constant":
                val = _constant_value(attrs, tensors)
            elif op in ("Shape", "Size"):
                x = self.shapes.get(ins[0]) if ins and ins[0] else None
                if x is None:
                    return
                if op == "Size":
                    val = np.array(math.prod(x[1]), dtype=np.int64)
                else:
                    start, end = shape_slice(len(x[1]), attrs, _rules_at(self.opset)[op][1])
                    val = np.array(x[1][start:end], dtype=np.int64)
            else:
                fn = VALUES.get(op)
                if (attrs or tensors) and not _known_attrs(op, self.opset).issuperset(
                        (*attrs, *tensors)):
                    return  # onnx's reference evaluator refuses some ops so
                if fn is None or not ins:
                    return
                values = self.values
                args: list[np.ndarray | None] = []
                for i in ins:  # every present input has a value of at most MAX_CONST_ELEMS
                    if not i:
                        args.append(None)
                        continue
                    a = values.get(i)
                    if a is None or a.size > MAX_CONST_ELEMS:
                        return
                    args.append(a)
                if tensors:
                    attrs = {**attrs, **tensors}
                val = fn(args, attrs, out)
        except GiveUp:
            return
        except Exception:  # noqa: BLE001 - this value stays unknown (as for onnx)
            return
        if val is None:
            return
        val = np.asarray(val)
        if ELEM_TYPES.get(val.dtype) != out[0] or val.shape != out[1]:
            raise GiveUp(f"value of {outs[0]!r} disagrees with its inferred type")
        self.values[outs[0]] = val


#: A memo's "not seen yet" (None is a known unknown value).
_UNSEEN: Any = object()

_GRAPH = onnx.AttributeProto.GRAPH


def _declared_fits(declared: onnx.TypeProto, typed: TypedShape) -> bool:
    """Whether an If branch's declared output type takes the inferred one
    as onnx merges them: a tensor type of no or the same element type, and
    no shape, or one of the same rank whose numeric dims agree."""
    if declared.WhichOneof("value") != "tensor_type":
        return False
    tt = declared.tensor_type
    if tt.elem_type and tt.elem_type != typed[0]:
        return False
    if not tt.HasField("shape"):
        return True
    dims = tt.shape.dim
    return len(dims) == len(typed[1]) and all(
        not d.HasField("dim_value") or d.dim_value == v for d, v in zip(dims, typed[1]))


#: Ops whose rules read constant values of their inputs.
_READS_VALUES = frozenset({"Reshape", "Split", "Slice", "Unsqueeze", "Squeeze", "Expand", "Tile",
                           "ConstantOfShape", "Range"})


def _no_values(pos: int) -> np.ndarray | None:
    """The value getter of rules that read no values (_READS_VALUES lists
    the others); should one ever ask, onnx decides."""
    raise GiveUp("a rule outside _READS_VALUES asked for a value")


def _getter(value: Callable[[str], np.ndarray | None], ins: tuple[str, ...]) -> ValueOf:
    """A rule's value getter by input position."""
    def val(pos: int) -> np.ndarray | None:
        return value(ins[pos])
    return val


_KNOWN_ATTRS: dict[tuple[str, int], frozenset[str]] = {}
_ATTR_TYPES: dict[tuple[str, int], dict[str, int]] = {}


def schema_attribute_types(op: str, opset: int) -> dict[str, int]:
    """Each attribute onnx's schema of standard op ``op`` declares at
    ``opset``, with its type (``onnx.AttributeProto.AttributeType`` values;
    empty where there is no such op); cached per process."""
    key = (op, opset)
    found = _ATTR_TYPES.get(key)
    if found is None:
        schema = _schema(op, opset)
        found = _ATTR_TYPES[key] = {n: int(a.type.value) for n, a in schema.attributes.items()} \
            if schema else {}
    return found


def schema_attributes(op: str, opset: int) -> frozenset[str] | None:
    """The attribute names onnx's schema of standard op ``op`` declares at
    ``opset`` (None: no such op there)."""
    schema = _schema(op, opset)
    return None if schema is None else _known_attrs(op, opset)


def _known_attrs(op: str, opset: int) -> frozenset[str]:
    """The attribute names onnx's schema of ``op`` declares (a value is
    computed only for nodes without others: onnx's reference evaluator
    refuses unknown attributes on some ops)."""
    key = (op, opset)
    found = _KNOWN_ATTRS.get(key)
    if found is None:
        schema = _schema(op, opset)
        found = _KNOWN_ATTRS[key] = frozenset(schema.attributes) if schema else frozenset()
    return found


_RULES_AT: dict[int, dict[str, tuple[Rule | None, int]]] = {}


def _rules_at(opset: int) -> dict[str, tuple[Rule | None, int]]:
    """op -> (rule or None, the op's schema since_version) at an opset,
    filled as ops are met (cached per process)."""
    return _RULES_AT.setdefault(opset, {})


def _rule_at(op: str, opset: int) -> tuple[Rule | None, int]:
    if op == "Constant":
        return _constant, 1
    schema = _schema(op, opset)
    if schema is None:
        raise GiveUp(f"no schema for {op} at opset {opset}")
    entry = RULES.get(op)
    if entry is None or schema.since_version < entry[1]:
        return None, schema.since_version
    return entry[0], schema.since_version


def _constant(ins: Types, val: ValueOf, attrs: Attrs, n_out: int, since: int) -> Result:
    if n_out != 1 or len(attrs) != 1:
        return None
    (name, v), = attrs.items()
    if name == "value" and isinstance(v, onnx.TensorProto):
        return [(v.data_type, tuple(v.dims[:]))]
    if name == "value_int" and type(v) is int:
        return [(INT64, ())]
    if name == "value_ints" and type(v) is list:
        return [(INT64, (len(v),))]
    if name == "value_float" and type(v) is float:
        return [(FLOAT, ())]
    if name == "value_floats" and type(v) is list:
        return [(FLOAT, (len(v),))]
    return None


def _constant_value(attrs: Attrs, tensors: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    if len(attrs) + len(tensors) != 1:
        return None
    if tensors:
        t = tensors.get("value")
        return None if t is None or t.data_type not in NP_DTYPES else tensor_value(t)
    (name, v), = attrs.items()
    if name in ("value_int", "value_ints"):
        return np.array(v, dtype=np.int64)
    return None
