"""The runtime never imports torch (STYLE habit 1)."""

import subprocess
import sys

CODE = """
import sys, onnx
from onnx import helper, TensorProto
import perfseer_rt, perfseer_rt.cli
import pkgutil, importlib
for mod in pkgutil.walk_packages(perfseer_rt.__path__, "perfseer_rt."):
    importlib.import_module(mod.name)
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
perfseer_rt.extract(helper.make_model(g))
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print(",".join(bad))
"""


def test_runtime_imports_no_torch():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"torch modules imported: {proc.stdout}"
