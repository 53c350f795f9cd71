"""Random single-node cases for checking :mod:`perfseer_rt.graph.propagate`
rule by rule against onnx's own inference of that node
(``onnx.shape_inference.infer_node_outputs``).

Each case is an op, an opset, input types (some with constant values, as
shape subgraphs give them), and attributes, drawn around the valid region
so that both the rules' success paths and onnx's error cases are hit.
Used by ``tests/test_propagate.py`` (a seeded slice) and runnable at length:
``python -m tests.propagate_cases 20000``.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfseer_rt.graph import propagate as P
from perfseer_rt.graph.nodes import read_attrs

UNARY = ("Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Neg", "Identity", "HardSwish", "Gelu",
         "LeakyRelu", "Clip", "IsNaN", "Not", "Softplus")
BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "And",
          "GreaterOrEqual", "Where", "Max", "Sum")
SHAPED = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm", "MatMul", "Flatten",
          "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
          "Unsqueeze", "Squeeze", "Expand", "Tile", "Shape", "Size", "ConstantOfShape", "Range",
          "Cast", "CastLike", "Softmax", "LogSoftmax", "Dropout", "BatchNormalization",
          "LayerNormalization")
OPSETS = (11, 13, 14, 17, 18, 19, 21)


def _dims(rng: random.Random, rank: int) -> list[int]:
    return [rng.choice((1, 1, 2, 3, 4, 5, 7, 8, 16)) for _ in range(rank)]


def _maybe(rng: random.Random, p: float = 0.15) -> bool:
    return rng.random() < p


def _like(rng: random.Random, shape: list[int]) -> list[int]:
    """A shape that usually broadcasts against ``shape``."""
    s = list(shape[rng.randint(0, len(shape)):]) if shape else []
    s = [1 if _maybe(rng, 0.3) else d for d in s]
    if _maybe(rng, 0.1):
        s = _dims(rng, rng.randint(0, 4))
    return s


def make_case(rng: random.Random):
    """(op, opset, [(name, elem, shape, value or None)], attrs, n_out)."""
    op = rng.choice(UNARY + BINARY + SHAPED + SHAPED)
    opset = rng.choice(OPSETS)
    rank = rng.randint(0, 5)
    x = _dims(rng, rank)
    elem = rng.choice((1, 1, 1, 7, 6, 10, 9))
    ins: list = [("x", elem, x, None)]
    attrs: dict = {}
    n_out = 1

    def const(name, values, dtype=np.int64):
        arr = np.array(values, dtype=dtype)
        ins.append((name, P.ELEM_TYPES[arr.dtype], list(arr.shape), arr))

    if op in BINARY:
        if op == "Where":
            ins = [("c", 9, _like(rng, x), None), ("x", elem, x, None),
                   ("y", elem if not _maybe(rng) else 7, _like(rng, x), None)]
        else:
            ins.append(("y", elem if not _maybe(rng) else 7, _like(rng, x), None))
            if op in ("Max", "Sum") and _maybe(rng, 0.5):
                ins.append(("z", elem, _like(rng, x), None))
    elif op in ("Conv", "MaxPool", "AveragePool"):
        x = [rng.randint(1, 3), rng.randint(1, 8)] + [rng.randint(1, 12) for _ in range(
            rng.choice((1, 2, 2, 2, 3)))] if not _maybe(rng, 0.05) else _dims(rng, 2)
        ins = [("x", 1, x, None)]
        n = max(len(x) - 2, 1)
        k = [rng.randint(1, 4) for _ in range(n)]
        if op == "Conv":
            ins.append(("w", 1, [rng.randint(1, 8), x[1] if len(x) > 1 else 1] + k, None))
            if _maybe(rng, 0.3):
                ins.append(("b", 1, [ins[1][2][0]], None))
            if _maybe(rng, 0.3):
                attrs["kernel_shape"] = k if not _maybe(rng) else k + [1]
        else:
            attrs["kernel_shape"] = k if not _maybe(rng, 0.05) else k[:-1]
        if _maybe(rng, 0.5):
            attrs["strides"] = [rng.randint(1, 3) for _ in range(n)]
        if _maybe(rng, 0.5):
            attrs["pads"] = [rng.randint(0, 2) for _ in range(2 * n)]
        elif _maybe(rng, 0.4):
            attrs["auto_pad"] = rng.choice(("SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"))
        if _maybe(rng, 0.4):
            attrs["dilations"] = [rng.randint(1, 2) for _ in range(n)]
        if _maybe(rng, 0.2):
            attrs["ceil_mode"] = rng.randint(0, 1)
        if op == "MaxPool" and _maybe(rng, 0.1):
            n_out = 2
    elif op == "GlobalAveragePool":
        pass
    elif op == "Gemm":
        m, k, nn = rng.randint(1, 6), rng.randint(1, 6), rng.randint(1, 6)
        ta, tb = rng.randint(0, 1), rng.randint(0, 1)
        a = [k, m] if ta else [m, k]
        b = [nn, k] if tb else [k, nn]
        if _maybe(rng):
            b = [b[0] + 1, b[1]]
        if _maybe(rng, 0.05):
            a = a + [2]
        ins = [("a", 1, a, None), ("b", 1, b, None)]
        if _maybe(rng, 0.5):
            ins.append(("c", 1, [nn], None))
        attrs = {"transA": ta, "transB": tb} if _maybe(rng, 0.8) else {}
    elif op == "MatMul":
        k = rng.randint(1, 6)
        a = _dims(rng, rng.randint(0, 3)) + [k] if rng.random() < 0.9 else []
        b = [k if not _maybe(rng, 0.1) else k + 1] + ([rng.randint(1, 5)] if rng.random() < 0.8
                                                     else [])
        b = _like(rng, a[:-2]) + b if _maybe(rng, 0.5) else b
        ins = [("a", 1, a[:5], None), ("b", 1, b, None)]
    elif op == "Flatten":
        attrs["axis"] = rng.randint(-rank - 1, rank + 1)
    elif op == "Reshape":
        total = int(np.prod(x)) if x else 1
        target = list(x)
        rng.shuffle(target)
        if target and _maybe(rng, 0.5):
            target[rng.randrange(len(target))] = -1
        if target and _maybe(rng, 0.3):
            target[rng.randrange(len(target))] = 0
        if _maybe(rng, 0.2):
            target = [total] if total else [0]
        if _maybe(rng, 0.1):
            target.append(-1)
        const("s", target)
        if _maybe(rng, 0.2):
            attrs["allowzero"] = rng.randint(0, 1)
    elif op == "Transpose":
        perm = list(range(rank))
        rng.shuffle(perm)
        if _maybe(rng, 0.8):
            attrs["perm"] = perm if not _maybe(rng, 0.1) else perm + [0]
    elif op == "Concat":
        axis = rng.randint(-rank, max(rank - 1, 0)) if rank else 0
        for i in range(rng.randint(0, 3)):
            y = list(x)
            if rank:
                y[axis] = rng.randint(1, 4)
            if _maybe(rng, 0.1):
                y = _dims(rng, rank)
            ins.append((f"y{i}", elem, y, None))
        if _maybe(rng, 0.95):
            attrs["axis"] = axis if not _maybe(rng, 0.05) else rank + 1
    elif op == "Split":
        axis = rng.randint(-rank, rank - 1) if rank else 0
        n_out = rng.randint(1, 3)
        attrs["axis"] = axis
        if rank and _maybe(rng, 0.5):
            d = x[axis]
            parts = [rng.randint(0, d) for _ in range(n_out - 1)]
            const("split", parts + [max(d - sum(parts), 0)] if not _maybe(rng) else parts)
        elif opset >= 18 and _maybe(rng, 0.5):
            attrs["num_outputs"] = n_out
    elif op == "Slice":
        m = rng.randint(1, max(rank, 1))
        dt = rng.choice((np.int64, np.int32)) if not _maybe(rng) else np.float32
        big = 2**62 if dt == np.int64 else 2**30
        picks = (0, 1, 2, -1, -2, 3, 5, big, -big)
        const("starts", [rng.choice(picks) for _ in range(m)], dt)
        const("ends", [rng.choice(picks) for _ in range(m)], ins[-1][3].dtype)
        if _maybe(rng, 0.6):
            const("axes", rng.sample(range(-rank, rank), min(m, 2 * rank)) if rank else [0],
                  ins[-1][3].dtype)
            ins[-1] = (ins[-1][0], ins[-1][1], [len(ins[-1][3])], ins[-1][3])
            if len(ins[-1][3]) != m:
                ins[-2] = ins[-2]
            if _maybe(rng, 0.5):
                const("steps", [rng.choice((1, 2, -1, -2, 0, 3)) for _ in range(
                    len(ins[-1][3]))], ins[-1][3].dtype)
    elif op in ("Gather", "GatherElements"):
        ins.append(("i", 7, _dims(rng, rng.randint(0, 3)) if op == "Gather" else list(x),
                    None))
        if _maybe(rng, 0.7):
            attrs["axis"] = rng.randint(-rank - 1, rank)
    elif op == "Unsqueeze":
        r = rank + rng.randint(1, 2)
        const("axes", rng.sample(range(-r, r), r - rank) if not _maybe(rng) else [0, 0])
    elif op == "Squeeze":
        if _maybe(rng, 0.7):
            ones = [i for i, d in enumerate(x) if d == 1] or [0]
            const("axes", rng.sample(ones, rng.randint(1, len(ones))) if not _maybe(rng)
                  else [rank])
    elif op == "Expand":
        const("shape", _like(rng, x) if not _maybe(rng) else [d + 1 for d in x])
    elif op == "Tile":
        const("reps", [rng.randint(0, 3) for _ in range(rank if not _maybe(rng) else rank + 1)])
    elif op == "Shape" and opset >= 15:
        if _maybe(rng, 0.5):
            attrs["start"] = rng.randint(-rank - 2, rank + 2)
        if _maybe(rng, 0.5):
            attrs["end"] = rng.randint(-rank - 2, rank + 2)
    elif op == "ConstantOfShape":
        ins = []
        const("shape", _dims(rng, rng.randint(0, 3)) if not _maybe(rng) else [-1])
        if _maybe(rng, 0.6):
            attrs["value"] = numpy_helper.from_array(np.array([1], dtype=rng.choice(
                (np.float32, np.int64, np.int32, np.bool_))), "v")
    elif op == "Range":
        ins = []
        dt = rng.choice((np.int64, np.int32, np.float32))
        for nm in ("start", "limit", "delta"):
            const(nm, rng.choice((0, 1, 5, -3, 7, 0 if nm != "delta" else 2)), dt)
    elif op == "Cast":
        attrs["to"] = rng.choice((1, 7, 6, 9, 10, 16, 8, 99, 2))
    elif op == "CastLike":
        ins.append(("t", rng.choice((1, 7, 10)), [], None))
    elif op in ("Softmax", "LogSoftmax"):
        if _maybe(rng, 0.7):
            attrs["axis"] = rng.randint(-rank - 1, rank)
    elif op == "Dropout":
        n_out = rng.randint(1, 2)
        if _maybe(rng, 0.3):
            ins.append(("ratio", 1, [] if not _maybe(rng) else [1], None))
    elif op == "BatchNormalization":
        x = _dims(rng, rng.randint(1, 4))
        c = x[1] if len(x) > 1 else 1
        ins = [("x", 1, x, None)] + [(f"p{i}", 1, [c if not _maybe(rng, 0.05) else c + 1], None)
                                     for i in range(4)]
        if _maybe(rng, 0.1):
            attrs["training_mode"] = 1
            n_out = 3
    elif op == "LayerNormalization":
        attrs["axis"] = rng.randint(-rank - 1, rank) if _maybe(rng, 0.7) else -1
        ins.append(("s", 1, x[attrs["axis"]:] if rank else [], None))
        n_out = rng.randint(1, 3)
        if n_out > 1 and _maybe(rng, 0.3):
            attrs["stash_type"] = rng.choice((1, 11, 10))
    elif op in ("Clip", "LeakyRelu") and _maybe(rng, 0.3):
        attrs["alpha" if op == "LeakyRelu" else "dummy"] = 0.5
    return op, opset, ins, attrs, n_out


def make_node(op, ins, attrs, n_out) -> onnx.NodeProto:
    node = helper.make_node(op, [i[0] for i in ins], [f"o{j}" for j in range(n_out)])
    for k, v in attrs.items():
        node.attribute.append(helper.make_attribute(k, v, attr_type=onnx.AttributeProto.INTS)
                              if isinstance(v, list) and not v else helper.make_attribute(k, v))
    return node


def onnx_result(op, opset, ins, attrs, n_out):
    """onnx's whole-graph inference of a one-node model (type checks off,
    errors non-fatal, as extraction runs it): static output types, None per
    output that onnx leaves open."""
    node = make_node(op, ins, attrs, n_out)
    inputs = [helper.make_tensor_value_info(n, e, s) for n, e, s, v in ins if v is None]
    inits = [numpy_helper.from_array(v, n) for n, _, _, v in ins if v is not None]
    graph = helper.make_graph([node], "g", inputs, [onnx.ValueInfoProto(name=o)
                                                    for o in node.output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                                 data_prop=True)
    found = {vi.name: P.static_type(vi.type) for vi in inferred.graph.value_info}
    return [found.get(o) for o in node.output]


def ours(op, opset, ins, attrs, n_out):
    """The rule's output types, or None where it leaves the node to onnx."""
    node = make_node(op, ins, attrs, n_out)
    values = {n: v for n, _, _, v in ins if v is not None}
    try:
        rule, since = P._rule_at(op, opset)
        attrs, tensors, _, loose = read_attrs(node.attribute)
        if rule is None or loose:
            return None
        return rule([(e, tuple(s)) for _, e, s, _ in ins], lambda pos: values.get(ins[pos][0]),
                    {**attrs, **tensors}, n_out, since)
    except P.GiveUp:
        return None


