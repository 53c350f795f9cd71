"""The HTTP/JSON service: FastAPI app behind ``perfseer-rt serve``.

Endpoints (OpenAPI page at ``/docs``, schema at ``/openapi.json``):

- ``POST /predict``: an ONNX model as the raw request body
  (``Content-Type: application/octet-stream``), or ``?path=`` naming a file
  under the configured model folder; query ``batch`` (``8`` or ``1,8,32``),
  ``device``, ``metrics``, ``model``, ``mode`` (``inference`` or ``train``),
  ``precision`` (GPU-prior devices). Answers the same JSON list as
  ``perfseer-rt predict --json`` (:mod:`perfseer_rt.serve.schema`).
- ``POST /check``: the same inputs (but ``precision``) plus ``max_latency_ms`` / ``max_memory_mb``;
  the verdict of :func:`perfseer_rt.predict.check`.
- ``GET /devices``: the shipped predictors (``perfseer-rt devices --json``).
- ``GET /healthz``: the process answers. ``GET /readyz``: predictors load and
  the default one runs (503 until then).

Limits (:class:`Settings`): the upload is read in chunks and refused with
413 as soon as it passes ``max_upload_mb`` (a declared Content-Length over
the limit is refused before any byte is read); at most ``max_concurrency``
predictions run at once (503 ``busy`` beyond); a prediction running longer
than ``timeout_s`` answers 504. User errors answer 4xx with
``{"error": <the CLI's one-line message>, "type": <exception class>}``;
anything else 500 ``internal error``; no traceback in bodies or logs.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from perfseer_rt import __version__
from perfseer_rt.errors import DeviceError, MetricError, ModelLoadError, PerfSeerError, ShapeError
from perfseer_rt.graph.extract import extract
from perfseer_rt.predict.api import predict
from perfseer_rt.predict.budget import check as do_check
from perfseer_rt.predict.explain import device_rows
from perfseer_rt.predict.many import parse_batches
from perfseer_rt.predict.registry import Predictor, get_predictor, predictors
from perfseer_rt.predict.seernet_run import _session
from perfseer_rt.predict.train_mode import predictor_for
from perfseer_rt.serve.schema import CheckVerdict, DeviceRow, ErrorBody, Result

log = logging.getLogger("perfseer_rt.serve")

_CHUNK = 1 << 16


@dataclass(frozen=True)
class Settings:
    """Service limits. ``model_dir``: the only folder ``?path=`` may read
    (None: path requests are refused); sizes in MiB, times in seconds."""

    model_dir: Path | None = None
    max_upload_mb: float = 256.0
    timeout_s: float = 60.0
    max_concurrency: int = 2


class HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "HTTPError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


_STATUS = {ModelLoadError: 422, ShapeError: 422, MetricError: 400, DeviceError: 404}


def status_for(exc: PerfSeerError) -> int:
    return next((s for cls, s in _STATUS.items() if isinstance(exc, cls)), 400)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def confine(model_dir: Path | None, rel: str) -> Path:
    """``rel`` resolved inside ``model_dir`` (symlinks followed, ``..``
    collapsed); anything that lands outside is refused."""
    if model_dir is None:
        raise HTTPError(403, "this server reads no paths (start it with --model-dir)",
                        "PathNotAllowed")
    root = model_dir.resolve()
    try:
        target = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        raise HTTPError(404, f"path {rel!r} does not exist under the model folder",
                        "ModelLoadError") from None
    if not target.is_relative_to(root):
        raise HTTPError(403, f"path {rel!r} is outside the model folder", "PathNotAllowed")
    if not target.is_file():
        raise HTTPError(422, f"path {rel!r} is not a file", "ModelLoadError")
    return target


async def read_body(request: Request, limit_bytes: int) -> bytes:
    """The request body, refused (413) once it passes ``limit_bytes``."""
    declared = request.headers.get("content-length")
    too_big = HTTPError(413, f"upload larger than the limit of {limit_bytes / 2**20:g} MiB",
                        "UploadTooLarge")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise too_big
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit_bytes:
            raise too_big
    return bytes(buf)


def _predict(source: str | bytes, name: str, batches: list[int | None], device: str | None,
             metrics: str | None, model: str | None, mode: str = "inference",
             precision: str | None = None) -> list[dict[str, Any]]:
    wanted = [m.strip() for m in metrics.split(",") if m.strip()] if metrics else None
    with named_errors(source, name):
        predictor_for(device, mode)  # an unknown device or mode fails before any extraction
        graphs = [extract(source, batch=b) for b in batches]
    results = predict(graphs, device=device, metrics=wanted, model=model, mode=mode,
                      precision=precision)
    for r in results:
        r["model"] = name
    return results


@contextmanager
def named_errors(source: str | bytes, name: str) -> Iterator[None]:
    """Errors name the model as the client did (``sub/m.onnx``, the upload's
    name), never the server's own paths."""
    try:
        yield
    except PerfSeerError as exc:
        own = "<bytes>" if isinstance(source, bytes) else str(source)
        raise type(exc)(str(exc).replace(own, name)) from None


MODE_DOC = ("inference (default) or train: one training step (step_ms, memory by part; "
            "GPU-prior devices price it from their kernel prior)")
