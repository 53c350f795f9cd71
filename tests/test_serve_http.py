"""Every question over HTTP, against a live server on loopback: the CLI's
options by the same names (dims, input shapes, precision, mode, metrics,
predictor, MIG profile), the model as a raw body, a multipart form, a JSON
body with a path or ?path=; a 415 naming the accepted types; one error shape
for every 4xx; the OpenAPI page generated from the options table."""

import json
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from click.testing import CliRunner  # noqa: E402

from perfseer_rt.cli import main  # noqa: E402
from perfseer_rt.predict.budget import check  # noqa: E402
from perfseer_rt.predict.many import predict_many  # noqa: E402
from perfseer_rt.predict.options import options_for  # noqa: E402
from tests.live_server import serving  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BERT = ROOT / "tests" / "models" / "bert_base.onnx"
RESNET = ROOT / "examples" / "resnet18.onnx"
pytestmark = pytest.mark.slow  # one live server (~10 s to start here)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-http")
    models = base / "models"
    models.mkdir()
    (models / "bert_base.onnx").write_bytes(BERT.read_bytes())
    (models / "resnet18.onnx").write_bytes(RESNET.read_bytes())
    with serving(base, "--model-dir", str(models), "--max-upload-mb", "16", "--max-batches", "8") as s:
        yield s.url


def post(url, endpoint="/predict", **kwargs):
    return httpx.post(url + endpoint, timeout=120, **kwargs)


def metrics_of(results):
    return [(r["batch"], {k: m["value"] for k, m in r["metrics"].items()}) for r in results]


def test_bert_with_dim_in_every_body_form(url):
    """?path=, a raw body, a multipart form (options as form fields) and a
    JSON body all answer what predict_many answers for BERT at seq 128."""
    local = predict_many([str(BERT)], [1, 4], dims={"seq": 128}, progress=False)
    answers = {
        "path": post(url, params=[("path", "bert_base.onnx"), ("dim", "seq=128"), ("batch", "1,4")]),
        "raw": post(url, params={"dim": "seq=128", "batch": "1,4", "name": "bert_base.onnx"},
                    content=BERT.read_bytes(), headers={"Content-Type": "application/octet-stream"}),
        "multipart": post(url, files={"file": ("bert_base.onnx", BERT.read_bytes())},
                          data={"dim": "seq=128", "batch": "1,4"}),
        "json": post(url, json={"path": "bert_base.onnx", "dim": ["seq=128"], "batch": "1,4"}),
    }
    for how, resp in answers.items():
        assert resp.status_code == 200, (how, resp.text)
        doc = resp.json()
        assert [r["model"] for r in doc] == ["bert_base.onnx"] * 2, how
        got, want = metrics_of(doc), metrics_of(local)
        assert [b for b, _ in got] == [1, 4]
        for (_, g), (_, w) in zip(got, want):
            assert g == pytest.approx(w, rel=1e-6), how


def test_input_shapes_precision_metrics_and_mig(url):
    resp = post(url, params=[("path", "bert_base.onnx"), ("input", "input_ids:2x64"),
                             ("input", "attention_mask:2x64"), ("device", "h100"),
                             ("precision", "amp-bf16"), ("metrics", "latency_ms,peak_mem_mb")])
    assert resp.status_code == 200, resp.text
    (doc,) = resp.json()
    local = predict_many([str(BERT)], [None], device="h100", precision="amp-bf16",
                         input_shapes={"input_ids": (2, 64), "attention_mask": (2, 64)},
                         metrics=["latency_ms", "peak_mem_mb"], progress=False)[0]
    assert doc["batch"] == 2 and doc["precision"] == local["precision"] == "amp-bf16"
    assert set(doc["metrics"]) == {"latency_ms", "peak_mem_mb"}
    assert doc["metrics"]["latency_ms"]["value"] == pytest.approx(local["metrics"]["latency_ms"]["value"])
    assert doc["mig"] == local["mig"] and doc["mig"]["profile"]  # the smallest slice that holds it


