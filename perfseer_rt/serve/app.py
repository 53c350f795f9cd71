"""The HTTP/JSON service: the FastAPI app behind ``perfseer-rt serve``.

Endpoints (OpenAPI page at ``/docs``, schema at ``/openapi.json``):

- ``POST /predict``, ``POST /check``, ``POST /inspect``: ``perfseer-rt
  predict --json``, ``check --json`` and ``inspect --json`` over HTTP. The
  model is the body (raw, or a multipart form's file part) or a file under
  the model folder (``?path=``, or a JSON body ``{"path": ...}``:
  :mod:`perfseer_rt.serve.bodies`); the options are the CLI's, by the same
  names (``?dim=seq=128``, repeatable; :mod:`perfseer_rt.serve.params`).
- ``GET /devices``: the shipped predictors (``perfseer-rt devices --json``).
- ``GET /healthz``: liveness; answered by the server process itself, never
  behind the work limit. ``GET /readyz``: 200 when a prediction would be
  accepted now (workers started, room in the queue), else 503 with
  ``Retry-After``. ``GET /metrics``: Prometheus metrics.

Load: a work request first has its query checked (options, limits, a
declared body size, the path), then takes a place among ``max_concurrency +
max_queue`` (else 429 with ``Retry-After``, before its body is read), streams
its body to a temporary file, waits up to ``queue_wait_s`` for one of
``max_concurrency`` worker slots (else 503 with ``Retry-After``), and runs
there for at most ``timeout_s`` (else 504; the worker is killed and
replaced: :mod:`perfseer_rt.serve.pool`).

Every 4xx/5xx answers ``{"error": <one line, the CLI's>, "type": <class>}``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from perfseer_rt import __version__
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.explain import device_rows
from perfseer_rt.predict.registry import predictors
from perfseer_rt.predict.train_mode import predictor_for
from perfseer_rt.serve.bodies import Body, check_declared, receive
from perfseer_rt.serve.errors import HTTPError, busy, from_user_error, one_line, retry_after, validation_message
from perfseer_rt.serve.jobs import JOBS
from perfseer_rt.serve.metrics import Metrics
from perfseer_rt.serve.params import RequestLimits, gather, openapi_body, openapi_parameters, parse_request
from perfseer_rt.serve.paths import model_path
from perfseer_rt.serve.pool import Pool, WaitTimeout
from perfseer_rt.serve.schema import CheckVerdict, DeviceRow, ErrorBody, LayerTable, Result

log = logging.getLogger("perfseer_rt.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]


@dataclass(frozen=True)
class Settings:
    """The service's limits. ``model_dir``: the only folder ``path`` may name
    (None: paths are refused); sizes in MiB, times in seconds."""

    model_dir: Path | None = None
    max_upload_mb: float = 256.0
    timeout_s: float = 60.0
    max_concurrency: int = 2
    max_queue: int = 16
    queue_wait_s: float = 30.0
    spare_workers: int = 1
    worker_max_rss_mb: float = 2048.0
    upload_dir: Path | None = None
    limits: RequestLimits = field(default_factory=RequestLimits)


class Instrument:
    """ASGI middleware: every answer counted by endpoint and status, and timed."""

    def __init__(self, app: ASGIApp, metrics: Metrics, endpoints: frozenset[str]) -> None:
        self.app, self.metrics, self.endpoints = app, metrics, endpoints

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope["path"] if scope["path"] in self.endpoints else "other"
        status = [500]
        start = time.perf_counter()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    pool = Pool(settings.max_concurrency, settings.spare_workers, settings.worker_max_rss_mb,
                on_event=lambda e: metrics.worker_events.labels(e).inc())
    limit_bytes = int(settings.max_upload_mb * 2**20)
    places = settings.max_concurrency + settings.max_queue
    state = _State()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.devices = sorted(await run_in_threadpool(predictors))
        await pool.start()
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(title="perfseer-rt", summary="Predict how an ONNX model performs before it "
                  "runs: latency, peak memory, utilization, energy; the CLI's answers over HTTP.",
                  version=__version__, lifespan=lifespan)
    app.add_middleware(Instrument, metrics=metrics, endpoints=frozenset(
        ("/predict", "/check", "/inspect", "/devices", "/healthz", "/readyz", "/metrics")))

    def answer(request: Request, status: int, body: dict[str, str],
               headers: dict[str, str] | None = None) -> JSONResponse:
        headers = dict(headers or {})
        if request.method == "POST" and not getattr(request.state, "body_read", False):
            headers["Connection"] = "close"  # the unread body is not worth reading
        log.warning("%s %s -> %d %s", request.method, request.url.path, status, body["error"])
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError) -> JSONResponse:
        return answer(request, exc.status, exc.body(), exc.headers)

    @app.exception_handler(PerfSeerError)
    async def _user_error(request: Request, exc: PerfSeerError) -> JSONResponse:
        err = from_user_error(exc)
        return answer(request, err.status, err.body())

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return answer(request, 422, {"error": validation_message(list(exc.errors())),
                                     "type": "ValidationError"})

    @app.exception_handler(StarletteHTTPException)
    async def _starlette(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {404: "NotFound", 405: "MethodNotAllowed"}
        return answer(request, exc.status_code, {"error": one_line(exc.detail),
                                                 "type": kinds.get(exc.status_code, "HTTPError")},
                      dict(exc.headers or {}))

    async def work(request: Request, job: str) -> Any:
        fn = JOBS[job][0]
        # everything the query says is checked before the body is read
        kind = check_declared(request.headers, limit_bytes)
        query = list(request.query_params.multi_items())
        early = parse_request(fn, gather(query), settings.limits)
        if early.path is not None:
            if kind == "application/json":
                raise HTTPError(400, "path given in the query and a JSON body: give the path "
                                "in one of them", "BadRequest")
            model_path(settings.model_dir, early.path)
        await run_in_threadpool(_known_device, early.kwargs)
        if state.admitted >= places:
            metrics.rejected.labels("queue_full").inc()
            raise busy(429, f"busy: {pool.running} predictions running and {state.admitted - pool.running}"
                       " waiting or uploading; retry later", pool.expected_wait_s())
        state.admitted += 1
        body = Body()
        try:
            body = await receive(request.stream(), request.headers.get("content-type"),
                                 limit_bytes, settings.upload_dir)
            request.state.body_read = True
            req = early
            if body.fields:
                req = parse_request(fn, gather(query, body.fields), settings.limits)
                await run_in_threadpool(_known_device, req.kwargs)
            if req.path is not None and body.file is not None:
                raise HTTPError(400, "a model in the body and a path: give one of them", "BadRequest")
            if req.path is not None:
                source, label = model_path(settings.model_dir, req.path), req.path
            elif body.file is not None:
                source, label = body.file, req.name or body.filename or "upload.onnx"
            else:
                raise HTTPError(422, "no model: send the ONNX file as the body "
                                "(application/octet-stream or a multipart form's file), or name "
                                "one under the model folder with path", "ModelLoadError")
            try:
                return JSONResponse(await pool.run(job, str(source), label, req.kwargs,
                                                   wait_s=settings.queue_wait_s,
                                                   timeout_s=settings.timeout_s))
            except WaitTimeout:
                metrics.rejected.labels("wait_timeout").inc()
                raise busy(503, f"busy: no worker was free within {settings.queue_wait_s:g} s; "
                           "retry later", pool.expected_wait_s()) from None
            except HTTPError as exc:
                if exc.status == 504:
                    metrics.rejected.labels("deadline").inc()
                raise
        except ClientDisconnect:
            log.info("%s %s: the client left before its body was read", request.method,
                     request.url.path)
            return Response(status_code=400)  # nobody reads it
        except (HTTPError, PerfSeerError):
            raise
        except Exception as exc:  # noqa: BLE001 - a bug: one line in the log, never a traceback
            log.error("%s %s -> 500 %s: %s", request.method, request.url.path, type(exc).__name__,
                      one_line(exc))
            raise HTTPError(500, "internal error", "InternalError") from None
        finally:
            state.admitted -= 1
            body.discard()

    responses: dict[int | str, dict[str, Any]] = {
        s: {"model": ErrorBody} for s in (400, 403, 404, 413, 415, 422, 429, 500, 503, 504)}

    def doc(fn: Callable[..., Any]) -> dict[str, Any]:
        return {"parameters": openapi_parameters(fn), "requestBody": openapi_body(fn)}

    @app.post("/predict", response_model=list[Result], responses=responses,
              openapi_extra=doc(JOBS["predict"][0]))
    async def predict(request: Request) -> Any:
        """Predict the metrics of one ONNX model at one or more batch sizes
        (`perfseer-rt predict --json`). A GPU device's answer carries the
        smallest MIG profile the model fits (`mig`)."""
        return await work(request, "predict")

    @app.post("/check", response_model=CheckVerdict, responses=responses,
              openapi_extra=doc(JOBS["check"][0]))
    async def check(request: Request) -> Any:
        """Does the model meet the budget (judged by the interval's upper
        end)? (`perfseer-rt check --json`)"""
        return await work(request, "check")

    @app.post("/inspect", response_model=LayerTable, responses=responses,
              openapi_extra=doc(JOBS["inspect"][0]))
    async def inspect(request: Request) -> Any:
        """The model's totals and per-layer table (`perfseer-rt inspect --json`)."""
        return await work(request, "inspect")

    @app.get("/devices", response_model=list[DeviceRow])
    async def devices() -> Any:
        """The shipped predictors, their units, meanings and test accuracy."""
        return JSONResponse(await run_in_threadpool(device_rows))

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the server process answers (never behind the work limit)."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> Any:
        """Would a prediction be accepted now? Workers started and warm (the
        default predictor loads), and room among the places."""
        alive = pool.ready + pool.running
        reason = None
        if pool.error and alive == 0:
            reason = f"workers cannot start: {pool.error}"
        elif alive == 0:
            reason = "workers are starting"
        elif state.admitted >= places:
            reason = f"busy: all {places} places taken"
        if reason is not None:
            return JSONResponse({"error": reason, "type": "NotReady"}, status_code=503,
                                headers=retry_after(pool.expected_wait_s()))
        return {"status": "ready", "devices": state.devices, "workers_idle": pool.ready,
                "jobs_running": pool.running, "queue_depth": pool.waiting,
                "places_free": places - state.admitted}

    @app.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        """Prometheus metrics (text exposition format)."""
        metrics.queue_depth.set(pool.waiting)
        metrics.running.set(pool.running)
        metrics.admitted.set(state.admitted)
        metrics.workers_ready.set(pool.ready)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.state.pool = pool
    return app


@dataclass
class _State:
    admitted: int = 0  # work requests holding a place
    devices: list[str] = field(default_factory=list)


def _known_device(kwargs: dict[str, Any]) -> None:
    """An unknown device (or one without a predictor for the mode) fails
    before any upload is read."""
    predictor_for(kwargs.get("device"), kwargs.get("mode", "inference"))


def app_from_env() -> FastAPI:
    """The app configured from ``PERFSEER_RT_*`` variables (for ``uvicorn
    --factory perfseer_rt.serve.app:app_from_env``)."""
    env = os.environ
    return create_app(Settings(
        model_dir=Path(env["PERFSEER_RT_MODEL_DIR"]) if env.get("PERFSEER_RT_MODEL_DIR") else None,
        max_upload_mb=float(env.get("PERFSEER_RT_MAX_UPLOAD_MB", 256)),
        timeout_s=float(env.get("PERFSEER_RT_TIMEOUT_S", 60)),
        max_concurrency=int(env.get("PERFSEER_RT_MAX_CONCURRENCY", 2)),
        max_queue=int(env.get("PERFSEER_RT_MAX_QUEUE", 16)),
        queue_wait_s=float(env.get("PERFSEER_RT_QUEUE_WAIT_S", 30))))

