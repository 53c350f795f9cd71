"""Build a config's module with deterministic weights and export it to ONNX.

Weights: the module is built on the ``meta`` device (no default init cost),
materialized with ``to_empty`` and filled by :func:`deterministic_init` from a
``torch.Generator`` seeded with the architecture id, so the same config gives
byte-identical ONNX files across runs.

Export uses the TorchScript exporter (``dynamo=False``) with constant folding
(``exporter="dynamo"``: torch's default exporter, for checks only):
eval-mode BatchNorm is folded into the preceding conv, dead branches are
removed, shape tensors stay small inline constants. The model is traced once
at batch 2 with a dynamic axis named ``"batch"`` on every input and output; a
fixed ``batch`` is then written into the graph's input/output shapes
(tracing at a large batch would be slow; all reshapes use -1 for the batch).
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.external_data_helper
import onnx.numpy_helper
import torch
from torch import nn

from training.zoo.config import ModelConfig
from training.zoo.errors import SpecError
from training.zoo.family import BATCH_DIM, TensorSpec
from training.zoo.registry import get_family
from training.zoo.spec import to_spec

#: Batch size used for tracing (any value > 1 avoids batch-1 specializations).
TRACE_BATCH = 2
#: Models with more weight bytes than this are written with external data
#: (``<name>.onnx.data`` beside the file): a protobuf cannot exceed 2 GiB.
LARGE_MODEL_BYTES = 1_800_000_000


def input_specs(config: ModelConfig, batch: int | None = None) -> list[TensorSpec]:
    """Inputs of the exported model: name, shape, dtype (and ``high`` for token ids).

    ``batch`` None -> ``config.batch``, and if that is None too the batch
    dimension is the string ``"batch"``. Images are float32 NCHW, token ids
    int64 (B, seq) with values in [0, high).
    """
    b = batch if batch is not None else config.batch
    return get_family(config.family).io(config.params, BATCH_DIM if b is None else b)[0]


def output_specs(config: ModelConfig, batch: int | None = None) -> list[TensorSpec]:
    """Outputs of the exported model, as :func:`input_specs`."""
    b = batch if batch is not None else config.batch
    return get_family(config.family).io(config.params, BATCH_DIM if b is None else b)[1]


def example_inputs(config: ModelConfig, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random numpy inputs for :func:`input_specs` at ``batch`` (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in input_specs(config, batch):
        if spec.dtype == "int64":
            out[spec.name] = rng.integers(0, spec.high or 2, size=spec.shape, dtype=np.int64)
        else:
            out[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    return out


def arch_seed(config: ModelConfig) -> int:
    """Weight seed derived from the architecture id (31 bits)."""
    return int(config.arch_id[:8], 16) & 0x7FFFFFFF


@torch.no_grad()
def deterministic_init(model: nn.Module, seed: int) -> nn.Module:
    """Fill every parameter and buffer deterministically and cheaply.

    - weights with >= 2 dims: LeCun-uniform, bound sqrt(3 / fan_in), fan_in =
      elements per output row (activations stay far from fp16 overflow in
      deep residual nets and far from denormals in deep plain nets);
    - embeddings, position embeddings and class tokens (``nn.Embedding`` weights
      and parameters whose name ends in ``_embed`` / ``_token``): normal, std 0.02;
    - biases uniform in [-0.01, 0.01], 1-dim weights (norm scales) in [0.9, 1.1];
    - BatchNorm running mean in [-0.01, 0.01], running var in [0.9, 1.1].

    No two tensors come out equal: the exporter would deduplicate equal
    initializers (e.g. all-zero folded BN biases) into ``Identity`` nodes.

    Any other buffer is an error: builders must not keep data in buffers.
    """
    gen = torch.Generator().manual_seed(seed)
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if id(p) in embeddings or leaf.endswith(("_embed", "_token")):
            p.normal_(0.0, 0.02, generator=gen)
        elif p.dim() >= 2:
            bound = math.sqrt(3.0 / max(1, p[0].numel()))
            p.uniform_(-bound, bound, generator=gen)
        elif leaf == "bias":
            p.uniform_(-0.01, 0.01, generator=gen)
        else:
            p.uniform_(0.9, 1.1, generator=gen)
    for name, b in model.named_buffers():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "running_var":
            b.uniform_(0.9, 1.1, generator=gen)
        elif leaf == "running_mean":
            b.uniform_(-0.01, 0.01, generator=gen)
        elif leaf == "num_batches_tracked":
            b.zero_()
        else:
            raise RuntimeError(f"buffer {name!r} cannot be initialized deterministically")
    return model


def build_model(config: ModelConfig, seed: int | None = None) -> nn.Module:
    """The eval-mode ``torch.nn.Module`` of ``config`` with deterministic weights.

    ``seed`` None -> :func:`arch_seed` of the config.
    """
    fam = get_family(config.family)
    seed = arch_seed(config) if seed is None else seed
    if fam.native_init:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = fam.build(config.params)
        return model.eval()
    with torch.device("meta"):
        model = fam.build(config.params)
    model = model.to_empty(device="cpu")
    deterministic_init(model, seed)
    return model.eval()


def _fix_batch(model: onnx.ModelProto, batch: int) -> None:
    """Replace the ``batch`` dim on graph inputs/outputs by ``batch`` (in place).

    The exporter writes no intermediate ``value_info``; consumers infer
    shapes from the now static inputs.
    """
    for vi in list(model.graph.input) + list(model.graph.output):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.dim_param == BATCH_DIM:
                dim.Clear()
                dim.dim_value = batch
    del model.graph.value_info[:]


#: torch's ONNX exporters: the TorchScript one (every dataset here) and the dynamo one.
EXPORTERS = ("torchscript", "dynamo")


def export_onnx(config: ModelConfig, path: str | os.PathLike, batch: int | None = None,
                structure_only: bool = False, opset: int = 18, seed: int | None = None,
                exporter: str = "torchscript") -> Path:
    """Export ``config`` to ONNX at ``path``; return the path.

    Args:
        config: the architecture (``config.batch`` is the default for ``batch``).
        path: output ``.onnx`` file (parent folders are created).
        batch: fixed batch size; None (and ``config.batch`` None) -> dynamic
            dim ``"batch"`` on every input and output.
        structure_only: keep only shapes: tensors >= 1 KiB are written as
            external data to ``<name>.data`` which is then deleted (initializer
            dims remain; small int tensors such as reshape shapes stay inline).
        opset: ONNX opset version (TorchScript exporter; the dynamo exporter
            writes its own default, as a user calling it plainly gets).
        seed: weight seed (None -> derived from ``arch_id``).
        exporter: ``"torchscript"`` (``dynamo=False`` with constant folding:
            every dataset) or ``"dynamo"`` (``dynamo=True``, torch's default
            since 2.9: what a user exporting today gets; for the checks of
            reports/cpu-amd-epyc-1t/model_kinds.md).

    Models over :data:`LARGE_MODEL_BYTES` of weights are saved with their
    weights in ``<name>.data`` beside ``path`` (onnxruntime finds it there).

    The model's ``metadata_props`` carry ``zoo.config`` (config JSON with
    arch_id), ``zoo.spec`` and ``zoo.arch_id``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = batch if batch is not None else config.batch
    if batch is not None and (isinstance(batch, bool) or int(batch) < 1):
        raise SpecError(f"bad batch {batch!r}: expected a positive integer or None")
    model = build_model(config, seed)
    large = sum(p.numel() * p.element_size() for p in model.parameters()) > LARGE_MODEL_BYTES
    ins = input_specs(config, TRACE_BATCH)
    outs = output_specs(config, TRACE_BATCH)
    args = tuple(torch.from_numpy(a) for a in example_inputs(config, TRACE_BATCH).values())
    kwargs: dict[str, Any] = {"dynamo": False, "opset_version": opset, "do_constant_folding": True,
              "input_names": [t.name for t in ins], "output_names": [t.name for t in outs],
              "dynamic_axes": {t.name: {0: BATCH_DIM} for t in ins + outs}}
    cfg = config.with_batch(None if batch is None else int(batch))
    meta = onnx.ModelProto()
    for key, value in (("zoo.config", cfg.to_json(include_arch_id=True)),
                       ("zoo.spec", to_spec(config)), ("zoo.arch_id", config.arch_id)):
        entry = meta.metadata_props.add()
        entry.key, entry.value = key, value

    if exporter not in EXPORTERS:
        raise SpecError(f"unknown exporter {exporter!r}: expected one of {', '.join(EXPORTERS)}")
    with torch.no_grad(), warnings.catch_warnings(), tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            batch_dim = torch.export.Dim(BATCH_DIM, min=1)
            program = torch.onnx.export(
                model, args, dynamo=True, input_names=kwargs["input_names"],
                output_names=kwargs["output_names"], verbose=False,
                dynamic_shapes=tuple({0: batch_dim} for _ in args))
            del model
            if program is None:  # torch returns None only when writing to a file
                raise SpecError("the dynamo exporter returned no program")
            proto = program.model_proto
        elif large:  # over the 2 GB protobuf limit: let torch write external data, then load it
            torch.onnx.export(model, args, os.path.join(tmp, "model.onnx"), **kwargs)
            del model
            proto = onnx.load(os.path.join(tmp, "model.onnx"))
        else:
            buf = io.BytesIO()
            # the TorchScript exporter (dynamo=False) writes to a file object; torch's hint names paths only
            torch.onnx.export(model, args, buf, **kwargs)  # type: ignore[arg-type]
            del model
            if batch is None and not structure_only:
                # Serialized protobuf messages merge when concatenated: appending the
                # metadata avoids a parse/serialize round trip of the weights.
                path.write_bytes(buf.getbuffer().tobytes() + meta.SerializeToString())
                return path
            proto = onnx.load_from_string(buf.getvalue())
            del buf
    proto.MergeFrom(meta)
    if batch is not None:
        _fix_batch(proto, int(batch))
    data_name = path.name + ".data"
    if structure_only:
        strip_weights(proto, data_name)
        if path.with_name(data_name).exists():
            path.with_name(data_name).unlink()
        onnx.save_model(proto, str(path))
    elif large:
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data_name, size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))
    return path