def test_a_training_step_on_a_mig_slice_with_every_gpu_option(url):
    """optimizer, layout, power_limit and mig_profile: the CLI's GPU options,
    by the same names, give what predict_many gives."""
    params = {"path": "bert_base.onnx", "dim": "seq=128", "device": "h100", "mode": "train",
              "precision": "amp-fp16", "optimizer": "sgd", "layout": "nhwc", "power_limit": "300",
              "mig_profile": "3g.40gb"}
    resp = post(url, params=params)
    assert resp.status_code == 200, resp.text
    (doc,) = resp.json()
    local = predict_many([str(BERT)], [None], dims={"seq": 128}, device="h100", mode="train",
                         precision="amp-fp16", optimizer="sgd", layout="nhwc", power_limit_w=300.0,
                         mig_profile="3g.40gb", progress=False)[0]
    assert doc["device"] == local["device"] and "3g.40gb" in doc["device"]
    assert (doc["optimizer"], doc["layout"], doc["mode"]) == ("sgd", "nhwc", "train")
    assert {k: m["value"] for k, m in doc["metrics"].items()} == pytest.approx(
        {k: m["value"] for k, m in local["metrics"].items()})
    for bad, piece in ((("optimizer", "lion"), "optimizer 'lion' is not one of"),
                       (("power_limit", "0"), "power_limit '0': expected watts"),
                       (("layout", "nwhc"), "layout 'nwhc' is not one of")):
        resp = post(url, params={**params, bad[0]: bad[1]})
        assert resp.status_code == 400 and piece in resp.json()["error"], resp.text


def test_predictor_choice_and_training_step(url):
    devices = httpx.get(url + "/devices").json()
    cpu = next(d for d in devices if d["device"] == "cpu-amd-epyc-1t")
    other = next(m for m in cpu["models"] if m != cpu["default_model"])
    resp = post(url, params={"path": "resnet18.onnx", "model": other})
    assert resp.status_code == 200 and resp.json()[0]["predictor"]["model"] == other
    train = post(url, params={"path": "bert_base.onnx", "dim": "seq=128", "device": "h100",
                              "mode": "train"})
    assert train.status_code == 200 and "step_ms" in train.json()[0]["metrics"], train.text


def test_check_and_inspect_take_the_same_options(url):
    resp = post(url, "/check", params={"path": "bert_base.onnx", "dim": "seq=128",
                                       "max_memory_mb": "4096"})
    assert resp.status_code == 200, resp.text
    local = check(str(BERT), dims={"seq": 128}, max_memory_mb=4096)
    assert resp.json()["checks"] == local["checks"]
    table = post(url, "/inspect", files={"file": ("b.onnx", BERT.read_bytes())},
                 data={"dim": "seq=32", "batch": "2"})
    assert table.status_code == 200, table.text
    cli = CliRunner().invoke(main, ["inspect", str(BERT), "--dim", "seq=32", "--batch", "2", "--json"])
    assert cli.exit_code == 0, cli.output
    want = json.loads(cli.stdout)
    assert {**table.json(), "model": None} == {**want, "model": None}
    assert table.json()["input_shapes"] == {"input_ids": [2, 32], "attention_mask": [2, 32]}


def test_415_names_the_accepted_types(url):
    for kind in ("text/plain", "application/x-www-form-urlencoded"):
        resp = post(url, content=b"x=1", headers={"Content-Type": kind})
        assert resp.status_code == 415, resp.text
        body = resp.json()
        assert body["type"] == "UnsupportedMediaType"
        for accepted in ("application/octet-stream", "multipart/form-data", "application/json"):
            assert accepted in body["error"]


