"""Helpers for tests that start a real server process on loopback."""

from __future__ import annotations

import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def report(name: str, doc: dict) -> None:
    """Print a measurement, with when and where it was made; also write it as
    ``$PERFSEER_RT_SERVE_REPORT/<name>.json`` when that variable is set
    (reports/serve/ keeps them)."""
    doc = {"measured": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "machine": f"{cpu_name()}, {os.cpu_count()} CPUs",
           "load_average_1min": round(os.getloadavg()[0], 2), **doc}
    print(json.dumps(doc, indent=1))
    out = os.environ.get("PERFSEER_RT_SERVE_REPORT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0,
                 endpoint: str = "/healthz") -> None:
    """Poll ``url + endpoint`` until it answers 200; fail with the server's log if the
    process exits or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + endpoint, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"server did not start in {timeout_s:.0f} s\n{log.read_text()}"
        time.sleep(0.2)


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path


@contextmanager
def serving(tmp_path: Path, *args: str, ready_timeout_s: float = 120.0) -> Iterator[Server]:
    """``perfseer-rt serve ARGS`` on a free loopback port, ready (``/readyz``
    200: its workers are warm); stopped with SIGTERM at the end, which must
    end it cleanly (exit 0, no traceback in its log)."""
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "perfseer_rt.cli", "serve", "--host",
                                 "127.0.0.1", "--port", str(port), *args],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    server = Server(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        wait_healthy(server.url, proc, log_path, ready_timeout_s, "/readyz")
        yield server
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
    text = log_path.read_text()
    assert code in (0, -signal.SIGTERM), text[-3000:]  # uvicorn ends on the signal it got, after a clean shutdown
    assert "Application shutdown complete" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]


def tree_memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of a process and all its descendants (the server,
    its fork server and workers), MiB: ``rss`` summed (pages shared between
    forked workers counted in each), ``pss`` (each shared page split among
    its sharers: the tree's true share) and the ``main`` process's RSS."""
    import psutil

    main = psutil.Process(pid)
    main_rss = main.memory_info().rss
    try:
        procs = [main, *main.children(recursive=True)]
    except psutil.NoSuchProcess:  # one exited while the tree was walked
        procs = [main]
    rss = pss = 0.0
    for p in procs:
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return {"rss": rss / 2**20, "pss": pss / 2**20, "main": main_rss / 2**20}


def peak_rss_mb(pid: int) -> float:
    """The kernel's high-water mark of a process's resident memory (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@dataclass
class LoadResult:
    """What a bounded load run saw: per request its status, seconds and
    Retry-After header (None when absent)."""

    clients: int
    wall_s: float
    answers: list[tuple[int, float, str | None]]

    def summary(self) -> dict:
        import numpy as np

        ok = [s for code, s, _ in self.answers if code == 200]
        codes: dict[str, int] = {}
        for code, _, _ in self.answers:
            codes[str(code)] = codes.get(str(code), 0) + 1
        pct = (np.percentile(np.array(ok) * 1000, [50, 95, 99]).round(1).tolist() if ok
               else [None, None, None])
        return {"clients": self.clients, "requests": len(self.answers), "status": codes,
                "ok_per_s": round(len(ok) / self.wall_s, 2), "wall_s": round(self.wall_s, 2),
                "p50_ms": pct[0], "p95_ms": pct[1], "p99_ms": pct[2]}


async def load(url: str, clients: int, per_client: int, params: dict,
               timeout_s: float = 300.0) -> LoadResult:
    """``clients`` concurrent clients, each POSTing ``per_client`` requests to
    ``url`` one after another (no retries; every answer is kept)."""
    import asyncio

    answers: list[tuple[int, float, str | None]] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(c: httpx.AsyncClient) -> None:
        for _ in range(per_client):
            t0 = time.perf_counter()
            r = await c.post(url, params=params)
            answers.append((r.status_code, time.perf_counter() - t0, r.headers.get("retry-after")))

    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c) for _ in range(clients)))
        wall = time.perf_counter() - t0
    return LoadResult(clients, wall, answers)


_PROBE = """
import sys, time, httpx
url, out, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
with httpx.Client(timeout=10) as c, open(out, "w", buffering=1) as f:
    while True:
        t0 = time.perf_counter()
        try:
            code = c.get(url).status_code
        except httpx.TransportError:
            code = 0
        f.write(f"{code} {time.perf_counter() - t0:.6f}\\n")
        time.sleep(interval)
"""


@contextmanager
def probing(url: str, tmp_path: Path, interval_s: float = 0.05) -> Iterator[list[tuple[int, float]]]:
    """GET ``url`` every ``interval_s`` from a process of its own (so the load
    generator's event loop does not delay it) while the block runs; the list
    yielded is filled with each answer's status and seconds at the end (a
    transport error counts as status 0)."""
    out = tmp_path / f"probe-{time.monotonic_ns()}.txt"
    proc = subprocess.Popen([sys.executable, "-c", _PROBE, url, str(out), str(interval_s)])
    seen: list[tuple[int, float]] = []
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text()):  # probing before the block starts
            assert proc.poll() is None and time.monotonic() < deadline, "the prober did not start"
            time.sleep(0.05)
        yield seen
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    for line in out.read_text().splitlines():
        code, secs = line.split()
        seen.append((int(code), float(secs)))
