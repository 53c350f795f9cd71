"""Each network ships once (``training/seernet/shared_weights.py``): the
blend's SeerNet weights (float16, ``training/seernet/compact_weights.py``)
are references into ``seernet.onnx``, the predictions are what the
self-contained blend gives, bit for bit, and its SeerNet part is what
``seernet.onnx`` predicts."""

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_model

from perfseer_rt import extract
from perfseer_rt.predict.manifest import concat_graphs
from training.seernet.shared_weights import MIN_SHARED_BYTES, share_weights

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "exported_models" / "cpu-amd-epyc-1t"


def _run(model: str | bytes, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _inlined(path: Path) -> bytes:
    """The model at ``path`` as one self-contained file (external data read in)."""
    model = onnx.load(str(path), load_external_data=False)
    load_external_data_for_model(model, str(path.parent))
    return model.SerializeToString()


def test_the_shipped_blend_reads_seernet_from_its_file_and_predicts_the_same():
    blend = onnx.load(str(CPU / "seernet_gbm.onnx"), load_external_data=False)
    external = [t for t in blend.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert external and {e.value for t in external for e in t.external_data if e.key == "location"} \
        == {"seernet.onnx"}
    assert (CPU / "seernet_gbm.onnx").stat().st_size < 0.6 * (CPU / "seernet.onnx").stat().st_size
    dims = {"seq": 16, "past_seq": 4, "total_seq": 20}
    graphs = [extract(p, batch=b, dims=dims) for b in (1, 8)
              for p in (ROOT / "examples" / "resnet18.onnx", ROOT / "tests" / "models" / "bert_small.onnx",
                        ROOT / "tests" / "models" / "gpt2_kv.onnx")]
    feeds = concat_graphs([g.x for g in graphs], [g.edge_index for g in graphs],
                          [g.edge_attr for g in graphs], [g.u for g in graphs])
    shipped = _run(str(CPU / "seernet_gbm.onnx"), feeds)
    whole = _run(_inlined(CPU / "seernet_gbm.onnx"), feeds)
    assert len(shipped) == 2 and all(np.array_equal(a, b) for a, b in zip(shipped, whole))


def test_the_blend_runs_the_network_of_seernet_onnx():
    """The blend's SeerNet part (its output before the trees join) is what
    ``seernet.onnx`` predicts, bit for bit: one network, stored once."""
    blend = onnx.load(str(CPU / "seernet_gbm.onnx"), load_external_data=False)
    load_external_data_for_model(blend, str(CPU))
    inner = blend.graph.output.add()
    inner.CopyFrom(blend.graph.output[0])
    inner.name = "blend_seernet_y"
    graphs = [extract(ROOT / "examples" / "resnet18.onnx", batch=b) for b in (1, 4, 32)]
    feeds = concat_graphs([g.x for g in graphs], [g.edge_index for g in graphs],
                          [g.edge_attr for g in graphs], [g.u for g in graphs])
    got = _run(blend.SerializeToString(), feeds)[-1]
    want = _run(str(CPU / "seernet.onnx"), feeds)[0]
    assert got.shape == want.shape == (3, len(want[0])) and np.array_equal(got, want)


def test_no_weight_is_shipped_twice():
    """No tensor of MIN_SHARED_BYTES or more is stored inline in two shipped files."""
    seen: dict[str, str] = {}
    for path in sorted((ROOT / "exported_models").rglob("*.onnx")):
        for t in onnx.load(str(path), load_external_data=False).graph.initializer:
            if t.data_location != TensorProto.EXTERNAL and len(t.raw_data) >= MIN_SHARED_BYTES:
                digest = hashlib.sha256(t.raw_data).hexdigest()
                assert digest not in seen or seen[digest] == str(path), \
                    f"{t.name} of {path} is also in {seen[digest]}"
                seen[digest] = str(path)


def _linear(w: np.ndarray, extra: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y" if not extra else "h"])]
    inits = [numpy_helper.from_array(w, "w")]
    if extra:  # a head of its own after the shared layer
        nodes.append(helper.make_node("Add", ["h", "b"], ["y"]))
        inits.append(numpy_helper.from_array(np.full(w.shape[1], 0.5, np.float32), "b"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_share_weights_keeps_the_outputs_and_stores_a_tensor_once(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    base, head = tmp_path / "base.onnx", tmp_path / "head.onnx"
    base.write_bytes(_linear(w, False).SerializeToString())
    head.write_bytes(_linear(w, True).SerializeToString())
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    before, size = _run(str(head), feeds), head.stat().st_size
    assert share_weights(head, base) == 1  # the 8 KiB weight; the small bias stays inline
    assert head.stat().st_size < size - w.nbytes + 512
    assert np.array_equal(_run(str(head), feeds)[0], before[0])
    loaded = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(head)).graph.initializer}
    assert np.array_equal(loaded["w"], w)
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="one folder"):
        share_weights(head, elsewhere / "base.onnx")
