"""Measuring child processes, reusable across models.

Measurements run in a child process (``python -m perfseer_rt.profile.child``)
so that (a) the parent's own memory never enters a peak, (b) a crash, hang
or CUDA fault of one model costs one record, not the campaign, and (c)
NVML's per-process memory is that of the measurement. The child imports only
what it needs (not the parent's ``__main__``, unlike ``multiprocessing``'s
spawn, which would re-import a campaign script and torch with it).

:class:`JsonChild` is the generic channel: requests go to the child's stdin
and replies come back on its stdout, one JSON document per line (no pickled
objects). The child side is :func:`serve`, which first points fd 1 and
``sys.stdout`` at stderr, so library prints cannot corrupt the replies.
:class:`ProfileWorker` is the onnxruntime measuring worker built on it;
``training/profile_train.py`` builds its training-step worker the same way.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from perfseer_rt import errors
from perfseer_rt.profile.record import failure_record
from perfseer_rt.profile.timing import PRESETS, MeasureSettings

DEFAULT_TIMEOUT_S = 600.0
START_TIMEOUT_S = 120.0

_EOF = object()  # end of the child's reply stream
_PROVIDER_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


# ----------------------------------------------------------------- child side
def serve(handle: Callable[[dict[str, Any]], dict[str, Any]],
          hello: Callable[[], dict[str, Any]] | None = None) -> None:
    """Run a child's request loop: one JSON request per stdin line -> one reply line.

    ``handle(request) -> reply``. A :class:`PerfSeerError` becomes
    ``{"user_error": class name, "message": ...}`` (re-raised in the parent);
    any other exception becomes a failure record. ``hello()`` gives the first
    line (``{"ready": true, ...}``), sent once the child is set up.
    """
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # library prints must not reach the reply channel
    sys.stdout = sys.stderr
    first = {"ready": True, "pid": os.getpid(), **(hello() if hello else {})}
    reply.write(json.dumps(first) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "stop":
            break
        try:
            out = handle(req)
        except errors.PerfSeerError as exc:
            out = {"user_error": type(exc).__name__, "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as a record
            out = failure_record(f"{type(exc).__name__}: {exc}")
        reply.write(json.dumps(out, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (tuple, set)):
        return list(obj)
    return str(obj)


# ---------------------------------------------------------------- parent side
class ChildDied(Exception):
    """The child exited or timed out; ``str()`` is a one-line reason."""


class JsonChild:
    """A ``python -m MODULE`` child answering JSON lines (see :func:`serve`).

    Args:
        module: the child's module, run with ``-m``.
        extra_path: folders put first on the child's ``PYTHONPATH`` (the
            folder holding ``perfseer_rt`` is always added).
    """

    def __init__(self, module: str, extra_path: Sequence[str] = ()) -> None:
        self.module = module
        self.extra_path = list(extra_path)
        self.info: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[Any] = queue.Queue()

    @property
    def running(self) -> bool:
        return self._proc is not None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> dict[str, Any]:
        """Start the child and return its hello line (ProfileError if it fails)."""
        root = str(Path(__file__).resolve().parents[2])  # folder holding perfseer_rt/
        env = dict(os.environ)
        paths = self.extra_path + [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                            if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env["PYTHONUNBUFFERED"] = "1"
        self._proc = subprocess.Popen([sys.executable, "-m", self.module], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=env, close_fds=True)
        self._lines = queue.Queue()
        threading.Thread(target=_pump, args=(self._proc.stdout, self._lines),
                         name=f"{self.module}-replies", daemon=True).start()
        line = self._read_line(START_TIMEOUT_S)
        if line is None or line is _EOF:
            code = self.stop(kill=True)
            raise errors.ProfileError(f"the measuring process {self.module} did not start "
                                      f"({_death_message(code)})")
        self.info = json.loads(line)
        return self.info

    def request(self, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request; return the reply. Raises ChildDied (child stopped)."""
        if not self.alive():
            self.stop(kill=True)
            self.start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(req).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:
            raise ChildDied(_death_message(self.stop(kill=True))) from None
        line = self._read_line(timeout_s)
        if line is None:
            self.stop(kill=True)
            raise ChildDied(f"timeout: the measurement ran past {timeout_s:.0f} s")
        if line is _EOF:
            assert self._proc is not None
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            raise ChildDied(_death_message(self.stop(kill=True)))
        reply: dict[str, Any] = json.loads(line)
        if "user_error" in reply:
            cls = getattr(errors, reply["user_error"], errors.ProfileError)
            raise cls(reply["message"])
        return reply

    def _read_line(self, timeout_s: float) -> Any:
        """One reply line; None on timeout; ``_EOF`` when the child closed its stdout."""
        try:
            return self._lines.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def stop(self, kill: bool = False) -> int | None:
        """Stop the child (politely unless ``kill``); returns its exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if not kill and proc.poll() is None:
            try:
                assert proc.stdin is not None  # started with stdin=PIPE
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
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        return code


def _pump(stream: IO[bytes], lines: queue.Queue[Any]) -> None:
    """Move the child's reply lines into a queue (``_EOF`` at the end); portable, no select."""
    for raw in iter(stream.readline, b""):
        lines.put(raw.rstrip(b"\n"))
    lines.put(_EOF)


