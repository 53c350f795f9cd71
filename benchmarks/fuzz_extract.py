"""Fuzz the PerfGraph extractor with mutated ONNX protobufs (issue 13).

Seeds are real models (``examples/*.onnx``, ``tests/models/*.onnx``) and
small hand-built graphs (conv chain with a shape subgraph, an attention
block, a custom op, a quantized MatMul, layers as nested model-local
functions, an int4 LLaMA-style layer and a fused BERT layer of onnxruntime
contrib ops). Each case takes one seed and 1-3
mutations: names (incl. invalid UTF-8, at the byte level), element types
(0, STRING, 99, negative, huge), dims (0, -1, 2^31, 2^40, symbolic), attributes
(huge/negative/zero pads, strides, kernels, groups, axes; wrong attribute
types), truncation, byte flips, node deletion/duplication/reordering, op type
swaps, graph growth (a long chain), function bodies (ops, inputs, names,
self-calls), model fields (opset imports, IR version, value_info shapes,
clashing names, external-data entries), and the batch (0, 65537, 2^40...).

Every case runs in-process in a fresh temporary working directory, with a
watchdog (``faulthandler`` dumps the stacks and exits if one case hangs for
``--hang-s``). Counted per case:

* ``ok`` / ``typed`` (a PerfSeerError, by class) / ``internal`` (typed, but
  from the extractor's last-resort guard: a bug to fix) / ``traceback``
  (any other exception);
* ``slow``: over 5 CPU-seconds;
* ``over_memory``: the case raised its process's peak RSS by more than
  :data:`MEMORY_MB` (VmHWM reset before each case);
* ``bad_features``: a non-finite or negative feature in a returned graph;
* ``files_written``: anything left in the working directory or the seed
  directories.

* ``aborted``: the case ended its process (an abort or crash inside a C++
  library, no exception to catch, or the hang watchdog); by default cases
  run in child processes (:func:`supervised`) and the run goes on after
  such a case.

Case ``i`` of seed ``s`` is reproducible alone (``--only i``).
Run: ``python -m benchmarks.fuzz_extract --cases 10000 --seed 1``.
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from perfseer_rt import extract  # noqa: E402
from perfseer_rt.errors import PerfSeerError  # noqa: E402
from perfseer_rt.profile import hostmem  # noqa: E402
from tests.contrib_models import bert_layer, llama_block  # noqa: E402
from tests.onnx_builders import one_iteration_list_loop  # noqa: E402

SLOW_S = 5.0
#: A case whose extraction raises the process's peak RSS by more than this
#: (MiB) fails (a Constant given perm=2^40 made onnx's inference take 20 GB).
MEMORY_MB = 2048
HUGE = [0, -1, -7, 1, 2, 3, 2**31 - 1, 2**31, 2**40, 2**62, 65537]
DTYPES = [0, 1, 2, 3, 7, 8, 10, 11, 16, 17, 21, 22, 26, 28, 29, 99, 2**31 - 1]
BATCHES = [None, None, None, 1, 2, 16, 0, -1, 65536, 65537, 2**40]
OPS = ["Relu", "Conv", "MatMul", "Gemm", "Reshape", "Add", "Softmax", "Foo", "Loop",
       "ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Einsum",
       "QLinearConv", "MatMulInteger", "If", "Gather", "Slice", "TopK", "NonZero",
       "NonMaxSuppression", "Unique", "Compress", "RoiAlign", "LSTM", "GRU", "LRN",
       "GridSample", "DeformConv", "Scan"]


# --------------------------------------------------------------------- seeds
def _const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits, opset=17, domains=()):
    g = helper.make_graph(nodes, "seed", inputs, outputs, initializer=inits)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 8
    return m


def built_seeds() -> list[bytes]:
    """Small graphs covering the extractor's paths."""
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(0)
    conv = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
         helper.make_node("Shape", ["p"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "zero"], ["n"], axis=0, name="gather"),
         helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsq"),
         helper.make_node("Concat", ["n1", "m1"], ["ns"], axis=0, name="concat"),
         helper.make_node("Reshape", ["p", "ns"], ["flat"], name="reshape"),
         helper.make_node("Gemm", ["flat", "fw", "fb"], ["y"], transB=1, name="fc")],
        [vi("x", f, ["N", 3, 8, 8])], [vi("y", f, None)],
        [_const("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
         _const("zero", np.array(0, np.int64)), _const("ax", np.array([0], np.int64)),
         _const("m1", np.array([-1], np.int64)),
         _const("fw", rng.standard_normal((10, 64)).astype(np.float32)),
         _const("fb", np.zeros(10, np.float32))])
    attn = _model(
        [helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
         helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
         helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
         helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
         helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
         helper.make_node("MatMul", ["p", "x"], ["o"], name="ctx"),
         helper.make_node("LayerNormalization", ["o", "g", "b"], ["y"], axis=-1, name="ln")],
        [vi("x", f, ["batch", 8, 16])], [vi("y", f, None)],
        [_const("wq", np.ones((16, 16), np.float32)), _const("wk", np.ones((16, 16), np.float32)),
         _const("g", np.ones(16, np.float32)), _const("b", np.zeros(16, np.float32))])
    custom = _model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("MyOp", ["a"], ["b"], domain="com.example", name="custom"),
         helper.make_node("Add", ["b", "x"], ["y"], name="add")],
        [vi("x", f, [1, 32])], [vi("y", f, None)], [], domains=("com.example",))
    quant = _model(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
         helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["yi"], name="mmi"),
         helper.make_node("Cast", ["yi"], ["y"], to=TensorProto.FLOAT, name="cast")],
        [vi("x", f, ["N", 32])], [vi("y", f, None)],
        [_const("w", np.ones((32, 8), np.int8)), _const("wz", np.array(0, np.int8))])
    cos = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("ConstantOfShape", ["s"], ["c"]),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [vi("x", f, ["N", 64, 64])], [vi("y", f, None)], [])
    # layers as model-local functions, one nested (torch's dynamo exporter, onnxscript)
    lin = helper.make_function("local", "Linear", ["a", "w"], ["c"],
                               [helper.make_node("MatMul", ["a", "w"], ["b"]),
                                helper.make_node("Relu", ["b"], ["c"])], [helper.make_opsetid("", 17)])
    pair = helper.make_function("local", "Pair", ["a", "w"], ["c"],
                                [helper.make_node("Linear", ["a", "w"], ["b"], domain="local"),
                                 helper.make_node("Linear", ["b", "w"], ["c"], domain="local")],
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    funcs = _model(
        [helper.make_node("Pair", ["x", "w"], ["h"], domain="local", name="pair"),
         helper.make_node("Linear", ["h", "w"], ["y"], domain="local", name="linear")],
        [vi("x", f, ["N", 32])], [vi("y", f, None)], [_const("w", np.ones((32, 32), np.float32))],
        domains=("local",))
    funcs.functions.extend([lin, pair])
    lists = one_iteration_list_loop()  # MViT's list code as torch writes it
    # a merged decoder's cache switch (bool[1]) and a mask dim named by an expression
    light = helper.make_graph([helper.make_node("MatMul", ["h", "w"], ["ya"])], "then", [],
                              [vi("ya", f, None)])
    heavy = helper.make_graph([helper.make_node("MatMul", ["h", "w"], ["hb"]),
                               helper.make_node("MatMul", ["hb", "w"], ["yb"])], "else", [],
                              [vi("yb", f, None)])
    merged = _model(
        [helper.make_node("Cast", ["mask"], ["mf"], to=f),
         helper.make_node("ReduceSum", ["mf"], ["ms"], keepdims=1),
         helper.make_node("Mul", ["x", "ms"], ["h"]),
         helper.make_node("If", ["use_cache_branch"], ["y"], then_branch=light,
                          else_branch=heavy, name="switch")],
        [vi("x", f, ["batch", "seq", 16]),
         vi("mask", TensorProto.INT64, ["batch", "past + seq"]),
         vi("use_cache_branch", TensorProto.BOOL, [1])], [vi("y", f, None)],
        [_const("w", np.ones((16, 16), np.float32))])
    # onnxruntime contrib ops: an int4 LLaMA-style layer and a fused BERT layer
    return [m.SerializeToString() for m in (conv, attn, custom, quant, cos, funcs, llama_block(),
                                            bert_layer(), lists, merged)]


def file_seeds(extra: Sequence[Path] = ()) -> list[bytes]:
    """The real models among the seeds; ``extra``: folders whose ``*.onnx``
    files come after them (``--extra-seeds``: the case stream of every seed
    number is unchanged without them)."""
    paths = sorted((ROOT / "examples").glob("*.onnx")) + sorted((ROOT / "tests" / "models").glob("*.onnx"))
    for folder in extra:
        paths += sorted(Path(folder).glob("*.onnx"))
    return [p.read_bytes() for p in paths if p.stat().st_size < 4 << 20]


# ----------------------------------------------------------------- mutations
def _names(m: onnx.ModelProto) -> list[str]:
    g = m.graph
    out = [n.name for n in g.node if n.name] + [t for n in g.node for t in list(n.input) + list(n.output) if t]
    return [s for s in out if len(s) >= 1]


def _all_vis(m):
    g = m.graph
    return list(g.input) + list(g.output) + list(g.value_info)


def mut_dtype(m, r):
    targets = [vi.type.tensor_type for vi in _all_vis(m) if vi.type.HasField("tensor_type")]
    inits = list(m.graph.initializer)
    if inits and (not targets or r.random() < 0.5):
        r.choice(inits).data_type = r.choice(DTYPES)
    elif targets:
        r.choice(targets).elem_type = r.choice(DTYPES)


def mut_dim(m, r):
    inits = list(m.graph.initializer)
    vis = [vi for vi in m.graph.input if vi.type.tensor_type.shape.dim]
    if inits and (not vis or r.random() < 0.4):
        t = r.choice(inits)
        if t.dims:
            t.dims[r.randrange(len(t.dims))] = r.choice(HUGE)
        return
    if vis:
        dims = r.choice(vis).type.tensor_type.shape.dim
        d = dims[r.randrange(len(dims))]
        if r.random() < 0.25:
            d.dim_param = r.choice(["N", "seq", "", "batch"])
        else:
            d.dim_value = r.choice([v for v in HUGE if v >= -(2**62)])


def mut_attr(m, r):
    nodes = [n for n in m.graph.node if n.attribute] or list(m.graph.node)
    n = r.choice(nodes)
    choice = r.random()
    if n.attribute and choice < 0.6:
        a = r.choice(list(n.attribute))
        if a.ints:
            a.ints[r.randrange(len(a.ints))] = r.choice(HUGE)
        elif a.type == onnx.AttributeProto.INT:
            a.i = r.choice(HUGE)
        elif a.type == onnx.AttributeProto.FLOAT:
            a.f = r.choice([float("nan"), float("inf"), -1e30, 0.0])
        else:
            a.type = r.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 99])
    elif choice < 0.8:
        name = r.choice(["pads", "strides", "kernel_shape", "group", "axis", "perm", "to", "equation",
                         "mode", "dilations", "num_heads"])
        kind = r.random()
        if kind < 0.5:
            n.attribute.append(helper.make_attribute(name, [r.choice(HUGE) for _ in range(r.randint(0, 6))]))
        elif kind < 0.8:
            n.attribute.append(helper.make_attribute(name, r.choice(HUGE)))
        else:
            n.attribute.append(helper.make_attribute(name, [b"a", b"\xff\xfe"]))
    else:
        body = helper.make_graph([helper.make_node("Relu", ["bx"], ["by"])], "body",
                                 [helper.make_tensor_value_info("bx", 1, [1])],
                                 [helper.make_tensor_value_info("by", 1, [1])])
        n.attribute.append(helper.make_attribute(r.choice(["body", "then_branch", "else_branch"]), body))