def check(n: int, seed: int = 0) -> tuple[int, int, list[str]]:
    """(cases, cases a rule decided, mismatches) over ``n`` random cases."""
    rng = random.Random(seed)
    decided, bad = 0, []
    for i in range(n):
        case = make_case(rng)
        got = ours(*case)
        if got is None:
            continue
        decided += 1
        want = onnx_result(*case)
        if want[:len(got)] != got:
            bad.append(f"case {i}: {case[0]} opset {case[1]} ins "
                       f"{[(a, b, c) for a, b, c, _ in case[2]]} values "
                       f"{[None if v is None else v.tolist() for *_, v in case[2]]} attrs "
                       f"{case[3]} n_out {case[4]}: ours {got}, onnx {want}")
    return n, decided, bad


if __name__ == "__main__":
    total, decided, mismatches = check(int(sys.argv[1]) if len(sys.argv) > 1 else 5000,
                                       int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    for m in mismatches[:40]:
        print(m)
    print(f"{total} cases, {decided} decided by a rule, {len(mismatches)} differ from onnx")


VALUE_OPS = ("Identity", "Gather", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Concat",
             "Slice", "Cast", "Add", "Sub", "Mul", "Div", "Mod", "Equal", "Less", "Greater",
             "LessOrEqual", "GreaterOrEqual", "And", "Or", "Not", "Neg", "Abs", "Where",
             "Expand", "ConstantOfShape", "Range", "Transpose")


def make_value_case(rng: random.Random):
    """A single-node case of a VALUES op whose every input is a constant."""
    while True:
        op, opset, ins, attrs, n_out = make_case(rng)
        if op in VALUE_OPS:
            break
    if op not in VALUE_OPS:
        return None
    filled = []
    for name, elem, shape, v in ins:
        if v is None:
            if elem not in P.NP_DTYPES or int(np.prod(shape)) > 4096:
                return None
            dt = P.NP_DTYPES[elem]
            if dt == np.bool_:
                v = rng.random() < 0.5 if not shape else np.array(
                    [rng.random() < 0.5 for _ in range(int(np.prod(shape)))]).reshape(shape)
                v = np.asarray(v, dtype=dt)
            else:
                v = np.array([rng.randint(-6, 9) for _ in range(int(np.prod(shape)))],
                             dtype=dt).reshape(shape)
        filled.append((name, elem, shape, v))
    return op, opset, filled, attrs, n_out


def check_values(n: int, seed: int = 0) -> tuple[int, int, list[str]]:
    """(cases, values computed, mismatches) of VALUES against onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    rng = random.Random(seed)
    computed, bad = 0, []
    for i in range(n):
        case = make_value_case(rng)
        if case is None:
            continue
        op, opset, ins, attrs, n_out = case
        typed = ours(op, opset, [(a, b, c, d) for a, b, c, d in ins], attrs, n_out)
        if not typed or n_out != 1 or typed[0] is None:
            continue
        node = make_node(op, ins, attrs, n_out)
        plain, tensors, _, _ = read_attrs(node.attribute)
        at = {**plain, **tensors}
        try:
            with np.errstate(all="ignore"):
                got = P.VALUES[op]([v for *_, v in ins], at, typed[0])
        except Exception:  # noqa: BLE001 - the pass leaves this value unknown
            got = None
        if got is None:
            continue
        got = np.asarray(got)
        computed += 1
        graph = helper.make_graph([node], "g", [], [onnx.ValueInfoProto(name="o0")],
                                  initializer=[numpy_helper.from_array(v, n)
                                               for n, _, _, v in ins])
        try:
            with np.errstate(all="ignore"):
                want = ReferenceEvaluator(helper.make_model(
                    graph, opset_imports=[helper.make_opsetid("", opset)])).run(None, {})[0]
        except Exception as exc:  # noqa: BLE001
            bad.append(f"case {i}: {op} opset {opset} attrs {attrs}: ours {got!r}, "
                       f"reference raised {type(exc).__name__}: {exc}")
            continue
        want = np.asarray(want)
        if want.dtype != got.dtype or want.shape != got.shape or not np.array_equal(
                want, got, equal_nan=want.dtype.kind == "f"):
            bad.append(f"case {i}: {op} opset {opset} ins "
                       f"{[(a, b, c, d.tolist()) for a, b, c, d in ins]} attrs {attrs}: "
                       f"ours {got.dtype} {got.tolist()}, reference {want.dtype} {want.tolist()}")
    return n, computed, bad
