"""The work a request asks for, as it runs in a worker process
(:mod:`perfseer_rt.serve.pool`): the same library calls as the CLI's
``predict``, ``check`` and ``inspect --json``, on a model file (a path under
the model folder, or the upload's temporary file), with errors naming the
model as the client did.

Each job takes ``(path, label, kwargs)``: ``kwargs`` are the call's keyword
arguments from :mod:`perfseer_rt.predict.options` (already parsed and
checked in the server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.graph.extract import extract
from perfseer_rt.graph.summary import layer_table
from perfseer_rt.predict.budget import check
from perfseer_rt.predict.many import predict_many


@contextmanager
def named(path: str, label: str) -> Iterator[None]:
    """Errors name the model as the client did (``sub/m.onnx``, the upload's
    name), never the server's own paths."""
    try:
        yield
    except PerfSeerError as exc:
        raise type(exc)(str(exc).replace(path, label)) from None


def predict_job(path: str, label: str, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    kwargs = dict(kwargs)
    batches = kwargs.pop("batches", [None])
    with named(path, label):
        results = predict_many([path], batches, progress=False, **kwargs)
    for r in results:
        r["model"] = label
    return results


def check_job(path: str, label: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    with named(path, label):
        verdict = check(path, **kwargs)
    verdict["prediction"]["model"] = label
    return verdict


def inspect_job(path: str, label: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    with named(path, label):
        graph = extract(path, **kwargs)
    return {"model": label, **layer_table(graph)}


#: Job name -> (the library call whose options it takes, the job).
JOBS: dict[str, tuple[Callable[..., Any], Callable[[str, str, dict[str, Any]], Any]]] = {
    "predict": (predict_many, predict_job),
    "check": (check, check_job),
    "inspect": (extract, inspect_job),
}
