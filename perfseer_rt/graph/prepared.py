"""What extraction knows of a model before any batch size or input shape is
given (:class:`PreparedModel`): functions inlined, nodes in topological
order, validated, weight inputs found, constant nodes folded away; and
the two ways from input shapes to every tensor's shape that it offers
(the Python pass of :mod:`perfseer_rt.graph.propagate`, or the skeleton
for onnx's inference).
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx

from perfseer_rt.errors import PerfSeerError, ShapeError
from perfseer_rt.graph.contrib import contrib_rule
from perfseer_rt.graph.exporter import exporter, exporter_folds, external_weight_share, fixed_input_shapes
from perfseer_rt.graph.fold import fold_static, shape_derived, weight_roots
from perfseer_rt.graph.implied import implied_dims
from perfseer_rt.graph.inline import inline_functions
from perfseer_rt.graph.inputs import graph_inputs, resolve_inputs, weight_inputs
from perfseer_rt.graph.limits import Deadline
from perfseer_rt.graph.nodes import attribute_keys, node_table
from perfseer_rt.graph.propagate import GiveUp, Propagation, TypedShape, long_1d, value_sources
from perfseer_rt.graph.samples import sample_inputs
from perfseer_rt.graph.shapes import skeleton
from perfseer_rt.graph.subgraphs import tensor_ints
from perfseer_rt.graph.toposort import reordered, topological_order
from perfseer_rt.graph.validate import InitInfo, validate

log = logging.getLogger(__name__)
Shape = tuple[int, ...]


class PreparedModel:
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
        inits_read = validate(proto, name, max_nodes, self.table, self.akeys)
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
            lambda name: tensor_ints(name, {}, proto))
        self.fast = _fast_setup(proto, inits_read)
        self.exporter = exporter(proto)
        #: Convs the exporter folded a BatchNorm / a Pad into, by table position
        self.folded_bn, self.folded_pads = exporter_folds(proto, self.table, self.exporter)
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
    """What :meth:`PreparedModel.propagate` needs of the model, or None where
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
