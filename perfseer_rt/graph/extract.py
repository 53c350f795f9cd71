"""ONNX model -> :class:`PerfGraph` (paper 001, section 3.1).

The pipeline: load (no external data) -> validate (node cap, element types,
initializer dims) -> resolve input shapes (batch, named dims, explicit
shapes; static graph inputs used as weights are weights) -> shape inference
on a weight-free skeleton -> fold constants and shape subgraphs -> per-node
costs (:mod:`perfseer_rt.graph.ops`) -> node, edge and global feature
arrays in the layout of :mod:`perfseer_rt.graph.layout`.

Speed: a node's features depend only on its signature (op, attributes,
input and output types, which inputs are constant), and so do most shape
rules; both are computed once per signature and kept, bounded, between
calls (:func:`clear_caches` empties them; they never change a result).

Failure contract: :func:`extract` raises only
:class:`~perfseer_rt.errors.PerfSeerError` subclasses, within its node cap and
CPU-time limit, and writes no file.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Iterable
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfseer_rt.errors import GraphError, LimitError, PerfSeerError, ShapeError
from perfseer_rt.graph import data_dependent, dtypes, layout, sequences
from perfseer_rt.graph.contrib import ONNX_DOMAIN_CONTRIB, contrib_rule
from perfseer_rt.graph.exporter import (
    TORCH_DYNAMO,
    exporter,
    external_weight_share,
    fixed_input_shapes,
)
from perfseer_rt.graph.fold import fold_static, shape_derived, weight_roots
from perfseer_rt.graph.implied import IMPLIED_DIM_WARNING, implied_dims
from perfseer_rt.graph.inline import inline_branches, inline_functions
from perfseer_rt.graph.limits import MAX_CONST_ELEMS, MAX_ELEMS, MAX_NODES, MAX_SHAPE_LEN, TIME_LIMIT_S, Deadline
from perfseer_rt.graph.load import ModelSource, load_model
from perfseer_rt.graph.nodes import (
    ATTRS,
    CACHED_KEY_CHARS,
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
    has_subgraph,
    node_table,
    read_attrs,
)
from perfseer_rt.graph.ops import (
    PARAM_INPUTS,
    SPATIAL_OPS,
    NodeCost,
    TensorInfo,
    check_spatial_attrs,
    is_known,
    node_cost,
)
from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.propagate import (
    BOOL,
    GiveUp,
    Propagation,
    TypedShape,
    clear_rule_cache,
    long_1d,
    reshaped,
    schema_attribute_types,
    schema_attributes,
    tensor_value,
    value_sources,
)
from perfseer_rt.graph.samples import sample_inputs
from perfseer_rt.graph.shapes import (
    graph_inputs,
    infer_shapes,
    refusal,
    resolve_inputs,
    skeleton,
    weight_inputs,
)
from perfseer_rt.graph.structure import structure_globals
from perfseer_rt.graph.switches import fix_switches, switch_shape
from perfseer_rt.graph.toposort import reordered, topological_order

log = logging.getLogger(__name__)
_T = TypeVar("_T")
Shape = tuple[int, ...]

_NODE_IDX = layout.column_index(layout.NODE_COLUMNS)
_OP_COL = {op: _NODE_IDX[f"op_{op}"] for op in layout.OP_VOCAB}
_OTHER_COL = _NODE_IDX[f"op_{layout.OTHER_OP}"]
_HP_IDX = {c: _NODE_IDX[c] for c in layout.HPARAM_COLUMNS}
_SUBGRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
#: A shared weight tensor at least this many elements earns a warning
#: (exporters share small scalar constants between layers all the time).
SHARED_WARN_ELEMS = 1024


#: The generic node columns, in the order of ``_NodeFeatures.cols`` (the
#: first is the index of the op's one-hot column).
_FEATURE_COLS = ("op", "in_elems", "out_elems", "num_inputs", "num_outputs", "in_channels",
                 "out_channels", "flops", "mac", "weight", "params", "ai")


#: Node columns of _FEATURE_COLS[1:].
_GENERIC_COLS = np.array([_NODE_IDX[c] for c in _FEATURE_COLS[1:]], dtype=np.intp)


class _NodeFeatures(NamedTuple):
    """What one node contributes to the PerfGraph that depends only on its
    signature (op, attributes, input and output types, constant inputs)."""

    cols: tuple[float, ...]  # values of _FEATURE_COLS
    hp_keys: tuple[str, ...] | None  # the cost rule's hyper-parameter names
    hp_vals: tuple[float, ...]  # and values (empty without)
    compute: int  # compute element type
    flops: float
    unknown: str | None  # the entry in PerfGraph.unknown_ops, if any
    weight_pos: tuple[tuple[int, int, float, int], ...]  # (position, elems, bytes, elem type)
    data_pos: tuple[int, ...]  # positions of data inputs
    note: str | None  # a control-flow warning


#: Most node signatures whose features are kept between calls (the cache is
#: emptied when it is full): NAS-Bench-201-like batches of small models
#: repeat the same few dozen signatures across thousands of graphs.
SIGNATURE_CACHE_SIZE = 16384
#: node signature -> its features (a pure function of the signature; filled
#: by every extraction, see _extract_shaped).
_FEATURES: dict[tuple[Any, ...], _NodeFeatures] = {}


def clear_caches() -> None:
    """Empty the caches of results computed per node signature (features
    here, shape rules in :mod:`perfseer_rt.graph.propagate`), as in a fresh
    process. They change speed only, never a result; benchmarks clear them
    to time an extraction from cold."""
    _FEATURES.clear()
    clear_rule_cache()


def extract(model: ModelSource, batch: int | None = None,
            input_shapes: dict[str, tuple[int, ...]] | None = None,
            dims: dict[str, int] | None = None, *, max_nodes: int = MAX_NODES,
            time_limit: float | None = TIME_LIMIT_S) -> PerfGraph:
    """Extract the PerfGraph of an ONNX model.

    Args:
        model: a path, the file's bytes, or an ``onnx.ModelProto``. External
            weight data is never read, so structure-only models work.
        batch: batch size in ``1..65536``; fills a dynamic first dim of every
            input (default 1) and is checked against static first dims.
        input_shapes: explicit static shapes by input name.
        dims: values of symbolic dims by name (``{"seq": 128, "past": 0}``
            sets every input dim so named); 0 is allowed here (empty caches).
            A dim named by an expression of named dims takes its value
            (:mod:`perfseer_rt.graph.dim_expressions`), and an input that
            switches the model's path (a merged decoder's
            ``use_cache_branch: bool[1]``) named here takes the value
            (:mod:`perfseer_rt.graph.switches`).
        max_nodes: node cap (main graph and subgraphs together).
        time_limit: CPU seconds before :class:`LimitError` (None: no limit).

    Raises:
        ModelLoadError: missing, non-ONNX or truncated model.
        ShapeError: dynamic dims that cannot be resolved (all listed), bad
            batch/dim values, or tensors whose shape cannot be inferred.
        GraphError: unknown element types, names that are not UTF-8,
            attributes out of range, implausibly large tensors.
        LimitError: more than ``max_nodes`` nodes, or over ``time_limit``.
    """
    return _guarded(model, lambda proto, name: _extract(
        proto, name, batch, input_shapes, dims, max_nodes, Deadline(time_limit, name)))


def _guarded(model: ModelSource, work: Callable[[onnx.ModelProto, str], _T]) -> _T:
    """Load ``model`` and run ``work(proto, name)`` under the failure
    contract: only PerfSeerError subclasses leave."""
    name = "<model>"
    # Extraction allocates millions of small acyclic objects on large graphs;
    # Python's cyclic collector then spends a fifth of the time scanning
    # them (100k-node chain: 2.3 -> 1.85 CPU-s without it). It is paused for
    # the call and restored as it was.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        proto, name = load_model(model)
        return work(proto, name)
    except PerfSeerError:
        raise
    except UnicodeDecodeError:
        raise GraphError(f"{name}: a node, tensor or attribute name is not valid UTF-8"
                         ) from None
    except (RecursionError, MemoryError) as exc:
        raise LimitError(f"{name}: the model is too large or too deeply nested to extract "
                         f"({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001 - the API contract: typed errors only
        log.debug("internal extraction error", exc_info=True)
        err = GraphError(f"{name}: cannot be extracted ({type(exc).__name__}: {exc}); "
                         "please report this model")
        err.internal = True
        raise err from exc
    finally:
        if gc_was_on:
            gc.enable()


def extract_batches(model: ModelSource, batches: Iterable[int | None],
                    input_shapes: dict[str, tuple[int, ...]] | None = None,
                    dims: dict[str, int] | None = None, *, max_nodes: int = MAX_NODES,
                    time_limit: float | None = TIME_LIMIT_S) -> list[PerfGraph]:
    """The PerfGraphs of one model at several batch sizes, in one pass.

    Equal, graph for graph, to ``[extract(model, b, input_shapes, dims) for b
    in batches]``, but the batch-independent work (loading, validation,
    weight-input detection, constant folding, the shape-inference skeleton)
    is done once; only shape inference and the features run per batch.

    Args:
        model, input_shapes, dims, max_nodes: as for :func:`extract`.
        batches: batch sizes (each as ``extract``'s ``batch``; None allowed).
        time_limit: CPU seconds per batch size.

    Raises:
        The errors of :func:`extract`, for the first batch size that fails.
    """
    sizes = list(batches)

    def work(proto: onnx.ModelProto, name: str) -> list[PerfGraph]:
        st = _Structure(fix_switches(proto, dims), name, max_nodes)
        return [_extract_top(st, b, input_shapes, dims, Deadline(time_limit, name),
                             reuse_skeleton=True) for b in sizes]

    return _guarded(model, work)


def resolve_input_shapes(model: ModelSource, batch: int | None = None,
                         input_shapes: dict[str, tuple[int, ...]] | None = None,
                         dims: dict[str, int] | None = None, *, max_nodes: int = MAX_NODES,
                         time_limit: float | None = TIME_LIMIT_S) -> dict[str, tuple[int, ...]]:
    """Every graph input's shape as :func:`extract` resolves it (explicit
    shapes, named dims, the batch, and the dims the model implies:
    :mod:`perfseer_rt.graph.implied`), without extracting; for running the
    model at the shapes a prediction was made for. Arguments and errors as
    for :func:`extract` (no shape-inference errors)."""
    return _guarded(model, lambda proto, name: _Structure(proto, name, max_nodes).resolve(
        batch, input_shapes, dims, Deadline(time_limit, name))[0])


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


def _validate(proto: onnx.ModelProto, name: str, max_nodes: int,
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
    top = name != _SUBGRAPH  # a subgraph may read its outer graph's tensors
    _check_names(g, name, table, tensors=not top)
    if not all(map(itemgetter(OP), table)):
        row = next(r for r in table if not r[OP])
        raise GraphError(f"{name}: node {row[NAME] or row[OUTS][:1]!r} has no op type; onnxruntime "
                         "refuses such a node")
    _check_opsets(proto, name)
    if akeys is None:
        akeys = attribute_keys(table)
    checked: set[str | None] = set()  # attributes found in range (the check reads nothing else)
    opset = _default_opset(proto)
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
        stored = _stored_bytes(t) if in_file else None
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
_SUBGRAPH = "<subgraph>"
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
    caller (:func:`_validate` checks the set of them, which is smaller)."""
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