def mut_op(m, r):
    n = r.choice(list(m.graph.node))
    n.op_type = r.choice(OPS)
    if r.random() < 0.2:
        n.domain = r.choice(["", "com.microsoft", "ai.onnx.ml", "x"])
    if r.random() < 0.2:  # a contrib op in place of a standard one (or the reverse)
        n.op_type = r.choice(["MatMulNBits", "GroupQueryAttention", "GatherBlockQuantized",
                              "SkipSimplifiedLayerNormalization", "Attention", "FusedMatMul"])
        n.domain = "com.microsoft"


def mut_graph(m, r):
    g = m.graph
    nodes = list(g.node)
    k = r.random()
    if k < 0.25 and len(nodes) > 1:
        del g.node[r.randrange(len(nodes))]
    elif k < 0.45:
        g.node.append(r.choice(nodes))  # duplicate producer of the same tensor
    elif k < 0.6:
        r.shuffle(nodes)
        del g.node[:]
        g.node.extend(nodes)
    elif k < 0.7 and len(g.input):
        del g.input[r.randrange(len(g.input))]
    elif k < 0.8:
        g.node[r.randrange(len(nodes))].input.append(r.choice(["", "nope", g.node[0].output[0]]))
    else:  # growth: a long chain after the first output
        src = g.output[0].name
        n_add = r.choice([100, 1000, 5000, 20000])
        prev = src
        for i in range(n_add):
            g.node.append(helper.make_node("Relu", [prev], [f"grow{i}"]))
            prev = f"grow{i}"
        g.output[0].name = prev


