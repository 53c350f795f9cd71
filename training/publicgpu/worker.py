"""A long-lived export process, watched for time and memory by its parent.

Importing torch and timm costs ~20 s on the shared 2-core machine, more than
most exports, so one child process (``spawn``) exports model after model. The
parent sends one job at a time and waits for its answer; it kills the child
and answers ``failed`` when the job runs past its time limit, when the
child's resident memory passes the limit, or when the child dies (a crash in
the exporter). The next job then starts a fresh child. A child that keeps
more than :data:`RECYCLE_MB` resident after a job is replaced too (memory
left behind by a large model).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from pathlib import Path

#: A child keeping more than this resident after a job is replaced (MiB).
RECYCLE_MB = 3000
#: Seconds between two looks at the child while a job runs.
POLL_S = 0.5


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (300 characters at most)."""
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _child(conn: Connection) -> None:
    """The export process: one thread (its priority is the parent's: start the
    run under ``nice``); answers jobs until sent None."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    # the exporters print whole graphs on some failures: the reason travels in the answer
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    # deliberately lazy (torch and the exporter): torch reads the thread count when
    # first imported (set above), and the parent never needs torch
    import torch

    from training.publicgpu import export_one  # lazy: imports torch

    torch.set_num_threads(1)
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            fields = export_one.export(job["model"], job["img_size"], job["exporter"],
                                       Path(job["out"]), lean=bool(job.get("lean")))
            if job.get("batch"):
                fields["extract"] = export_one.check_extract(Path(job["out"]), job["batch"])
            answer = {"status": "ok", **fields}
        except Exception as exc:  # noqa: BLE001 - every failure is recorded with its reason
            answer = {"status": "failed", "reason": one_line(exc)}
        gc.collect()
        conn.send(answer)


class ExportWorker:
    """The parent's handle on the export process (see module doc).

    Args:
        timeout_s: limit of one job, seconds.
        mem_limit_mb: limit of the child's resident memory, MiB.
    """

    def __init__(self, timeout_s: float = 900.0, mem_limit_mb: float = 8000.0):
        self.timeout_s, self.mem_limit_mb = timeout_s, mem_limit_mb
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(10)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def _rss_mb(self) -> float:
        """The child's resident memory (``VmRSS`` in ``/proc``; 0 when gone), MiB."""
        if self._proc is None or self._proc.pid is None:
            return 0.0
        try:
            for line in Path(f"/proc/{self._proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def run(self, job: dict) -> dict:
        """Export one job (``model``, ``img_size``, ``exporter``, ``out``, ``batch``);
        the answer: ``status`` ok (with the export's fields) or failed (``reason``),
        plus ``seconds`` and ``peak_rss_mb`` (the child's, sampled every ``POLL_S``)."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        assert self._conn is not None and self._proc is not None
        t0 = time.monotonic()
        peak = 0.0
        self._conn.send(job)
        answer: dict | None = None
        while answer is None:
            if self._conn.poll(POLL_S):
                try:
                    answer = self._conn.recv()
                except EOFError:
                    code = self._proc.exitcode
                    self._kill()
                    answer = {"status": "failed", "reason": f"export process died (exit code {code})"}
                break
            rss = self._rss_mb()
            peak = max(peak, rss)
            elapsed = time.monotonic() - t0
            if rss > self.mem_limit_mb:
                self._kill()
                answer = {"status": "failed", "reason": f"over the memory limit: {rss:.0f} MiB "
                          f"resident > {self.mem_limit_mb:.0f} MiB"}
            elif elapsed > self.timeout_s:
                self._kill()
                answer = {"status": "failed", "reason": f"timeout: over {self.timeout_s:.0f} s"}
            elif not self._proc.is_alive():
                code = self._proc.exitcode
                self._kill()
                answer = {"status": "failed", "reason": f"export process died (exit code {code})"}
        answer["seconds"] = round(time.monotonic() - t0, 2)
        answer["peak_rss_mb"] = round(max(peak, self._rss_mb()))
        if self._proc is not None and self._rss_mb() > RECYCLE_MB:
            self.close()
        return answer

    def close(self) -> None:
        """Stop the child (politely, then by force)."""
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(10)
            except (BrokenPipeError, OSError):
                pass
        self._kill()