def strip_weights(proto: onnx.ModelProto, location: str, size_threshold: int = 1024) -> None:
    """Turn every tensor of >= ``size_threshold`` bytes into a dangling external reference.

    The result is what ``onnx.save_model(..., save_as_external_data=True,
    all_tensors_to_one_file=True, location=location, size_threshold=...)``
    writes, followed by deleting the data file -- without writing the data.
    Initializers and ``Constant`` node values are covered; dims, dtype and
    names stay, so shapes remain known. Smaller tensors (reshape shapes) stay inline.
    """
    tensors = list(proto.graph.initializer)
    for node in proto.graph.node:
        tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    offset = 0
    for tensor in tensors:
        if not tensor.HasField("raw_data"):
            if tensor.data_type == onnx.TensorProto.STRING:
                continue
            array = onnx.numpy_helper.to_array(tensor)
            tensor.CopyFrom(onnx.numpy_helper.from_array(array, tensor.name))
        size = len(tensor.raw_data)
        if size < size_threshold:
            continue
        onnx.external_data_helper.set_external_data(tensor, location, offset, size)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        offset += size


def read_zoo_metadata(path: str | os.PathLike) -> dict:
    """The ``zoo.config`` metadata of an exported file, as a dict (empty if absent)."""
    proto = onnx.load(str(path), load_external_data=False)
    for entry in proto.metadata_props:
        if entry.key == "zoo.config":
            return json.loads(entry.value)
    return {}