def _stored_bytes(t: onnx.TensorProto) -> int | None:
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


class _Structure:
    """What extraction knows of a model before any batch size or input shape
    is given: it is validated, its weight inputs found, its constant nodes
    folded away. :func:`extract_batches` builds it once per model."""

    def __init__(self, proto: onnx.ModelProto, name: str, max_nodes: int):
        proto = inline_functions(proto, name, max_nodes)
        self.table = node_table(proto.graph)
        order = topological_order(self.table, name)
        if order is not None:  # nodes out of file order (onnxruntime sorts them too)
            proto = reordered(proto, order)
            self.table = node_table(proto.graph)
        self.akeys = attribute_keys(self.table)
        inits_read = _validate(proto, name, max_nodes, self.table, self.akeys)
        self.proto = proto
        self.name = name
        self.max_nodes = max_nodes
        self.weights = weight_inputs(proto)
        inits = {t[0] for t in inits_read}
        inits.update(self.weights)
        self.const, self.kept = fold_static(proto, inits, self.table)
        # constants computed from shapes: read by nodes, but not weights
        self.derived = shape_derived(self.table, self.const)
        self.roots = weight_roots(self.table, self.const)
        self.skeleton: onnx.ModelProto | None = None  # reused across batch sizes
        inputs = graph_inputs(proto)
        self.data_inputs = len(inputs)
        # inputs holding one sample ([3, H, W]: the model adds the batch axis)
        self.samples = sample_inputs(
            self.table, [vi.name for vi in inputs if vi.name not in self.weights
                         and 2 <= len(vi.type.tensor_type.shape.dim) <= 3
                         and vi.type.tensor_type.shape.dim[0].dim_value > 0],
            lambda name: _int_values(name, {}, proto))
        self.fast = _fast_setup(proto, inits_read)
        self.exporter = exporter(proto)
        self.fixed_shapes = fixed_input_shapes([vi for vi in inputs if vi.name not in self.weights])
        # a file's name is its path ("<bytes>", "<ModelProto>" otherwise: no such file)
        self.external_share = external_weight_share(proto, Path(name), name)
        self.folded = set(range(len(self.table))) - set(self.kept)

    def propagate(self, inputs: dict[str, tuple[int, ...]], deadline: Deadline
                  ) -> dict[str, TypedShape] | None:
        """Shapes from :mod:`perfseer_rt.graph.propagate`, or None where it
        gives up (onnx's inference on the skeleton then decides)."""
        if self.fast is None:
            return None
        typed_inits, input_elems, constants, late, opset = self.fast
        typed = dict(typed_inits)
        for n, elem in input_elems:
            typed[n] = (elem, inputs[n])
        if long_1d(typed):
            return None
        try:
            return Propagation(self.table, self.folded, typed, constants, late, self.proto,
                               opset, self.akeys, contrib_rule).run(self.kept, deadline)
        except GiveUp as exc:
            log.debug("%s: shape propagation gave up (%s)", self.name, exc)
            return None
        except (PerfSeerError, MemoryError, RecursionError):
            raise  # a limit or an invalid model: the same for every engine
        except Exception:  # noqa: BLE001 - the pass only accelerates: onnx decides
            log.debug("%s: shape propagation failed", self.name, exc_info=True)
            return None

    def resolve(self, batch: int | None, input_shapes: dict[str, Shape] | None,
                dims: dict[str, int] | None, deadline: Deadline
                ) -> tuple[dict[str, Shape], dict[str, tuple[int, str]]]:
        """Every input's shape (:func:`resolve_inputs`) and the named dims
        the model implied where they were not given
        (:func:`perfseer_rt.graph.implied.implied_dims`: size, why)."""
        try:
            return resolve_inputs(self.proto, batch, input_shapes, dims, self.weights,
                                  self.samples), {}
        except ShapeError as exc:
            given = dims or {}

            def shapes_with(extra: dict[str, int]) -> dict[str, TypedShape] | None:
                try:
                    inputs = resolve_inputs(self.proto, batch, input_shapes, {**given, **extra},
                                            self.weights, self.samples)
                except ShapeError:
                    return None
                return self.propagate(inputs, deadline)

            input_dims = {vi.name: vi.type.tensor_type.shape.dim for vi in graph_inputs(self.proto)
                          if vi.name not in (input_shapes or {})}
            implied = implied_dims(self.table, input_dims, given, shapes_with)
            if not implied:
                raise
            try:
                inputs = resolve_inputs(self.proto, batch, input_shapes,
                                        {**given, **{n: s for n, (s, _) in implied.items()}},
                                        self.weights, self.samples)
            except ShapeError:
                raise exc from None  # other dims are missing too: name them all, as before
            return inputs, implied

    def skeleton_for(self, inputs: dict[str, Shape], reuse: bool) -> onnx.ModelProto:
        """The shape-inference skeleton with these input shapes; with
        ``reuse`` the one skeleton of the model is re-shaped in place (its
        nodes and weights are the same for every batch size)."""
        if not reuse or self.skeleton is None:
            sk = skeleton(self.proto, inputs)
            if reuse:
                self.skeleton = sk
            return sk
        sk = self.skeleton
        del sk.graph.value_info[:]  # inference added facts of the last shapes
        for vi in sk.graph.input[:self.data_inputs]:
            dim = vi.type.tensor_type.shape.dim
            del dim[:]
            for d in inputs[vi.name]:
                dim.add(dim_value=d)
        return sk


FastSetup = tuple[dict[str, TypedShape], list[tuple[str, int]], dict[str, onnx.TensorProto],
                  set[str], int]


def _fast_setup(proto: onnx.ModelProto, inits: list[InitInfo]) -> FastSetup | None:
    """What :meth:`_Structure.propagate` needs of the model, or None where
    the pass does not apply (IR < 4: onnx does not type initializers that are
    not inputs; model-local functions; no or ambiguous default opset;
    repeated initializer names; sparse initializers)."""
    versions = [imp.version for imp in proto.opset_import if imp.domain in ("", "ai.onnx")]
    g = proto.graph
    if proto.ir_version < 4 or len(proto.functions) or len(versions) != 1 or len(
            g.sparse_initializer):
        return None
    typed = {n: (data_type, dims) for n, data_type, dims, _, _ in inits}
    if len(typed) != len(inits):
        return None
    elems = [(vi.name, vi.type.tensor_type.elem_type) for vi in graph_inputs(proto)]
    if any(n in typed for n, _ in elems) or len({n for n, _ in elems}) != len(elems):
        return None
    constants, late = value_sources(g.initializer, inits)
    return typed, elems, constants, late, versions[0]


def _extract(proto: onnx.ModelProto, name: str, batch: int | None,
             input_shapes: dict[str, Shape] | None, dims: dict[str, int] | None, max_nodes: int,
             deadline: Deadline) -> PerfGraph:
    return _extract_top(_Structure(fix_switches(proto, dims), name, max_nodes), batch,
                        input_shapes, dims, deadline)


#: Share of a model's FLOPs above which a top-level If is extracted as its
#: heavier branch (:func:`_extract_top`).
DOMINANT_IF_SHARE = 0.5
#: The note when a dominant If was replaced by a branch ({why}: "its heavier
#: branch", or "the branch its condition selects").
DOMINANT_IF_WARNING = (
    "If node {label} does {share:.0%} of the model's work (a merged decoder's cache switch, "
    "say): it is extracted as {why} ({branch}), so the prediction is for a run that takes "
    "that branch{hint}")
#: Added to it where the heavier branch was taken and the condition is a
#: switch input (:mod:`perfseer_rt.graph.switches`) the caller can set.
SWITCH_HINT = ("; its condition is the input {name!r}: --dim {name}=1 takes then_branch, "
               "--dim {name}=0 else_branch")
#: A dominant If's branch taken: (branch, FLOPs, label, why, hint) by first output.
Chosen = dict[str, tuple[str, float, str, str, str]]


def _extract_top(st: _Structure, batch: int | None, input_shapes: dict[str, Shape] | None,
                 dims: dict[str, int] | None, deadline: Deadline,
                 reuse_skeleton: bool = False) -> PerfGraph:
    """The PerfGraph of a model; an If that does most of its work (as
    optimum's merged decoders switch between their with- and without-cache
    decoders, each a whole model in a branch) is replaced by its heavier
    branch's nodes and the model extracted again, so that the predictors
    see those nodes and their weights, not one node of summed FLOPs."""
    notes: list[str] = []
    chosen: Chosen = {}
    graph = _extract_shaped(st, batch, input_shapes, dims, deadline,
                            reuse_skeleton=reuse_skeleton, chosen=chosen)
    for _ in range(MAX_SUBGRAPH_DEPTH):
        total = float(graph.globals["flops_total"])
        picks = {o: branch for o, (branch, flops, *_) in chosen.items()
                 if total > 0 and flops / total >= DOMINANT_IF_SHARE}
        if not picks:
            break
        try:  # where the branch cannot stand in the graph, the If stays whole
            st = _Structure(inline_branches(st.proto, picks), st.name, st.max_nodes)
            inlined: Chosen = {}
            again = _extract_shaped(st, batch, input_shapes, dims, deadline, chosen=inlined)
        except LimitError:
            raise
        except PerfSeerError:
            break
        notes += [DOMINANT_IF_WARNING.format(label=label, share=flops / total, branch=branch,
                                             why=why, hint=hint)
                  for o, (branch, flops, label, why, hint) in chosen.items() if o in picks]
        graph, chosen = again, inlined
    graph.warnings[:0] = notes
    return graph


