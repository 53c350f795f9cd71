"""A measuring child process, reusable across models.

Measurements run in a child process started with ``multiprocessing``'s
``spawn`` method so that (a) the parent's own memory never enters a peak,
(b) a crash, hang or CUDA fault of one model costs one record, not the
campaign, and (c) NVML's per-process memory is that of the measurement.

Requests and replies cross a pipe as JSON text (no pickled objects). The
child keeps its baseline honest between models by releasing free heap and
resetting ``VmHWM`` (:mod:`perfseer_rt.profile.hostmem`); where the reset
does not work, :class:`ProfileWorker` restarts the child for every model.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys
from typing import Any, Mapping, Sequence

from perfseer_rt import errors
from perfseer_rt.profile.record import failure_record
from perfseer_rt.profile.timing import MeasureSettings

DEFAULT_TIMEOUT_S = 600.0
START_TIMEOUT_S = 120.0


def _child_main(conn) -> None:
    """Child loop: answer ``measure`` requests until ``stop`` or EOF."""
    os.dup2(2, 1)  # library prints must not reach the parent's stdout (JSON output)
    sys.stdout = sys.stderr
    import onnxruntime as ort

    from perfseer_rt.profile import hostmem

    ort.set_default_logger_severity(3)
    reset_ok = hostmem.reset_hwm() and hostmem.hwm_reset_works()
    conn.send_bytes(json.dumps({"ready": True, "pid": os.getpid(),
                                "hwm_reset": reset_ok}).encode())
    while True:
        try:
            req = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        if req.get("op") == "stop":
            break
        try:
            reply = _dispatch(req, reset_ok)
        except errors.PerfSeerError as exc:
            reply = {"user_error": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as a record
            reply = failure_record(f"{type(exc).__name__}: {exc}")
        conn.send_bytes(json.dumps(reply, default=_json_default).encode())


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


def _dispatch(req: dict, reset_ok: bool) -> dict:
    from perfseer_rt.profile import hostmem

    settings = MeasureSettings.from_dict(req.get("settings"))
    shapes = req.get("input_shapes")
    if req["provider"] == "cpu":
        from perfseer_rt.profile.cpu import measure_cpu

        baseline = hostmem.start_baseline() if reset_ok else hostmem.rss_kib()
        rec = measure_cpu(req["model"], batch=req.get("batch"), input_shapes=shapes,
                          threads=req.get("threads", 1), settings=settings,
                          baseline_kib=baseline)
        if not reset_ok:
            rec["notes"].append("VmHWM reset unavailable: measured in a fresh process; "
                                "peak includes start-up")
        return rec
    if req["provider"] == "cuda":
        from perfseer_rt.profile.cuda import measure_cuda

        return measure_cuda(req["model"], batch=req.get("batch"), input_shapes=shapes,
                            settings=settings, provider_options=req.get("provider_options"),
                            device_id=req.get("device_id", 0))
    raise errors.DeviceError(f"unknown provider {req['provider']!r}; choose cpu or cuda")


class ProfileWorker:
    """A child process that measures models one after another.

    Use as a context manager::

        with ProfileWorker("cpu") as w:
            rec = w.measure("model.onnx", batch=8)

    Args:
        provider: ``"cpu"`` or ``"cuda"``.
        timeout_s: wall-clock limit of one measurement; past it the child is
            killed and the record has status ``"error"``.
        fresh: start a new child for every model (default: only when
            ``VmHWM`` cannot be reset).
    """

    def __init__(self, provider: str = "cpu", *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 fresh: bool = False) -> None:
        if provider not in ("cpu", "cuda"):
            raise errors.DeviceError(f"unknown provider {provider!r}; choose cpu or cuda")
        self.provider = provider
        self.timeout_s = timeout_s
        self.fresh = fresh
        self.hwm_reset: bool | None = None
        self._proc = None
        self._conn = None
        self._used = False

    # -- process management -------------------------------------------------
    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child_main, args=(child,), name="perfseer-profile",
                           daemon=True)
        proc.start()
        child.close()
        if not parent.poll(START_TIMEOUT_S):
            proc.kill()
            raise errors.ProfileError("the measuring process did not start within "
                                      f"{START_TIMEOUT_S:.0f} s")
        try:
            hello = json.loads(parent.recv_bytes())
        except (EOFError, OSError):
            proc.join(5)
            raise errors.ProfileError(f"the measuring process exited at start "
                                      f"(exit code {proc.exitcode})") from None
        self.hwm_reset = bool(hello.get("hwm_reset"))
        self.pid = hello.get("pid")
        self._proc, self._conn, self._used = proc, parent, False

    def _stop(self, kill: bool = False) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if not kill and proc.is_alive():
            try:
                conn.send_bytes(b'{"op": "stop"}')
            except OSError:
                pass
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        conn.close()

    def close(self) -> None:
        """Stop the child process."""
        self._stop()

    def __enter__(self) -> "ProfileWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self._stop(kill=True)
        except Exception:
            pass

    # -- measuring ------------------------------------------------------------
    def measure(self, model: str | os.PathLike, *, batch: int | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None, threads: int = 1,
                settings: MeasureSettings | None = None,
                provider_options: Mapping[str, Any] | None = None,
                device_id: int = 0) -> dict[str, Any]:
        """Measure one model in the child; returns its record (no ``env`` yet).

        Raises the PerfSeerError subclass the child raised for a user error
        (unresolved shapes, CUDA that does not attach).
        """
        need_fresh = self.fresh or (self.hwm_reset is False and self.provider == "cpu")
        if self._proc is not None and (not self._proc.is_alive() or (need_fresh and self._used)):
            self._stop()
        if self._proc is None:
            self._start()
        req = {"op": "measure", "provider": self.provider, "model": os.fspath(model),
               "batch": batch, "threads": threads,
               "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
               "settings": (settings or _default_settings(self.provider)).to_dict(),
               "provider_options": dict(provider_options or {}), "device_id": device_id}
        self._used = True
        self._conn.send_bytes(json.dumps(req).encode())
        if not self._conn.poll(self.timeout_s):
            self._stop(kill=True)
            return failure_record(f"timeout: the measurement ran past {self.timeout_s:.0f} s",
                                  status="error", model=os.fspath(model), batch=batch)
        try:
            reply = json.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            self._proc.join(5)
            code = self._proc.exitcode
            self._stop(kill=True)
            return failure_record(_death_message(code), status="error",
                                  model=os.fspath(model), batch=batch)
        if "user_error" in reply:
            cls = getattr(errors, reply["user_error"], errors.ProfileError)
            raise cls(reply["message"])
        return reply


def _default_settings(provider: str) -> MeasureSettings:
    if provider == "cuda":
        from perfseer_rt.profile.cuda import CUDA_SETTINGS

        return CUDA_SETTINGS
    return MeasureSettings()


def _death_message(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the kernel's OOM killer?)" if name == "SIGKILL" else ""
        return f"the measuring process died from {name}{hint}"
    return f"the measuring process exited with code {code}"
