"""Command line of the model zoo.

    python -m training.zoo export SPEC -o out.onnx [--batch N] [--structure-only] [--opset 18]
    python -m training.zoo sample FAMILY [-n 5] [--seed 0] [--json]
    python -m training.zoo info SPEC [--json]
    python -m training.zoo families [--json]

SPEC is a spec string (``resnet:depth=50,res=224``) or config JSON (a line
printed by ``sample --json``). Errors print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from training.zoo import export_onnx, family_names, get_family, parse_spec, sample_many, to_spec
from training.zoo.errors import SpecError
from training.zoo.export import input_specs, output_specs

PROG = "python -m training.zoo"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Deterministic model zoo: spec -> ONNX.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="export one model to ONNX")
    p.add_argument("spec", help="spec string or config JSON")
    p.add_argument("-o", "--output", required=True, help="output .onnx path")
    p.add_argument("--batch", type=int, default=None, help="fixed batch size (default: dynamic 'batch' axis)")
    p.add_argument("--structure-only", action="store_true", help="drop weight data, keep shapes")
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--json", action="store_true", help="print a JSON summary")

    p = sub.add_parser("sample", help="print random configs of a family")
    p.add_argument("family")
    p.add_argument("-n", type=int, default=5, help="how many (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="JSON lines (config with arch_id and spec)")

    p = sub.add_parser("info", help="canonical spec, arch id, inputs and outputs of a spec")
    p.add_argument("spec")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("families", help="list families and their parameters")
    p.add_argument("--json", action="store_true")
    return parser


def _io_dict(config, batch) -> dict:
    return {
        "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in input_specs(config, batch)],
        "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in output_specs(config, batch)],
    }


def _run(args: argparse.Namespace) -> int:
    if args.command == "export":
        config = parse_spec(args.spec)
        if args.batch is not None and args.batch < 1:
            raise SpecError(f"bad --batch {args.batch}: expected a positive integer")
        start = time.perf_counter()
        path = export_onnx(config, args.output, batch=args.batch, structure_only=args.structure_only,
                           opset=args.opset)
        seconds = time.perf_counter() - start
        if args.json:
            print(json.dumps({"path": str(path), "arch_id": config.arch_id, "spec": to_spec(config),
                              "batch": args.batch if args.batch is not None else config.batch,
                              "structure_only": args.structure_only, "bytes": path.stat().st_size,
                              "export_s": round(seconds, 3)}))
        else:
            print(path)
    elif args.command == "sample":
        if args.n < 0:
            raise SpecError(f"bad -n {args.n}: expected a count >= 0")
        for config in sample_many(args.family, args.n, args.seed):
            if args.json:
                row = config.to_dict(include_arch_id=True)
                row["spec"] = to_spec(config)
                print(json.dumps(row, sort_keys=True))
            else:
                print(to_spec(config))
    elif args.command == "info":
        config = parse_spec(args.spec)
        info = {"spec": to_spec(config), "arch_id": config.arch_id, "config": config.to_dict(),
                **_io_dict(config, config.batch)}
        if args.json:
            print(json.dumps(info))
        else:
            for key, value in info.items():
                print(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")
    elif args.command == "families":
        rows: list[dict[str, Any]] = []
        for name in family_names():
            fam = get_family(name)
            rows.append({"family": name, "params": [
                {"name": p.name, "default": p.default, "allowed": p.allowed() if p.kind != "custom" else p.doc,
                 "doc": p.doc} for p in fam.params]})
        if args.json:
            print(json.dumps(rows))
        else:
            for row in rows:
                print(row["family"] + ": " + ", ".join(f"{p['name']}={p['default']}" for p in row["params"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 on a bad spec or argument)."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except SpecError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