def _extract_shaped(st: _Structure, batch: int | None, input_shapes: dict[str, Shape] | None,
                    dims: dict[str, int] | None, deadline: Deadline, depth: int = 0,
                    reuse_skeleton: bool = False,
                    chosen: Chosen | None = None) -> PerfGraph:
    """The PerfGraph of a validated, folded model at one set of input shapes.
    ``chosen`` collects each If's heavier branch (first output -> (branch,
    FLOPs, label))."""
    proto, name, max_nodes, weights = st.proto, st.name, st.max_nodes, st.weights
    inputs, implied = st.resolve(batch, input_shapes, dims, deadline)
    const, derived, kept, roots = st.const, st.derived, st.kept, st.roots
    if not kept:
        raise ShapeError(f"{name}: every node folds to a constant; nothing to extract")
    deadline.check("folding")

    rows = [st.table[i] for i in kept]
    akeys = [st.akeys[i] for i in kept]
    ops = [r[0] for r in rows]
    node_ins = [r[3] for r in rows]
    node_outs = [r[4] for r in rows]
    # the tensors whose shapes the features need, in node order (an error
    # about them names the first, whatever the process's string hashing)
    ordered: dict[str, None] = {}
    for op, ins_, outs_ in zip(ops, node_ins, node_outs):
        params = PARAM_INPUTS.get(op)
        if params:
            ordered.update((t, None) for pos, t in enumerate(ins_) if t and pos not in params)
        else:
            for t in ins_:
                ordered[t] = None
        for t in outs_:
            ordered[t] = None
    ordered.pop("", None)
    needed = set(ordered)
    shapes, engine, completion = _resolve_shapes(st, inputs, needed, deadline, depth,
                                              reuse_skeleton)
    known_trips = completion.trips if completion is not None else {}
    taken = completion.taken if completion is not None else {}
    producers = completion.producers() if completion is not None else None
    missing = sorted(needed - shapes.keys())
    unread = _unread_outputs(missing, st.proto, st.table) if missing else []
    if unread:  # left out of their nodes' features, with a warning
        drop = set(unread)
        node_outs = [outs_ if drop.isdisjoint(outs_) else tuple("" if o in drop else o for o in outs_)
                     for outs_ in node_outs]
        for t in unread:
            del ordered[t]
        missing = [m for m in missing if m not in drop]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        head = (f"{name}: the shapes of {len(missing)} tensor(s) could not be inferred "
                f"(engine: {engine}): {shown}{more}")
        foreign = _not_onnx_ops(st.table, st.proto)
        # a clash is the file's only where no size was assumed at a bound
        bounded = completion is not None and bool(completion.assumed or completion.routed)
        refused = None if foreign or bounded else refusal(st.proto, shapes)
        if refused:
            raise ShapeError(f"{head}; {refused}: the model is inconsistent at these input "
                             "shapes (onnxruntime refuses such a file; if other input sizes "
                             "are valid, give them with --input or --dim)")
        why = (f"; the model has ops that are not ONNX operators at its opset ({foreign}), "
               "which onnxruntime refuses: its converter left them in" if foreign else "")
        raise ShapeError(
            f"{head}{why}; give static input shapes with --input or named dims with --dim (if "
            "every input shape is already static, their sizes depend on values only known at "
            "run time)")
    counted: dict[str, int] = {}  # element counts, for the TensorInfos below
    by_shape: dict[Shape, int] = {}  # most tensors share a few shapes
    for t in ordered:
        shape = shapes[t][1]
        elems = by_shape.get(shape, -1)
        if elems < 0:
            elems = 1
            for d in shape:
                elems *= d
            by_shape[shape] = elems
        counted[t] = elems
        if elems > MAX_ELEMS:
            raise GraphError(f"{name}: tensor {t!r} would have shape {list(shape)} "
                             f"({elems:.3g} elements, over the {MAX_ELEMS:.3g} limit); "
                             "check the model's attributes and the input shapes")
    deadline.check("shape inference")
    log.debug("%s: shapes from %s", name, engine)

    itemsize: dict[int, float] = {}
    tinfo: dict[str, TensorInfo] = {}  # one TensorInfo per tensor, built on first use

    def info(t: str) -> TensorInfo:
        ti = tinfo.get(t)
        if ti is None:
            elem, shape = shapes[t]
            size = itemsize.get(elem)
            if size is None:
                size = itemsize[elem] = dtypes.itemsize(elem, f"tensor {t!r}")
            ti = tinfo[t] = TensorInfo(t, shape, size, counted.get(t))
        return ti

    compute_types = _COMPUTE_TYPES

    def node_features(k: int) -> _NodeFeatures:
        """What node ``k`` contributes that depends only on its op,
        attributes, input and output types and which inputs are constant."""
        op = ops[k]
        node_in = node_ins[k]
        node_out = node_outs[k]
        params = PARAM_INPUTS.get(op)
        if params:
            ins = [(tinfo.get(t) or info(t)) if t and pos not in params else None
                   for pos, t in enumerate(node_in)]
        else:
            ins = [(tinfo.get(t) or info(t)) if t else None for t in node_in]
        outs = [tinfo.get(t) or info(t) for t in node_out if t]
        note = None
        if op in _CONTROL_FLOW and has_subgraph(rows[k]):
            cost, ruled, note = _control_flow_cost(proto.graph.node[kept[k]], proto, shapes,
                                                   max_nodes, deadline, depth, known_trips, chosen,
                                                   taken, producers)
        else:
            try:
                cost, ruled = node_cost(op, ins, outs, rows[k][ATTRS])
            except ShapeError as exc:  # a node its inputs' shapes do not fit
                raise ShapeError(f"{name}: node {rows[k][NAME] or op!r} ({op}): {exc}; the model "
                                 "is inconsistent at these input shapes (onnxruntime refuses such "
                                 "a node)") from None
        compute = None
        typed = shapes.get(node_in[0]) if node_in and node_in[0] else None
        if typed is not None and typed[0] in compute_types:
            compute = typed[0]  # the common case: the first input
        else:
            first_typed = None
            for t in (*node_in, *node_out):
                if t:
                    typed = shapes.get(t)
                    if typed is not None:
                        if first_typed is None:
                            first_typed = typed[0]
                        if typed[0] in compute_types:
                            compute = typed[0]
                            break
            if compute is None:
                compute = first_typed if first_typed is not None else 0
        flops = cost.flops
        data_bytes: float = 0
        weight_bytes: float = 0
        params_n = 0
        first_data = None
        weight_pos: list[tuple[int, int, float, int]] = []
        data_pos: list[int] = []
        for pos, (tname, ti) in enumerate(zip(node_in, ins)):
            if ti is None:
                continue
            if tname in const:
                weight_bytes += ti.nbytes
                params_n += ti.elems
                if tname not in derived:  # shape-derived: constant input, not a weight
                    weight_pos.append((pos, ti.elems, ti.nbytes, shapes[tname][0]))
            else:
                data_bytes += ti.nbytes
                if first_data is None:
                    first_data = ti
                data_pos.append(pos)
        out_bytes: float = 0
        out_n = 0
        for o in outs:
            out_bytes += o.nbytes
            out_n += o.elems
        mac = data_bytes + weight_bytes + out_bytes
        in_elems = in_ch = out_ch = 0.0
        first_in = first_data if first_data is not None else (ins[0] if ins and ins[0] else None)
        if first_in is not None:
            in_elems = float(first_in.elems)
            shape = first_in.shape  # its channel slot (ops.channel_dim)
            r = len(shape)
            in_ch = float(shape[1] if r > 3 or r == 2 else shape[2] if r == 3 else
                          shape[0] if r == 1 else 1)
        if outs:
            shape = outs[0].shape
            r = len(shape)
            out_ch = float(shape[1] if r > 3 or r == 2 else shape[2] if r == 3 else
                           shape[0] if r == 1 else 1)
        cols = (float(_OP_COL.get(op, _OTHER_COL)), in_elems, float(out_n), float(len(data_pos)),
                float(len(outs)), in_ch, out_ch, float(flops), float(mac), float(weight_bytes),
                float(params_n), flops / mac if mac else 0.0)
        hparams = cost.hparams
        return _NodeFeatures(
            cols, tuple(hparams) if hparams else None,
            tuple(hparams.values()) if hparams else (), compute, float(flops),
            None if ruled else f"{op} (unreadable inputs)" if is_known(op) else op,
            tuple(weight_pos), tuple(data_pos), note)

    producer = {o: k for k, outs_ in enumerate(node_outs) for o in outs_ if o}
    n_nodes = len(kept)
    # A node's features are a function of its op, attributes, the types of
    # its inputs and outputs and which inputs are constant: real models
    # repeat a handful of such signatures (blocks, layers, cells), and so do
    # batches of related models, so each is computed once (node_features)
    # and looked up after, in this call and later ones; only edges and
    # weight uses, which depend on the tensors' identities, run per node.
    # Control flow is never looked up (its cost depends on its subgraphs).
    memo = _FEATURES
    # the node columns go to numpy as the graph's distinct features (uniq)
    # and one index per node: converting Python floats is the slow part
    uniq: list[_NodeFeatures] = []
    uniq_at: dict[int, int] = {}  # id(features) -> position in uniq (uniq keeps them alive)
    node_feat: list[int] = []
    # the cost rules' hyper-parameters, grouped by their names (a Conv has
    # 13, always the same): one numpy assignment per group at the end
    hp_groups: dict[tuple[str, ...], tuple[list[int], list[int]]] = {}  # -> (nodes, uniq positions)
    unknown: list[str] = []
    src: list[int] = []
    dst: list[int] = []
    edge_tensors: list[str] = []
    weight_uses: dict[str, int] = {}
    flops_by_dtype: dict[int, float] = {}  # by the compute element type of each node
    control_notes: list[str] = []
    weight_sizes: dict[str, tuple[int, float, int]] = {}  # name -> (elems, bytes, elem type)
    shapes_get = shapes.get
    for k in range(n_nodes):
        if not k % 4096:
            deadline.check("node costs")
        op = ops[k]
        node_in = node_ins[k]
        row = rows[k]
        if op in _CONTROL_FLOW and has_subgraph(row):
            feat = node_features(k)
            if feat.note:
                control_notes.append(feat.note)
        else:
            akey = akeys[k]
            key = (op, akey,
                   tuple([(shapes_get(t), (t in const) + (t in derived)) if t else None
                          for t in node_in]),
                   tuple([shapes_get(t) for t in node_outs[k]]))
            cached = memo.get(key)
            if cached is None:
                feat = node_features(k)
                if akey is None or len(akey) <= CACHED_KEY_CHARS:
                    if len(memo) >= SIGNATURE_CACHE_SIZE:
                        memo.clear()
                    memo[key] = feat
            else:
                feat = cached
        compute = feat.compute
        flops_by_dtype[compute] = flops_by_dtype.get(compute, 0) + feat.flops
        if feat.unknown is not None:
            unknown.append(feat.unknown)
        for pos, elems, nbytes, elem in feat.weight_pos:
            tname = node_in[pos]
            root = roots.get(tname, tname)  # aliases of one weight count once
            uses = weight_uses.get(root)
            if uses is None:
                weight_uses[root] = 1
                weight_sizes[root] = (elems, nbytes, elem)
            else:
                weight_uses[root] = uses + 1
                if weight_sizes[root][1] < nbytes:
                    weight_sizes[root] = (elems, nbytes, elem)
        linked: list[str] | None = None  # tensors this node already has an edge for
        for pos in feat.data_pos:
            tname = node_in[pos]
            p = producer.get(tname)
            if p is not None:
                if linked is None:
                    linked = [tname]
                elif tname in linked:
                    continue
                else:
                    linked.append(tname)
                src.append(p)
                dst.append(k)
                edge_tensors.append(tname)
        fi = uniq_at.get(id(feat))
        if fi is None:
            fi = uniq_at[id(feat)] = len(uniq)
            uniq.append(feat)
        node_feat.append(fi)
        if feat.hp_keys is not None:
            group = hp_groups.get(feat.hp_keys)
            if group is None:
                group = hp_groups[feat.hp_keys] = ([], [])
            group[0].append(k)
            group[1].append(fi)

    x = np.zeros((n_nodes, len(layout.NODE_COLUMNS)), dtype=np.float64)
    cols = np.array([f.cols for f in uniq], dtype=np.float64).reshape(
        len(uniq), len(_FEATURE_COLS))[np.array(node_feat, dtype=np.intp)]
    x[np.arange(n_nodes), cols[:, 0].astype(np.int64)] = 1.0
    x[:, _GENERIC_COLS] = cols[:, 1:]
    for keys, (hp_rows, hp_feats) in hp_groups.items():
        # the rules' hyper-parameters override the generic columns set above
        picked = _hp_columns(keys)
        if picked is not None:
            distinct = sorted(set(hp_feats))  # (np.unique costs ~0.1 ms a call)
            at = {fi: j for j, fi in enumerate(distinct)}
            table = np.array([uniq[i].hp_vals for i in distinct],  # float(v) of each,
                             dtype=np.float64)[[at[fi] for fi in hp_feats]]  # as numpy converts
            x[np.array(hp_rows)[:, None], picked[1]] = table[:, picked[0]]

    for col, src_col in (("flops_ratio", "flops"), ("mac_ratio", "mac"),
                         ("weight_ratio", "weight")):
        arr = x[:, _NODE_IDX[src_col]]
        total = arr.sum()
        x[:, _NODE_IDX[col]] = arr / total if total else 0.0

    edge_shapes = [shapes[t][1] for t in edge_tensors]
    # one row per distinct tensor type, indexed per edge (as the node columns)
    edge_rows: dict[str, int] = {}  # tensor -> its row
    by_type: dict[TypedShape, int] = {}
    rows_e: list[list[float]] = []
    edge_row_of: list[int] = []
    for t in edge_tensors:
        er = edge_rows.get(t)
        if er is None:
            typed = shapes[t]
            er = by_type.get(typed)
            if er is None:
                size = itemsize.get(typed[0])
                if size is None:  # only cached nodes read it: a known type
                    size = itemsize[typed[0]] = dtypes.itemsize(typed[0], f"tensor {t!r}")
                er = by_type[typed] = len(rows_e)
                rows_e.append(_edge_row(typed[1], size, counted[t]))
            edge_rows[t] = er
        edge_row_of.append(er)
    edge_attr = np.array(rows_e, dtype=np.float64).reshape(
        len(rows_e), len(layout.EDGE_COLUMNS))[np.array(edge_row_of, dtype=np.intp)]
    edge_index = np.array([src, dst], dtype=np.int64).reshape(2, len(src))

    data_inputs = [(n, s) for n, s in inputs.items() if n not in weights]
    first_name, first = data_inputs[0] if data_inputs else ("", ())
    # an input holding one sample is a batch of 1, whatever its first dim
    batch_size = batch if batch is not None else (
        1 if not first or first_name in st.samples else first[0])
    params_unique = float(sum(e for e, _, _ in weight_sizes.values()))
    bytes_unique = float(sum(b for _, b, _ in weight_sizes.values()))
    u = _globals(x, edge_index, edge_attr, batch_size, params_unique, bytes_unique)
    meta, warnings = _model_info(weights, weight_uses, weight_sizes, flops_by_dtype, rows, roots)
    meta["exporter"] = st.exporter
    meta["fixed_input_shapes"] = st.fixed_shapes
    meta["external_weight_share"] = st.external_share
    if st.exporter == TORCH_DYNAMO:
        warnings.append(DYNAMO_WARNING)
    if st.fixed_shapes and depth == 0:
        warnings.append(FIXED_SHAPES_WARNING)
    if st.external_share >= EXTERNAL_WEIGHTS_WARN_SHARE and depth == 0:
        warnings.append(EXTERNAL_WEIGHTS_WARNING.format(share=st.external_share))
    warnings += control_notes
    if completion is not None and completion.assumed:
        warnings.append(data_dependent.warning(_counts(completion.assumed)))
    if completion is not None and completion.routed:
        warnings.append(data_dependent.routing_warning(completion.routed))
    if completion is not None and completion.guessed:
        counts = _counts(completion.guessed)
        warnings.append(GUESSED_SHAPE_WARNING.format(
            nodes=sum(counts.values()), ops=", ".join(sorted(counts))))
    if unread:
        warnings.append(UNREAD_OUTPUT_WARNING.format(
            n=len(unread), names=", ".join(repr(t) for t in unread[:4]) + (" ..." if len(unread) > 4 else "")))
    warnings += [IMPLIED_DIM_WARNING.format(name=k, size=v, why=why)
                 for k, (v, why) in implied.items()]
    return PerfGraph(
        node_names=[r[1] or f"{r[0]}_{i}" for i, r in enumerate(rows)],
        node_ops=ops, x=x, edge_index=edge_index,
        edge_attr=edge_attr, edge_tensors=edge_tensors, edge_shapes=edge_shapes, u=u,
        unknown_ops=unknown, input_shapes=inputs, info=meta, warnings=warnings)


