"""``perfseer-rt serve`` against a live server: uvicorn started as a
subprocess on 127.0.0.1 (a free port), spoken to with httpx."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from tests.live_server import free_port, serving, wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet18.onnx"
UPLOAD_LIMIT_MB = 8

pytestmark = pytest.mark.slow  # a server start (~5 s on this machine)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    models = base / "models"
    (models / "sub").mkdir(parents=True)
    (models / "sub" / "resnet18.onnx").write_bytes(EXAMPLE.read_bytes())
    (models / "truncated.onnx").write_bytes(EXAMPLE.read_bytes()[:1000])
    secret = base / "outside.onnx"
    secret.write_bytes(EXAMPLE.read_bytes())
    (models / "link.onnx").symlink_to(secret)          # a symlink pointing outside
    uploads = base / "uploads"
    uploads.mkdir()
    port = free_port()
    log_path = base / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfseer_rt.cli", "serve", "--host", "127.0.0.1", "--port",
         str(port), "--model-dir", str(models), "--max-upload-mb", str(UPLOAD_LIMIT_MB),
         "--upload-dir", str(uploads)],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, log_path, 120, "/readyz")
    yield {"url": url, "log": log_path, "proc": proc, "models": models, "uploads": uploads}
    proc.terminate()
    proc.wait(timeout=30)
    log.close()
    assert "Traceback" not in log_path.read_text()


def no_traceback(resp):
    assert "Traceback" not in resp.text and "File \"" not in resp.text


def test_health_ready_devices_docs(server):
    url = server["url"]
    assert httpx.get(url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(url + "/readyz", timeout=30)
    assert ready.status_code == 200 and "cpu-amd-epyc-1t" in ready.json()["devices"]
    devices = httpx.get(url + "/devices").json()
    assert any(d["device"] == "cpu-amd-epyc-1t" for d in devices)
    assert httpx.get(url + "/docs").status_code == 200
    spec = httpx.get(url + "/openapi.json").json()
    assert "/predict" in spec["paths"] and "Result" in spec["components"]["schemas"]


def test_upload_gives_the_cli_json(server):
    import perfseer_rt

    resp = httpx.post(server["url"] + "/predict", params={"batch": "1,8", "name": "r18.onnx"},
                      content=EXAMPLE.read_bytes(),
                      headers={"Content-Type": "application/octet-stream"}, timeout=60)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert [(d["model"], d["batch"]) for d in doc] == [("r18.onnx", 1), ("r18.onnx", 8)]
    local = perfseer_rt.predict.predict(str(EXAMPLE), batch=8)[0]
    assert doc[1]["metrics"]["latency_ms"]["value"] == pytest.approx(
        local["metrics"]["latency_ms"]["value"], rel=1e-5)
    assert doc[1]["predictor"] == local["predictor"]
    assert set(doc[1]) == set(local)


def test_check_gives_the_python_verdict(server):
    """POST /check answers what perfseer_rt.predict.check answers, each check
    naming the bound that decided it (judged_by)."""
    import perfseer_rt

    local = perfseer_rt.predict.check(str(EXAMPLE), max_memory_mb=1e6, max_latency_ms=1e-3)
    resp = httpx.post(server["url"] + "/check",
                      params={"max_memory_mb": 1e6, "max_latency_ms": 1e-3},
                      content=EXAMPLE.read_bytes(),
                      headers={"Content-Type": "application/octet-stream"}, timeout=60)
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["ok"] is False and doc["checks"] == local["checks"]
    assert [c["ok"] for c in doc["checks"]] == [False, True]
    assert all(c["judged_by"] in ("interval_upper", "value") for c in doc["checks"])


def test_a_gpu_training_step_over_http(server):
    """?mode=train on a GPU-prior device answers what predict(mode="train")
    answers, memory by part; an unknown mode is a 4xx with the CLI's line."""
    import perfseer_rt

    resp = httpx.post(server["url"] + "/predict", params={"path": "sub/resnet18.onnx", "batch": 16,
                                                          "device": "h100", "mode": "train"}, timeout=60)
    assert resp.status_code == 200, resp.text
    (doc,) = resp.json()
    local = perfseer_rt.predict.predict(str(EXAMPLE), batch=16, device="h100", mode="train")[0]
    assert doc["mode"] == "train" and doc["metrics"]["step_ms"] == local["metrics"]["step_ms"]
    assert "optimizer_state" in doc["metrics"]["peak_mem_mb"]["parts"]
    verdict = httpx.post(server["url"] + "/check", params={"path": "sub/resnet18.onnx", "batch": 16,
                                                           "device": "h100", "mode": "train",
                                                           "max_latency_ms": 1e6}, timeout=60).json()
    assert verdict["ok"] and verdict["checks"][0]["metric"] == "step_ms"
    bad = httpx.post(server["url"] + "/predict", params={"path": "sub/resnet18.onnx", "mode": "fly"},
                     timeout=60)
    assert 400 <= bad.status_code < 500 and "fly" in bad.json()["error"]
    no_traceback(bad)


def test_path_inside_the_model_folder(server):
    resp = httpx.post(server["url"] + "/predict", params={"path": "sub/resnet18.onnx"},
                      timeout=60)
    assert resp.status_code == 200 and resp.json()[0]["model"] == "sub/resnet18.onnx"


@pytest.mark.parametrize("path", ["../outside.onnx", "sub/../../outside.onnx", "link.onnx",
                                  "/etc/passwd", "/root/.ssh/id_rsa", "../nothing-here.onnx",
                                  "missing.onnx", "sub", "/"])
