"""Upgrade predictor manifests to the current schema, in place.

    python -m training.seernet.migrate_manifest exported_models/*/manifest.json

The ONNX files are untouched, so predictions do not change
(``tests/test_golden_predictions.py`` pins them); the upgraded document is
parsed strictly before it replaces the old one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from perfseer_rt.graph.perfgraph import atomic_write_bytes
from perfseer_rt.predict.manifest import ManifestError, parse_manifest, upgrade, upgrade_v1
from perfseer_rt.predict.registry import SEPARATE_SCHEMA_KINDS, typed_manifest


def migrate(path: str) -> bool:
    """Upgrade one file; False when it already follows the current schema
    or is of a kind with its own schema (checked, left as is)."""
    with open(path) as f:
        doc = json.load(f)
    if isinstance(doc, dict) and doc.get("kind") in SEPARATE_SCHEMA_KINDS:
        typed_manifest(Path(path), doc)
        return False
    new = upgrade_v1(doc) if doc.get("format") == "perfseer-rt-predictor/1" else upgrade(doc)
    if new is doc:
        parse_manifest(doc)  # current already: only check it
        return False
    parse_manifest(new)
    atomic_write_bytes(path, (json.dumps(new, indent=1) + "\n").encode())
    return True


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.seernet.migrate_manifest",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="manifest.json files")
    a = p.parse_args(argv)
    for path in a.paths:
        try:
            changed = migrate(path)
        except (OSError, json.JSONDecodeError, ManifestError) as exc:
            print(f"migrate_manifest: error: {path}: {exc}", file=sys.stderr)
            return 2
        print(f"{path}: {'upgraded' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
