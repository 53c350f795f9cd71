"""How a model was exported, as far as the file tells: which exporter
wrote it, whether its input shapes are fixed, and whether its weights are
stored as external data.

torch has two ONNX exporters that spell one model differently: the
TorchScript one (``torch.onnx.export(..., dynamo=False)``, which wrote every
model perfseer-rt's CPU predictors were trained on) and the dynamo one
(``dynamo=True``, torch's default since 2.9), which marks every node with
``pkg.torch.onnx.*`` metadata. The two spellings of one model can run
differently under onnxruntime (docs/cpu.md, "What it cannot see"), so a prediction says
which one it saw. So can one model exported with and without a dynamic
batch axis: onnxruntime plans CPU memory differently when every shape is
known when the session is created. And so can one model with its weights in
the .onnx file or in an external data file beside it (every model over 2 GB,
every onnxruntime-genai model): onnxruntime then holds no copy of the file's
weight bytes while it creates the session, and pages it never reads (unused
embedding rows) stay out of memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import onnx

from perfseer_rt.errors import GraphError
from perfseer_rt.graph import dtypes
from perfseer_rt.graph.nodes import Row

TORCH_DYNAMO = "torch-dynamo"
TORCH_TORCHSCRIPT = "torch-torchscript"
#: Node metadata keys the dynamo exporter writes.
_DYNAMO_PREFIX = "pkg.torch.onnx."
#: Nodes looked at for that metadata (every node of a dynamo export has it).
_NODES_LOOKED_AT = 8
#: Node metadata key under which onnxscript's rewriter (run by the dynamo
#: exporter's ``optimize=True``, its default) names the rules that made the
#: node, comma-separated: ``FuseBatchNormIntoConv`` (a BatchNorm folded into
#: the Conv, which PyTorch eager runs as its own kernel), ``FuseConvPad`` (an
#: ``F.pad`` folded into the Conv's pads), ``RemoveOptionalBiasFromConv``...
REWRITER_RULES_KEY = "pkg.onnxscript.rewriter.rule_name"
#: The rewriter's rule that folds a BatchNormalization into the Conv before it.
FUSED_BATCHNORM = "FuseBatchNormIntoConv"
#: The rewriter's rule that folds a Pad into the Conv after it.
FUSED_PAD = "FuseConvPad"


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


def rewrites(proto: onnx.ModelProto) -> dict[int, tuple[str, ...]]:
    """The rewriter rules that made each node (:data:`REWRITER_RULES_KEY`),
    by the node's position in the graph; only nodes that carry them."""
    out: dict[int, tuple[str, ...]] = {}
    for k, node in enumerate(proto.graph.node):
        for prop in node.metadata_props:
            if prop.key == REWRITER_RULES_KEY:
                rules = tuple(r.strip() for r in prop.value.split(",") if r.strip())
                if rules:
                    out[k] = rules
    return out


def folded_bias(name: str) -> bool:
    """Whether a Conv's bias is a constant torch's TorchScript exporter made
    by constant folding (named ``onnx::Conv_<n>``; a bare number in older
    torch), as it does when it folds a BatchNorm into the Conv, rather than
    the Conv's own parameter (``layer1.0.conv1.bias``)."""
    return name.startswith("onnx::") or name.isdigit()


def exporter_folds(proto: onnx.ModelProto, table: list[Row], exported_by: str
                   ) -> tuple[set[int] | None, set[int]]:
    """(the Convs into which the exporter folded a BatchNorm, those into
    which it folded a Pad), by position in ``table``, where the file tells:
    a dynamo export by its rewriter's rules (:data:`REWRITER_RULES_KEY`;
    without them, None), a TorchScript export by the names of the folded
    biases (:func:`folded_bias`; every other bias is the Conv's own). None:
    the file does not tell (another producer) and a reader must guess."""
    if exported_by == TORCH_DYNAMO:
        rules = rewrites(proto)
        if not rules:
            return None, set()
        return ({k for k, r in rules.items() if FUSED_BATCHNORM in r and table[k][0] == "Conv"},
                {k for k, r in rules.items() if FUSED_PAD in r and table[k][0] == "Conv"})
    if exported_by == TORCH_TORCHSCRIPT:
        return {k for k, row in enumerate(table)
                if row[0] == "Conv" and len(row[3]) > 2 and folded_bias(row[3][2])}, set()
    return None, set()


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


def external_weight_share(proto: onnx.ModelProto, model_path: Path | None,
                          name: str = "model") -> float:
    """The share of the initializers' bytes stored in external data files
    that exist beside the model file ``model_path`` (None, or not a file, as
    for a model given as bytes: 0.0; the file system is asked only when an
    initializer is external). A structure-only model, whose external files
    are absent, has 0.0: it stands for the model, however stored. Element
    types are validated before (unknown ones count 0 bytes here).

    For a model file, a location onnxruntime refuses is a
    :class:`GraphError` naming the model ``name``: none, an absolute path, a
    path out of the model's folder, or something there that is not a
    regular file (a folder, pipe or device, which is never opened here)."""
    if model_path is None:
        return 0.0
    model_dir: Path | None = None
    found: dict[str, bool] = {}
    external = 0.0
    for t in proto.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if model_dir is None:
            if not model_path.is_file():  # bytes: onnxruntime could not find the data either
                return 0.0
            model_dir = model_path.parent
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        exists = found.get(location)
        if exists is None:
            exists = found[location] = _external_file(location, model_dir,
                                                      f"{name}: initializer {t.name!r}")
        if exists:
            external += _nbytes(t)
    if not external:
        return 0.0
    return external / sum(_nbytes(t) for t in proto.graph.initializer)


def _external_file(location: str, model_dir: Path, where: str) -> bool:
    """Whether the external data file ``location`` is there (a regular file
    in ``model_dir``; False where it is absent); a GraphError (prefixed
    ``where``) where onnxruntime refuses the location."""
    if not location:
        raise GraphError(f"{where} is stored as external data but names no file; onnxruntime "
                         "refuses such a model")
    if os.path.isabs(location):
        raise GraphError(f"{where} names its external data file by an absolute path "
                         f"({location[:200]!r}); onnxruntime reads external data only from the "
                         "model's folder")
    try:
        path = model_dir / location
        inside = os.path.realpath(model_dir)
        if os.path.commonpath([inside, os.path.realpath(path)]) != inside:
            raise GraphError(f"{where}: its external data file {location[:200]!r} lies outside "
                             "the model's folder; onnxruntime refuses such a model")
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # absent, or a name no file can have (NUL, too long)
        return False
    if not stat.S_ISREG(mode):
        raise GraphError(f"{where}: its external data {location[:200]!r} is not a regular file "
                         "(a folder, pipe or device); onnxruntime refuses such a model")
    return True


def _nbytes(t: onnx.TensorProto) -> float:
    entry = dtypes.DTYPES.get(t.data_type)
    n = entry[1] if entry is not None else 0.0
    for d in t.dims:
        n *= d
    return float(n)