def mut_name_bytes(data: bytes, m, r) -> bytes:
    """Replace one name by bytes of the same length, often invalid UTF-8."""
    names = _names(m)
    if not names:
        return data
    name = r.choice(names).encode("utf-8", "surrogateescape")
    junk = bytes(r.choice([0xff, 0xfe, 0xc0, 0x80, 0x00, 0x41, 0xed]) for _ in range(len(name)))
    return data.replace(name, junk, r.choice([1, -1]))


def mut_bytes(data: bytes, r) -> bytes:
    if r.random() < 0.5:
        return data[:r.randrange(len(data))]  # truncation
    b = bytearray(data)
    for _ in range(r.randint(1, 8)):
        b[r.randrange(len(b))] = r.randrange(256)
    return bytes(b)


def mut_function(m, r):
    """Edit a model-local function: a body node's op or inputs, a call of
    itself or of a missing function, or a renamed function."""
    if not m.functions:
        return
    fn = r.choice(list(m.functions))
    k = r.random()
    if k < 0.3 and len(fn.node):
        node = fn.node[r.randrange(len(fn.node))]
        node.op_type = r.choice(OPS + [fn.name, "Missing"])
        node.domain = r.choice(["", "local", "x"])
    elif k < 0.5 and len(fn.node):
        fn.node[r.randrange(len(fn.node))].input.append(r.choice(["", "nope", fn.input[0]]))
    elif k < 0.7:
        fn.name = r.choice(["Other", "", "\u00e9"])
    elif k < 0.85:
        del fn.output[:]
    else:
        del fn.opset_import[:]