def _counts(nodes: dict[str, str]) -> dict[str, int]:
    """op -> number of nodes, from first output -> op."""
    counts: dict[str, int] = {}
    for op in nodes.values():
        counts[op] = counts.get(op, 0) + 1
    return counts


def _resolve_shapes(st: _Structure, inputs: dict[str, Shape], needed: set[str],
                    deadline: Deadline, depth: int, reuse_skeleton: bool = False
                    ) -> tuple[dict[str, TypedShape], str, _Completion | None]:
    """Shapes of the model's tensors at these input shapes: the Python pass,
    else onnx's inference on the skeleton completed by the documented rules
    (:class:`_Completion`, :func:`_assume_unknown_op_shapes`). Returns the
    shapes, the engine that gave them and the completion, which lists the
    nodes whose sizes were assumed (None from the Python pass, which assumes
    nothing); tensors of ``needed`` may be missing (the caller says which)."""
    fast = st.propagate(inputs, deadline)
    if fast is not None:
        return fast, "perfseer", None
    kept = st.kept
    sk = st.skeleton_for(inputs, reuse_skeleton)
    sk_nodes = sk.graph.node  # protobuf wrappers are made only where needed
    kept_set = set(kept)
    folded = [n for i, n in enumerate(sk_nodes) if i not in kept_set]
    completion = _Completion(st.proto, (st.max_nodes, depth), deadline)
    shapes, engine = infer_shapes(sk, needed, folded, deadline, st.proto, fill=completion)
    all_outs = {o for i in kept for o in st.table[i][4] if o}
    if shapes.keys() >= all_outs and _CONTROL_FLOW.isdisjoint(st.table[i][0] for i in kept):
        return shapes, engine, completion
    shapes = _assume_unknown_op_shapes(sk, [sk_nodes[i] for i in kept], shapes, needed, folded,
                                       deadline, completion)
    return shapes, engine, completion


#: Producers :meth:`_Completion._bounded` walks back through at most.
BOUND_SEARCH_NODES = 256


