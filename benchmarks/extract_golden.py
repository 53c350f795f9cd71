"""Dump and compare everything :func:`perfseer_rt.extract` returns, for
checking that an optimisation of the extractor changes no output.

The corpus: ``examples/*.onnx``, ``tests/models/*.onnx`` and the fuzzer's
built seeds, each at batch None/1/8 (and their named dims), any ``*.onnx``
in the ``--zoo`` folders (e.g. structure-only zoo exports), and the first
``--fuzz`` fuzzer cases (mutated protobufs, most of which fail: the error
class and message are recorded). Per case one pickle holds the node, edge
and global arrays, names, shapes, info and warnings, or the error.

Run::

    python -m benchmarks.extract_golden dump /tmp/golden --zoo /tmp/zoo --fuzz 1500
    python -m benchmarks.extract_golden compare /tmp/golden

``compare`` re-extracts every case and reports every difference (arrays
compared bitwise), then extracts each model at all of its batch sizes with
``extract_batches`` and compares those too; it exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import fuzz_extract  # noqa: E402
from perfseer_rt import extract  # noqa: E402
from perfseer_rt.errors import PerfSeerError  # noqa: E402
from perfseer_rt.graph import extract_batches  # noqa: E402

#: Named dims tried on models with symbolic non-batch dims.
DIMS = {"seq": 16, "past": 4, "sequence": 16, "batch": 2, "past_seq": 4, "total_seq": 20,
        "sequence_length": 16, "past_sequence_length": 4, "total_sequence_length": 20}  # GenAI's


BATCHES = (None, 1, 8)


def models(zoo: list[Path]) -> list[tuple[str, bytes]]:
    """(name, bytes) of the real and built models of the corpus."""
    files = sorted((ROOT / "examples").glob("*.onnx")) + sorted((ROOT / "tests/models").glob("*.onnx"))
    for d in zoo:
        files += sorted(Path(d).glob("*.onnx"))
    out = [(p.stem, p.read_bytes()) for p in files]
    return out + [(f"built{i}", b) for i, b in enumerate(fuzz_extract.built_seeds())]


def corpus(zoo: list[Path], fuzz: int, seed: int):
    """(case id, bytes, extract kwargs) for every case."""
    for name, data in models(zoo):
        for batch in BATCHES:
            yield f"{name}_b{batch}", data, {"batch": batch}
            yield f"{name}_b{batch}_dims", data, {"batch": batch, "dims": dict(DIMS)}
    seeds = fuzz_extract.built_seeds() + fuzz_extract.file_seeds()
    for i in range(fuzz):
        data, batch, _ = fuzz_extract.make_case(seeds, seed, i)
        yield f"fuzz{seed}_{i}", data, {"batch": batch}


def run_case(data: bytes, kw: dict) -> dict:
    try:
        g = extract(data, **kw)
    except PerfSeerError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return run_graph(g)


def run_graph(g) -> dict:
    return {"x": g.x, "edge_index": g.edge_index, "edge_attr": g.edge_attr, "u": g.u,
            "node_names": g.node_names, "node_ops": g.node_ops, "edge_tensors": g.edge_tensors,
            "edge_shapes": [tuple(int(d) for d in s) for s in g.edge_shapes],
            "unknown_ops": g.unknown_ops, "input_shapes": g.input_shapes, "info": g.info,
            "warnings": g.warnings}


def diff(want: dict, got: dict) -> list[str]:
    """Human-readable differences (empty: identical)."""
    if set(want) != set(got):
        return [f"keys {sorted(want)} != {sorted(got)}"]
    out = []
    for k in want:
        a, b = want[k], got[k]
        if isinstance(a, np.ndarray):
            if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
                if a.shape == b.shape and a.size:
                    bad = np.argwhere(a != b)
                    out.append(f"{k}: {len(bad)} cells differ, first {bad[0].tolist()}: "
                               f"{a[tuple(bad[0])]!r} != {b[tuple(bad[0])]!r}")
                else:
                    out.append(f"{k}: shape/dtype {a.shape} {a.dtype} != {b.shape} {b.dtype}")
        elif a != b:
            out.append(f"{k}: {str(a)[:200]} != {str(b)[:200]}")
    return out


def compare_batched(folder: Path, zoo: list[Path]) -> tuple[int, int]:
    """extract_batches over BATCHES against the one-by-one goldens: equal
    graphs, or the first failing batch's error. Returns (models, differing)."""
    n = bad = 0
    for name, data in models(zoo):
        for suffix, dims in (("", None), ("_dims", dict(DIMS))):
            n += 1
            want = [pickle.loads((folder / f"{name}_b{b}{suffix}.pkl").read_bytes())
                    for b in BATCHES]
            try:
                got = [run_graph(g) for g in extract_batches(data, BATCHES, dims=dims)]
            except PerfSeerError as exc:
                got = [{"error": type(exc).__name__, "message": str(exc)}]
                want = [next(w for w in want if "error" in w)] if any(
                    "error" in w for w in want) else want
            d = [x for w, g in zip(want, got) for x in diff(w, g)] if len(want) == len(got) \
                else [f"{len(got)} results for {len(want)}"]
            if d:
                bad += 1
                print(f"{name}{suffix} batched: " + "; ".join(d))
    return n, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("dump", "compare"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("--zoo", type=Path, action="append", default=[])
    ap.add_argument("--fuzz", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    n = bad = 0
    for cid, data, kw in corpus(args.zoo, args.fuzz, args.seed):
        res = run_case(data, kw)
        path = args.folder / f"{cid}.pkl"
        n += 1
        if args.action == "dump":
            path.write_bytes(pickle.dumps(res))
            continue
        if not path.exists():
            print(f"{cid}: no golden")
            bad += 1
            continue
        d = diff(pickle.loads(path.read_bytes()), res)
        if d:
            bad += 1
            print(f"{cid}: " + "; ".join(d))
    if args.action == "compare":
        m, mbad = compare_batched(args.folder, args.zoo)
        print(f"{n} cases, {bad} differ; extract_batches: {m} models x dims, {mbad} differ")
        bad += mbad
    else:
        print(f"{n} cases dumped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
