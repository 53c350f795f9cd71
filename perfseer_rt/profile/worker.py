"""A measuring child process, reusable across models.

Measurements run in a child process (``python -m perfseer_rt.profile.child``)
so that (a) the parent's own memory never enters a peak, (b) a crash, hang
or CUDA fault of one model costs one record, not the campaign, and (c)
NVML's per-process memory is that of the measurement. The child imports only
numpy and onnxruntime (not the parent's ``__main__``, unlike
``multiprocessing``'s spawn, which would re-import a campaign script and
torch with it).

Requests go to the child's stdin and replies come back on its stdout, one
JSON document per line (no pickled objects); the child points its own
``sys.stdout`` and fd 1 at stderr first, so library prints cannot corrupt
the replies. See :mod:`perfseer_rt.profile.child` for how the child keeps
its memory baseline honest; where ``VmHWM`` cannot be reset,
:class:`ProfileWorker` restarts the child for every model.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from perfseer_rt import errors
from perfseer_rt.profile.record import failure_record
from perfseer_rt.profile.timing import MeasureSettings

DEFAULT_TIMEOUT_S = 600.0
START_TIMEOUT_S = 120.0


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
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._used = False

    # -- process management -------------------------------------------------
    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # folder holding perfseer_rt/
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "")
                                                      .split(os.pathsep) if p])
        env["PYTHONUNBUFFERED"] = "1"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "perfseer_rt.profile.child"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, close_fds=True)
        self._buf = b""
        hello = self._read_line(START_TIMEOUT_S)
        if hello is None:
            code = self._proc.poll()
            self._stop(kill=True)
            raise errors.ProfileError(
                "the measuring process did not start " + (f"(exit code {code})" if code is not None
                                                          else f"within {START_TIMEOUT_S:.0f} s"))
        info = json.loads(hello)
        self.hwm_reset = bool(info.get("hwm_reset"))
        self.pid = info.get("pid")
        self._used = False

    def _read_line(self, timeout_s: float) -> bytes | None:
        """One reply line, or None on timeout or when the child closed stdout."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _stop(self, kill: bool = False) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if not kill and proc.poll() is None:
            try:
                proc.stdin.write(b'{"op": "stop"}\n')
                proc.stdin.flush()
                proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return code

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
        if self._proc is not None and (not self._alive() or (need_fresh and self._used)):
            self._stop()
        if self._proc is None:
            self._start()
        req = {"op": "measure", "provider": self.provider, "model": os.fspath(model),
               "batch": batch, "threads": threads,
               "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
               "settings": (settings or _default_settings(self.provider)).to_dict(),
               "provider_options": dict(provider_options or {}), "device_id": device_id}
        self._used = True
        fail = dict(model=os.fspath(model), batch=batch,
                    provider_requested=_PROVIDER_NAMES[self.provider])
        try:
            self._proc.stdin.write(json.dumps(req).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:
            return failure_record(_death_message(self._stop(kill=True)), status="error", **fail)
        line = self._read_line(self.timeout_s)
        if line is None:
            if self._alive():
                self._stop(kill=True)
                return failure_record(f"timeout: the measurement ran past {self.timeout_s:.0f} s",
                                      status="error", **fail)
            return failure_record(_death_message(self._stop(kill=True)), status="error", **fail)
        reply = json.loads(line)
        if "user_error" in reply:
            cls = getattr(errors, reply["user_error"], errors.ProfileError)
            raise cls(reply["message"])
        return reply


_PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


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