class _Completion:
    """The documented rules for outputs that onnx's inference leaves open on
    standard ops: data-dependent sizes at their upper bound
    (:mod:`perfseer_rt.graph.data_dependent`) and an If's outputs (the larger
    of its branches, :func:`_if_output_types`). Called node by node by
    :func:`perfseer_rt.graph.shapes.infer_shapes` (one topological pass) and
    by the rounds of :func:`_assume_unknown_op_shapes`; ``assumed`` collects
    the bounded nodes (first output -> op), each once."""

    def __init__(self, proto: onnx.ModelProto, nesting: tuple[int, int], deadline: Deadline):
        self.proto = proto
        self.nesting = nesting  # (node cap, depth of this graph)
        self.deadline = deadline
        self.assumed: dict[str, str] = {}
        #: trip counts of Loops known from values (the Loop's outputs -> trips)
        self.trips: dict[tuple[str, ...], int] = {}
        #: the branch of each If whose condition is known before run time
        #: (computed from shapes: torch's ``if x.dim() == 1``; first output -> branch)
        self.taken: dict[str, str] = {}
        #: ops without a shape rule whose outputs were assumed shaped like
        #: their first input (first output -> op; _assume_unknown_op_shapes)
        self.guessed: dict[str, str] = {}
        #: the exact item shapes of sequences, where known (sequences.sequence_items)
        self.items: dict[str, sequences.Items] = {}
        #: NonZeros taken as MoE routing (first output -> (token slots, experts))
        self.routed: dict[str, tuple[int, int]] = {}
        self._producers: dict[str, onnx.NodeProto] | None = None  # built on first use
        self._routing: dict[str, int] | None = None  # data_dependent.routing_groups

    def __call__(self, node: onnx.NodeProto, shapes: dict[str, TypedShape],
                 values: dict[str, np.ndarray]) -> list[TypedShape | None] | None:
        """The output types of ``node`` by the rules (None: no rule applies)."""
        op = node.op_type
        if node.domain not in ("", "ai.onnx") or not node.output:
            return None
        if op == "If":
            cond = node.input[0] if node.input else ""
            # known from shapes, not from sizes assumed at a bound (a detector's
            # "no boxes" test on NonZero's bound: the data decides it)
            taken = _condition(cond, values) if not self._bounded(cond) else None
            if taken is not None and node.output[0]:
                self.taken[node.output[0]] = "then_branch" if taken else "else_branch"
            return _if_output_types(node, shapes, self.proto, self.nesting, self.deadline,
                                    self.assumed, self.taken.get(node.output[0]))
        ins = node.input

        def int_values(pos: int) -> list[int] | None:
            return _int_values(ins[pos] if len(ins) > pos else "", values, self.proto)

        def int_value(pos: int) -> int | None:
            found = int_values(pos)
            return found[0] if found and len(found) == 1 and 0 <= found[0] <= 2**31 else None

        if op == "Loop":
            return self._loop(node, shapes, int_value(0))
        in_types = [shapes.get(i) if i else None for i in ins]
        if op in sequences.PRODUCERS or op in sequences.READERS:
            attrs, _, _, _ = read_attrs(node.attribute)

            def items_of(pos: int) -> sequences.Items | None:
                return self.items.get(ins[pos]) if len(ins) > pos and ins[pos] else None

            typed = sequences.sequence_shapes(op, in_types, attrs, len(node.output), int_values,
                                              items_of)
            if typed is not None and op in sequences.PRODUCERS:
                found = sequences.sequence_items(op, in_types, attrs, int_values, items_of)
                if found is not None:
                    self.items[node.output[0]] = found
            return None if typed is None else list(typed)
        if op == "Split":
            return self._split(node, in_types, int_values)
        if op == "NonZero":
            routed = self._routed(node, shapes)
            if routed is not None:
                return routed
        if op == "Dropout":
            return _dropout_types(in_types, len(node.output), _default_opset(self.proto) or 1)
        if op in _NO_ONNX_INFERENCE and in_types and in_types[0] is not None:
            return [in_types[0]]
        if op == "Reshape" and len(ins) == 1 and in_types[0] is not None:
            # Reshape-1 (opsets 1-4) takes its target as an attribute, which onnx does not read
            target = read_attrs(node.attribute)[0].get("shape")
            return [reshaped(in_types[0], target)] if type(target) is list else None
        if op not in data_dependent.DATA_DEPENDENT_OPS:
            return None
        attrs, _, _, _ = read_attrs(node.attribute)
        typed = data_dependent.bound_shapes(op, in_types, attrs, len(node.output), int_value)
        if typed is None or len(typed) < len(node.output):
            return None
        self.assumed.setdefault(node.output[0], op)
        return list(typed)

    def _split(self, node: onnx.NodeProto, in_types: list[TypedShape | None],
               int_values: Callable[[int], list[int] | None]
               ) -> list[TypedShape | None] | None:
        """A Split given sizes that sum below its input's axis, where that
        axis derives from a size assumed at its upper bound: a loop traced
        over the items found at export (transformers' MoE layers loop over
        the experts the tracing input hit, split out of a NonZero) runs only
        when the data gives the sizes' sum, so the outputs take the sizes."""
        x = in_types[0] if in_types else None
        if x is None or not (self.assumed or self.routed):
            return None
        attrs, _, _, _ = read_attrs(node.attribute)
        rank = len(x[1])
        axis = attrs.get("axis", 0)
        if type(axis) is not int or not -rank <= axis < rank:
            return None
        axis %= rank
        sizes = int_values(1) if len(node.input) > 1 and node.input[1] else attrs.get("split")
        if not sizes or len(sizes) != len(node.output) or min(sizes) < 0 \
                or sum(sizes) >= x[1][axis] or not self._bounded(node.input[0]):
            return None
        self.assumed.setdefault(node.output[0], "Split")
        return [(x[0], x[1][:axis] + (n,) + x[1][axis + 1:]) for n in sizes]

    def _routed(self, node: onnx.NodeProto, shapes: dict[str, TypedShape]
                ) -> list[TypedShape | None] | None:
        """A NonZero listing the tokens routed to one expert (a one-class
        slice of a OneHot that several such NonZeros read: the experts a
        traced MoE layer loops over) at its share of the routed slots
        (:func:`data_dependent.routed_count`)."""
        producers = self.producers()
        src = data_dependent.routing_source(node.input[0], producers)
        if src is None:
            return None
        if self._routing is None:
            self._routing = data_dependent.routing_groups(self.proto.graph.node, producers)
        experts = self._routing.get(src.output[0], 0)
        mask = shapes.get(node.input[0])
        count = data_dependent.routed_count(mask, shapes.get(src.input[0]),
                                            shapes.get(src.output[0]), experts)
        if mask is None or count is None:
            return None
        self.routed.setdefault(node.output[0], (math.prod(mask[1]), experts))
        return [(data_dependent.INT64, (len(mask[1]), count))]

    def _made_by(self, name: str, op: str) -> bool:
        """Whether tensor ``name`` is the output of an ``op`` node."""
        node = self.producers().get(name) if name else None
        return node is not None and node.op_type == op

    def producers(self) -> dict[str, onnx.NodeProto]:
        """Each tensor's producing node in the graph (built on first use)."""
        if self._producers is None:
            self._producers = {o: n for n in self.proto.graph.node for o in n.output if o}
        return self._producers

    def _bounded(self, name: str) -> bool:
        """Whether tensor ``name`` derives from a node whose sizes were
        assumed (within :data:`BOUND_SEARCH_NODES` producers)."""
        producers = self.producers()
        seen: set[str] = set()
        todo = [name]
        while todo and len(seen) < BOUND_SEARCH_NODES:
            t = todo.pop()
            node = producers.get(t)
            if t in seen or node is None:
                continue
            seen.add(t)
            if any(o in self.assumed or o in self.routed for o in node.output):
                return True
            todo.extend(i for i in node.input if i)
        return False

    def _loop(self, node: onnx.NodeProto, shapes: dict[str, TypedShape], trips: int | None
              ) -> list[TypedShape | None]:
        """A Loop's carried outputs keep their carried inputs' shapes, except
        an empty one (a first dim of 0: the list a scripted loop appends to),
        which gains one row per iteration; its scan outputs stack the body's
        (shaped by extracting the body with the carried shapes) once per
        iteration. Iterations: ``trips``, or the one iteration the cost
        assumes when the trip count is unknown before run time. A known trip
        count is kept for the cost (``trips``)."""
        if trips is not None:
            self.trips[tuple(node.output)] = trips
        rows = 1 if trips is None else trips
        carried = node.input[2:]
        scans = node.output[len(carried):]
        body = next((a.g for a in node.attribute if a.name == "body"
                     and a.type == onnx.AttributeProto.GRAPH), None)
        # carried lists that start empty (a first dim of 0)
        empty = [j for j, i in enumerate(carried) if i in shapes and shapes[i][1][:1] == (0,)]
        found = items = None
        if body is not None and (empty or any(o and o not in shapes for o in scans)):
            shaped = self._body_outputs(body, node, shapes, trips)
            if shaped is not None:
                found, items = shaped
        out: list[TypedShape | None] = []
        for j, (o, i) in enumerate(zip(node.output, carried)):
            typed = shapes.get(i) if o and i else None
            if typed is not None and j in empty:
                # an empty sequence gains the items one iteration adds (the
                # body's output from empty, as the body starts it empty), each
                # of the shape the body gives; an empty tensor one row each
                result = body.output[1 + j].name if body is not None \
                    and len(body.output) > 1 + j else ""
                grown = found.get(result) if found is not None \
                    and self._made_by(carried[j], "SequenceEmpty") else None
                if grown is not None and grown[1][:1] != (0,) and len(grown[1]) >= 1:
                    typed = (typed[0], (rows * grown[1][0], *grown[1][1:]))
                    if trips == 1 and items is not None and result in items:
                        self.items[o] = items[result]  # exact: no assumption made
                        out.append(typed)
                        continue
                else:
                    typed = (typed[0], (rows, *typed[1][1:]))
                self.assumed.setdefault(o, "Loop")
            out.append(typed)
        if any(o and o not in shapes for o in scans):
            for o, vi in zip(scans, [] if body is None else body.output[1 + len(carried):]):
                typed = found.get(vi.name) if found is not None else None
                out.append(None if typed is None else (typed[0], (rows, *typed[1])))
                if typed is not None and trips is None:
                    self.assumed.setdefault(o, "Loop")
        return out

    def _body_outputs(self, body: onnx.GraphProto, node: onnx.NodeProto,
                      shapes: dict[str, TypedShape], trips: int | None
                      ) -> tuple[dict[str, TypedShape], dict[str, sequences.Items]] | None:
        """Shapes of a Loop body's tensors for one iteration with the carried
        inputs' shapes, and the item shapes of its sequences where known
        (None where the body cannot be shaped); a loop of ``trips`` 1 is
        shaped with its iteration number."""
        formal = [vi.name for vi in body.input]
        if len(formal) < 2:
            return None
        actual: dict[str, TypedShape | None] = {formal[0]: (7, ()), formal[1]: (9, ())}
        actual.update({f: shapes.get(a) for f, a in zip(formal[2:], node.input[2:]) if a})
        given = _loop_body_values(body, node, self.producers(), trips)
        sub = _subgraph_model(body, actual, self.proto, shapes, values=given)
        max_nodes, depth = self.nesting
        if sub is None or depth + 1 >= MAX_SUBGRAPH_DEPTH:
            return None
        try:
            st = _Structure(sub, _SUBGRAPH, max_nodes)
            inputs, _ = st.resolve(None, None, None, self.deadline)
            found, _, completion = _resolve_shapes(st, inputs, {vi.name for vi in body.output},
                                                   self.deadline, depth + 1)
        except LimitError:
            raise
        except PerfSeerError:
            return None
        return found, (completion.items if completion is not None else {})


def _unread_outputs(names: Iterable[str], proto: onnx.ModelProto, table: list[Row]) -> list[str]:
    """The tensors among ``names`` that are a node's optional output (not
    its first) and that no node, subgraph or graph output reads: an output
    whose shape nothing gives (a training output of an old
    BatchNormalization, say) then leaves the rest of the graph extractable."""
    optional = {o for row in table for o in row[OUTS][1:] if o}
    found = [t for t in names if t in optional]
    if not found:
        return []
    read = {i for row in table for i in row[INS]}
    read.update(vi.name for vi in proto.graph.output)
    for row in table:
        if has_subgraph(row):
            for a in row[OTHER]:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    read.update(_free_tensors(sub))
    return [t for t in found if t not in read]


#: Default-domain ops whose onnx schemas have no shape inference (a function
#: only; ``OpSchema.has_type_and_shape_inference_function``): their output is
#: shaped and typed like their first input.
_NO_ONNX_INFERENCE = frozenset({"GroupNormalization", "MeanVarianceNormalization"})


def _default_opset(proto: onnx.ModelProto) -> int | None:
    """The model's default-domain opset (None where it names none)."""
    return next((imp.version for imp in proto.opset_import if imp.domain in ("", "ai.onnx")), None)


def _dropout_types(in_types: list[TypedShape | None], n_out: int, opset: int
                   ) -> list[TypedShape | None] | None:
    """A Dropout's output and mask: both shaped like its input. onnx's
    inference leaves the mask open before opset 10 (Dropout-1, -6 and -7,
    whose mask is typed ``T``, the input's type: the ONNX Model Zoo's
    Caffe2-converted AlexNet, VGG, SqueezeNet and Inception-v1 write it);
    from opset 10 the mask is bool."""
    x = in_types[0] if in_types else None
    if x is None:
        return None
    mask: TypedShape = (x[0] if opset < 10 else BOOL, x[1])
    out: list[TypedShape | None] = [x, mask]
    return out[:n_out]


