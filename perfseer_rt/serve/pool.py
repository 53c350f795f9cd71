"""Worker processes that run the service's jobs, and can be stopped.

Extraction and prediction run in worker processes (forked from a
``forkserver`` that has imported perfseer-rt once, so a new worker is ready
in well under a second), one job at a time each. At most ``size`` jobs run
at once; a request waits for a slot in FIFO order up to its wait limit.
A job past its deadline has its worker killed (SIGKILL: the CPU and memory it
held are freed at once, whatever C++ code it was in) and a fresh worker takes
its place; ``spare`` workers beyond ``size`` are kept started and warm so
that the next request finds one at once. A worker whose resident memory
passes ``max_rss_mb`` after a job is retired the same way.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from onnx import TensorProto, helper

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.predict.api import predict
from perfseer_rt.serve.errors import HTTPError, one_line, status_for
from perfseer_rt.serve.jobs import JOBS

#: Imported once by the forkserver, so every worker starts with them.
PRELOAD = ["perfseer_rt.serve.jobs"]
#: Seconds before a worker that failed to start is tried again.
RESTART_BACKOFF_S = 5.0

T = TypeVar("T")


class WaitTimeout(Exception):
    """No slot (or no worker) within the wait limit."""


# ------------------------------------------------------------ worker side
def rss_mb() -> float:
    """This process's resident memory, MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _warm() -> None:
    """Predict a one-node model on the default device: the predictor, its
    sessions and the extractor are loaded before the first job needs them
    (and a broken install shows here, on /readyz)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    predict(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def _send(conn: Connection, msg: dict[str, Any]) -> bool:
    """Send ``msg`` to the server; False when the server has closed the pipe
    (it is shutting down, or gave up on this worker): the worker then ends
    quietly instead of dying with a traceback in the server's log."""
    try:
        conn.send(msg)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return False
    return True


def worker_main(conn: Connection) -> None:
    """A worker's loop: ``("ready", pid)`` once warm, then one reply per job
    message ``(job, path, label, kwargs)`` until None or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops its workers itself
    try:
        _warm()
    except Exception as exc:  # noqa: BLE001 - reported to the server, which says so on /readyz
        _send(conn, {"state": "failed", "error": f"{type(exc).__name__}: {one_line(exc)}"})
        return
    if not _send(conn, {"state": "ready", "pid": os.getpid(), "rss_mb": rss_mb()}):
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        job, path, label, kwargs = msg
        reply: dict[str, Any]
        try:
            reply = {"state": "ok", "result": JOBS[job][1](path, label, kwargs)}
        except PerfSeerError as exc:
            reply = {"state": "error", "status": status_for(exc), "error": one_line(exc),
                     "type": type(exc).__name__}
        except MemoryError:
            reply = {"state": "error", "status": 413, "type": "TooLarge",
                     "error": "the model needs more memory than this server's workers have"}
        except Exception as exc:  # noqa: BLE001 - an internal error, logged by the server
            reply = {"state": "internal", "error": f"{type(exc).__name__}: {one_line(exc)}"}
        reply["rss_mb"] = rss_mb()
        if not _send(conn, reply):
            return


# ------------------------------------------------------------ server side
@dataclass(eq=False)
class Worker:
    process: BaseProcess
    conn: Connection
    rss_mb: float = 0.0


class Gate(Generic[T]):
    """Items handed out in FIFO order to waiters, each with its own time limit."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiters: deque[asyncio.Future[T]] = deque()

    @property
    def waiting(self) -> int:
        return sum(not w.done() for w in self._waiters)

    @property
    def available(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(item)
                return
        self._items.append(item)

    def take_now(self) -> T | None:
        return self._items.popleft() if self._items and not self.waiting else None

    async def take(self, timeout_s: float) -> T:
        """The next item; :class:`WaitTimeout` after ``timeout_s``."""
        now = self.take_now()
        if now is not None:
            return now
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._waiters.append(fut)

        def expire() -> None:
            if not fut.done():
                fut.set_exception(WaitTimeout())

        timer = loop.call_later(max(timeout_s, 0.0), expire)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.put(fut.result())  # handed over as we were cancelled: pass it on
            raise
        finally:
            timer.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)


def _roundtrip(conn: Connection, msg: Any) -> Any:
    conn.send(msg)
    return conn.recv()


