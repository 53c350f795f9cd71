"""The op types of a predictor's training data (``training_data.ops``,
:mod:`training.seernet.training_ops`): the layout's one-hot ops read from the
stored graphs, the others named by exporting their architectures again."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from perfseer_rt import extract  # noqa: E402
from perfseer_rt.graph import layout  # noqa: E402
from perfseer_rt.predict.manifest import read_manifest  # noqa: E402
from training.seernet.data import write_graph_shard  # noqa: E402
from training.seernet.training_ops import training_ops, write_ops  # noqa: E402
from training.zoo import export_onnx, parse_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OTHER = layout.NODE_COLUMNS.index("op_other")
#: a ResNet (every op in the layout's vocabulary) and an EdgeNeXt (some ops outside it)
SPECS = {"a": "resnet:depth=18,width=0.25,res=32", "b": "timm:model=edgenext_xx_small,res=64"}


def test_training_ops_counts_architectures_and_names_the_ops_outside_the_vocabulary(tmp_path):
    ds = tmp_path / "ds"
    (ds / "records").mkdir(parents=True)
    (ds / "graphs").mkdir()
    graphs, records, expected = {}, [], {}
    for arch, spec in SPECS.items():
        export_onnx(parse_spec(spec), tmp_path / f"{arch}.onnx", structure_only=True)
        for batch in (1, 4):
            key = f"{arch}/b{batch}"
            graphs[key] = extract(tmp_path / f"{arch}.onnx", batch=batch)
            records.append({"arch_id": arch, "spec": spec, "batch": batch, "graph_key": key,
                            "family": spec.split(":")[0], "status": "ok"})
        expected[arch] = set(graphs[f"{arch}/b1"].node_ops)
    (ds / "records" / "part0000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_graph_shard(ds / "graphs" / "part-00000.npz", list(graphs), list(graphs.values()))
    assert not graphs["a/b1"].x[:, OTHER].any() and graphs["b/b1"].x[:, OTHER].any()

    ops = training_ops([ds], progress=False)
    assert "other" not in ops
    assert set(ops) == expected["a"] | expected["b"]
    assert all(n == (op in expected["a"]) + (op in expected["b"]) for op, n in ops.items())

    manifest = tmp_path / "manifest.json"
    manifest.write_text((ROOT / "exported_models" / "cpu-amd-epyc-1t" / "manifest.json").read_text())
    write_ops(manifest, ops)
    assert read_manifest(manifest).training_data.ops == ops