def _gathered_only(rows: list[Row], names: set[str], roots: dict[str, str]) -> set[str]:
    """The weights among ``names`` that only Gather nodes read (as their
    data input), aliases resolved by ``roots``."""
    if not names:
        return set()
    readers: dict[str, set[str]] = {}
    for row in rows:
        for pos, t in enumerate(row[3]):
            root = roots.get(t, t)
            if root in names:
                readers.setdefault(root, set()).add(row[0] if pos == 0 else "")
    return {t for t, ops in readers.items() if ops == {"Gather"}}


def _loop_body_values(body: onnx.GraphProto, node: onnx.NodeProto,
                      producers: dict[str, onnx.NodeProto], trips: int | None
                      ) -> dict[str, np.ndarray | onnx.NodeProto]:
    """What a Loop body's formal inputs are known to hold (for
    :func:`_subgraph_model`): the iteration number 0 in a loop of one
    iteration (torch's exporter writes them), and a list carried in empty
    (made by SequenceEmpty) as that node, as a tensor input of a 0 dim
    cannot stand for it."""
    given: dict[str, np.ndarray | onnx.NodeProto] = {}
    formal = [vi.name for vi in body.input]
    counter = body.input[0].type.tensor_type.shape.dim if body.input else []
    if trips == 1 and formal and all(d.HasField("dim_value") and d.dim_value == 1
                                     for d in counter):
        given[formal[0]] = np.zeros([1] * len(counter), dtype=np.int64)  # scalar or [1]
    for f, a in zip(formal[2:], node.input[2:]):
        made = producers.get(a) if a else None
        if made is not None and made.op_type == "SequenceEmpty":
            empty = onnx.NodeProto()
            empty.CopyFrom(made)
            del empty.output[:]
            empty.output.append(f)
            given[f] = empty
    return given