class Pool:
    """``size`` job slots over ``size + spare`` worker processes."""

    def __init__(self, size: int, spare: int = 1, max_rss_mb: float = 2048.0,
                 on_event: Callable[[str], None] | None = None) -> None:
        self.size, self.spare, self.max_rss_mb = size, spare, max_rss_mb
        self.on_event = on_event or (lambda _: None)
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        self._threads = ThreadPoolExecutor(max_workers=2 * (size + spare) + 2,
                                           thread_name_prefix="perfseer-rt-pool")
        self._slots: Gate[int] = Gate()
        for i in range(size):
            self._slots.put(i)
        self._workers: Gate[Worker] = Gate()
        self._alive: set[Worker] = set()
        self.starting = 0
        self.running = 0
        self.error: str | None = None
        self.job_s = 1.0  # moving average of a job's seconds, for Retry-After
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()

    # ---------------------------------------------------------------- state
    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return self._slots.waiting

    @property
    def ready(self) -> int:
        """Started, warm workers with no job."""
        return self._workers.available

    def expected_wait_s(self, ahead: int | None = None) -> float:
        """About how long a request arriving now would wait for a slot."""
        ahead = self.waiting + self.running if ahead is None else ahead
        return self.job_s * max(1, ahead - self.size + 1) / self.size

    # ---------------------------------------------------------------- life
    async def start(self) -> None:
        for _ in range(self.size + self.spare):
            self._spawn()

    async def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        loop = asyncio.get_running_loop()
        for w in list(self._alive):
            try:
                w.conn.send(None)
            except OSError:
                pass
        await asyncio.gather(*(loop.run_in_executor(self._threads, self._stop, w) for w in list(self._alive)))
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _stop(self, w: Worker, grace_s: float = 5.0) -> None:
        w.process.join(grace_s)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5.0)
        w.conn.close()
        self._alive.discard(w)

    def _spawn(self) -> None:
        if self._closed:
            return
        self.starting += 1
        task = asyncio.get_running_loop().create_task(self._start_one())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            w, hello = await loop.run_in_executor(self._threads, self._launch)
        except Exception as exc:  # noqa: BLE001 - the fork server failed: say so, retry later
            w, hello = None, {"state": "failed", "error": f"{type(exc).__name__}: {one_line(exc)}"}
        self.starting -= 1
        if w is not None and hello.get("state") == "ready" and not self._closed:
            self.error = None
            w.rss_mb = float(hello.get("rss_mb", 0.0))
            self._alive.add(w)
            self._workers.put(w)
            self.on_event("started")
            return
        if w is not None:
            await loop.run_in_executor(self._threads, self._stop, w, 1.0)
        if self._closed:
            return
        self.error = str(hello.get("error", "the worker exited while starting"))
        self.on_event("failed")
        await asyncio.sleep(RESTART_BACKOFF_S)
        self._spawn()

    def _launch(self) -> tuple[Worker, dict[str, Any]]:
        ours, theirs = self._ctx.Pipe()
        proc = self._ctx.Process(target=worker_main, args=(theirs,), daemon=True,
                                 name="perfseer-rt-worker")
        proc.start()
        theirs.close()
        w = Worker(proc, ours)
        try:
            hello = ours.recv()
        except (EOFError, OSError):
            proc.join(5.0)
            hello = {"state": "failed", "error": f"the worker exited while starting "
                                                 f"(exit code {proc.exitcode})"}
        return w, hello

    def _replace(self, w: Worker, reason: str, kill: bool) -> None:
        """Stop ``w`` (SIGKILL when ``kill``, else ask it to exit) and start another."""
        if kill:
            w.process.kill()
        else:
            try:
                w.conn.send(None)
            except OSError:
                pass
        loop = asyncio.get_running_loop()
        loop.run_in_executor(self._threads, self._stop, w)
        self.on_event(reason)
        self._spawn()

    # ---------------------------------------------------------------- jobs
    async def run(self, job: str, path: str, label: str, kwargs: dict[str, Any], *,
                  wait_s: float, timeout_s: float) -> Any:
        """The job's result.

        Raises:
            WaitTimeout: no slot or worker within ``wait_s``.
            HTTPError: 504 past ``timeout_s`` (the worker is killed), the
                job's user error (4xx), or 500 for an internal error or a
                worker that died.
        """
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        slot = await self._slots.take(wait_s)
        try:
            w = await self._workers.take(max(wait_s - (loop.time() - t0), 0.0))
            return await self._on(w, (job, path, label, kwargs), timeout_s)
        finally:
            self._slots.put(slot)

    async def _on(self, w: Worker, msg: Any, timeout_s: float) -> Any:
        loop = asyncio.get_running_loop()
        self.running += 1
        start = time.monotonic()
        fut = loop.run_in_executor(self._threads, _roundtrip, w.conn, msg)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved, never logged
        try:
            reply = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            self._replace(w, "deadline", kill=True)
            raise HTTPError(504, f"prediction took longer than {timeout_s:g} s; it was stopped",
                            "Timeout") from None
        except asyncio.CancelledError:
            self._replace(w, "cancelled", kill=True)
            raise
        except (EOFError, OSError):
            self._replace(w, "crashed", kill=True)
            raise HTTPError(500, "the worker process died during the job (out of memory?); it "
                            "was replaced", "WorkerDied") from None
        finally:
            self.running -= 1
        self.job_s = 0.8 * self.job_s + 0.2 * (time.monotonic() - start)
        w.rss_mb = float(reply.get("rss_mb", 0.0))
        if w.rss_mb > self.max_rss_mb:
            self._replace(w, "memory", kill=False)
        else:
            self._workers.put(w)
        if reply["state"] == "ok":
            return reply["result"]
        if reply["state"] == "error":
            raise HTTPError(int(reply["status"]), str(reply["error"]), str(reply["type"]))
        raise RuntimeError(str(reply["error"]))