BAD = [  # (request, status, a piece of the message)
    ({"params": {"path": "resnet18.onnx", "mode": "foo"}}, 400, "mode 'foo' is not one of"),
    ({"params": {"path": "resnet18.onnx", "foo": "1"}}, 400, "unknown parameter 'foo'"),
    ({"params": [("path", "resnet18.onnx"), ("batch", "1"), ("batch", "2")]}, 400, "given 2 times"),
    ({"params": {"path": "resnet18.onnx", "batch": "0"}}, 400, "batch '0': expected positive"),
    ({"params": {"path": "resnet18.onnx", "batch": "1,2,3,4,5,6,7,8,9"}}, 400, "at most 8"),
    ({"params": {"path": "resnet18.onnx", "batch": "100000"}}, 400, "batch sizes up to"),
    ({"params": {"path": "bert_base.onnx", "dim": "seq"}}, 400, "dim 'seq': expected NAME=VALUE"),
    ({"params": {"path": "bert_base.onnx", "dim": "seq=9999999"}}, 400, "dims up to"),
    ({"params": {"path": "bert_base.onnx", "input": "input_ids"}}, 400, "input 'input_ids'"),
    ({"params": {"path": "resnet18.onnx", "device": "tpu"}}, 400, "unknown device 'tpu'"),
    ({"params": {"path": "resnet18.onnx", "metrics": "joy"}}, 400, "does not predict joy"),
    ({"params": {"path": "resnet18.onnx", "precision": "fp8"}}, 400, "precision 'fp8'"),
    ({"params": {"path": "resnet18.onnx", "mig_profile": "9g.1tb", "device": "h100"}}, 400,
     "9g.1tb"),
    ({"params": {"path": "bert_base.onnx"}}, 422, "--dim seq=N"),
    ({}, 422, "no model"),
    ({"params": {"path": "resnet18.onnx"}, "content": RESNET.read_bytes(),
      "headers": {"Content-Type": "application/octet-stream"}}, 400, "give one of them"),
    ({"params": {"path": "resnet18.onnx"}, "json": {"dim": ["seq=1"]}}, 400, "in one of them"),
    ({"json": {"path": "resnet18.onnx", "batch": {"a": 1}}}, 400, "JSON key 'batch'"),
    ({"json": ["resnet18.onnx"]}, 400, "must be an object"),
    ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, "does not parse"),
    ({"json": {"path": "resnet18.onnx"}, "params": {"path": "resnet18.onnx"}}, 400, "in one of them"),
    ({"files": [("file", ("a.onnx", b"x")), ("file", ("b.onnx", b"y"))]}, 400, "more than one file"),
    ({"files": {"dim": (None, "seq=1")}}, 422, "no model"),
    ({"content": b"--x\r\nbroken", "headers": {"Content-Type": "multipart/form-data; boundary=x"}},
     400, "multipart"),
    ({"content": bytes(17 << 20), "headers": {"Content-Type": "application/octet-stream"}}, 413,
     "limit of 16 MiB"),
]


@pytest.mark.parametrize("kwargs,status,piece", BAD, ids=[b[2][:30] for b in BAD])
def test_every_4xx_has_one_shape(url, kwargs, status, piece):
    resp = post(url, **kwargs)
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error", "type"} and "\n" not in body["error"], body
    assert piece in body["error"], body
    assert "Traceback" not in resp.text and "detail" not in body


@pytest.mark.parametrize("endpoint,params,piece", [
    ("/check", {"max_memory_mb": "inf"}, "max_memory_mb 'inf': expected a positive, finite"),
    ("/check", {"max_memory_mb": "nan"}, "max_memory_mb 'nan'"),
    ("/check", {"max_latency_ms": "-1"}, "max_latency_ms '-1'"),
    ("/check", {}, "give at least one budget"),
    ("/inspect", {"device": "h100"}, "unknown parameter 'device'"),
])
def test_budgets_must_be_finite(url, endpoint, params, piece):
    resp = post(url, endpoint, params={"path": "resnet18.onnx", **params})
    assert resp.status_code == 400 and piece in resp.json()["error"], resp.text


def test_routes_and_methods_answer_in_the_same_shape(url):
    for method, path, status in (("GET", "/nothing", 404), ("GET", "/predict", 405),
                                 ("DELETE", "/healthz", 405)):
        resp = httpx.request(method, url + path)
        assert resp.status_code == status and set(resp.json()) == {"error", "type"}, resp.text


def test_cli_and_http_say_the_same(url, tmp_path):
    """A bad value gets the same line from the CLI (flag --dim) and the
    service (parameter dim)."""
    cli = CliRunner().invoke(main, ["predict", str(BERT), "--dim", "seq"])
    assert cli.exit_code == 2
    resp = post(url, params={"path": "bert_base.onnx", "dim": "seq"})
    assert cli.stderr.strip() == "perfseer-rt: error: " + resp.json()["error"].replace("dim", "--dim")


def test_openapi_lists_the_options_of_each_call(url):
    """The OpenAPI page's parameters are the options table's, per endpoint,
    each naming its CLI flag and Python keyword; the body's three forms."""
    spec = httpx.get(url + "/openapi.json").json()
    for endpoint, fn in (("/predict", predict_many), ("/check", check)):
        op = spec["paths"][endpoint]["post"]
        names = [p["name"] for p in op["parameters"]]
        assert names == [o.name for o, _ in options_for(fn)] + ["path", "name"]
        for p, (opt, kw) in zip(op["parameters"], options_for(fn)):
            assert f"`{opt.flag}`" in p["description"] and f"`{kw}=`" in p["description"]
        assert set(op["requestBody"]["content"]) == {"application/octet-stream",
                                                     "multipart/form-data", "application/json"}
        assert "400" in op["responses"] and "429" in op["responses"]
    modes = next(p for p in spec["paths"]["/predict"]["post"]["parameters"] if p["name"] == "mode")
    assert modes["schema"]["enum"] == ["inference", "train"]
    assert httpx.get(url + "/docs").status_code == 200