def mut_model(m, r):
    """Model-level fields: opset imports, IR version, value_info shapes,
    clashing names, external-data entries."""
    g = m.graph
    k = r.random()
    if k < 0.2 and len(m.opset_import):
        imp = r.choice(list(m.opset_import))
        imp.version = r.choice([1, 6, 7, 9, 11, 13, 21, 23, 24, 25, 99, -1, 2**40])
        if r.random() < 0.3:
            imp.domain = r.choice(["", "ai.onnx", "com.microsoft", "x"])
    elif k < 0.3:
        m.ir_version = r.choice([0, 1, 3, 4, 7, 10, 11, 12, 99, -5])
    elif k < 0.45:
        names = [t for n in g.node for t in n.output if t]
        if names:  # a shape claimed for an intermediate tensor, often wrong
            dims = [r.choice(HUGE + [1, 2, 8]) for _ in range(r.randint(0, 5))]
            g.value_info.append(helper.make_tensor_value_info(r.choice(names), r.choice(DTYPES), dims))
    elif k < 0.65:
        pool = [t.name for t in g.initializer] + [vi.name for vi in g.input] + \
            [t for n in g.node for t in n.output if t]
        if len(pool) >= 2:  # one name given to two different things
            a, b = r.sample(pool, 2)
            for t in g.initializer:
                if t.name == a:
                    t.name = b
                    break
            else:
                for n in g.node:
                    if a in n.output:
                        n.output[list(n.output).index(a)] = b
                        break
    elif len(g.initializer):  # its data said to live in a file
        t = r.choice(list(g.initializer))
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in (("location", r.choice(["w.bin", "../../etc/passwd", "/dev/zero", "",
                                                  "\u00e9.bin"])),
                           ("offset", r.choice(["0", "-1", "99999999999", "x"])),
                           ("length", r.choice(["4", "-4", "1099511627776", ""]))):
            if r.random() < 0.8:
                entry = t.external_data.add()
                entry.key, entry.value = key, value


PROTO_MUTATIONS = [mut_dtype, mut_dim, mut_attr, mut_op, mut_graph, mut_function, mut_model]


def make_case(seeds: list[bytes], seed: int, i: int) -> tuple[bytes, int | None, list[str]]:
    """The bytes and batch of case ``i`` (deterministic in seed and i)."""
    r = random.Random(seed * 1_000_003 + i)
    data = r.choice(seeds)
    m = onnx.ModelProto()
    m.ParseFromString(data)
    applied = []
    for _ in range(r.randint(1, 3)):
        kind = r.random()
        if kind < 0.8:
            fn = r.choice(PROTO_MUTATIONS)
            try:
                fn(m, r)
                applied.append(fn.__name__)
            except (IndexError, ValueError, TypeError):
                pass
    data = m.SerializeToString()
    if r.random() < 0.2:
        data = mut_name_bytes(data, m, r)
        applied.append("mut_name_bytes")
    if r.random() < 0.1:
        data = mut_bytes(data, r)
        applied.append("mut_bytes")
    return data, r.choice(BATCHES), applied


