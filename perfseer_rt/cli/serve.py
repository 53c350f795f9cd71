"""``perfseer-rt serve``: run the HTTP service (needs the ``[serve]`` extra)."""

from __future__ import annotations

from pathlib import Path

import click

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.install import installed_flavours

_positive = click.FloatRange(min=0, min_open=True)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="PERFSEER_RT_HOST")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              envvar="PERFSEER_RT_PORT")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar="PERFSEER_RT_MODEL_DIR",
              help="The only folder that ?path= may read (default: none).")
@click.option("--max-upload-mb", type=_positive, default=256.0, show_default=True,
              envvar="PERFSEER_RT_MAX_UPLOAD_MB", help="Largest request body, MiB.")
@click.option("--timeout-s", type=_positive, default=60.0, show_default=True,
              envvar="PERFSEER_RT_TIMEOUT_S",
              help="Longest a job may run in its worker, seconds (then 504; the worker is "
                   "stopped and replaced).")
@click.option("--max-concurrency", type=click.IntRange(min=1), default=2, show_default=True,
              envvar="PERFSEER_RT_MAX_CONCURRENCY",
              help="Jobs running at once, each in its own worker process.")
@click.option("--max-queue", type=click.IntRange(min=0), default=16, show_default=True,
              envvar="PERFSEER_RT_MAX_QUEUE",
              help="Requests admitted beyond those running (uploading or waiting); more are "
                   "answered 429 with Retry-After before their body is read.")
@click.option("--queue-wait-s", type=_positive, default=30.0, show_default=True,
              envvar="PERFSEER_RT_QUEUE_WAIT_S",
              help="Longest a request waits for a worker, seconds (then 503 with Retry-After).")
@click.option("--spare-workers", type=click.IntRange(min=0), default=1, show_default=True,
              envvar="PERFSEER_RT_SPARE_WORKERS",
              help="Started, warm workers kept beyond --max-concurrency, to take a stopped "
                   "worker's place at once.")
@click.option("--worker-max-rss-mb", type=_positive, default=2048.0, show_default=True,
              envvar="PERFSEER_RT_WORKER_MAX_RSS_MB",
              help="A worker whose resident memory passes this after a job is replaced, MiB.")
@click.option("--upload-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar="PERFSEER_RT_UPLOAD_DIR",
              help="Where uploads are streamed to while their job runs (default: the system's "
                   "temporary folder).")
@click.option("--max-batches", type=click.IntRange(min=1), default=64, show_default=True,
              envvar="PERFSEER_RT_MAX_BATCHES", help="Batch sizes one request may ask for.")
def serve(host: str, port: int, model_dir: Path | None, max_upload_mb: float, timeout_s: float,
          max_concurrency: int, max_queue: int, queue_wait_s: float, spare_workers: int,
          worker_max_rss_mb: float, upload_dir: Path | None, max_batches: int) -> None:
    """Serve predictions over HTTP/JSON (OpenAPI page at /docs)."""
    try:  # deliberately lazy: the web stack is the [serve] extra, imported only here
        import uvicorn

        from perfseer_rt.serve.app import Settings, create_app
        from perfseer_rt.serve.params import RequestLimits
    except ImportError as exc:
        dist = "perfseer-rt-gpu" if installed_flavours() == ["onnxruntime-gpu"] else "perfseer-rt"
        raise PerfSeerError(f"perfseer-rt serve needs the [serve] extra ({exc.name} is "
                            f"missing): pip install '{dist}[serve]'") from None
    for flag, folder in (("--model-dir", model_dir), ("--upload-dir", upload_dir)):
        if folder is not None and not folder.is_dir():
            raise PerfSeerError(f"{flag} {str(folder)!r} is not a folder")
    app = create_app(Settings(model_dir=model_dir, max_upload_mb=max_upload_mb, timeout_s=timeout_s,
                              max_concurrency=max_concurrency, max_queue=max_queue,
                              queue_wait_s=queue_wait_s, spare_workers=spare_workers,
                              worker_max_rss_mb=worker_max_rss_mb, upload_dir=upload_dir,
                              limits=RequestLimits(max_batches=max_batches)))
    # no connection limit here: uvicorn's would answer /healthz 503 under load; the work
    # limit is the app's (429/503 with Retry-After), and connections are the ingress's to bound
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_keep_alive=5,
                timeout_graceful_shutdown=10)
