"""Validation of an ONNX graph before any arithmetic (the first step of
:func:`perfseer_rt.graph.extract.extract`): node cap, names that are text,
opsets, attributes (names, types and ranges against the op's schema), every
tensor defined once and every reference defined, element types and
initializer dims.

Each check raises :class:`~perfseer_rt.errors.GraphError` or
:class:`~perfseer_rt.errors.LimitError` naming the first problem, where
onnxruntime would refuse the model.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, NoReturn

import onnx

from perfseer_rt.errors import GraphError, LimitError
from perfseer_rt.graph import dtypes
from perfseer_rt.graph.limits import MAX_ELEMS, MAX_SHAPE_LEN
from perfseer_rt.graph.nodes import (
    ATTRS,
    DOMAIN,
    INS,
    LOOSE,
    NAME,
    OP,
    OTHER,
    OUTS,
    TENSORS,
    Row,
    attribute_keys,
    node_table,
)
from perfseer_rt.graph.ops import SPATIAL_OPS, check_spatial_attrs
from perfseer_rt.graph.propagate import schema_attribute_types, schema_attributes


def count_nodes(graph: onnx.GraphProto, cap: int, table: list[Row] | None = None) -> int:
    """Nodes of ``graph`` and of all its subgraphs (stops counting past ``cap``)."""
    total = len(graph.node)
    stack = []
    if table is None:
        stack.append(graph)
    else:  # the top graph's attributes from the table
        for row in table:
            if row[OTHER]:
                total += _push_subgraphs(row[OTHER], stack)
    while stack and total <= cap:
        for node in stack.pop().node:
            total += _push_subgraphs(node.attribute, stack)
    return total


def _push_subgraphs(attributes: Iterable[onnx.AttributeProto], stack: list[onnx.GraphProto]) -> int:
    """Push the subgraphs held by ``attributes`` (If/Loop/Scan bodies) on
    ``stack``; return how many nodes they hold at their top level."""
    nodes = 0
    for a in attributes:
        if a.type == onnx.AttributeProto.GRAPH:
            nodes += len(a.g.node)
            stack.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            nodes += sum(len(g.node) for g in a.graphs)
            stack.extend(a.graphs)
    return nodes


#: What validation reads of each initializer (dense ones, then the values of
#: sparse ones): (name, data type, dims, elements, data in the file).
InitInfo = tuple[str, int, tuple[int, ...], int, bool]


def validate(proto: onnx.ModelProto, name: str, max_nodes: int,
              table: list[Row] | None = None, akeys: list[str | None] | None = None
              ) -> list[InitInfo]:
    """Node cap, element types and initializer dims, before any arithmetic;
    returns what it read of the initializers. ``akeys``: the table's
    :func:`~perfseer_rt.graph.nodes.attribute_keys`, when the caller has them."""
    g = proto.graph
    table = node_table(g) if table is None else table
    n = count_nodes(g, max_nodes, table)
    if n > max_nodes:
        raise LimitError(f"{name}: more than {max_nodes:,} nodes (node cap); pass a larger "
                         "max_nodes if the model is really this large")
    top = name != SUBGRAPH_NAME  # a subgraph may read its outer graph's tensors
    _check_names(g, name, table, tensors=not top)
    if not all(map(itemgetter(OP), table)):
        row = next(r for r in table if not r[OP])
        raise GraphError(f"{name}: node {row[NAME] or row[OUTS][:1]!r} has no op type; onnxruntime "
                         "refuses such a node")
    _check_opsets(proto, name)
    if akeys is None:
        akeys = attribute_keys(table)
    checked: set[str | None] = set()  # attributes found in range (the check reads nothing else)
    opset = default_opset(proto)
    # op -> its schema's attribute names and those of type TENSOR (None: no schema)
    declared: dict[str, tuple[frozenset[str], frozenset[str]] | None] = {}
    typed_ok: set[tuple[str, str | None]] = set()  # (op, attributes) found of the schema's types
    for row, akey in zip(table, akeys):
        if row[0] in SPATIAL_OPS and akey not in checked:
            try:
                check_spatial_attrs(row[ATTRS])
            except (GraphError, TypeError, ValueError) as exc:
                raise GraphError(f"{name}: node {row[1] or row[0]!r}: {exc}") from None
            checked.add(akey)
        if row[0] in _BODIES and not row[DOMAIN]:
            held = {a.name for a in row[OTHER] if a.type == onnx.AttributeProto.GRAPH}
            missing = sorted(_BODIES[row[0]] - held)
            if missing:
                raise GraphError(f"{name}: node {row[1] or row[0]!r}: {row[0]} has no "
                                 f"{' or '.join(missing)} subgraph; onnxruntime refuses such a node")
        if (row[ATTRS] or row[TENSORS] or row[OTHER]) and not row[DOMAIN] and opset is not None:
            # an attribute the op does not have, or of another type: onnxruntime refuses the
            # model, and onnx's inference has spent 20 GB on one (a Constant given perm=2^40; fuzz)
            op = row[0]
            if op in declared:
                of_op = declared[op]
            else:
                types = schema_attribute_types(op, opset) \
                    if schema_attributes(op, opset) is not None else None
                of_op = declared[op] = None if types is None else (
                    frozenset(types), frozenset(a for a, t in types.items() if t == _AT.TENSOR))
            if of_op is None:
                continue
            names, tensor_names = of_op
            if not (names.issuperset(row[ATTRS]) and tensor_names.issuperset(row[TENSORS])
                    and (not row[OTHER] or names.issuperset(a.name for a in row[OTHER]))):
                extra = next((a for a in (*row[ATTRS], *row[TENSORS], *(a.name for a in row[OTHER]))
                              if a not in names), None)
                if extra is not None:
                    raise GraphError(f"{name}: node {row[1] or op!r}: {op} (opset {opset}) has no "
                                     f"attribute {extra!r}; onnxruntime refuses such a node")
            elif (op, akey) in typed_ok and not row[OTHER]:
                continue
            wrong = None if row[LOOSE] else _mistyped_attribute(row, schema_attribute_types(op, opset))
            if wrong is not None:
                attr, want, got = wrong
                raise GraphError(f"{name}: node {row[1] or op!r}: {op} (opset {opset}) takes "
                                 f"attribute {attr!r} as {want}, the file gives {got}; "
                                 "onnxruntime refuses such a node")
            if not row[LOOSE]:  # TENSORS of the right names are TENSORs: read so
                typed_ok.add((op, akey))
    inits = {t.name for t in g.initializer}
    made = _check_single_definitions(g, name, table, inits)
    if top:  # every node output is in made, every input in it or named below
        try:
            "".join(made)
        except TypeError:
            _bad_name(g, name)
        made |= inits  # the set is the function's own
        made.update(s.values.name for s in g.sparse_initializer)
        _check_references(g, name, table, made)
    for vi in g.input:
        if vi.name not in inits and vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            dtypes.itemsize(tt.elem_type, f"{name}: input {vi.name!r}")
            if tt.elem_type in _INT_TYPES and len(tt.shape.dim) == 1 \
                    and tt.shape.dim[0].dim_value > MAX_SHAPE_LEN:
                raise GraphError(f"{name}: input {vi.name!r} is a 1-D integer tensor of "
                                 f"{tt.shape.dim[0].dim_value} elements, over the "
                                 f"{MAX_SHAPE_LEN} limit")
    summary: list[InitInfo] = []
    external = onnx.TensorProto.EXTERNAL
    for t in list(g.initializer) + [s.values for s in g.sparse_initializer]:
        data_type = t.data_type
        dims = tuple(t.dims[:])
        known = dtypes.DTYPES.get(data_type)  # the message is built only for an error
        size = known[1] if known is not None else dtypes.itemsize(
            data_type, f"{name}: initializer {t.name!r}")
        elems = 1
        for d in dims:
            if d < 0:
                raise GraphError(f"{name}: initializer {t.name!r} has a negative dim "
                                 f"{list(dims)}")
            elems *= d
        if elems > MAX_ELEMS:
            raise GraphError(f"{name}: initializer {t.name!r} has {elems:.3g} elements, "
                             f"over the {MAX_ELEMS:.3g} limit")
        in_file = t.data_location != external
        stored = stored_bytes(t) if in_file else None
        if stored is None:  # no data (structure-only): its dims are all there is
            if data_type in _INT_TYPES and len(dims) == 1 and elems > MAX_SHAPE_LEN:
                raise GraphError(f"{name}: initializer {t.name!r} is a 1-D integer tensor "
                                 f"of {elems} elements without data, over the "
                                 f"{MAX_SHAPE_LEN} limit")
        elif elems * size > 8 * stored + 64:
            raise GraphError(f"{name}: initializer {t.name!r} declares dims {list(dims)} "
                             f"({elems:.3g} elements) but stores only {stored} bytes")
        summary.append((t.name, data_type, dims, elems, in_file))
    return summary


_INT_TYPES = frozenset({2, 3, 4, 5, 6, 7, 12, 13})
#: The name a subgraph extracted as a model of its own goes by.
SUBGRAPH_NAME = "<subgraph>"
#: The newest opset of each ONNX domain the installed onnx knows.
_NEWEST_OPSETS = {"": onnx.defs.onnx_opset_version(), "ai.onnx": onnx.defs.onnx_opset_version(),
                  "ai.onnx.ml": onnx.defs.onnx_ml_opset_version()}


def _check_opsets(proto: onnx.ModelProto, name: str) -> None:
    """No ONNX domain stamped with an opset newer than onnx knows:
    onnxruntime refuses such a model (an opset it does not know is "under
    development"), and neither onnx's schemas nor our rules describe its ops."""
    for imp in proto.opset_import:
        newest = _NEWEST_OPSETS.get(imp.domain)
        if newest is not None and imp.version > newest:
            raise GraphError(f"{name}: the model is stamped with opset {imp.version} of domain "
                             f"{imp.domain or 'ai.onnx'!r}, newer than the newest onnx "
                             f"{onnx.__version__} knows ({newest}); onnxruntime refuses opsets it "
                             "does not know")


_AT = onnx.AttributeProto


def _attribute_type(value: Any) -> int | None:
    """The attribute type a value of a row's ``attrs`` was read from (None:
    an empty list, which INTS and FLOATS share)."""
    kind = type(value)
    if kind is list:
        if not value:
            return None
        return _AT.INTS if type(value[0]) is int else _AT.FLOATS
    return _AT.INT if kind is int else _AT.FLOAT if kind is float else _AT.STRING


def _mistyped_attribute(row: Row, types: dict[str, int]) -> tuple[str, str, str] | None:
    """``(attribute, schema's type, file's type)`` of the first of the node's
    attributes whose type is not the one the op's schema declares, or None."""
    found = [(a, _attribute_type(v)) for a, v in row[ATTRS].items()]
    found += [(a, _AT.TENSOR) for a in row[TENSORS]]
    found += [(a.name, a.type) for a in row[OTHER]]
    for attr, kind in found:
        want = types.get(attr)
        if want is not None and kind is not None and kind != want:
            return attr, _AT.AttributeType.Name(want), _AT.AttributeType.Name(kind)
    return None


#: The subgraphs a control-flow node must hold.
_BODIES = {"If": frozenset({"then_branch", "else_branch"}), "Loop": frozenset({"body"}),
           "Scan": frozenset({"body"})}


def _check_single_definitions(g: onnx.GraphProto, name: str, table: list[Row],
                              inits: set[str]) -> set[str]:
    """Every node output is defined once: by no other node, initializer or
    graph input (onnxruntime refuses a "duplicate definition"; onnx's
    inference then mixes the two, and a weight taken for a shape vector made
    its data propagation take 2.5 GB on a fuzzed detector). Returns the
    tensors the nodes define."""
    outs = [o for row in table for o in row[OUTS] if o]
    made = set(outs)
    twice: str | None = None
    if len(made) != len(outs):  # a tensor two nodes write: the first in node order
        seen: set[str] = set()
        for o in outs:
            if o in seen:
                twice = o
                break
            seen.add(o)
    else:
        clash = made & (inits | {vi.name for vi in g.input})
        twice = next((o for o in outs if o in clash), None) if clash else None
    if twice is not None:
        raise GraphError(f"{name}: tensor {twice!r} is defined twice (by a node and by another "
                         "node, an initializer or a graph input); onnxruntime refuses such a model")
    return made


def _check_references(g: onnx.GraphProto, name: str, table: list[Row], defined: set[str]
                      ) -> None:
    """Every tensor a node reads, and every graph output, is ``defined`` (by
    a node or an initializer; the set is extended here) or a graph input
    (onnxruntime refuses a model that reads or outputs a tensor nothing
    defines; extraction had failed on the first as a shape it could not
    infer, and not seen the second). Nodes' subgraphs may read the outer
    graph's tensors: they are not looked into. Graph inputs are named once
    (a second is a "duplicate definition")."""
    inputs = [vi.name for vi in g.input]
    declared = set(inputs)
    if len(declared) != len(inputs):
        twice = next(n for i, n in enumerate(inputs) if n in inputs[:i])
        raise GraphError(f"{name}: graph input {twice!r} is declared twice; onnxruntime refuses "
                         "such a model")
    defined.update(declared)
    defined.add("")  # an optional input left out
    outputs = [vi.name for vi in g.output]
    if defined.issuperset(chain.from_iterable(map(itemgetter(INS), table))) \
            and defined.issuperset(outputs):
        return
    for row in table:
        missing = next((i for i in row[INS] if i not in defined), None)
        if isinstance(missing, bytes):
            _bad_name(g, name)
        if missing is not None:
            raise GraphError(f"{name}: node {row[NAME] or row[OP]!r} reads {missing!r}, which no "
                             "node, graph input or initializer defines; onnxruntime refuses such "
                             "a model")
    missing = next(o for o in outputs if o not in defined)
    raise GraphError(f"{name}: graph output {missing!r} is defined by no node, graph input or "
                     "initializer; onnxruntime refuses such a model")


def _check_names(g: onnx.GraphProto, name: str, table: list[Row], tensors: bool = True) -> None:
    """Every name is text: protobuf hands a string field that is not valid
    UTF-8 back as bytes, which no later step could compare or print. With
    ``tensors`` False the nodes' input and output names are left to the
    caller (:func:`validate` checks the set of them, which is smaller)."""
    join = "".join  # fails on the first bytes object, at C speed
    try:
        for col in (OP, NAME, DOMAIN):
            join(map(itemgetter(col), table))
        for col in ((INS, OUTS) if tensors else ()):
            join(chain.from_iterable(map(itemgetter(col), table)))
        for col in (ATTRS, TENSORS):  # attribute names: the keys of these dicts
            join(chain.from_iterable(map(itemgetter(col), table)))
        join(map(attrgetter("name"), chain.from_iterable(map(itemgetter(OTHER), table))))
        for vis in (g.input, g.output, g.value_info, g.initializer):
            join([v.name for v in vis])
        join([t.values.name for t in g.sparse_initializer])
        return
    except TypeError:
        _bad_name(g, name)


def _bad_name(g: onnx.GraphProto, name: str) -> NoReturn:
    """The GraphError naming the first name in ``g`` that is not valid UTF-8."""
    texts: list[str | bytes] = []
    for n in g.node:  # read again, in the order of the fields (an error path)
        texts += (n.name, n.op_type, n.domain)
        texts += n.input
        texts += n.output
        texts += [a.name for a in n.attribute]
    for vis in (g.input, g.output, g.value_info, g.initializer):
        texts += [v.name for v in vis]
    texts += [t.values.name for t in g.sparse_initializer]
    bad = b""
    for text in texts:
        if isinstance(text, bytes):
            bad = text
            break
    raise GraphError(f"{name}: a node, tensor or attribute name is not valid UTF-8 "
                     f"({bad[:40]!r})")


def stored_bytes(t: onnx.TensorProto) -> int | None:
    """Bytes of data an initializer carries in the file (None: external or
    no data at all)."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    raw = t.raw_data  # a copy of the bytes: read once
    if raw:
        return len(raw)
    n = 8 * (len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data)
             + len(t.uint64_data)) + sum(len(x) for x in t.string_data)
    return n or None


def default_opset(proto: onnx.ModelProto) -> int | None:
    """The model's default-domain opset (None where it names none)."""
    return next((imp.version for imp in proto.opset_import if imp.domain in ("", "ai.onnx")), None)