# ---------------------------------------------------------------------- run
@functools.cache
def _hwm_resets() -> bool:
    """Whether resetting VmHWM works in this process (tested once)."""
    return hostmem.hwm_reset_works()


def run_case(data: bytes, batch, watch_dirs: list[Path]) -> dict:
    before = {d: set(os.listdir(d)) for d in watch_dirs}
    measured = _hwm_resets() and hostmem.reset_hwm()  # the peak from here on is this case's
    rss0 = hostmem.rss_kib()
    t0 = time.process_time()
    res: dict = {"outcome": "ok"}
    try:
        g = extract(data, batch=batch)
        arrays = (g.x, g.edge_attr, g.u)
        if not all(np.isfinite(a).all() and (a >= 0).all() for a in arrays if a.size):
            res["bad_features"] = True
    except PerfSeerError as exc:
        res["outcome"] = "internal" if getattr(exc, "internal", False) else "typed"
        res["error"] = type(exc).__name__
        res["message"] = str(exc)[:200]
    except BaseException as exc:  # noqa: BLE001 - what the fuzzer exists to count
        if isinstance(exc, KeyboardInterrupt):
            raise
        res["outcome"] = "traceback"
        res["error"] = type(exc).__name__
        res["message"] = str(exc)[:200]
    res["cpu_s"] = time.process_time() - t0
    peak = hostmem.hwm_kib()
    if measured and peak is not None and rss0 is not None:
        res["mem_mb"] = max(peak - rss0, 0) / 1024
    res["written"] = sorted(str(d / f) for d in watch_dirs for f in set(os.listdir(d)) - before[d])
    return res


def fuzz(cases: int, seed: int, hang_s: float = 120.0, only: int | None = None,
         crashes: Path | None = None, progress: bool = True, start: int = 0,
         log: Path | None = None, extra: Sequence[Path] = ()) -> dict:
    """Run cases ``start..cases-1`` (or case ``only``) in this process;
    returns the summary (counts and failing cases). With ``log``, one JSON
    line per case is appended to it, written before the case runs (its
    index) and after (its result), so that a case that kills the process is
    known (:func:`supervised`)."""
    seeds = built_seeds() + file_seeds(extra)
    results: list[dict] = []
    old_cwd = os.getcwd()
    indices = [only] if only is not None else range(start, cases)
    try:
        from tqdm import tqdm
        it = tqdm(indices, desc="fuzz", unit="case", disable=not progress, mininterval=2)
    except ImportError:  # tqdm is optional here
        it = indices
    log_fh = open(log, "a", buffering=1) if log is not None else None  # line-buffered
    with tempfile.TemporaryDirectory(prefix="psrt-fuzz-") as tmp:
        os.chdir(tmp)
        watch = [Path(tmp), ROOT, ROOT / "examples", Path(old_cwd)]
        try:
            for i in it:
                data, batch, applied = make_case(seeds, seed, i)
                if log_fh is not None:
                    log_fh.write(json.dumps({"case": i, "started": True}) + "\n")
                if i == _ABORT_AT:  # the supervisor's own test: a case that kills its process
                    os.abort()
                faulthandler.dump_traceback_later(hang_s, exit=True)
                res = run_case(data, batch, watch)
                faulthandler.cancel_dump_traceback_later()
                res.update(case=i, batch=batch, mutations=applied)
                results.append(res)
                if log_fh is not None:
                    log_fh.write(json.dumps(res, default=str) + "\n")
                if crashes is not None and _is_failure(res):
                    crashes.mkdir(parents=True, exist_ok=True)
                    (crashes / f"seed{seed}_case{i}.onnx").write_bytes(data)
        finally:
            os.chdir(old_cwd)
            if log_fh is not None:
                log_fh.close()
    return summarize(results, seed)


#: Case index at which an in-process run aborts (``PSRT_FUZZ_ABORT_AT``; for
#: tests/test_fuzz_extract.py, which checks that :func:`supervised` goes on).
_ABORT_AT = int(os.environ.get("PSRT_FUZZ_ABORT_AT", "-1"))


def _is_failure(res: dict) -> bool:
    return bool(res["outcome"] in ("traceback", "internal", "abort") or res.get("bad_features")
                or res.get("written") or res.get("cpu_s", 0) > SLOW_S
                or res.get("mem_mb", 0) > MEMORY_MB)


