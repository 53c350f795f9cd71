"""Shapes of a model's tensors at given input shapes (:func:`resolve_shapes`):
the Python pass, else onnx's inference on the skeleton completed by the
documented rules for what it leaves open (:class:`Completion`): sizes that
depend on the data at their upper bound, an If's outputs (the larger of
its branches), a Loop's outputs, sequences, and ops without a schema
(contrib rules, else shaped like their first input).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import helper

from perfseer_rt.errors import LimitError, PerfSeerError
from perfseer_rt.graph import data_dependent, sequences
from perfseer_rt.graph.contrib import contrib_rule
from perfseer_rt.graph.limits import Deadline
from perfseer_rt.graph.nodes import read_attrs
from perfseer_rt.graph.prepared import PreparedModel
from perfseer_rt.graph.propagate import BOOL, GiveUp, TypedShape, reshaped
from perfseer_rt.graph.shapes import infer_shapes
from perfseer_rt.graph.subgraphs import (
    CONTROL_FLOW,
    MAX_SUBGRAPH_DEPTH,
    if_condition,
    loop_body_values,
    subgraph_model,
    tensor_ints,
)
from perfseer_rt.graph.validate import SUBGRAPH_NAME, default_opset

Shape = tuple[int, ...]
#: Rounds of typing unknown ops' outputs and re-running onnx's inference: a
#: round reaches the next unknown op along a path (a chain of custom ops
#: needs one per op); each round is under the extraction's time limit.
GUESS_ROUNDS = 64


def resolve_shapes(st: PreparedModel, inputs: dict[str, Shape], needed: set[str],
                    deadline: Deadline, depth: int, reuse_skeleton: bool = False
                    ) -> tuple[dict[str, TypedShape], str, Completion | None]:
    """Shapes of the model's tensors at these input shapes: the Python pass,
    else onnx's inference on the skeleton completed by the documented rules
    (:class:`Completion`, :func:`_assume_unknown_op_shapes`). Returns the
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
    completion = Completion(st.proto, (st.max_nodes, depth), deadline)
    shapes, engine = infer_shapes(sk, needed, folded, deadline, st.proto, fill=completion)
    all_outs = {o for i in kept for o in st.table[i][4] if o}
    if shapes.keys() >= all_outs and CONTROL_FLOW.isdisjoint(st.table[i][0] for i in kept):
        return shapes, engine, completion
    shapes = _assume_unknown_op_shapes(sk, [sk_nodes[i] for i in kept], shapes, needed, folded,
                                       deadline, completion)
    return shapes, engine, completion


#: Producers :meth:`Completion._bounded` walks back through at most.
BOUND_SEARCH_NODES = 256


class Completion:
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
            taken = if_condition(cond, values) if not self._bounded(cond) else None
            if taken is not None and node.output[0]:
                self.taken[node.output[0]] = "then_branch" if taken else "else_branch"
            return _if_output_types(node, shapes, self.proto, self.nesting, self.deadline,
                                    self.assumed, self.taken.get(node.output[0]))
        ins = node.input

        def int_values(pos: int) -> list[int] | None:
            return tensor_ints(ins[pos] if len(ins) > pos else "", values, self.proto)

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
            return _dropout_types(in_types, len(node.output), default_opset(self.proto) or 1)
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
        given = loop_body_values(body, node, self.producers(), trips)
        sub = subgraph_model(body, actual, self.proto, shapes, values=given)
        max_nodes, depth = self.nesting
        if sub is None or depth + 1 >= MAX_SUBGRAPH_DEPTH:
            return None
        try:
            st = PreparedModel(sub, SUBGRAPH_NAME, max_nodes)
            inputs, _ = st.resolve(None, None, None, self.deadline)
            found, _, completion = resolve_shapes(st, inputs, {vi.name for vi in body.output},
                                                   self.deadline, depth + 1)
        except LimitError:
            raise
        except PerfSeerError:
            return None
        return found, (completion.items if completion is not None else {})

#: Default-domain ops whose onnx schemas have no shape inference (a function
#: only; ``OpSchema.has_type_and_shape_inference_function``): their output is
#: shaped and typed like their first input.
_NO_ONNX_INFERENCE = frozenset({"GroupNormalization", "MeanVarianceNormalization"})




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


def _control_flow_shapes(nodes: Iterable[onnx.NodeProto], shapes: dict[str, TypedShape],
                         completion: Completion) -> list[onnx.ValueInfoProto]:
    """Shapes onnx leaves open on control flow: a Scan's carried outputs
    keep their carried inputs' shapes; a Loop's and an If's outputs are
    typed by ``completion`` (:meth:`Completion._loop`,
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
    sub = subgraph_model(branch, {}, proto, shapes)
    if sub is None:
        return declared
    max_nodes, depth = nesting
    if depth + 1 >= MAX_SUBGRAPH_DEPTH:
        return declared
    try:
        st = PreparedModel(sub, SUBGRAPH_NAME, max_nodes)
        inputs, _ = st.resolve(None, None, None, deadline)
        wanted = {vi.name for vi in branch.output}
        found, _, completion = resolve_shapes(st, inputs, wanted, deadline, depth + 1)
    except LimitError:
        raise
    except PerfSeerError:
        return declared
    typed = [t if t is not None else found.get(vi.name) for t, vi in zip(declared, branch.output)]
    if all(t is not None for t in typed) and completion is not None:
        for o, op in completion.assumed.items():
            assumed.setdefault(o, op)
    return typed

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
                              completion: Completion) -> dict[str, TypedShape]:
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
