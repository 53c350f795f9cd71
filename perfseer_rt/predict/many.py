"""Many models at many batch sizes: the shared front of ``perfseer-rt predict``
and ``POST /predict`` (parsing a batch list, expanding folders, one batched
prediction over every (model, batch) graph)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from perfseer_rt.errors import DomainError, ModelLoadError, PerfSeerError
from perfseer_rt.graph.many import iter_extract_many
from perfseer_rt.predict.api import predict
from perfseer_rt.predict.train_mode import predictor_for

#: More (model, batch) jobs than this show a progress bar on stderr.
PROGRESS_MIN_JOBS = 8


def expand_models(paths: Sequence[str]) -> list[str]:
    """Files as given; a folder becomes its ``*.onnx`` entries that are not
    folders (recursively, sorted): a pipe or a broken link there is kept, to
    be refused by name when it is loaded, not skipped in silence."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(f) for f in Path(p).rglob("*.onnx") if not f.is_dir())
            if not found:
                raise ModelLoadError(f"folder {p!r} holds no .onnx files")
            out.extend(found)
        else:
            out.append(p)
    return out


def parse_batches(text: str | None) -> list[int | None]:
    """``"1,8,32"`` -> ``[1, 8, 32]``; None -> ``[None]`` (the model's own batch)."""
    if text is None:
        return [None]
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
        if not values or any(v < 1 for v in values):
            raise ValueError
    except ValueError:
        raise PerfSeerError(f"--batch {text!r}: expected positive integers separated by "
                            "commas, e.g. --batch 1,8,32") from None
    return list(dict.fromkeys(values))


def _progress_bar(total: int) -> Any:
    """A tqdm bar of ``total`` graphs on stderr."""
    # lazy: tqdm (and the multiprocessing lock its first bar creates, ~30 ms) only when a bar is shown
    from tqdm import tqdm

    return tqdm(total=total, desc="extract", unit="graph", file=sys.stderr)


def predict_many(models: list[str], batches: list[int | None], *, device: str | None = None,
                 metrics: Sequence[str] | None = None,
                 input_shapes: dict[str, tuple[int, ...]] | None = None,
                 model_name: str | None = None, precision: str | None = None,
                 dims: dict[str, int] | None = None,
                 progress: bool | None = None, mode: str = "inference", workers: int = 1,
                 on_error: Callable[[str, PerfSeerError], None] | None = None,
                 extrapolate: bool = False, **gpu_options: Any) -> list[dict[str, Any]]:
    """Predict every model at every batch size: extraction per model (all its
    batch sizes in one pass, :func:`~perfseer_rt.graph.iter_extract_many`, in
    ``workers`` processes) with a progress bar on stderr when there are many,
    then one batched prediction (``mode``: ``"inference"`` or ``"train"``, as
    :func:`predict`). Results are in model-major order. A model that fails to
    extract raises its error, or with ``on_error`` is passed to it (model,
    error) and left out while the others are predicted; so is a graph far
    outside the predictor's domain (:mod:`.domain`) unless ``extrapolate``.
    ``gpu_options`` (``optimizer``, ``layout``, ``attention``, ``power_limit_w``,
    ``mig_profile``) go to :func:`predict` as they are."""
    # an unknown device (or one without a training-step predictor) fails before any extraction
    predictor_for(device, mode)
    total = len(models) * len(batches)
    show = (total >= PROGRESS_MIN_JOBS and sys.stderr.isatty()) if progress is None \
        else progress
    graphs: list[Any] = []
    names: list[str] = []
    bar = _progress_bar(total) if show else None
    try:
        outcomes = iter_extract_many(models, batches, input_shapes, dims, workers=workers)
        for m, outcome in zip(models, outcomes):
            if bar is not None:
                bar.update(len(batches))
            if isinstance(outcome, PerfSeerError):
                named_by(m, outcome)
                if on_error is None:
                    raise outcome
                on_error(m, outcome)
                continue
            graphs += outcome
            names += [m] * len(outcome)
    finally:
        if bar is not None:
            bar.close()
    while True:  # a graph far outside the device's domain: named by its model, left out with on_error
        if not graphs:
            return []
        try:
            results = predict(graphs, device=device, metrics=metrics, model=model_name,
                              precision=precision, mode=mode, extrapolate=extrapolate, **gpu_options)
            break
        except DomainError as exc:
            if exc.index is None:
                raise
            named = DomainError(f"{names[exc.index]}: {str(exc).split(': ', 1)[-1]}", index=exc.index)
            if on_error is None:
                raise named from None
            on_error(names[exc.index], named)
            del graphs[exc.index], names[exc.index]
    for r, m in zip(results, names):
        r["model"] = m
    return results


def named_by(model: str, exc: PerfSeerError) -> None:
    """Start ``exc``'s message with ``model`` where it does not already (most
    errors name their file first; a shape error does not), so that the one
    line a user sees among many models says which failed."""
    if exc.args and isinstance(exc.args[0], str) and not exc.args[0].startswith(model):
        exc.args = (f"{model}: {exc.args[0]}", *exc.args[1:])
