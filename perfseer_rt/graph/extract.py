"""ONNX model -> :class:`PerfGraph` (paper 001, section 3.1).

The pipeline, one module a step: load (no external data,
:mod:`~perfseer_rt.graph.load`) -> prepare (:mod:`~perfseer_rt.graph.prepared`:
inline functions, sort, validate with :mod:`~perfseer_rt.graph.validate`,
find weight inputs, fold constants and shape subgraphs) -> resolve input
shapes (batch, named dims, explicit shapes) -> every tensor's shape
(:mod:`~perfseer_rt.graph.completion`) -> per-node costs
(:mod:`~perfseer_rt.graph.ops`; control flow through its subgraphs,
:mod:`~perfseer_rt.graph.control_flow`) -> node, edge and global feature
arrays (:mod:`~perfseer_rt.graph.features`) in the layout of
:mod:`~perfseer_rt.graph.layout`, with the model's info and warnings
(:mod:`~perfseer_rt.graph.model_info`). :mod:`~perfseer_rt.graph.shaped`
runs the steps after preparation for one set of input shapes.

Speed: a node's features depend only on its signature (op, attributes,
input and output types, which inputs are constant), and so do most shape
rules; both are computed once per signature and kept, bounded, between
calls (:func:`clear_caches` empties them; they never change a result).

Failure contract: :func:`extract` raises only
:class:`~perfseer_rt.errors.PerfSeerError` subclasses, within its node cap and
CPU-time limit, and writes no file.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

import onnx

from perfseer_rt.errors import GraphError, LimitError, PerfSeerError
from perfseer_rt.graph.control_flow import DOMINANT_IF_WARNING, Chosen
from perfseer_rt.graph.features import clear_feature_cache
from perfseer_rt.graph.inline import inline_branches
from perfseer_rt.graph.inputs import check_shape_options
from perfseer_rt.graph.limits import MAX_NODES, TIME_LIMIT_S, Deadline
from perfseer_rt.graph.load import ModelSource, load_model
from perfseer_rt.graph.model_info import (
    CPU_PREDICTOR_WARNINGS,
    DYNAMO_WARNING,
    EXTERNAL_WEIGHTS_WARNING,
    FIXED_SHAPES_WARNING,
    general_warnings,
)
from perfseer_rt.graph.perfgraph import PerfGraph
from perfseer_rt.graph.prepared import PreparedModel
from perfseer_rt.graph.propagate import clear_rule_cache
from perfseer_rt.graph.shaped import clear_subgraph_cache, extract_shaped
from perfseer_rt.graph.subgraphs import MAX_SUBGRAPH_DEPTH, clear_constants
from perfseer_rt.graph.switches import fix_switches

__all__ = ["CPU_PREDICTOR_WARNINGS", "DOMINANT_IF_SHARE", "DYNAMO_WARNING", "EXTERNAL_WEIGHTS_WARNING",
           "FIXED_SHAPES_WARNING", "clear_caches", "extract", "extract_batches", "general_warnings",
           "resolve_input_shapes"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
Shape = tuple[int, ...]


def clear_caches() -> None:
    """Empty the caches of results computed per node signature (features,
    :mod:`perfseer_rt.graph.features`; shape rules and folded values,
    :mod:`perfseer_rt.graph.propagate`; subgraph FLOPs,
    :mod:`perfseer_rt.graph.shaped`), as in a fresh process. They change
    speed only, never a result; benchmarks clear them to time an extraction
    from cold."""
    clear_feature_cache()
    clear_rule_cache()
    clear_subgraph_cache()


def extract(model: ModelSource, batch: int | None = None,
            input_shapes: dict[str, tuple[int, ...]] | None = None,
            dims: dict[str, int] | None = None, *, max_nodes: int = MAX_NODES,
            time_limit: float | None = TIME_LIMIT_S) -> PerfGraph:
    """Extract the PerfGraph of an ONNX model.

    Args:
        model: a path, the file's bytes, or an ``onnx.ModelProto``. External
            weight data is never read, so structure-only models work.
        batch: batch size in ``1..65536``; fills a dynamic first dim of every
            input (default 1) and is checked against static first dims.
        input_shapes: explicit static shapes by input name.
        dims: values of symbolic dims by name (``{"seq": 128, "past": 0}``
            sets every input dim so named); 0 is allowed here (empty caches).
            A dim named by an expression of named dims takes its value
            (:mod:`perfseer_rt.graph.dim_expressions`), and an input that
            switches the model's path (a merged decoder's
            ``use_cache_branch: bool[1]``) named here takes the value
            (:mod:`perfseer_rt.graph.switches`).
        max_nodes: node cap (main graph and subgraphs together).
        time_limit: CPU seconds before :class:`LimitError` (None: no limit).

    Raises:
        ModelLoadError: missing, non-ONNX or truncated model.
        ShapeError: dynamic dims that cannot be resolved (all listed), bad
            batch/dim values, or tensors whose shape cannot be inferred.
        GraphError: unknown element types, names that are not UTF-8,
            attributes out of range, implausibly large tensors.
        LimitError: more than ``max_nodes`` nodes, or over ``time_limit``.
    """
    check_shape_options(input_shapes, dims)
    return _guarded(model, lambda proto, name: _extract(
        proto, name, batch, input_shapes, dims, max_nodes, Deadline(time_limit, name)))


def _guarded(model: ModelSource, work: Callable[[onnx.ModelProto, str], _T]) -> _T:
    """Load ``model`` and run ``work(proto, name)`` under the failure
    contract: only PerfSeerError subclasses leave."""
    name = "<model>"
    # Extraction allocates millions of small acyclic objects on large graphs;
    # Python's cyclic collector then spends a fifth of the time scanning
    # them (100k-node chain: 2.3 -> 1.85 CPU-s without it). It is paused for
    # the call and restored as it was.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        proto, name = load_model(model)
        return work(proto, name)
    except PerfSeerError:
        raise
    except UnicodeDecodeError:
        raise GraphError(f"{name}: a node, tensor or attribute name is not valid UTF-8"
                         ) from None
    except (RecursionError, MemoryError) as exc:
        raise LimitError(f"{name}: the model is too large or too deeply nested to extract "
                         f"({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001 - the API contract: typed errors only
        log.debug("internal extraction error", exc_info=True)
        err = GraphError(f"{name}: cannot be extracted ({type(exc).__name__}: {exc}); "
                         "please report this model")
        err.internal = True
        raise err from exc
    finally:
        clear_constants()
        if gc_was_on:
            gc.enable()


def extract_batches(model: ModelSource, batches: Iterable[int | None],
                    input_shapes: dict[str, tuple[int, ...]] | None = None,
                    dims: dict[str, int] | None = None, *, max_nodes: int = MAX_NODES,
                    time_limit: float | None = TIME_LIMIT_S) -> list[PerfGraph]:
    """The PerfGraphs of one model at several batch sizes, in one pass.

    Equal, graph for graph, to ``[extract(model, b, input_shapes, dims) for b
    in batches]``, but the batch-independent work (loading, validation,
    weight-input detection, constant folding, the shape-inference skeleton)
    is done once; only shape inference and the features run per batch.

    Args:
        model, input_shapes, dims, max_nodes: as for :func:`extract`.
        batches: batch sizes (each as ``extract``'s ``batch``; None allowed).
        time_limit: CPU seconds per batch size.

    Raises:
        The errors of :func:`extract`, for the first batch size that fails.
    """
    sizes = list(batches)
    check_shape_options(input_shapes, dims)

    def work(proto: onnx.ModelProto, name: str) -> list[PerfGraph]:
        st = PreparedModel(fix_switches(proto, dims), name, max_nodes)
        return [_extract_top(st, b, input_shapes, dims, Deadline(time_limit, name),
                             reuse_skeleton=True) for b in sizes]

    return _guarded(model, work)


def resolve_input_shapes(model: ModelSource, batch: int | None = None,
                         input_shapes: dict[str, tuple[int, ...]] | None = None,
                         dims: dict[str, int] | None = None, *, max_nodes: int = MAX_NODES,
                         time_limit: float | None = TIME_LIMIT_S) -> dict[str, tuple[int, ...]]:
    """Every graph input's shape as :func:`extract` resolves it (explicit
    shapes, named dims, the batch, and the dims the model implies:
    :mod:`perfseer_rt.graph.implied`), without extracting; for running the
    model at the shapes a prediction was made for. Arguments and errors as
    for :func:`extract` (no shape-inference errors)."""
    check_shape_options(input_shapes, dims)
    return _guarded(model, lambda proto, name: PreparedModel(proto, name, max_nodes).resolve(
        batch, input_shapes, dims, Deadline(time_limit, name))[0])


def _extract(proto: onnx.ModelProto, name: str, batch: int | None,
             input_shapes: dict[str, Shape] | None, dims: dict[str, int] | None, max_nodes: int,
             deadline: Deadline) -> PerfGraph:
    return _extract_top(PreparedModel(fix_switches(proto, dims), name, max_nodes), batch,
                        input_shapes, dims, deadline)


#: Share of a model's FLOPs above which a top-level If is extracted as its
#: heavier branch (:func:`_extract_top`).
DOMINANT_IF_SHARE = 0.5


def _extract_top(st: PreparedModel, batch: int | None, input_shapes: dict[str, Shape] | None,
                 dims: dict[str, int] | None, deadline: Deadline,
                 reuse_skeleton: bool = False) -> PerfGraph:
    """The PerfGraph of a model; an If that does most of its work (as
    optimum's merged decoders switch between their with- and without-cache
    decoders, each a whole model in a branch) is replaced by its heavier
    branch's nodes and the model extracted again, so that the predictors
    see those nodes and their weights, not one node of summed FLOPs."""
    notes: list[str] = []
    chosen: Chosen = {}
    graph = extract_shaped(st, batch, input_shapes, dims, deadline,
                            reuse_skeleton=reuse_skeleton, chosen=chosen)
    for _ in range(MAX_SUBGRAPH_DEPTH):
        total = float(graph.globals["flops_total"])
        picks = {o: branch for o, (branch, flops, *_) in chosen.items()
                 if total > 0 and flops / total >= DOMINANT_IF_SHARE}
        if not picks:
            break
        try:  # where the branch cannot stand in the graph, the If stays whole
            st = PreparedModel(inline_branches(st.proto, picks), st.name, st.max_nodes)
            inlined: Chosen = {}
            again = extract_shaped(st, batch, input_shapes, dims, deadline, chosen=inlined)
        except LimitError:
            raise
        except PerfSeerError:
            break
        notes += [DOMINANT_IF_WARNING.format(label=label, share=flops / total, branch=branch,
                                             why=why, hint=hint)
                  for o, (branch, flops, label, why, hint) in chosen.items() if o in picks]
        graph, chosen = again, inlined
    graph.warnings[:0] = notes
    return graph