def _model_info(weights: dict[str, Shape], weight_uses: dict[str, int],
                weight_sizes: dict[str, tuple[int, float, int]], flops_by_dtype: dict[int, float],
                rows: list[Row] | None = None, roots: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    """Facts about the model that are not features (``PerfGraph.info``) and
    the warnings they raise: shared weights (tied, or read in slices by
    Gather nodes only: an MoE layer's expert bank; ``rows`` and ``roots``, the
    kept nodes and weight aliases, tell them apart), weight inputs, the
    compute dtype (the element type of the inputs of the nodes that do most
    FLOPs) and, in a float32 model, the share of weight bytes stored
    quantized."""
    shared = {t: n for t, n in weight_uses.items() if n > 1}
    shared_bytes = float(sum(weight_sizes[t][1] for t in shared))
    per_use = float(sum(weight_sizes[t][1] * n for t, n in weight_uses.items()))
    by_dtype: dict[str, float] = {}
    for _, nbytes, elem in weight_sizes.values():
        key = dtypes.dtype_name(elem)
        by_dtype[key] = by_dtype.get(key, 0) + nbytes
    flops: dict[str, float] = {}
    for elem, f in flops_by_dtype.items():
        key = dtypes.dtype_name(elem)
        flops[key] = flops.get(key, 0) + f
    # the first of the largest, as Counter.most_common(1) picks it
    dtype = max(flops.items(), key=itemgetter(1))[0] if flops and max(flops.values()) > 0 else (
        max(by_dtype.items(), key=itemgetter(1))[0] if by_dtype else "float32")
    meta = {"dtype": dtype, "weight_bytes_by_dtype": dict(by_dtype),
            "flops_by_dtype": dict(flops),
            "params_unique": float(sum(e for e, _, _ in weight_sizes.values())),
            "weight_bytes_unique": float(sum(b for _, b, _ in weight_sizes.values())),
            "weight_bytes_per_use": per_use,
            "shared_weights": len(shared), "shared_weight_bytes": shared_bytes,
            "weight_inputs": sorted(weights)}
    warnings: list[str] = []
    big = [t for t in shared if weight_sizes[t][0] >= SHARED_WARN_ELEMS]
    sliced = _gathered_only(rows or [], set(big), roots or {})
    for group, what in (([t for t in big if t not in sliced], "shared by several nodes ({uses} "
                         "uses; tied weights)"),
                        ([t for t in big if t in sliced], "read in slices by several Gather "
                         "nodes ({uses} uses: an expert bank or a lookup table)")):
        if group:
            mb = sum(weight_sizes[t][1] for t in group) / 2**20
            uses = sum(shared[t] for t in group)
            warnings.append(f"{len(group)} weight tensor(s) ({mb:.2f} MiB) are "
                            + what.format(uses=uses) + ", counted once in params/weights")
    if weights:
        shown = ", ".join(sorted(weights)[:4]) + (" ..." if len(weights) > 4 else "")
        warnings.append(f"{len(weights)} graph input(s) with fixed shapes are used as "
                        f"weights and costed as weights: {shown}")
    if dtype != "float32":
        warnings.append(f"the model computes mostly in {dtype}; perfseer-rt's shipped "
                        "predictors were trained on float32 models only")
    else:
        narrow = {k: v for k, v in by_dtype.items() if k in dtypes.NARROW_WEIGHT_NAMES}
        total = sum(by_dtype.values())  # 0 where every weight is empty (a 0-length dim)
        share = sum(narrow.values()) / total if narrow and total else 0.0
        if share >= QUANT_WEIGHT_WARN_SHARE:
            what = ("quantized weights, dequantized" if narrow.keys() <= dtypes.QUANT_NAMES
                    else "narrow weights, converted")
            warnings.append(f"{share:.0%} of the weight bytes are stored as "
                            f"{'/'.join(sorted(narrow))} ({what} as the "
                            "model runs in float32); perfseer-rt's shipped predictors were "
                            "trained on float32 weights only")
    return meta, warnings


#: The warning on a model written by torch's dynamo exporter (README, "Exporters").
DYNAMO_WARNING = ("exported by torch's dynamo exporter (dynamo=True, torch's default since 2.9); "
                  "perfseer-rt's CPU predictors were trained on TorchScript exports (dynamo=False): "
                  "on timm models measured both ways, latency predictions held, but dynamo exports of "
                  "attention models (Swin, PVT, ViT) used up to 2.7x the memory of their TorchScript "
                  "exports and memory was predicted up to 71 % low (README, \"Exporters\"); export "
                  "with dynamo=False for memory predictions within their intervals")
#: The warning on a model whose input shapes are all fixed in the file (README, "Exporters").
FIXED_SHAPES_WARNING = ("the model's input shapes are fixed in the file (no dynamic axis); "
                        "perfseer-rt's CPU predictors were trained on exports with a dynamic batch "
                        "axis, and onnxruntime plans memory differently when every shape is known: at "
                        "batch 16 a Swin-T used 2.7x, a ViT-S/16 2.0x and a ConvNeXt-T 1.3x the "
                        "memory of its dynamic-batch export (README, \"Exporters\"); export with a "
                        "dynamic batch axis for memory predictions within their intervals")
#: Share of weight bytes in external data files above which a prediction warns.
EXTERNAL_WEIGHTS_WARN_SHARE = 0.5
#: The warning on a model whose weights are mostly external data (README, "External weights").
EXTERNAL_WEIGHTS_WARNING = (
    "{share:.0%} of the weight bytes are stored as external data beside the model: onnxruntime "
    "holds no copy of them while it creates the session, so that phase is predicted without one "
    "(README, \"External weights\"); pages it never reads (unused embedding rows) stay out of "
    "memory too, which the prediction does not see: on onnxruntime-genai LLaMA-style models "
    "memory was still over-predicted by up to 52 % at int4 (a float embedding table mostly "
    "unread) and within 8 % at fp32; perfseer-rt's CPU predictors were trained almost only on "
    "weights inline")
#: The note when optional outputs nothing reads had no shape (:func:`_unread_outputs`).
UNREAD_OUTPUT_WARNING = (
    "{n} optional output(s) that no node reads have no shape that onnx's inference or "
    "perfseer-rt's rules give ({names}): they are left out of their nodes' features "
    "(onnxruntime may still compute them)")
#: The warning when outputs of ops without a shape rule were guessed.
GUESSED_SHAPE_WARNING = (
    "the output shapes of {nodes} node(s) of ops without a shape rule ({ops}) were assumed equal "
    "to their first input's; where such an op changes the shape, the sizes after it are off")
#: The extraction warnings about the CPU predictors' training exports (they
#: do not concern predictors of other kinds; see :func:`general_warnings`).
CPU_PREDICTOR_WARNINGS = (DYNAMO_WARNING, FIXED_SHAPES_WARNING, EXTERNAL_WEIGHTS_WARNING)


def general_warnings(warnings: Iterable[str]) -> list[str]:
    """A PerfGraph's warnings less those of :data:`CPU_PREDICTOR_WARNINGS`
    (what a predictor that was not trained on CPU exports passes on)."""
    fixed = {w for w in CPU_PREDICTOR_WARNINGS if "{" not in w}
    tails = [w.split("}", 1)[1] for w in CPU_PREDICTOR_WARNINGS if "{" in w]
    return [w for w in warnings if w not in fixed and not any(w.endswith(t) for t in tails)]


#: Share of the weight bytes stored narrow (int8/uint8/int4, float16, float8...) in a
#: model that computes in float32 from which the narrow storage is flagged.
QUANT_WEIGHT_WARN_SHARE = 0.1
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: Rounds of typing unknown ops' outputs and re-running onnx's inference: a
#: round reaches the next unknown op along a path (a chain of custom ops
#: needs one per op); each round is under the extraction's time limit.
GUESS_ROUNDS = 64
_COMPUTE_TYPES = dtypes.FLOAT_TYPES | dtypes.QUANT_TYPES
#: Deepest nesting of control-flow subgraphs that is costed.
MAX_SUBGRAPH_DEPTH = 8


def _control_flow_cost(node: onnx.NodeProto, proto: onnx.ModelProto,
                       shapes: dict[str, TypedShape], max_nodes: int, deadline: Deadline,
                       depth: int, known_trips: dict[tuple[str, ...], int] | None = None,
                       chosen: Chosen | None = None,
                       taken: dict[str, str] | None = None,
                       producers: dict[str, onnx.NodeProto] | None = None
                       ) -> tuple[NodeCost, bool, str | None]:
    """Cost of If (the branch its condition selects where ``taken`` knows it
    by the If's first output, else the heavier branch), Loop (body x trip
    count: a constant, or one computed from shapes, ``known_trips`` by the
    Loop's outputs; 1 assumed when unknown) and Scan (body x scan length).
    ``producers`` maps ``proto``'s tensors to their nodes (built here when
    not given). Returns ``(cost, ruled, warning or None)``; a body that
    cannot be costed gives the generic cost and a warning."""
    label = f"{node.op_type} node {node.name or node.output[0]!r}"
    bodies = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    if depth >= MAX_SUBGRAPH_DEPTH:
        return NodeCost(0.0), False, f"{label}: subgraphs nested deeper than " \
            f"{MAX_SUBGRAPH_DEPTH} are not costed"
    branch = (taken or {}).get(node.output[0]) if node.op_type == "If" and node.output else None
    if node.op_type == "If" and branch is None and node.input and node.input[0]:
        constant = _constant_of(proto, node.input[0])  # a switch set by the caller, say
        known = _condition(node.input[0], {node.input[0]: constant}) if constant is not None \
            else None
        branch = None if known is None else "then_branch" if known else "else_branch"
    if branch is not None and branch in bodies:
        flops = _subgraph_flops(bodies[branch], {}, proto, shapes, max_nodes, deadline, depth)
        if flops is None:
            return NodeCost(0.0), False, f"{label}: its {branch} could not be costed"
        if chosen is not None:
            chosen[node.output[0]] = (branch, float(flops), repr(node.name or node.output[0]),
                                      "the branch its condition selects", "")
        return NodeCost(flops), True, None
    if node.op_type == "If":
        found = {k: _subgraph_flops(g, {}, proto, shapes, max_nodes, deadline, depth)
                 for k, g in bodies.items() if k in ("then_branch", "else_branch")}
        costs = {k: v for k, v in found.items() if v is not None}
        if not costs:
            return NodeCost(0.0), False, f"{label}: neither branch could be costed"
        heavy = max(costs, key=costs.__getitem__)
        # a branch whose shapes do not follow at these input shapes would fail to run on them
        # (silero-vad's 8 kHz branch given a 16 kHz frame): the other is the one that runs
        only = len(costs) < len(found)
        if chosen is not None and node.output and node.output[0]:
            cond = node.input[0] if node.input else ""
            switch = next((vi for vi in proto.graph.input if vi.name == cond
                           and switch_shape(vi) is not None), None)
            hint = SWITCH_HINT.format(name=cond) if switch is not None else ""
            chosen[node.output[0]] = (heavy, float(costs[heavy]), repr(node.name or node.output[0]),
                                      "the only branch whose shapes follow from these input "
                                      "shapes" if only else "its heavier branch", hint)
        if only:
            other = next(k for k in found if k not in costs)
            return NodeCost(costs[heavy]), True, (
                f"{label}: its {other} could not be costed at these input shapes (a branch whose "
                f"shapes do not follow from them cannot run on them); costed as its {heavy} "
                f"({costs[heavy]:.3g} FLOPs)")
        return NodeCost(costs[heavy]), True, (
            f"{label}: costed as its heavier branch ({heavy}, {costs[heavy]:.3g} FLOPs)")
    body = bodies.get("body")
    if body is None:
        return NodeCost(0.0), False, f"{label}: no body subgraph"
    formal = [vi.name for vi in body.input]
    if node.op_type == "Loop":
        actual = {f: shapes.get(a) for f, a in zip(formal[2:], node.input[2:]) if a}
        actual.update({formal[0]: (7, ()), formal[1]: (9, ())} if len(formal) > 1 else {})
        trips = _const_int(proto, node.input[0]) if node.input and node.input[0] else None
        if trips is None and known_trips:
            trips = known_trips.get(tuple(node.output))
        if producers is None:
            producers = {o: n for n in proto.graph.node for o in n.output}
        given = _loop_body_values(body, node, producers, trips)
    else:  # Scan: state variables, then scan inputs sliced along axis 0
        given = {}
        n_scan = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
        n_state = len(node.input) - n_scan
        actual = {f: shapes.get(a) for f, a in zip(formal[:n_state], node.input[:n_state])}
        trips = None
        for f, a in zip(formal[n_state:], node.input[n_state:]):
            typed = shapes.get(a)
            if typed and typed[1]:
                actual[f] = (typed[0], typed[1][1:])
                trips = typed[1][0]
    flops = _subgraph_flops(body, actual, proto, shapes, max_nodes, deadline, depth, given)
    if flops is None:
        return NodeCost(0.0), False, f"{label}: its body could not be costed"
    if trips is None:
        return NodeCost(flops), True, (f"{label}: trip count unknown before run time; "
                                       "assumed 1 iteration of its body")
    return NodeCost(flops * trips), True, None


def _condition(name: str, values: dict[str, np.ndarray]) -> bool | None:
    """An If's condition where its value was computed before run time
    (None: not known)."""
    v = values.get(name) if name else None
    if v is None or v.size != 1 or v.dtype.kind not in "biu":
        return None
    return bool(v.ravel()[0])


def _int_values(name: str, values: dict[str, np.ndarray], proto: onnx.ModelProto
                ) -> list[int] | None:
    """The integer values of a tensor (at most 2^16 of them) computed so far
    or held by an initializer or Constant (None: unknown or absent)."""
    if not name:
        return None
    v = values.get(name)
    if v is None:
        v = _constant_of(proto, name)
    if v is None or v.dtype.kind not in "iu" or v.size > MAX_CONST_ELEMS:
        return None
    return [int(x) for x in np.asarray(v).ravel()]


def _constant_of(proto: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The value of an initializer or Constant node of the graph (None:
    neither, or data not in the file)."""
    found = [t for t in proto.graph.initializer if t.name == name]
    found += [a.t for n in proto.graph.node if n.op_type == "Constant" and name in n.output
              for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    return tensor_value(found[0]) if found else None


def _const_int(proto: onnx.ModelProto, name: str) -> int | None:
    """The value (0..2^31) of a scalar integer initializer or Constant, if it has one."""
    found = _int_values(name, {}, proto)
    return found[0] if found and len(found) == 1 and 0 <= found[0] <= 2**31 else None


def _subgraph_flops(body: onnx.GraphProto, actual: dict[str, TypedShape | None],
                    proto: onnx.ModelProto, shapes: dict[str, TypedShape], max_nodes: int,
                    deadline: Deadline, depth: int,
                    values: dict[str, np.ndarray | onnx.NodeProto] | None = None
                    ) -> float | None:
    """Total FLOPs of a subgraph extracted as a model of its own
    (:func:`_subgraph_model`, ``values`` as there); None where it cannot be
    extracted."""
    sub = _subgraph_model(body, actual, proto, shapes, complete=False, values=values)
    assert sub is not None  # noqa: S101 - complete=False always builds one
    try:
        st = _Structure(sub, _SUBGRAPH, max_nodes)
        if not st.kept:  # constants only (an If's empty branch): no work
            return 0.0
        return float(_extract_shaped(st, None, None, None, deadline, depth + 1
                                     ).globals["flops_total"])
    except LimitError:
        raise
    except PerfSeerError:
        return None


def _subgraph_model(body: onnx.GraphProto, actual: dict[str, TypedShape | None],
                    proto: onnx.ModelProto, shapes: dict[str, TypedShape],
                    complete: bool = True,
                    values: dict[str, np.ndarray | onnx.NodeProto] | None = None
                    ) -> onnx.ModelProto | None:
    """A subgraph as a model of its own: formal inputs take ``actual``
    shapes (or their declared static ones), or are initializers (nodes)
    where ``values`` holds their values (the nodes defining them); tensors
    of the outer scope come in as inputs with their outer shapes. With
    ``complete``, None while a tensor it reads from the outer scope has no
    shape yet."""
    g = onnx.GraphProto()
    g.CopyFrom(body)
    outer = []
    for t in _free_tensors(g):
        if t in shapes:
            outer.append(t)
        elif complete:
            return None
    del g.input[:]
    for vi in body.input:
        typed = actual.get(vi.name) if actual else None
        value = values.get(vi.name) if values else None
        if isinstance(value, onnx.NodeProto):
            g.node.insert(0, value)
        elif value is not None:
            g.initializer.append(numpy_helper.from_array(value, vi.name))
        elif typed is not None:
            g.input.append(helper.make_tensor_value_info(vi.name, typed[0], list(typed[1])))
        else:
            g.input.append(vi)
    constants = _outer_constants(proto.graph, set(outer))
    for t in outer:
        if t in constants:  # a Constant node or a small initializer: its value
            value = constants[t]
            if isinstance(value, onnx.NodeProto):
                g.node.insert(0, value)
            else:
                g.initializer.append(value)
            continue
        elem, shape = shapes[t]
        g.input.append(helper.make_tensor_value_info(t, elem, list(shape)))
    sub = onnx.ModelProto(ir_version=proto.ir_version, graph=g)
    sub.opset_import.extend(proto.opset_import)
    return sub


def _free_tensors(graph: onnx.GraphProto) -> list[str]:
    """The tensors ``graph`` reads from its enclosing scopes, in first-use
    order: read by its nodes or by the subgraphs nested in them, defined by
    none of its inputs, initializers or nodes (nor by the nested graph that
    reads them)."""
    defined = ({vi.name for vi in graph.input} | {t.name for t in graph.initializer}
               | {o for n in graph.node for o in n.output})
    free: dict[str, None] = {}
    for n in graph.node:
        reads = list(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                reads += _free_tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    reads += _free_tensors(sub)
        free.update((t, None) for t in reads if t and t not in defined)
    return list(free)


def _outer_constants(graph: onnx.GraphProto, names: set[str]
                     ) -> dict[str, onnx.NodeProto | onnx.TensorProto]:
    """The tensors among ``names`` that ``graph`` defines by value: its
    Constant nodes and initializers of at most MAX_CONST_ELEMS elements with
    data in the file (a subgraph that reads them, e.g. the axes of a Slice,
    can then be shaped)."""
    found: dict[str, onnx.NodeProto | onnx.TensorProto] = {}
    if not names:
        return found
    for t in graph.initializer:
        if t.name in names and t.data_location != onnx.TensorProto.EXTERNAL \
                and math.prod(t.dims) <= MAX_CONST_ELEMS and _stored_bytes(t):
            found[t.name] = t
    for n in graph.node:
        if n.op_type == "Constant" and not n.domain and len(n.output) == 1 \
                and n.output[0] in names:
            found[n.output[0]] = n
    return found


def _edge_row(shape: Shape, itemsize: float, elems: int) -> list[float]:
    """Edge features of a tensor of this shape, element size and element
    count (shape slots per the layout's docstring).

    Products are exact integers converted once to float: every edge tensor
    has at most MAX_ELEMS (2^40) elements, so this equals a float64 product.
    """
    r = len(shape)
    size = float(elems)
    slots: tuple[int, ...]
    if r == 0:
        slots = (1, 1, 1, 1)
    elif r == 1:
        slots = (1, shape[0], 1, 1)
    elif r == 2:
        slots = (shape[0], shape[1], 1, 1)
    elif r == 3:
        slots = (shape[0], shape[2], shape[1], 1)
    elif r == 4:
        slots = shape
    else:
        slots = (shape[0], shape[1], math.prod(shape[2:-1]), shape[-1])
    return [size, *map(float, slots), float(itemsize)]


def _control_flow_shapes(nodes: Iterable[onnx.NodeProto], shapes: dict[str, TypedShape],
                         completion: _Completion) -> list[onnx.ValueInfoProto]:
    """Shapes onnx leaves open on control flow: a Scan's carried outputs
    keep their carried inputs' shapes; a Loop's and an If's outputs are
    typed by ``completion`` (:meth:`_Completion._loop`,
    :func:`_if_output_types`)."""
    extra = []
    for n in nodes:
        if n.op_type in ("Loop", "If"):
            if all(not o or o in shapes for o in n.output):
                continue
            typed = completion(n, shapes, {})
            for o, t in zip(n.output, typed or ()):
                if o and o not in shapes and t is not None:
                    extra.append(helper.make_tensor_value_info(o, t[0], list(t[1])))
        elif n.op_type == "Scan":
            n_scan = next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0)
            for o, i in zip(n.output, n.input[:len(n.input) - n_scan]):
                if o and o not in shapes and i in shapes:
                    extra.append(helper.make_tensor_value_info(o, shapes[i][0],
                                                               list(shapes[i][1])))
    return extra


def _if_output_types(node: onnx.NodeProto, shapes: dict[str, TypedShape],
                     proto: onnx.ModelProto, nesting: tuple[int, int], deadline: Deadline,
                     assumed: dict[str, str], taken: str | None = None
                     ) -> list[TypedShape | None]:
    """An If's output types: those of the ``taken`` branch where its
    condition is known, else dim by dim the larger of its two branches'
    shapes (each branch's declared static shape, else the shapes of the
    branch extracted as a model of its own; the cost takes the heavier
    branch too), or the then-branch's declared static shape where only it is
    known (None for an output neither gives). Data-dependent sizes bounded
    inside a branch are added to ``assumed``."""
    branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    if taken is not None:
        found = _branch_output_types(branches.get(taken), proto, shapes, nesting, deadline,
                                     assumed)
        return list(found) if found is not None else [None] * len(node.output)
    typed = [_branch_output_types(branches.get(b), proto, shapes, nesting, deadline, assumed)
             for b in ("then_branch", "else_branch")]
    out: list[TypedShape | None] = []
    for i in range(len(node.output)):
        then, other = (t[i] if t is not None and len(t) > i else None for t in typed)
        if then is not None and other is not None and len(other[1]) == len(then[1]):
            then = (then[0], tuple(map(max, then[1], other[1])))
        elif then is not None and (not then[1] or min(then[1]) < 1):
            then = None  # the else branch unknown: only a plain static shape is taken
        out.append(then)
    return out


def _branch_output_types(branch: onnx.GraphProto | None, proto: onnx.ModelProto,
                         shapes: dict[str, TypedShape], nesting: tuple[int, int],
                         deadline: Deadline, assumed: dict[str, str]
                         ) -> list[TypedShape | None] | None:
    """Each output's type of an If branch: declared static with every dim
    >= 1, else inferred by extracting the branch's shapes (None per output
    where neither works). A declared 0 is not taken: torch's exporter
    declares the sizes it traced, and a detector traced on an image where it
    found nothing declares its detections' outputs empty."""
    if branch is None:
        return None
    declared: list[TypedShape | None] = []
    for vi in branch.output:
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim)
        if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0
                                        for d in dims):
            declared.append((tt.elem_type, tuple(d.dim_value for d in dims)))
        else:
            declared.append(None)
    if all(t is not None for t in declared):
        return declared
    sub = _subgraph_model(branch, {}, proto, shapes)
    if sub is None:
        return declared
    max_nodes, depth = nesting
    if depth + 1 >= MAX_SUBGRAPH_DEPTH:
        return declared
    try:
        st = _Structure(sub, _SUBGRAPH, max_nodes)
        inputs, _ = st.resolve(None, None, None, deadline)
        wanted = {vi.name for vi in branch.output}
        found, _, completion = _resolve_shapes(st, inputs, wanted, deadline, depth + 1)
    except LimitError:
        raise
    except PerfSeerError:
        return declared
    typed = [t if t is not None else found.get(vi.name) for t, vi in zip(declared, branch.output)]
    if all(t is not None for t in typed) and completion is not None:
        for o, op in completion.assumed.items():
            assumed.setdefault(o, op)
    return typed


