"""A graph's nodes read once from protobuf: the node table.

Every protobuf field access from Python costs ~0.1-0.5 us, and validation,
folding, shape propagation and costing all walk every node, so each node's
fields (and its attributes, as plain values) are read once into a tuple:

``(op_type, name, domain, inputs, outputs, attrs, tensors, other, loose)``

(``domain`` is ``""`` for the default domain, however the file spells it.)

* ``attrs``: numeric and string attributes as plain Python values (strings
  decoded as UTF-8 with replacement; an attribute whose type is unset, as
  very old files leave it, is typed by the field it fills);
* ``tensors``: TENSOR attributes (a Constant's value, ConstantOfShape's);
* ``other``: every other attribute (subgraphs, string lists...) as protobuf;
* ``loose``: whether an attribute has an unset type, a scalar whose field is
  not set, or a type not in ``attrs``/``tensors``: onnx's inference reads
  such attributes by field presence, which
  :mod:`perfseer_rt.graph.propagate` does not model (it gives up there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import onnx

from perfseer_rt.errors import GraphError

Attrs = dict[str, Any]
Row = tuple[str, str, str, tuple[str, ...], tuple[str, ...], Attrs,
            dict[str, onnx.TensorProto], list[onnx.AttributeProto], bool]
#: Positions in a row (literal indices, so that a row's fields keep their types).
OP: Final = 0
NAME: Final = 1
DOMAIN: Final = 2
INS: Final = 3
OUTS: Final = 4
ATTRS: Final = 5
TENSORS: Final = 6
OTHER: Final = 7
LOOSE: Final = 8

_AT = onnx.AttributeProto
_INT, _INTS, _FLOAT, _FLOATS, _STRING, _TENSOR = (_AT.INT, _AT.INTS, _AT.FLOAT, _AT.FLOATS,
                                                  _AT.STRING, _AT.TENSOR)
_SUBGRAPH = (_AT.GRAPH, _AT.GRAPHS)
#: Shared by every node without attributes (never mutated).
_NONE: Attrs = {}
_NO_TENSORS: dict[str, onnx.TensorProto] = {}
_NO_OTHER: list[onnx.AttributeProto] = []


def read_attrs(attributes: Sequence[onnx.AttributeProto]
               ) -> tuple[Attrs, dict[str, onnx.TensorProto], list[onnx.AttributeProto], bool]:
    """``(attrs, tensors, other, loose)`` of one node (see the module doc)."""
    attrs: Attrs = {}
    tensors: dict[str, onnx.TensorProto] = {}
    other: list[onnx.AttributeProto] = []
    loose = False
    for a in attributes:
        t = a.type
        if t == _INT:
            attrs[a.name] = a.i
            if not a.HasField("i"):
                loose = _check_kind(a)
        elif t == _INTS:
            attrs[a.name] = a.ints[:]
            if not a.ints:
                _check_kind(a)
        elif t == _FLOAT:
            attrs[a.name] = a.f
            if not a.HasField("f"):
                loose = _check_kind(a)
        elif t == _STRING:
            attrs[a.name] = a.s.decode("utf-8", "replace")
            if not a.HasField("s"):
                loose = _check_kind(a)
        elif t == _FLOATS:
            attrs[a.name] = a.floats[:]
            if not a.floats:
                _check_kind(a)
        elif t == _TENSOR:
            if not a.HasField("t"):
                _check_kind(a)
            tensors[a.name] = a.t
        elif t == _AT.UNDEFINED:  # very old files leave the type unset
            loose = True
            if a.ints:
                attrs[a.name] = a.ints[:]
            elif a.floats:
                attrs[a.name] = a.floats[:]
            elif a.s:
                attrs[a.name] = a.s.decode("utf-8", "replace")
            elif a.HasField("i"):
                attrs[a.name] = a.i
            elif a.HasField("f"):
                attrs[a.name] = a.f
            else:
                other.append(a)
        else:
            other.append(a)
            loose = True
    return attrs, tensors or _NO_TENSORS, other or _NO_OTHER, loose


#: The value field of each attribute kind (the rare check of :func:`_check_kind`).
_KIND_FIELDS = ((_AT.INT, "i"), (_AT.FLOAT, "f"), (_AT.STRING, "s"), (_AT.TENSOR, "t"),
                (_AT.GRAPH, "g"), (_AT.SPARSE_TENSOR, "sparse_tensor"), (_AT.TYPE_PROTO, "tp"))
_LIST_FIELDS = ((_AT.INTS, "ints"), (_AT.FLOATS, "floats"), (_AT.STRINGS, "strings"),
                (_AT.TENSORS, "tensors"), (_AT.GRAPHS, "graphs"))


def _check_kind(a: onnx.AttributeProto) -> bool:
    """An attribute whose declared type's field is empty: True (read by
    presence: loose) when it holds nothing else; a corrupt file when it
    holds a value of another kind (onnx's C++ inference then reads a
    default and has aborted the process on such a Constant), a GraphError."""
    held = [k for k, f in _KIND_FIELDS if a.HasField(f)] + [k for k, f in _LIST_FIELDS
                                                             if len(getattr(a, f))]
    if held and a.type not in held:
        raise GraphError(f"attribute {a.name!r} is declared {_AT.AttributeType.Name(a.type)} but "
                         f"holds a {_AT.AttributeType.Name(held[0])} value; the file is corrupt")
    return True


def node_table(graph: onnx.GraphProto) -> list[Row]:
    """The graph's nodes as rows, in graph order."""
    rows: list[Row] = []
    add = rows.append
    for n in graph.node:
        a = n.attribute
        if a:
            try:
                attrs, tensors, other, loose = read_attrs(a)
            except GraphError as exc:
                raise GraphError(f"node {n.name or n.op_type!r}: {exc}") from None
        else:
            attrs, tensors, other, loose = _NONE, _NO_TENSORS, _NO_OTHER, False
        # a slice copies a repeated field in one C call; tuple() of the field
        # itself iterates it from Python (1.4 against 0.6 us per node)
        domain = n.domain
        if domain == "ai.onnx":  # the default domain's other spelling: one name in the table
            domain = ""
        add((n.op_type, n.name, domain, tuple(n.input[:]), tuple(n.output[:]), attrs, tensors,
             other, loose))
    return rows


def has_subgraph(row: Row) -> bool:
    """Whether the node holds a subgraph (If/Loop/Scan bodies)."""
    return bool(row[OTHER]) and any(a.type in _SUBGRAPH for a in row[OTHER])


def attribute_keys(table: list[Row]) -> list[str | None]:
    """A hashable key of each node's ``attrs`` (None: no attributes), equal
    for two nodes exactly when their attributes are: ``repr`` of the dict,
    which tells 1 from 1.0 and 0.0 from -0.0 and keeps the attributes'
    order. Rules that read only the attributes (and the inputs' types) are
    computed once per distinct key; caches kept between calls skip keys
    longer than :data:`CACHED_KEY_CHARS` (a huge string or list attribute)."""
    return [repr(r[5]) if r[5] else None for r in table]


#: Longest attribute key whose results are kept between calls.
CACHED_KEY_CHARS = 2048
