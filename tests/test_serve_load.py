"""``perfseer-rt serve`` under load, against a live server on loopback
(tests/live_server.py): a bounded load at 1, 4 and 64 clients with a health
prober beside it; a job past its deadline; concurrent 250 MiB uploads.

The figures (throughput, p50/p95/p99, memory) are printed, and written as
JSON under ``$PERFSEER_RT_SERVE_REPORT`` when it is set (reports/serve/
holds them, with the command); the assertions are on behaviour, with
bounds that follow from the server's settings, not on speed.
"""

import asyncio
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
psutil = pytest.importorskip("psutil")

from tests.live_server import load, peak_rss_mb, probing, report, serving, tree_memory_mb  # noqa: E402
from tests.onnx_builders import single_op  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # live servers and hundreds of requests: ~1-3 min in all


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import onnx

    folder = tmp_path_factory.mktemp("models")
    (folder / "resnet18.onnx").write_bytes((ROOT / "examples" / "resnet18.onnx").read_bytes())
    (folder / "bert_base.onnx").write_bytes((ROOT / "tests" / "models" / "bert_base.onnx").read_bytes())
    onnx.save(single_op("Relu", [1, 64]), folder / "tiny.onnx")
    return folder


def metric(text: str, name: str) -> float:
    """One sample of the Prometheus text ``text`` (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


# settings of the load run: 2 jobs at once, 8 more may wait (10 places)
CONCURRENCY, QUEUE = 2, 8


def test_load_at_1_4_and_64_clients(tmp_path, models):
    """Liveness answers 200 every time whatever the load; every request is
    answered 200 or refused 429/503 with Retry-After; within the places
    (1 and 4 clients) nothing is refused; beyond them (64) some are, at once."""
    args = ["--model-dir", str(models), "--max-concurrency", str(CONCURRENCY),
            "--max-queue", str(QUEUE), "--queue-wait-s", "60"]
    rows, refused = [], 0
    with serving(tmp_path, *args) as s:
        for clients, per_client in ((1, 20), (4, 10), (64, 3)):
            with probing(s.url + "/healthz", tmp_path) as health:
                res = asyncio.run(load(s.url + "/predict", clients, per_client,
                                       {"path": "resnet18.onnx"}))
            row = res.summary()
            lat = sorted(t for _, t in health)
            row["healthz"] = {"probes": len(health), "ok": sum(c == 200 for c, _ in health),
                              "p50_ms": round(1000 * lat[len(lat) // 2], 1) if lat else None,
                              "max_ms": round(1000 * lat[-1], 1) if lat else None}
            rows.append(row)
            assert health and all(code == 200 for code, _ in health), row
            for code, _, after in res.answers:
                assert code in (200, 429, 503), row
                if code != 200:
                    assert after is not None and int(after) >= 1, row
            if clients <= CONCURRENCY + QUEUE:
                assert row["status"] == {"200": clients * per_client}, row
            else:
                assert row["status"].get("429", 0) > 0 and row["status"].get("200", 0) > 0, row
            refused += row["status"].get("429", 0)
        text = httpx.get(s.url + "/metrics").text
    assert metric(text, 'perfseer_rt_rejected_total{reason="queue_full"}') == refused
    probes = sum(r["healthz"]["probes"] for r in rows)  # (a prober stopped mid-request: +1 each)
    assert probes <= metric(text, 'perfseer_rt_requests_total{endpoint="/healthz",status="200"}') \
        <= probes + 3
    report("load", {"command": "PERFSEER_RT_SERVE_REPORT=reports/serve python -m pytest "
                    "tests/test_serve_load.py -k clients -s",
                    "server": f"perfseer-rt serve --max-concurrency {CONCURRENCY} --max-queue "
                              f"{QUEUE} --queue-wait-s 60",
                    "request": "POST /predict?path=resnet18.onnx (examples/resnet18.onnx, batch 1)",
                    "rows": rows})


def test_a_job_past_its_deadline_frees_its_worker(tmp_path, models):
    """With one job slot and a 1 s limit, BERT at 64 batch sizes is stopped
    (504), its worker process is killed, and the request queued behind it is
    served within a second of the 504; memory returns to where it was."""
    args = ["--model-dir", str(models), "--max-concurrency", "1", "--spare-workers", "1",
            "--timeout-s", "1"]
    slow = {"path": "bert_base.onnx", "dim": "seq=128", "batch": ",".join(map(str, range(1, 65)))}
    with serving(tmp_path, *args) as s:
        server = psutil.Process(s.proc.pid)
        workers_before = {p.pid for p in server.children(recursive=True)}
        idle = tree_memory_mb(s.proc.pid)

        async def run():
            async with httpx.AsyncClient(base_url=s.url, timeout=120) as c:
                t0 = time.perf_counter()
                slow_req = asyncio.create_task(c.post("/predict", params=slow))
                await asyncio.sleep(0.2)  # the slow job holds the only slot
                queued = asyncio.create_task(c.post("/predict", params={"path": "tiny.onnx"}))
                first = await slow_req
                t_504 = time.perf_counter() - t0
                second = await queued
                t_next = time.perf_counter() - t0
                return first, t_504, second, t_next

        first, t_504, second, t_next = asyncio.run(run())
        assert first.status_code == 504, first.text
        assert first.json() == {"error": "prediction took longer than 1 s; it was stopped",
                                "type": "Timeout"}
        assert second.status_code == 200, second.text
        assert t_next - t_504 < 1.0, (t_504, t_next)
        after = tree_memory_mb(s.proc.pid)
        gone = [pid for pid in workers_before if not psutil.pid_exists(pid)]
        text = httpx.get(s.url + "/metrics").text
    assert len(gone) == 1, gone  # the slow job's worker, and only it
    assert metric(text, 'perfseer_rt_worker_events_total{event="deadline"}') == 1
    assert metric(text, 'perfseer_rt_rejected_total{reason="deadline"}') == 1
    assert after["rss"] < idle["rss"] + 100, (idle, after)
    report("deadline", {"command": "PERFSEER_RT_SERVE_REPORT=reports/serve python -m pytest "
                        "tests/test_serve_load.py -k deadline -s",
                        "server": " ".join(["perfseer-rt serve", *args[2:]]),
                        "slow_request": "POST /predict?path=bert_base.onnx&dim=seq=128&batch=1,...,64",
                        "answered_504_after_s": round(t_504, 2),
                        "queued_request_served_s_after_504": round(t_next - t_504, 3),
                        "tree_rss_mb": {"idle": round(idle["rss"]), "after": round(after["rss"])}})


UPLOAD_MIB, UPLOADS = 250, 6


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    """A valid ONNX model of 250 MiB: one MatMul whose weight is 8192 x 8000 float32."""
    import onnx
    from onnx import TensorProto, helper

    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8192, 8000])
    w.raw_data = bytes(8192 * 8000 * 4)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8192])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8000])],
                              initializer=[w])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    path = tmp_path_factory.mktemp("big") / "big.onnx"
    onnx.save(m, path)
    assert abs(path.stat().st_size / 2**20 - UPLOAD_MIB) < 1
    return path


def test_memory_bounded_with_concurrent_250mb_uploads(tmp_path, big_model):
    """Six 250 MiB uploads at once: the server process never holds an upload
    (its peak RSS grows by less than 64 MiB), and the whole process tree
    stays under idle + max-concurrency x 3 x the model's size (only the jobs
    running hold a model; the others wait on disk)."""
    args = ["--max-concurrency", "2", "--max-queue", "4", "--max-upload-mb", "256",
            "--timeout-s", "600", "--queue-wait-s", "900", "--upload-dir", str(tmp_path)]
    size = big_model.stat().st_size
    bound_mb = None
    with serving(tmp_path, *args) as s:
        idle = tree_memory_mb(s.proc.pid)
        main_peak_before = peak_rss_mb(s.proc.pid)
        bound_mb = idle["rss"] + 2 * 3 * UPLOAD_MIB
        peak = dict(idle)
        done = threading.Event()

        def sample():
            while not done.is_set():
                for k, v in tree_memory_mb(s.proc.pid).items():
                    peak[k] = max(peak[k], v)
                time.sleep(0.1)

        async def upload(c, i):
            async def chunks():
                with open(big_model, "rb") as f:
                    while block := f.read(1 << 20):
                        yield block

            return await c.post("/predict", params={"name": f"big{i}.onnx"}, content=chunks(),
                                headers={"Content-Type": "application/octet-stream",
                                         "Content-Length": str(size)})

        async def run():
            async with httpx.AsyncClient(base_url=s.url, timeout=900) as c:
                return await asyncio.gather(*(upload(c, i) for i in range(UPLOADS)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.perf_counter()
        try:
            answers = asyncio.run(run())
        finally:
            done.set()
            sampler.join()
        wall = time.perf_counter() - t0
        main_peak = peak_rss_mb(s.proc.pid)
        after = tree_memory_mb(s.proc.pid)
    assert [a.status_code for a in answers] == [200] * UPLOADS, [a.text[:200] for a in answers]
    assert sorted(a.json()[0]["model"] for a in answers) == [f"big{i}.onnx" for i in range(UPLOADS)]
    assert list(tmp_path.glob("perfseer-rt-upload-*")) == []  # every upload removed
    assert main_peak - main_peak_before < 64, (main_peak_before, main_peak)
    assert peak["rss"] < bound_mb, (idle, peak, bound_mb)
    report("uploads", {"command": "PERFSEER_RT_SERVE_REPORT=reports/serve python -m pytest "
                       "tests/test_serve_load.py -k uploads -s",
                       "server": " ".join(["perfseer-rt serve", *args[:-2]]),
                       "uploads": f"{UPLOADS} concurrent POST /predict of a {UPLOAD_MIB} MiB ONNX "
                                  "model (raw body)",
                       "wall_s": round(wall, 1),
                       "server_process_peak_rss_mb": {"before": round(main_peak_before),
                                                      "after": round(main_peak)},
                       "tree_rss_mb": {"idle": round(idle["rss"]), "peak": round(peak["rss"]),
                                       "after": round(after["rss"]), "bound": round(bound_mb)},
                       "tree_pss_mb": {"idle": round(idle["pss"]), "peak": round(peak["pss"])}})
