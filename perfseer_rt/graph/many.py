"""Many models in one call: :func:`extract_many` (and its iterator form),
each model at all of its batch sizes in one pass (:func:`extract_batches`),
optionally in worker processes and without stopping at a model that fails.

A folder of thousands of candidate architectures (a NAS search space, a model
zoo) is the use: one corrupt file should not end the run, and a machine with
several cores should extract on all of them. Worker processes are started
with ``spawn`` (a forked onnxruntime is not safe) and each keeps its own
per-signature caches; results come back in the models' order, equal graph for
graph to the same extraction in one process (tests/test_extract_many.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial

from perfseer_rt.errors import LimitError, PerfSeerError
from perfseer_rt.graph.extract import extract_batches
from perfseer_rt.graph.limits import MAX_NODES, TIME_LIMIT_S
from perfseer_rt.graph.load import ModelSource
from perfseer_rt.graph.perfgraph import PerfGraph

#: One model's outcome: its graphs (one per batch size), or the error it raised.
Outcome = list[PerfGraph] | PerfSeerError
#: Models a worker takes at a time (fewer when there are few models per worker).
CHUNK = 16


def _one(model: ModelSource, batches: Sequence[int | None], input_shapes: dict[str, tuple[int, ...]] | None,
         dims: dict[str, int] | None, max_nodes: int, time_limit: float | None) -> Outcome:
    try:
        return extract_batches(model, batches, input_shapes, dims, max_nodes=max_nodes,
                               time_limit=time_limit)
    except PerfSeerError as exc:
        return exc


def iter_extract_many(models: Sequence[ModelSource], batches: Sequence[int | None] = (None,),
                      input_shapes: dict[str, tuple[int, ...]] | None = None,
                      dims: dict[str, int] | None = None, *, workers: int = 1,
                      max_nodes: int = MAX_NODES, time_limit: float | None = TIME_LIMIT_S
                      ) -> Iterator[Outcome]:
    """Each model's outcome, in the models' order, as it is ready: its
    PerfGraphs at ``batches`` (as :func:`extract_batches` gives them) or the
    :class:`PerfSeerError` that model raised (the others go on).

    Args:
        models: paths, bytes or ModelProtos (as :func:`extract` takes).
        batches, input_shapes, dims, max_nodes, time_limit: as for
            :func:`extract_batches`, the same for every model.
        workers: processes to extract in (1: this process); each starts a
            Python that imports perfseer-rt (~0.3 s), so they pay off on many
            models, not on a few.

    Raises:
        ValueError: ``workers`` below 1.
        LimitError: a worker process died (a crash inside a C++ library);
            the outcomes before it have been yielded.
    """
    if workers < 1:
        raise ValueError(f"workers={workers}: expected 1 or more")
    work = partial(_one, batches=list(batches), input_shapes=input_shapes, dims=dims,
                   max_nodes=max_nodes, time_limit=time_limit)
    if workers == 1 or len(models) <= 1:
        yield from map(work, models)
        return
    # lazy: only a run with workers pays for importing multiprocessing (4 ms of every
    # `perfseer-rt` start otherwise)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    chunk = max(1, min(CHUNK, len(models) // (4 * workers)))
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield from pool.map(work, models, chunksize=chunk)
    except BrokenProcessPool:
        raise LimitError("an extraction worker process died (a crash inside a library it "
                         "calls); run the models with workers=1 to find the one") from None
    finally:  # a caller that stops early (the first error) does not wait for the rest
        pool.shutdown(wait=True, cancel_futures=True)


def extract_many(models: Sequence[ModelSource], batches: Sequence[int | None] = (None,),
                 input_shapes: dict[str, tuple[int, ...]] | None = None,
                 dims: dict[str, int] | None = None, *, workers: int = 1, return_errors: bool = False,
                 max_nodes: int = MAX_NODES, time_limit: float | None = TIME_LIMIT_S) -> list[Outcome]:
    """The PerfGraphs of many models, one list per model (one graph per batch
    size), in the models' order (:func:`iter_extract_many`).

    With ``return_errors`` a model that fails has its :class:`PerfSeerError`
    in its place and the others are extracted; without, the first failure in
    the models' order is raised, as a loop of :func:`extract_batches` would.
    """
    outcomes: list[Outcome] = []
    for outcome in iter_extract_many(models, batches, input_shapes, dims, workers=workers,
                                     max_nodes=max_nodes, time_limit=time_limit):
        if isinstance(outcome, PerfSeerError) and not return_errors:
            raise outcome
        outcomes.append(outcome)
    return outcomes