def summarize(results: list[dict], seed: int) -> dict:
    """The counts over per-case results (:func:`run_case`'s, with ``case``)."""
    summary: Counter = Counter(r["outcome"] for r in results)
    errors = Counter(r["error"] for r in results if r["outcome"] == "typed" and "error" in r)
    slowest = max(((r.get("cpu_s", 0.0), r["case"]) for r in results), default=(0.0, -1))
    largest = max(((r.get("mem_mb", 0.0), r["case"]) for r in results), default=(0.0, -1))
    failures = [r for r in results if _is_failure(r)]
    return {"cases": len(results), "seed": seed, "ok": summary["ok"], "typed": summary["typed"],
            "internal": summary["internal"], "traceback": summary["traceback"],
            "aborted": summary["abort"],
            "slow_over_5s": sum(r.get("cpu_s", 0) > SLOW_S for r in results),
            "over_memory": sum(r.get("mem_mb", 0) > MEMORY_MB for r in results),
            "largest_mem_mb": round(largest[0], 1), "largest_mem_case": largest[1],
            "bad_features": sum(bool(r.get("bad_features")) for r in results),
            "files_written": sum(bool(r.get("written")) for r in results),
            "typed_by_class": dict(errors),
            "slowest_cpu_s": round(slowest[0], 3), "slowest_case": slowest[1],
            "failures": failures[:50]}


def supervised(cases: int, seed: int, hang_s: float, crashes: Path | None,
               extra: Sequence[Path] = ()) -> dict:
    """:func:`fuzz` in child processes: a case that kills its process (an
    abort or a crash inside a C++ library, which no exception reports) is
    counted as ``aborted`` and the run goes on from the next case."""
    results: list[dict] = []
    start = 0
    with tempfile.TemporaryDirectory(prefix="psrt-fuzz-log-") as tmp:
        log = Path(tmp) / "cases.jsonl"
        while start < cases:
            cmd = [sys.executable, "-m", "benchmarks.fuzz_extract", "--in-process", "--cases",
                   str(cases), "--seed", str(seed), "--start", str(start), "--hang-s",
                   str(hang_s), "--log", str(log)] + (["--crashes", str(crashes)] if crashes else []) \
                + [a for folder in extra for a in ("--extra-seeds", str(folder))]
            rc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode
            done = {}
            started = None
            for line in log.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("started"):
                    started = rec["case"]
                else:
                    done[rec["case"]] = rec
            results = [done[i] for i in sorted(done)]
            if started is None or started in done:  # the child finished its range
                break
            results.append({"case": started, "outcome": "abort", "returncode": rc, "cpu_s": 0.0})
            if crashes is not None:
                data, _, _ = make_case(built_seeds() + file_seeds(extra), seed, started)
                crashes.mkdir(parents=True, exist_ok=True)
                (crashes / f"seed{seed}_case{started}.onnx").write_bytes(data)
            with open(log, "a") as fh:  # the next child's log follows
                fh.write(json.dumps(results[-1]) + "\n")
            start = started + 1
    return summarize(sorted(results, key=lambda r: r["case"]), seed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", type=int, default=None, help="run case I alone")
    ap.add_argument("--hang-s", type=float, default=120.0,
                    help="wall seconds before the watchdog dumps stacks and exits")
    ap.add_argument("--crashes", type=Path, default=None,
                    help="directory to save failing cases' bytes")
    ap.add_argument("--in-process", action="store_true",
                    help="run every case in this process (default: in child processes that a "
                         "case killing its process does not stop)")
    ap.add_argument("--extra-seeds", type=Path, action="append", default=[],
                    help="a folder whose *.onnx files are seeds too, after the built-in ones")
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--log", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    t0 = time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if args.in_process or args.only is not None:
        out = fuzz(args.cases, args.seed, args.hang_s, args.only, args.crashes, start=args.start,
                   log=args.log, extra=args.extra_seeds)
    else:
        out = supervised(args.cases, args.seed, args.hang_s, args.crashes, args.extra_seeds)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["total_cpu_s"] = round(time.process_time() - t0 + after.ru_utime + after.ru_stime
                               - children.ru_utime - children.ru_stime, 1)
    if args.log is None:
        print(json.dumps(out, indent=1))
    bad = out["traceback"] + out["internal"] + out["aborted"] + out["slow_over_5s"] \
        + out["over_memory"] + out["bad_features"] + out["files_written"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
