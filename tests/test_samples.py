"""Inputs that hold one sample (:mod:`perfseer_rt.graph.samples`):
torchvision's detectors export one image ``[3, H, W]`` and add the batch
axis themselves. Their batch read 3 (the channels), and ``--batch 1`` was
refused with advice to use ``--batch 3``."""

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from perfseer_rt import extract
from perfseer_rt.errors import ShapeError
from tests.onnx_builders import const, model

MODELS = Path(__file__).parent / "models"


def _image_model(unsqueeze: bool, opset: int = 17):
    """x [3, 8, 8] normalised, then made a batch of one (or, without
    ``unsqueeze``, read by a Conv1d as 3 sequences of 8 channels)."""
    nodes = [helper.make_node("Sub", ["x", "mean"], ["centred"]),
             helper.make_node("Div", ["centred", "std"], ["normed"])]
    if unsqueeze:
        axes = {} if opset >= 13 else {"axes": [0]}
        ins = ["normed", "zero"] if opset >= 13 else ["normed"]
        nodes += [helper.make_node("Unsqueeze", ins, ["batched"], **axes),
                  helper.make_node("Conv", ["batched", "w"], ["y"])]
        w = const("w", (4, 3, 3, 3))
    else:
        nodes += [helper.make_node("Conv", ["normed", "w"], ["y"])]
        w = const("w", (4, 8, 3))
    inits = [const("mean", (1,), [0.5]), const("std", (1,), [0.25]), w]
    if unsqueeze and opset >= 13:
        inits.append(const("zero", (1,), [0], dtype=np.int64))
    return model(nodes, [("x", [3, 8, 8])], [("y", None)], inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 17])
def test_an_image_the_model_batches_itself_is_a_batch_of_one(opset):
    g = extract(_image_model(True, opset))
    assert g.globals["batch_size"] == 1 and g.input_shapes["x"] == (3, 8, 8)
    assert extract(_image_model(True, opset), batch=1).globals["batch_size"] == 1
    with pytest.raises(ShapeError, match=r"holds one sample .* --batch 1, not 2"):
        extract(_image_model(True, opset), batch=2)


def test_a_leading_dim_the_model_convolves_is_still_its_batch():
    g = extract(_image_model(False))
    assert g.globals["batch_size"] == 3
    with pytest.raises(ShapeError, match="fixed batch dim of 3"):
        extract(_image_model(False), batch=1)


def test_a_torchvision_detector_is_predicted_at_batch_one():
    g = extract(MODELS / "ssdlite_detection.onnx", batch=1)
    assert g.globals["batch_size"] == 1 and g.input_shapes["image"] == (3, 320, 320)