PRECISION_DOC = "GPU-prior devices: fp32 (default), fp16-tc or bf16-tc (a stated assumption)"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(title="perfseer-rt", summary="Predict how an ONNX model performs before "
                  "it runs: latency, peak memory (MiB over the process baseline), ...",
                  version=_version())
    slots = asyncio.Semaphore(settings.max_concurrency)
    limit = int(settings.max_upload_mb * 2**20)

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError) -> JSONResponse:
        log.warning("%s %s -> %d %s", request.method, request.url.path, exc.status, exc.message)
        return JSONResponse({"error": exc.message, "type": exc.kind}, status_code=exc.status,
                            headers={"Connection": "close"} if exc.status == 413 else None)

    @app.exception_handler(PerfSeerError)
    async def _user_error(request: Request, exc: PerfSeerError) -> JSONResponse:
        msg = one_line(exc)
        log.warning("%s %s -> %d %s", request.method, request.url.path, status_for(exc), msg)
        return JSONResponse({"error": msg, "type": type(exc).__name__},
                            status_code=status_for(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s -> 500 %s: %s", request.method, request.url.path,
                  type(exc).__name__, one_line(exc))
        return JSONResponse({"error": "internal error", "type": "InternalError"},
                            status_code=500)

    async def guarded(fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` in a worker thread within the concurrency and time limits."""
        if slots.locked():
            raise HTTPError(503, f"busy: {settings.max_concurrency} predictions already "
                            "running; retry later", "Busy")
        await slots.acquire()
        task = asyncio.ensure_future(run_in_threadpool(fn, *args))
        task.add_done_callback(lambda _: slots.release())  # held until the thread ends
        try:
            return await asyncio.wait_for(asyncio.shield(task), settings.timeout_s)
        except asyncio.TimeoutError:
            raise HTTPError(504, f"prediction took longer than {settings.timeout_s:g} s",
                            "Timeout") from None

    async def source_of(request: Request, path: str | None) -> tuple[str | bytes, str]:
        if path is not None:
            return str(confine(settings.model_dir, path)), path
        data = await read_body(request, limit)
        if not data:
            raise HTTPError(422, "empty request body: send the ONNX model as the body "
                            "(application/octet-stream) or give ?path=", "ModelLoadError")
        return data, request.query_params.get("name") or "upload.onnx"

    errors: dict[int | str, dict[str, Any]] = {s: {"model": ErrorBody} for s in (400, 403, 404, 413, 422, 503, 504)}
    body_doc = {"requestBody": {"required": False, "content": {"application/octet-stream": {
        "schema": {"type": "string", "format": "binary"}}},
        "description": "The ONNX model (omit when ?path= names one)."}}

    @app.post("/predict", response_model=list[Result], responses=errors,
              openapi_extra=body_doc)
    async def predict(request: Request,
                      path: str | None = Query(None, description="A model file under the "
                                               "server's model folder, instead of a body."),
                      batch: str | None = Query(None, description="8 or 1,8,32"),
                      device: str | None = None, metrics: str | None = None,
                      model: str | None = Query(None, description="which of the device's "
                                                "predictors"),
                      name: str | None = Query(None, description="the upload's name in "
                                               "the answer"),
                      mode: str = Query("inference", description=MODE_DOC),
                      precision: str | None = Query(None, description=PRECISION_DOC)) -> Any:
        """Predict the metrics of one ONNX model at one or more batch sizes."""
        batches = parse_batches(batch)
        source, label = await source_of(request, path)
        return await guarded(_predict, source, label, batches, device, metrics, model, mode, precision)

    @app.post("/check", response_model=CheckVerdict, responses=errors,
              openapi_extra=body_doc)
    async def check(request: Request, path: str | None = None, batch: int | None = None,
                    device: str | None = None, max_latency_ms: float | None = None,
                    max_memory_mb: float | None = None, model: str | None = None,
                    name: str | None = None,
                    mode: str = Query("inference", description=MODE_DOC)) -> Any:
        """Does the model meet the budget (judged by the interval's upper end)?"""
        source, label = await source_of(request, path)

        def run() -> dict[str, Any]:
            with named_errors(source, label):
                verdict = do_check(source, device, max_latency_ms=max_latency_ms,
                                   max_memory_mb=max_memory_mb, batch=batch,
                                   predictor_model=model, mode=mode)
            verdict["prediction"]["model"] = label
            return verdict

        return await guarded(run)

    @app.get("/devices", response_model=list[DeviceRow])
    async def devices() -> list[dict[str, Any]]:
        """The shipped predictors, their units, meanings and test accuracy."""
        return device_rows()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> Any:
        """Predictors load and the default one answers."""
        try:
            pred = await run_in_threadpool(get_predictor, None)
            await run_in_threadpool(_warm, pred)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            return JSONResponse({"error": one_line(exc), "type": type(exc).__name__},
                                status_code=503)
        return {"status": "ready", "devices": sorted(predictors())}

    return app


def _warm(pred: Predictor) -> None:
    _session(str(pred.model_file()), pred.threads)


def _version() -> str:
    return __version__


def app_from_env() -> FastAPI:
    """The app configured from ``PERFSEER_RT_*`` variables (for ``uvicorn
    --factory perfseer_rt.serve.app:app_from_env``)."""
    env = os.environ
    return create_app(Settings(
        model_dir=Path(env["PERFSEER_RT_MODEL_DIR"]) if env.get("PERFSEER_RT_MODEL_DIR") else None,
        max_upload_mb=float(env.get("PERFSEER_RT_MAX_UPLOAD_MB", 256)),
        timeout_s=float(env.get("PERFSEER_RT_TIMEOUT_S", 60)),
        max_concurrency=int(env.get("PERFSEER_RT_MAX_CONCURRENCY", 2))))
