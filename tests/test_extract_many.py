"""Many models in one call (:mod:`perfseer_rt.graph.many`) and ``perfseer-rt
predict --keep-going --workers``: the same graphs as one extraction per model,
in the models' order, a failing model's typed error in its place."""

import json
import os

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from perfseer_rt.cli import main
from perfseer_rt.errors import ModelLoadError, ShapeError
from perfseer_rt.graph import extract_batches, extract_many
from tests.test_extract import conv_chain

BATCHES = (1, 4)


@pytest.fixture()
def models(tmp_path):
    """Two good models, a file that is not ONNX, a model whose dims are unresolved."""
    good1, good2, junk, open_dims = (tmp_path / n for n in ("a.onnx", "b.onnx", "c.onnx", "d.onnx"))
    onnx.save(conv_chain(), good1)
    onnx.save(conv_chain(channels=(3, 16, 16)), good2)
    junk.write_bytes(b"not a model")
    onnx.save(conv_chain(batch_dim="N"), open_dims)
    m = onnx.load(open_dims)
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"  # an unnamed spatial size
    onnx.save(m, open_dims)
    return [str(p) for p in (good1, junk, good2, open_dims)]


def _same(a, b):
    assert a.node_ops == b.node_ops and a.edge_tensors == b.edge_tensors
    for name in ("x", "edge_index", "edge_attr", "u"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.warnings == b.warnings


@pytest.mark.parametrize("workers", [1, 2])
def test_many_models_give_one_extraction_each_and_errors_in_place(models, workers):
    out = extract_many(models, BATCHES, workers=workers, return_errors=True)
    assert len(out) == 4
    assert isinstance(out[1], ModelLoadError) and "not an ONNX model" in str(out[1])
    assert isinstance(out[3], ShapeError) and "--dim H=N" in str(out[3])
    for i in (0, 2):
        expected = extract_batches(models[i], BATCHES)
        assert len(out[i]) == len(BATCHES)
        for got, want in zip(out[i], expected):
            _same(got, want)


def test_without_return_errors_the_first_failure_in_order_is_raised(models):
    with pytest.raises(ModelLoadError, match="c.onnx: not an ONNX model"):
        extract_many(models, BATCHES)
    with pytest.raises(ValueError, match="workers=0"):
        extract_many(models, workers=0)


def test_cli_keep_going_predicts_the_others_and_exits_2(models):
    res = CliRunner().invoke(main, ["predict", *models, "--batch", "2", "--json", "--keep-going",
                                    "--workers", "2"])
    assert res.exit_code == 2
    assert [r["model"] for r in json.loads(res.stdout)] == [models[0], models[2]]
    errors = [line for line in res.stderr.splitlines() if line.startswith("perfseer-rt: error:")]
    assert len(errors) == 2 and "c.onnx" in errors[0] and "d.onnx" in errors[1]
    assert "2 of 4 model(s) could not be extracted" in res.stderr
    plain = CliRunner().invoke(main, ["predict", *models, "--batch", "2", "--json"])
    assert plain.exit_code == 2 and plain.stdout == "" and "c.onnx" in plain.stderr


def test_the_first_failure_names_its_model_among_many(models):
    """Without --keep-going the first failing model ends the run; its one
    line names that model, also where the error itself does not (a shape
    error says which dims, not which file)."""
    good_then_open = [models[0], models[3]]
    res = CliRunner().invoke(main, ["predict", *good_then_open, "--batch", "2"])
    assert res.exit_code == 2
    line, = [x for x in res.stderr.splitlines() if x.startswith("perfseer-rt: error:")]
    assert line.startswith(f"perfseer-rt: error: {models[3]}: ") and "--dim H=N" in line


def test_a_folder_pipe_is_named_not_skipped(tmp_path):
    """A folder's ``*.onnx`` entries are its models: a named pipe among them
    had been skipped in silence (it is no regular file); it is now an error
    line naming it, the others predicted, exit 2. A folder named ``*.onnx``
    is still no model."""
    onnx.save(conv_chain(), tmp_path / "a.onnx")
    os.mkfifo(tmp_path / "b.onnx")
    (tmp_path / "c.onnx").mkdir()
    res = CliRunner().invoke(main, ["predict", str(tmp_path), "--batch", "2", "--json", "--keep-going"])
    assert res.exit_code == 2
    assert [r["model"] for r in json.loads(res.stdout)] == [str(tmp_path / "a.onnx")]
    errors = [line for line in res.stderr.splitlines() if line.startswith("perfseer-rt: error:")]
    assert len(errors) == 1 and "b.onnx: not a regular file" in errors[0]