def _not_onnx_ops(table: list[Row], proto: onnx.ModelProto) -> str:
    """Ops of the default domain that onnx has no schema for at the model's
    opset and onnxruntime has no kernel for (e.g. a TensorFlow op a converter
    left in), as "op (n nodes)", or ""."""
    opset = _default_opset(proto)
    if opset is None:
        return ""
    counts: dict[str, int] = {}
    for row in table:
        op = row[0]
        if not row[DOMAIN] and op not in ONNX_DOMAIN_CONTRIB and schema_attributes(op, opset) is None:
            counts[op] = counts.get(op, 0) + 1
    return ", ".join(f"{op} ({n} node{'s' if n > 1 else ''})" for op, n in sorted(counts.items()))


def _has_schema(node: onnx.NodeProto) -> bool:
    """Whether onnx knows the op (standard ops: its inference is trusted,
    and a shape it leaves open is not guessed)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    try:
        onnx.defs.get_schema(node.op_type, node.domain)
        return True
    except Exception:  # noqa: BLE001 - SchemaError: not a standard op
        return False


def _assume_unknown_op_shapes(sk: onnx.ModelProto, nodes: list[onnx.NodeProto],
                              shapes: dict[str, TypedShape], needed: set[str],
                              folded: list[onnx.NodeProto], deadline: Deadline,
                              completion: _Completion) -> dict[str, TypedShape]:
    """Outputs of ops onnx has no schema for (custom domains) are typed by
    their rule where they have one (:mod:`perfseer_rt.graph.contrib`: the
    contrib ops of onnxruntime), else assumed to keep the shape and type of
    their first input; control flow and standard ops whose sizes depend on
    the data take ``completion``'s rules; inference is re-run from there so
    that the rest of the graph resolves. Documented rules; other standard
    ops are never guessed."""
    for _ in range(GUESS_ROUNDS):
        extra = _control_flow_shapes(nodes, shapes, completion)
        todo = [n for n in nodes if any(o and o not in shapes for o in n.output)
                and n.input and n.input[0] in shapes and not _has_schema(n)]
        bounded = [n for n in nodes if n.op_type in data_dependent.DATA_DEPENDENT_OPS
                   and n.input and n.input[0] in shapes
                   and any(o and o not in shapes for o in n.output)]
        if not todo and not extra and not bounded:
            break
        deadline.check("shape inference")
        for n in todo:
            typed = _contrib_shapes(n, shapes)
            if typed is None:
                typed = [shapes[n.input[0]]] * len(n.output)
                completion.guessed.setdefault(n.output[0], n.op_type)
            extra += [helper.make_tensor_value_info(o, elem, list(shape))
                      for o, (elem, shape) in zip(n.output, typed) if o and o not in shapes]
        for n in bounded:
            extra += [helper.make_tensor_value_info(o, t[0], list(t[1]))
                      for o, t in zip(n.output, completion(n, shapes, {}) or ())
                      if o and o not in shapes and t is not None]
        if not extra:
            break
        sk.graph.value_info.extend(extra)
        new, _ = infer_shapes(sk, needed, folded, deadline, completion.proto,
                              data_prop=not (completion.assumed or completion.routed),
                              fill=completion)
        if len(new) <= len(shapes):
            break
        shapes = new
    return shapes


def _contrib_shapes(node: onnx.NodeProto, shapes: dict[str, TypedShape]
                    ) -> list[TypedShape] | None:
    """The output types of a contrib op by its rule (None: no rule, or the
    rule cannot type every output from what is known)."""
    rule = contrib_rule(node.domain, node.op_type)
    if rule is None:
        return None
    attrs, _, _, _ = read_attrs(node.attribute)
    try:
        typed = rule([shapes.get(i) if i else None for i in node.input], lambda pos: None,
                     attrs, len(node.output), 1)
    except (GiveUp, IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if typed is None or len(typed) < len(node.output):
        return None
    return typed


def _median(col: np.ndarray) -> float:
    """``float(np.median(col))`` of a non-empty finite column, without
    np.median's wrapper overhead (the same partition and mean)."""
    n = col.shape[0]
    k = n // 2
    if n % 2:
        return float(np.partition(col, k)[k])
    return float(np.mean(np.partition(col, [k - 1, k])[k - 1:k + 1]))


_HP_COLUMNS: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray] | None] = {}


def _hp_columns(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions in ``keys``, node columns) of the hyper-parameters that
    are layout columns (None: none is); per cost rule's names, cached."""
    if keys in _HP_COLUMNS:
        return _HP_COLUMNS[keys]
    picked = [(i, _HP_IDX[c]) for i, c in enumerate(keys) if c in _HP_IDX]
    found = (np.array([i for i, _ in picked], dtype=np.intp),
             np.array([j for _, j in picked], dtype=np.intp)) if picked else None
    if len(_HP_COLUMNS) < SIGNATURE_CACHE_SIZE:
        _HP_COLUMNS[keys] = found
    return found


def _globals(x: np.ndarray, edge_index: np.ndarray, edge_attr: np.ndarray, batch_size: int,
             params_unique: float, bytes_unique: float) -> np.ndarray:
    """Global features u in the order of ``layout.GLOBAL_COLUMNS`` (the
    structure columns from :func:`perfseer_rt.graph.structure.structure_globals`).

    ``params_total`` and ``weight_total`` count each weight tensor once
    however many nodes read it (tied weights); the per-node ``weight``
    statistics (mean, median, max) stay per use.
    """
    n = x.shape[0]
    e = edge_attr.shape[0]
    vals = {"num_nodes": n, "num_edges": e,
            "density": e / (n * (n - 1)) if n > 1 else 0.0, "batch_size": batch_size}
    for name in ("flops", "mac", "weight"):
        col = x[:, _NODE_IDX[name]]
        total = vals[f"{name}_total"] = col.sum()
        vals[f"{name}_mean"] = total / n  # what col.mean() computes, without its wrapper
        vals[f"{name}_median"] = _median(col)
        vals[f"{name}_max"] = col.max()
    vals["weight_total"] = bytes_unique
    vals["params_total"] = params_unique
    vals["edge_size_mean"] = edge_attr[:, 0].mean() if e else 0.0
    vals["ai_model"] = vals["flops_total"] / vals["mac_total"] if vals["mac_total"] else 0.0
    base = np.array([float(vals[c]) for c in layout.BASE_GLOBAL_COLUMNS], dtype=np.float64)
    return np.concatenate([base, structure_globals(x, edge_index, edge_attr, bytes_unique)])
