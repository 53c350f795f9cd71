"""How a model was exported, as far as the file tells: which exporter
wrote it, and whether its input shapes are fixed.

torch has two ONNX exporters that spell one model differently: the
TorchScript one (``torch.onnx.export(..., dynamo=False)``, which wrote every
model perfseer-rt's CPU predictors were trained on) and the dynamo one
(``dynamo=True``, torch's default since 2.9), which marks every node with
``pkg.torch.onnx.*`` metadata. The two spellings of one model can run
differently under onnxruntime (README, "Exporters"), so a prediction says
which one it saw. So can one model exported with and without a dynamic
batch axis: onnxruntime plans CPU memory differently when every shape is
known when the session is created.
"""

from __future__ import annotations

import onnx

TORCH_DYNAMO = "torch-dynamo"
TORCH_TORCHSCRIPT = "torch-torchscript"
#: Node metadata keys the dynamo exporter writes.
_DYNAMO_PREFIX = "pkg.torch.onnx."
#: Nodes looked at for that metadata (every node of a dynamo export has it).
_NODES_LOOKED_AT = 8


def exporter(proto: onnx.ModelProto) -> str:
    """``"torch-dynamo"``, ``"torch-torchscript"``, else the file's
    ``producer_name`` (``"unknown"`` when empty). A dynamo export whose node
    metadata was stripped reads as TorchScript."""
    producer = proto.producer_name or "unknown"
    if producer != "pytorch":
        return producer
    for node in proto.graph.node[:_NODES_LOOKED_AT]:
        for prop in node.metadata_props:
            if prop.key.startswith(_DYNAMO_PREFIX):
                return TORCH_DYNAMO
    return TORCH_TORCHSCRIPT


def fixed_input_shapes(inputs: list[onnx.ValueInfoProto]) -> bool:
    """Whether every one of ``inputs`` (the data inputs) has all its dims
    given as numbers in the file (no dynamic axis); False without inputs."""
    if not inputs:
        return False
    for vi in inputs:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            return False
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value") or d.dim_value <= 0:
                return False
    return True
