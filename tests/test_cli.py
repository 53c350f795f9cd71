"""The CLI: JSON output, atomic -o, inspect, and one-line errors with exit 2."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from perfseer_rt.cli import main
from perfseer_rt.errors import OutputError
from perfseer_rt.graph.perfgraph import atomic_write_bytes
from tests.test_extract import conv_chain


@pytest.fixture()
def model_path(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(conv_chain(), p)
    return p


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_extract_json(model_path):
    res = run("extract", model_path, "--batch", 2, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    g = doc["global"]
    for key in ("num_nodes", "num_edges", "flops_total", "mac_total", "weight_total", "batch_size"):
        assert key in g
    assert g["batch_size"] == 2 and g["num_nodes"] == 5
    assert doc["feature_version"]
    assert [n["op"] for n in doc["nodes"]] == ["Conv", "Relu", "Conv", "Add", "Reshape"]
    assert all({"name", "op", "flops", "mac", "weight"} <= n.keys() for n in doc["nodes"])
    assert all({"src", "dst", "shape"} <= e.keys() for e in doc["edges"])
    assert sum(n["flops"] for n in doc["nodes"]) == pytest.approx(g["flops_total"])


def test_extract_input_option(tmp_path):
    from onnx import helper

    from tests.onnx_builders import model
    m = model([helper.make_node("Relu", ["ids"], ["y"])], [("ids", ["B", "S"])], [("y", None)])
    p = tmp_path / "dyn.onnx"
    onnx.save(m, p)
    res = run("extract", p, "--json")
    assert res.exit_code == 2
    assert "dim 1 ('S') is dynamic" in res.stderr
    res = run("extract", p, "--input", "ids:3x7", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["global"]["flops_total"] == 21
    res = run("extract", p, "--input", "ids:3by7")
    assert res.exit_code == 2 and "NAME:D1xD2" in res.stderr


def test_extract_npz_output(model_path, tmp_path):
    out = tmp_path / "g.npz"
    res = run("extract", model_path, "-o", out)
    assert res.exit_code == 0, res.output
    with np.load(out) as z:
        assert z["x"].shape[0] == 5 and z["edge_index"].shape == (2, 5)


def test_failed_extract_writes_no_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    out = tmp_path / "g.npz"
    res = run("extract", bad, "-o", out)
    assert res.exit_code == 2
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]


@pytest.mark.parametrize("where", ["missing/x.npz", "new_folder/", "a_folder/", "a_folder"])
def test_extract_output_where_no_file_can_go_exits_2_and_writes_nothing(model_path, tmp_path, where):
    """``-o`` naming a folder (or ending with a separator) or a file in a
    folder that does not exist: exit 2, no traceback, nothing written (a
    trailing separator had written a file of the folder's name)."""
    (tmp_path / "a_folder").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    res = run("extract", model_path, "-o", str(tmp_path / where) + ("/" if where.endswith("/") else ""))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_atomic_write_raises_a_typed_error(tmp_path):
    with pytest.raises(OutputError, match="does not exist"):
        atomic_write_bytes(tmp_path / "no" / "x.json", b"{}")
    with pytest.raises(OutputError, match="is a folder"):
        atomic_write_bytes(f"{tmp_path}/sub/", b"{}")
    assert list(tmp_path.iterdir()) == []


def test_inspect(model_path):
    res = run("inspect", model_path, "--batch", 4, "--top", 2)
    assert res.exit_code == 0, res.output
    assert "nodes:      5" in res.stdout
    assert "heaviest 2 layers" in res.stdout
    assert "conv2" in res.stdout


def test_unknown_op_warning(tmp_path):
    from onnx import helper

    from tests.onnx_builders import model
    nodes = [helper.make_node("Mystery", ["x"], ["y"], domain="org.x", name="m")]
    p = tmp_path / "u.onnx"
    onnx.save(model(nodes, [("x", [1, 4])], [("y", None)], domains=("org.x",)), p)
    res = run("extract", p, "--json")
    assert res.exit_code == 0
    assert "warning" in res.stderr and "Mystery" in res.stderr


@pytest.mark.parametrize("case", ["missing", "text", "truncated", "dynamic"])
def test_bad_input_one_line_exit_2_no_traceback(tmp_path, case):
    """Run as a real process: exactly one stderr line, exit code 2."""
    p = tmp_path / "m.onnx"
    data = conv_chain().SerializeToString()
    if case == "text":
        p.write_text("name,value\na,1\n")
    elif case == "truncated":
        p.write_bytes(data[: len(data) // 2])
    elif case == "dynamic":
        from onnx import helper

        from tests.onnx_builders import model
        onnx.save(model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["B", "T"])],
                        [("y", None)]), p)
    proc = subprocess.run([sys.executable, "-m", "perfseer_rt.cli", "extract", str(p), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    expected = {"missing": "no such file", "text": "not an ONNX model",
                "truncated": "truncated or corrupt", "dynamic": "is dynamic"}[case]
    assert expected in lines[0] and lines[0].startswith("perfseer-rt: error:")
    assert proc.stdout == ""


def test_extract_onto_its_own_model_refuses_and_leaves_the_model(model_path, tmp_path):
    """``extract M -o M`` would replace the model with the arrays: exit 2, one
    line, the model's bytes unchanged."""
    target = tmp_path / "m.onnx"
    target.write_bytes(open(model_path, "rb").read())
    before = target.read_bytes()
    r = run("extract", target, "-o", target)
    assert r.exit_code == 2 and "the model itself" in r.output and len(r.output.strip().splitlines()) == 1
    assert target.read_bytes() == before


def test_a_dim_naming_the_batch_axis_must_agree_with_batch():
    """``--dim batch=4 --batch 8`` on a model whose first dim is named
    ``batch`` is a contradiction: exit 2 naming both, not the batch-4 answer
    labelled batch 8; the two agreeing is accepted."""
    bert = "tests/models/bert_small.onnx"
    r = run("extract", bert, "--dim", "batch=4", "--dim", "seq=16", "--batch", "8")
    assert r.exit_code == 2 and "--dim batch=4 conflicts with --batch 8" in r.output
    ok = run("extract", bert, "--dim", "batch=8", "--dim", "seq=16", "--batch", "8")
    assert ok.exit_code == 0 and json.loads(ok.output)["input_shapes"]["input_ids"] == [8, 16]
