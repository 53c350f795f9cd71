"""``perfseer-rt serve``: run the HTTP service (needs the ``[serve]`` extra)."""

from __future__ import annotations

from pathlib import Path

import click

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.install import installed_flavours


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="PERFSEER_RT_HOST")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              envvar="PERFSEER_RT_PORT")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              envvar="PERFSEER_RT_MODEL_DIR",
              help="The only folder that POST /predict?path= may read (default: none).")
@click.option("--max-upload-mb", type=click.FloatRange(min=0, min_open=True), default=256.0,
              show_default=True, envvar="PERFSEER_RT_MAX_UPLOAD_MB",
              help="Largest model upload, MiB.")
@click.option("--timeout-s", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, envvar="PERFSEER_RT_TIMEOUT_S",
              help="Longest a prediction may run, seconds (then 504).")
@click.option("--max-concurrency", type=click.IntRange(min=1), default=2, show_default=True,
              envvar="PERFSEER_RT_MAX_CONCURRENCY",
              help="Predictions running at once (then 503 busy).")
def serve(host: str, port: int, model_dir: Path | None, max_upload_mb: float, timeout_s: float,
          max_concurrency: int) -> None:
    """Serve predictions over HTTP/JSON (OpenAPI page at /docs)."""
    try:  # deliberately lazy: the web stack is the [serve] extra, imported only here
        import uvicorn

        from perfseer_rt.serve.app import Settings, create_app
    except ImportError as exc:
        dist = "perfseer-rt-gpu" if installed_flavours() == ["onnxruntime-gpu"] else "perfseer-rt"
        raise PerfSeerError(f"perfseer-rt serve needs the [serve] extra ({exc.name} is "
                            f"missing): pip install '{dist}[serve]'") from None
    if model_dir is not None and not model_dir.is_dir():
        raise PerfSeerError(f"--model-dir {str(model_dir)!r} is not a folder")
    app = create_app(Settings(model_dir=model_dir, max_upload_mb=max_upload_mb,
                              timeout_s=timeout_s, max_concurrency=max_concurrency))
    uvicorn.run(app, host=host, port=port, log_level="info",
                timeout_keep_alive=5, limit_concurrency=max_concurrency * 8 + 8)
