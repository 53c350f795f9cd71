"""SeerNet blended with the global-features GBM, chosen per metric on validation.

The blend is geometric: ``y = exp(w * log(y_seernet) + (1 - w) * log(y_gbm))``
with one weight ``w`` per metric, picked from :data:`WEIGHTS` by validation
MAPE (``w = 1`` is SeerNet alone). It ships as one ONNX file with the
SeerNet contract (same inputs, output ``y [G, M]`` in metric units): the
exported SeerNet graph, the GBM's trees as ``ai.onnx.ml.TreeEnsemble`` (opset 5,
:mod:`training.seernet.tree_ensemble`) nodes on the raw global features ``u`` (the GBM is fitted on them: trees
need no normalization) plus its scale offsets (:meth:`GlobalGBM.offset`),
and the blend. The runtime runs it like any SeerNet (``perfseer_rt/predict/api.py``).
A second output, :data:`GAP_OUTPUT` ``[G, M]``, is ``log(y_seernet) -
log(y_gbm)``: how far apart the two models are, the disagreement signal of
:mod:`perfseer_rt.predict.uncertainty` (:func:`gap` computes it from the
two models' predictions in training).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from training.seernet.baselines.gbm import GlobalGBM
from training.seernet.evaluate import score
from training.seernet.normalization import Normalization
from training.seernet.tree_ensemble import TREE_ENSEMBLE_OPSET, to_tree_ensemble

#: Candidate SeerNet weights (the GBM gets ``1 - w``).
WEIGHTS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
#: ONNX domain and version of the tree operator.
ML_DOMAIN, ML_OPSET = "ai.onnx.ml", TREE_ENSEMBLE_OPSET
#: Name of the blend's second output: log(SeerNet) - log(GBM) per metric.
GAP_OUTPUT = "gap"

__all__ = ["GAP_OUTPUT", "WEIGHTS", "blend", "choose_weights", "export_blend", "float32_threshold", "gap",
           "tree_nodes"]


def blend(seer: np.ndarray, gbm: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """Geometric blend ``[G, M]`` of two predictions in metric units, one
    SeerNet weight per metric column."""
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.exp(w * np.log(seer) + (1.0 - w) * np.log(gbm))


def gap(seer: np.ndarray, gbm: np.ndarray) -> np.ndarray:
    """``log(seer) - log(gbm)`` elementwise (the exported :data:`GAP_OUTPUT`)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.log(np.asarray(seer, np.float64)) - np.log(np.asarray(gbm, np.float64))
    return out


def choose_weights(seer: np.ndarray, gbm: np.ndarray, true: np.ndarray,
                   grid: Sequence[float] = WEIGHTS) -> list[float]:
    """Per metric, the SeerNet weight from ``grid`` with the lowest MAPE of
    the blend against ``true`` (validation data); ties go to SeerNet."""
    chosen = []
    for j in range(true.shape[1]):
        best, best_w = np.inf, 1.0
        for w in sorted(grid, reverse=True):
            mape = score(blend(seer[:, [j]], gbm[:, [j]], [w])[:, 0], true[:, j])["mape"]
            if mape is not None and mape < best - 1e-9:
                best, best_w = mape, float(w)
        chosen.append(best_w)
    return chosen


def float32_threshold(t: float) -> float:
    """The largest float32 at or below ``t``: for float32 ``x``,
    ``x <= result`` exactly when ``x <= t`` (the trees' float64 thresholds
    become float32 attributes without changing any decision)."""
    f = np.float32(t)
    if np.isfinite(f) and float(f) > t:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)


def tree_nodes(gbm: GlobalGBM, u_name: str, prefix: str) -> tuple[list, list[str], list]:
    """``TreeEnsemble`` nodes (``ai.onnx.ml`` opset 5, :mod:`training.seernet.tree_ensemble`),
    one per metric of ``gbm`` (fitted on the raw float32 global features),
    reading ``u_name`` and writing ``[G, 1]`` standardized log predictions;
    returns ``(nodes, output names, initializers)``."""
    nodes, outs, inits = [], [], []
    for m, model in enumerate(gbm.models):
        attrs: dict[str, Any] = {k: [] for k in (
            "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
            "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true",
            "target_treeids", "target_nodeids", "target_ids", "target_weights")}
        for tree_id, pred in enumerate(p for ps in model._predictors for p in ps):
            for node_id, n in enumerate(pred.nodes):
                attrs["nodes_treeids"].append(tree_id)
                attrs["nodes_nodeids"].append(node_id)
                if n["is_leaf"]:
                    for k, v in (("nodes_featureids", 0), ("nodes_values", 0.0), ("nodes_modes", "LEAF"),
                                 ("nodes_truenodeids", 0), ("nodes_falsenodeids", 0),
                                 ("nodes_missing_value_tracks_true", 0)):
                        attrs[k].append(v)
                    for k, v in (("target_treeids", tree_id), ("target_nodeids", node_id), ("target_ids", 0),
                                 ("target_weights", float(n["value"]))):
                        attrs[k].append(v)
                    continue
                if n["is_categorical"]:
                    raise ValueError("categorical splits are not exported")
                f = int(n["feature_idx"])
                attrs["nodes_featureids"].append(f)
                attrs["nodes_values"].append(float32_threshold(float(n["num_threshold"])))
                attrs["nodes_modes"].append("BRANCH_LEQ")
                attrs["nodes_truenodeids"].append(int(n["left"]))
                attrs["nodes_falsenodeids"].append(int(n["right"]))
                attrs["nodes_missing_value_tracks_true"].append(int(n["missing_go_to_left"]))
        out = f"{prefix}z{m}"
        ensemble, base = to_tree_ensemble(helper.make_node(
            "TreeEnsembleRegressor", [u_name], [out], name=f"{prefix}trees{m}", domain=ML_DOMAIN,
            n_targets=1, aggregate_function="SUM",
            base_values=[float(np.ravel(model._baseline_prediction)[0])], **attrs))
        nodes += ensemble
        inits.append(base)
        outs.append(out)
    return nodes, outs, inits


