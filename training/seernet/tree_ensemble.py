"""The GBM's trees as one ``TreeEnsemble`` (``ai.onnx.ml`` opset 5) per metric.

``TreeEnsembleRegressor`` (``ai.onnx.ml`` opset 3) stores every node, leaves
included, as entries of repeated attributes: a mode string per node
(``"BRANCH_LEQ"``, ``"LEAF"``), tree and node ids, and a second table of
leaf targets. ``TreeEnsemble`` (opset 5) stores the branches only, modes as
one byte each in a uint8 tensor, thresholds and leaf weights as float32
tensors, children as indices with a leaf flag: the blend's trees take 1.5 of
the 3.9 MB they took (110,715 nodes over four metrics).

:func:`to_tree_ensemble` rewrites one regressor node; the two compute the
same (onnxruntime: identical float32 outputs on the shipped blend). Opset 5
has no ``base_values``: an ``Add`` of the base value follows the ensemble.

    mode (uint8): 0 BRANCH_LEQ (x <= split: true branch), 1 BRANCH_LT,
                  2 BRANCH_GTE, 3 BRANCH_GT, 4 BRANCH_EQ, 5 BRANCH_NEQ
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

ML_DOMAIN = "ai.onnx.ml"
#: The ``ai.onnx.ml`` opset of ``TreeEnsemble``: onnxruntime maps it onto its opset-3
#: kernel (added in 2024, microsoft/onnxruntime#22333; releases before 1.25, the oldest
#: this project allows; checked with 1.32).
TREE_ENSEMBLE_OPSET = 5
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
_SUM = 1  # TreeEnsemble aggregate_function: 0 average, 1 sum, 2 min, 3 max


def to_tree_ensemble(node: onnx.NodeProto) -> tuple[list[onnx.NodeProto], onnx.TensorProto]:
    """The ``TreeEnsemble`` node and the ``Add`` of the base value that compute
    what the ``TreeEnsembleRegressor`` ``node`` computes (aggregate ``SUM``,
    no post transform, numeric splits), writing its output; and the base
    value's initializer.

    Raises:
        ValueError: another aggregate, a post transform, a ``BRANCH_MEMBER``
            split, or a tree that is a single leaf (opset 5 roots are branches).
    """
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    if a.get("aggregate_function", b"SUM") != b"SUM" or a.get("post_transform", b"NONE") != b"NONE":
        raise ValueError(f"{node.name}: only aggregate SUM without post transform is converted")
    trees, ids = a["nodes_treeids"], a["nodes_nodeids"]
    modes = [m.decode() for m in a["nodes_modes"]]
    leaf = {(t, n): i for i, (t, n) in enumerate(zip(a["target_treeids"], a["target_nodeids"]))}
    if len(leaf) != len(a["target_treeids"]):
        raise ValueError(f"{node.name}: a leaf with several targets")
    branch: dict[tuple[int, int], int] = {}
    for t, n, m in zip(trees, ids, modes):
        if m != "LEAF":
            if m not in _MODES:
                raise ValueError(f"{node.name}: split mode {m!r} is not converted")
            branch[(t, n)] = len(branch)
    roots: dict[int, int] = {}
    for t, n in zip(trees, ids):
        roots.setdefault(t, n)
    if any((t, n) not in branch for t, n in roots.items()):
        raise ValueError(f"{node.name}: a tree that is a single leaf")
    cols: dict[str, list] = {k: [] for k in ("feat", "split", "mode", "miss", "true", "true_leaf",
                                             "false", "false_leaf")}
    missing = a.get("nodes_missing_value_tracks_true") or [0] * len(trees)
    for i, (t, m) in enumerate(zip(trees, modes)):
        if m == "LEAF":
            continue
        cols["feat"].append(a["nodes_featureids"][i])
        cols["split"].append(a["nodes_values"][i])
        cols["mode"].append(_MODES[m])
        cols["miss"].append(missing[i])
        for side, key in ((a["nodes_truenodeids"][i], "true"), (a["nodes_falsenodeids"][i], "false")):
            to_leaf = (t, side) not in branch
            cols[key].append(leaf[(t, side)] if to_leaf else branch[(t, side)])
            cols[f"{key}_leaf"].append(int(to_leaf))
    out = node.output[0]
    base = numpy_helper.from_array(np.asarray(a.get("base_values") or [0.0], np.float32), f"{out}.base")
    extra: dict[str, Any] = {"nodes_missing_value_tracks_true": cols["miss"]} if any(cols["miss"]) else {}
    ensemble = helper.make_node(
        "TreeEnsemble", list(node.input), [f"{out}.trees"], name=node.name, domain=ML_DOMAIN,
        aggregate_function=_SUM, n_targets=a["n_targets"],
        tree_roots=[branch[(t, n)] for t, n in sorted(roots.items())],
        nodes_featureids=cols["feat"],
        nodes_splits=numpy_helper.from_array(np.asarray(cols["split"], np.float32)),
        nodes_modes=numpy_helper.from_array(np.asarray(cols["mode"], np.uint8)),
        nodes_truenodeids=cols["true"], nodes_trueleafs=cols["true_leaf"],
        nodes_falsenodeids=cols["false"], nodes_falseleafs=cols["false_leaf"],
        leaf_targetids=list(a["target_ids"]),
        leaf_weights=numpy_helper.from_array(np.asarray(a["target_weights"], np.float32)), **extra)
    add = helper.make_node("Add", [f"{out}.trees", base.name], [out], name=f"{node.name}.base")
    return [ensemble, add], base


def convert_model(model: onnx.ModelProto) -> int:
    """Rewrite every ``TreeEnsembleRegressor`` of ``model`` (in place) as
    :func:`to_tree_ensemble` and import ``ai.onnx.ml`` opset 5. Returns how
    many nodes were rewritten."""
    graph, nodes, done = model.graph, [], 0
    for node in graph.node:
        if node.op_type == "TreeEnsembleRegressor" and node.domain == ML_DOMAIN:
            new, base = to_tree_ensemble(node)
            nodes += new
            graph.initializer.append(base)
            done += 1
        else:
            nodes.append(node)
    if done:
        del graph.node[:]
        graph.node.extend(nodes)
        for op in model.opset_import:
            if op.domain == ML_DOMAIN:
                op.version = TREE_ENSEMBLE_OPSET
    return done