def _death_message(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the kernel's OOM killer?)" if name == "SIGKILL" else ""
        return f"the measuring process died from {name}{hint}"
    return f"the measuring process exited with code {code}"


class ProfileWorker:
    """A child process that measures ONNX models one after another.

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
        if provider not in _PROVIDER_NAMES:
            raise errors.DeviceError(f"unknown provider {provider!r}; choose cpu or cuda")
        self.provider = provider
        self.timeout_s = timeout_s
        self.fresh = fresh
        self._child = JsonChild("perfseer_rt.profile.child")
        self._used = False

    @property
    def hwm_reset(self) -> bool | None:
        """Whether the child can reset VmHWM (None before it started)."""
        return self._child.info.get("hwm_reset") if self._child.info else None

    @property
    def pid(self) -> int | None:
        return self._child.info.get("pid") if self._child.alive() else None

    def close(self) -> None:
        """Stop the child process."""
        self._child.stop()

    def __enter__(self) -> "ProfileWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self._child.stop(kill=True)
        except Exception:
            pass

    def measure(self, model: str | os.PathLike[str], *, batch: int | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None, threads: int = 1,
                settings: MeasureSettings | None = None,
                provider_options: Mapping[str, Any] | None = None, device_id: int = 0,
                timeout_s: float | None = None) -> dict[str, Any]:
        """Measure one model in the child; returns its record (no ``env`` yet).

        A crash or timeout of the child gives a record with status
        ``"error"``; the next call starts a new child. Raises the
        PerfSeerError subclass the child raised for a user error
        (unresolved shapes, CUDA that does not attach).
        """
        need_fresh = self.fresh or (self.hwm_reset is False and self.provider == "cpu")
        if self._child.running and need_fresh and self._used:
            self._child.stop()
        if not self._child.alive():
            self._child.stop(kill=True)
            self._child.start()
        req = {"op": "measure", "provider": self.provider, "model": os.fspath(model),
               "batch": batch, "threads": threads,
               "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
               "settings": (settings or default_settings(self.provider)).to_dict(),
               "provider_options": dict(provider_options or {}), "device_id": device_id}
        self._used = True
        try:
            return self._child.request(req, timeout_s or self.timeout_s)
        except ChildDied as exc:
            return failure_record(str(exc), status="error", model=os.fspath(model), batch=batch,
                                  provider_requested=_PROVIDER_NAMES[self.provider],
                                  threads=threads if self.provider == "cpu" else None)


def default_settings(provider: str) -> MeasureSettings:
    """``PRESETS[provider]``: CPU >= 10 runs and >= 0.5 s; CUDA >= 10 runs and >= 1 s (NVML window)."""
    return PRESETS["cuda" if provider == "cuda" else "cpu"]
