"""training/seernet/memory_probe.py: with onnxruntime's defaults the second
run allocates the recorded memory pattern on top of the arena the first run
filled; without the pattern it does not (allocator behaviour, not timing)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

pytest.importorskip("onnxruntime")

C, HW, BATCH = 16, 128, 16
TENSOR_MIB = BATCH * C * HW * HW * 4 / 2**20  # one activation: 16 MiB


def _conv_net(path):
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(4):
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, (C, C, 3, 3)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, HW, HW])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", C, HW, HW])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    save(model, str(path))


def _probe(path, *flags):
    out = subprocess.run([sys.executable, "-m", "training.seernet.memory_probe", str(path), "--batch", str(BATCH),
                          *flags], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_memory_pattern_is_a_second_block_on_top_of_the_first_run(tmp_path):
    path = tmp_path / "net.onnx"
    _conv_net(path)
    default, no_pattern = _probe(path), _probe(path, "--no-pattern")
    assert default["first_run_mib"] >= 2 * TENSOR_MIB  # two activations alive at once, at least
    assert default["after_3_runs_mib"] - default["first_run_mib"] >= TENSOR_MIB  # the pattern block
    assert abs(no_pattern["after_3_runs_mib"] - no_pattern["first_run_mib"]) <= 0.25 * TENSOR_MIB