def export_blend(seernet_path: str | os.PathLike, gbm: GlobalGBM, norm: Normalization,
                 metrics: Sequence[str], weights: Sequence[float], path: str | os.PathLike) -> Path:
    """Write the blended predictor: ``seernet_path`` (an exported SeerNet with
    output ``y`` in ``metrics`` order), the GBM's trees and the blend, to
    ``path``. ``gbm`` must predict ``metrics`` in the same order."""
    model = onnx.load(str(seernet_path))
    graph = model.graph
    if [o.name for o in graph.output] != ["y"] or len(gbm.models) != len(metrics):
        raise ValueError("export_blend needs a one-output SeerNet and one GBM model per metric")
    p = "blend_"
    for node in graph.node:
        node.output[:] = [f"{p}seernet_y" if o == "y" else o for o in node.output]
    trees, z, tree_consts = tree_nodes(gbm, "u", p)
    graph.initializer.extend(tree_consts)
    consts = {f"{p}y_mean": [norm.target_mean[m] for m in metrics],
              f"{p}y_std": [norm.target_std[m] for m in metrics],
              f"{p}w": list(weights), f"{p}one_minus_w": [1.0 - w for w in weights]}
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items())
    offset = gbm.offset_scale if gbm.offset_scale is not None else [0.0] * len(metrics)
    cols, sel, floors = gbm.scale_matrix(len(metrics))
    offsets: dict[str, np.ndarray] = {
        f"{p}scale_cols": cols, f"{p}scale_sel": sel.astype(np.float32),
        f"{p}scale_floor": floors.astype(np.float32), f"{p}offset_scale": np.asarray(offset, np.float32)}
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in offsets.items())
    graph.node.extend(trees + [
        helper.make_node("Concat", z, [f"{p}trees_z"], axis=1),
        # each metric's scale offset (GlobalGBM.offset): trees + s * log(u[:, cols] @ sel + floor)
        helper.make_node("Gather", ["u", f"{p}scale_cols"], [f"{p}scale_u"], axis=1),
        helper.make_node("Relu", [f"{p}scale_u"], [f"{p}scale_pos"]),
        helper.make_node("MatMul", [f"{p}scale_pos", f"{p}scale_sel"], [f"{p}scale_sum"]),
        helper.make_node("Add", [f"{p}scale_sum", f"{p}scale_floor"], [f"{p}scale"]),
        helper.make_node("Log", [f"{p}scale"], [f"{p}log_scale"]),
        helper.make_node("Mul", [f"{p}log_scale", f"{p}offset_scale"], [f"{p}offset"]),
        helper.make_node("Add", [f"{p}trees_z", f"{p}offset"], [f"{p}gbm_z"]),
        helper.make_node("Mul", [f"{p}gbm_z", f"{p}y_std"], [f"{p}gbm_zs"]),
        helper.make_node("Add", [f"{p}gbm_zs", f"{p}y_mean"], [f"{p}gbm_log"]),
        helper.make_node("Log", [f"{p}seernet_y"], [f"{p}seernet_log"]),
        helper.make_node("Mul", [f"{p}seernet_log", f"{p}w"], [f"{p}a"]),
        helper.make_node("Mul", [f"{p}gbm_log", f"{p}one_minus_w"], [f"{p}b"]),
        helper.make_node("Add", [f"{p}a", f"{p}b"], [f"{p}log"]),
        helper.make_node("Exp", [f"{p}log"], ["y"]),
        helper.make_node("Sub", [f"{p}seernet_log", f"{p}gbm_log"], [GAP_OUTPUT]),
    ])
    y_type = graph.output[0].type
    gap_out = graph.output.add()
    gap_out.name = GAP_OUTPUT
    gap_out.type.CopyFrom(y_type)
    if not any(o.domain == ML_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(ML_DOMAIN, ML_OPSET))
    onnx.checker.check_model(model)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)
    return path
