"""NeuSight's published whole-model latencies (data/neusight-e2e, read by
training/gpuprior/neusight_labels.py) and the structure-only exports of their
models (training/gpuprior/neusight_e2e.py)."""

import json

import onnx
import pytest

from perfseer_rt import extract
from perfseer_rt.predict import registry
from training.gpuprior import neusight_e2e as E
from training.gpuprior import neusight_labels as L

TINY_BERT = {"architectures": ["BertLMHeadModel"], "model_type": "bert", "hidden_size": 64,
             "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3,
             "vocab_size": 1000, "max_position_embeddings": 128, "type_vocab_size": 2}


def test_every_label_names_its_source_and_every_nvidia_gpu_a_device():
    rows = L.read_labels()
    assert len(rows) >= 100
    for r in rows:
        assert r["source"].endswith(f"{r['model']}-{'inf' if r['mode'] == 'inference' else 'train'}"
                                    f"-{r['seq']}-{r['batch']}.json") and len(r["commit"]) == 40
        assert r["e2e_ms"] > 0 and r["e2e_ms"] == pytest.approx(r["fw_ms"] + r["bw_ms"])
        if r["gpu"].startswith(("NVIDIA", "Tesla")):
            assert registry.get_predictor(r["device"]).kind == "gpu"
    assert {r["model"] for r in rows} == set(L.MODELS)
    assert all((L.DATA / "configs" / f"{m}.json").exists() for m in L.MODELS)


def test_exports_are_structure_only_with_the_asked_layers(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tiny.json").write_text(json.dumps(TINY_BERT))
    one = E.export_model("tiny", 1, tmp_path / "tiny-1.onnx", folder=tmp_path)
    full = E.export_model("tiny", None, tmp_path / "tiny-3.onnx", folder=tmp_path)
    assert not list(tmp_path.glob("*.data"))  # structure-only: no weights written
    assert all(len(t.raw_data) < 1024 for t in onnx.load(str(full), load_external_data=False).graph.initializer)
    g1, g3 = (extract(p, batch=2, dims={"seq": 16}) for p in (one, full))
    assert g3.node_ops.count("Softmax") == 3 * g1.node_ops.count("Softmax") == 3
