"""Facts about a model that are not features (``PerfGraph.info``: weights
shared or sliced, weight inputs, the compute dtype, narrow weights) and the
warnings extraction attaches to a PerfGraph.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Any

from perfseer_rt.graph import dtypes
from perfseer_rt.graph.nodes import Row

Shape = tuple[int, ...]

#: A shared weight tensor at least this many elements earns a warning
#: (exporters share small scalar constants between layers all the time).
SHARED_WARN_ELEMS = 1024
#: Share of the weight bytes stored narrow (int8/uint8/int4, float16, float8...) in a
#: model that computes in float32 from which the narrow storage is flagged.
QUANT_WEIGHT_WARN_SHARE = 0.1


def model_info(weights: dict[str, Shape], weight_uses: dict[str, int],
                weight_sizes: dict[str, tuple[int, float, int]], flops_by_dtype: dict[int, float],
                rows: list[Row] | None = None, roots: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    """Facts about the model that are not features (``PerfGraph.info``) and
    the warnings they raise: shared weights (tied, or read in slices by
    Gather nodes only: an MoE layer's expert bank; ``rows`` and ``roots``, the
    kept nodes and weight aliases, tell them apart), weight inputs, the
    compute dtype (the element type of the inputs of the nodes that do most
    FLOPs) and, in a float32 model, the share of weight bytes stored
    quantized."""
    shared = {t: n for t, n in weight_uses.items() if n > 1}
    shared_bytes = float(sum(weight_sizes[t][1] for t in shared))
    per_use = float(sum(weight_sizes[t][1] * n for t, n in weight_uses.items()))
    by_dtype: dict[str, float] = {}
    for _, nbytes, elem in weight_sizes.values():
        key = dtypes.dtype_name(elem)
        by_dtype[key] = by_dtype.get(key, 0) + nbytes
    flops: dict[str, float] = {}
    for elem, f in flops_by_dtype.items():
        key = dtypes.dtype_name(elem)
        flops[key] = flops.get(key, 0) + f
    # the first of the largest, as Counter.most_common(1) picks it
    dtype = max(flops.items(), key=itemgetter(1))[0] if flops and max(flops.values()) > 0 else (
        max(by_dtype.items(), key=itemgetter(1))[0] if by_dtype else "float32")
    meta = {"dtype": dtype, "weight_bytes_by_dtype": dict(by_dtype),
            "flops_by_dtype": dict(flops),
            "params_unique": float(sum(e for e, _, _ in weight_sizes.values())),
            "weight_bytes_unique": float(sum(b for _, b, _ in weight_sizes.values())),
            "weight_bytes_per_use": per_use,
            "shared_weights": len(shared), "shared_weight_bytes": shared_bytes,
            "weight_inputs": sorted(weights)}
    warnings: list[str] = []
    big = [t for t in shared if weight_sizes[t][0] >= SHARED_WARN_ELEMS]
    sliced = _gathered_only(rows or [], set(big), roots or {})
    for group, what in (([t for t in big if t not in sliced], "shared by several nodes ({uses} "
                         "uses; tied weights)"),
                        ([t for t in big if t in sliced], "read in slices by several Gather "
                         "nodes ({uses} uses: an expert bank or a lookup table)")):
        if group:
            mb = sum(weight_sizes[t][1] for t in group) / 2**20
            uses = sum(shared[t] for t in group)
            warnings.append(f"{len(group)} weight tensor(s) ({mb:.2f} MiB) are "
                            + what.format(uses=uses) + ", counted once in params/weights")
    if weights:
        shown = ", ".join(sorted(weights)[:4]) + (" ..." if len(weights) > 4 else "")
        warnings.append(f"{len(weights)} graph input(s) with fixed shapes are used as "
                        f"weights and costed as weights: {shown}")
    if dtype != "float32":
        warnings.append(f"the model computes mostly in {dtype}; perfseer-rt's shipped "
                        "predictors were trained on float32 models only")
    else:
        narrow = {k: v for k, v in by_dtype.items() if k in dtypes.NARROW_WEIGHT_NAMES}
        total = sum(by_dtype.values())  # 0 where every weight is empty (a 0-length dim)
        share = sum(narrow.values()) / total if narrow and total else 0.0
        if share >= QUANT_WEIGHT_WARN_SHARE:
            what = ("quantized weights, dequantized" if narrow.keys() <= dtypes.QUANT_NAMES
                    else "narrow weights, converted")
            warnings.append(f"{share:.0%} of the weight bytes are stored as "
                            f"{'/'.join(sorted(narrow))} ({what} as the "
                            "model runs in float32); perfseer-rt's shipped predictors were "
                            "trained on float32 weights only")
    return meta, warnings


#: The warning on a model written by torch's dynamo exporter (README, "Exporters").
DYNAMO_WARNING = ("exported by torch's dynamo exporter (dynamo=True, torch's default since 2.9); "
                  "perfseer-rt's CPU predictors were trained on TorchScript exports (dynamo=False): "
                  "on timm models measured both ways, latency predictions held, but dynamo exports of "
                  "attention models (Swin, PVT, ViT) used up to 2.7x the memory of their TorchScript "
                  "exports and memory was predicted up to 71 % low (README, \"Exporters\"); export "
                  "with dynamo=False for memory predictions within their intervals")
#: The warning on a model whose input shapes are all fixed in the file (README, "Exporters").
FIXED_SHAPES_WARNING = ("the model's input shapes are fixed in the file (no dynamic axis); "
                        "perfseer-rt's CPU predictors were trained on exports with a dynamic batch "
                        "axis, and onnxruntime plans memory differently when every shape is known: at "
                        "batch 16 a Swin-T used 2.7x, a ViT-S/16 2.0x and a ConvNeXt-T 1.3x the "
                        "memory of its dynamic-batch export (README, \"Exporters\"); export with a "
                        "dynamic batch axis for memory predictions within their intervals")
#: Share of weight bytes in external data files above which a prediction warns.
EXTERNAL_WEIGHTS_WARN_SHARE = 0.5
#: The warning on a model whose weights are mostly external data (README, "External weights").
EXTERNAL_WEIGHTS_WARNING = (
    "{share:.0%} of the weight bytes are stored as external data beside the model: onnxruntime "
    "holds no copy of them while it creates the session, so that phase is predicted without one "
    "(README, \"External weights\"); pages it never reads (unused embedding rows) stay out of "
    "memory too, which the prediction does not see: on onnxruntime-genai LLaMA-style models "
    "memory was still over-predicted by up to 52 % at int4 (a float embedding table mostly "
    "unread) and within 8 % at fp32; perfseer-rt's CPU predictors were trained almost only on "
    "weights inline")
#: The note when optional outputs nothing reads had no shape (:func:`_unread_outputs`).
UNREAD_OUTPUT_WARNING = (
    "{n} optional output(s) that no node reads have no shape that onnx's inference or "
    "perfseer-rt's rules give ({names}): they are left out of their nodes' features "
    "(onnxruntime may still compute them)")
#: The warning when outputs of ops without a shape rule were guessed.
GUESSED_SHAPE_WARNING = (
    "the output shapes of {nodes} node(s) of ops without a shape rule ({ops}) were assumed equal "
    "to their first input's; where such an op changes the shape, the sizes after it are off")
#: The extraction warnings about the CPU predictors' training exports (they
#: do not concern predictors of other kinds; see :func:`general_warnings`).
CPU_PREDICTOR_WARNINGS = (DYNAMO_WARNING, FIXED_SHAPES_WARNING, EXTERNAL_WEIGHTS_WARNING)


def general_warnings(warnings: Iterable[str]) -> list[str]:
    """A PerfGraph's warnings less those of :data:`CPU_PREDICTOR_WARNINGS`
    (what a predictor that was not trained on CPU exports passes on)."""
    fixed = {w for w in CPU_PREDICTOR_WARNINGS if "{" not in w}
    tails = [w.split("}", 1)[1] for w in CPU_PREDICTOR_WARNINGS if "{" in w]
    return [w for w in warnings if w not in fixed and not any(w.endswith(t) for t in tails)]




def _gathered_only(rows: list[Row], names: set[str], roots: dict[str, str]) -> set[str]:
    """The weights among ``names`` that only Gather nodes read (as their
    data input), aliases resolved by ``roots``."""
    if not names:
        return set()
    readers: dict[str, set[str]] = {}
    for row in rows:
        for pos, t in enumerate(row[3]):
            root = roots.get(t, t)
            if root in names:
                readers.setdefault(root, set()).add(row[0] if pos == 0 else "")
    return {t for t, ops in readers.items() if ops == {"Gather"}}


def op_counts(nodes: dict[str, str]) -> dict[str, int]:
    """op -> number of nodes, from first output -> op."""
    counts: dict[str, int] = {}
    for op in nodes.values():
        counts[op] = counts.get(op, 0) + 1
    return counts