def test_paths_outside_or_missing_answer_alike(server, path):
    """Outside the folder (existing or not, by .., by an absolute path or a
    link out), missing inside, or not a file: one status, one message."""
    resp = httpx.post(server["url"] + "/predict", params={"path": path}, timeout=30)
    assert resp.status_code == 404, resp.text
    assert resp.json() == {"error": f"no model file {path!r} under the model folder (a path is "
                                    "relative to the folder and stays inside it)",
                           "type": "ModelNotFound"}
    no_traceback(resp)


@pytest.mark.parametrize("raw", ["%00", "sub%00/resnet18.onnx", "%ff", "a%0ab", "%7f"])
def test_bad_bytes_in_a_path_are_400(server, raw):
    resp = httpx.post(server["url"] + "/predict?path=" + raw, timeout=30)
    assert resp.status_code == 400, resp.text
    assert resp.json()["type"] == "OptionError" and resp.json()["error"].startswith("path: ")
    no_traceback(resp)


def test_truncated_model_is_422_with_the_cli_message(server):
    from click.testing import CliRunner

    from perfseer_rt.cli import main

    for kwargs in ({"params": {"path": "truncated.onnx"}},
                   {"content": EXAMPLE.read_bytes()[:1000]}):
        resp = httpx.post(server["url"] + "/predict", timeout=30, **kwargs)
        assert resp.status_code == 422, resp.text
        body = resp.json()
        assert body["type"] == "ModelLoadError" and "truncated or corrupt" in body["error"]
        no_traceback(resp)
    # the same one line as the CLI's, naming the model as the client did
    trunc = server["models"] / "truncated.onnx"
    cli = CliRunner().invoke(main, ["predict", str(trunc)])
    resp = httpx.post(server["url"] + "/predict", params={"path": "truncated.onnx"})
    assert cli.stderr.strip() == "perfseer-rt: error: " + resp.json()["error"].replace(
        "truncated.onnx", str(trunc))
    assert str(server["models"]) not in resp.text  # no server paths leak


def test_one_gigabyte_upload_is_refused_early(server):
    sent = [0]
    chunk = bytes(1 << 20)  # one MiB, reused: the client allocates nothing more

    def gigabyte():
        for _ in range(1024):
            sent[0] += len(chunk)
            yield chunk

    t0 = time.monotonic()
    resp = httpx.post(server["url"] + "/predict", content=gigabyte(), timeout=60)
    assert resp.status_code == 413, resp.text
    assert f"{UPLOAD_LIMIT_MB} MiB" in resp.json()["error"]
    assert sent[0] < 1 << 30, "the whole gigabyte went through"
    print(f"1 GiB upload: refused after the client sent {sent[0] >> 20} MiB")
    assert time.monotonic() - t0 < 30
    # and declared up front: refused before any body byte is read
    resp = httpx.post(server["url"] + "/predict", content=gigabyte(),
                      headers={"Content-Length": str(1 << 30)}, timeout=60)
    assert resp.status_code == 413
    # the server is still fine
    assert httpx.get(server["url"] + "/healthz").status_code == 200


def test_a_client_leaving_mid_upload(server):
    """The upload's temporary file is removed, nothing is logged as a
    traceback (checked when the server stops), and the server goes on."""
    import socket

    with socket.create_connection(("127.0.0.1", int(server["url"].rsplit(":", 1)[1]))) as s:
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
                  b"Content-Length: 1000000\r\n\r\n" + bytes(1000))
        time.sleep(0.5)
    deadline = time.monotonic() + 10
    while list(server["uploads"].iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(server["uploads"].iterdir()) == []
    assert httpx.get(server["url"] + "/healthz").status_code == 200
    resp = httpx.post(server["url"] + "/predict", content=EXAMPLE.read_bytes(), timeout=60)
    assert resp.status_code == 200 and list(server["uploads"].iterdir()) == []


def test_no_model_folder_reads_no_paths(tmp_path):
    with serving(tmp_path, "--max-concurrency", "1", "--spare-workers", "0") as s:
        resp = httpx.post(s.url + "/predict", params={"path": "x.onnx"})
    assert resp.status_code == 403 and "--model-dir" in resp.json()["error"]


def test_gate_hands_out_in_order_and_times_out():
    """The queue's mechanism (perfseer_rt.serve.pool.Gate): waiters are
    served first come, first served; one past its wait limit gets
    WaitTimeout and takes nothing."""
    import asyncio

    from perfseer_rt.serve.pool import Gate, WaitTimeout

    async def main():
        gate = Gate()
        got = []

        async def waiter(i, wait_s):
            try:
                got.append((i, await gate.take(wait_s)))
            except WaitTimeout:
                got.append((i, "timeout"))

        tasks = [asyncio.create_task(waiter(i, 5.0 if i != 1 else 0.05)) for i in range(3)]
        await asyncio.sleep(0.2)
        assert gate.waiting == 2  # 1 gave up
        gate.put("a")
        gate.put("b")
        await asyncio.gather(*tasks)
        return got, gate.available

    got, left = asyncio.run(main())
    assert sorted(got) == [(0, "a"), (1, "timeout"), (2, "b")] and left == 0


def test_a_worker_whose_server_left_ends_quietly():
    """A worker still warming when the server shuts down finds the pipe
    closed when it reports ready: it ends (returns) instead of raising
    BrokenPipeError into the server's log."""
    import multiprocessing as mp

    from perfseer_rt.serve.pool import worker_main

    server_end, worker_end = mp.Pipe()
    server_end.close()
    worker_main(worker_end)  # warms, then finds nobody to report to
    worker_end.close()
