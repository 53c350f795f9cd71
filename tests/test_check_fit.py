"""``check`` and ``fit``: exit codes, the Python calls, and fit against
memory measured on this CPU (perfseer_rt.profile) with the shipped CPU
predictor."""

import json
import math

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

import perfseer_rt
from perfseer_rt.cli import main
from perfseer_rt.errors import MetricError, PerfSeerError
from perfseer_rt.predict.budget import fit, upper
from tests.onnx_builders import const, model

DEVICE = "cpu-amd-epyc-1t"
EXAMPLE = "examples/resnet18.onnx"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def convnet(blocks=10, c=32, hw=32, batch_dim="N", seq_dim=None) -> onnx.ModelProto:
    """Conv+ReLU blocks, global pool, Gemm: a small model with real weights
    whose activation memory grows with the batch."""
    nodes, inits, x, cin = [], [], "x", 3
    for i in range(blocks):
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        inits += [const(f"w{i}", (c, cin, 3, 3), np.full((c, cin, 3, 3), 0.01)),
                  const(f"b{i}", (c,), np.zeros(c))]
        x, cin = f"r{i}", c
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits += [const("fw", (10, c), np.full((10, c), 0.01)), const("fb", (10,), np.zeros(10))]
    return model(nodes, [("x", [batch_dim, 3, seq_dim or hw, hw])], [("y", [batch_dim, 10])],
                 inits)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    p = tmp_path_factory.mktemp("fit") / "convnet.onnx"
    onnx.save(convnet(), p)
    return p


def test_check_exit_codes_match_the_python_call():
    [r] = perfseer_rt.predict.predict(EXAMPLE, batch=1, device=DEVICE)
    lat, mem = r["metrics"]["latency_ms"], r["metrics"]["peak_mem_mb"]
    roomy = ["--max-latency-ms", upper(lat) * 1.5, "--max-memory-mb", upper(mem) * 1.5]
    tight = ["--max-latency-ms", upper(lat) * 0.5, "--max-memory-mb", upper(mem) * 1.5]
    res = run("check", EXAMPLE, "--device", DEVICE, *roomy)
    assert res.exit_code == 0 and res.stdout.startswith("PASS"), res.output
    res = run("check", EXAMPLE, "--device", DEVICE, *tight)
    assert res.exit_code == 1 and res.stdout.startswith("FAIL"), res.output
    assert "latency_ms" in res.stdout and "> limit" in res.stdout
    verdict = perfseer_rt.predict.check(EXAMPLE, DEVICE, max_latency_ms=upper(lat) * 0.5,
                                        max_memory_mb=upper(mem) * 1.5)
    assert verdict["ok"] is False
    assert [c["ok"] for c in verdict["checks"]] == [False, True]
    doc = json.loads(run("check", EXAMPLE, "--device", DEVICE, *tight, "--json").stdout)
    assert doc["ok"] is False and doc["checks"] == verdict["checks"]


@pytest.mark.parametrize("args, message", [
    (["missing.onnx", "--max-latency-ms", 5], "no such file"),
    ([EXAMPLE], "give at least one budget"),
    ([EXAMPLE, "--max-latency-ms", -1], "positive"),
    ([EXAMPLE, "--device", "nb201-pixel3", "--max-memory-mb", 10], "does not predict memory"),
    ([EXAMPLE, "--device", "no-such-device", "--max-latency-ms", 5], "unknown device"),
])
def test_check_bad_input_exits_2(args, message):
    res = run("check", *args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr and res.stderr.count("\n") == 1 and "Traceback" not in res.output


def test_check_judges_the_interval_upper_end(monkeypatch):
    """A value inside the budget whose interval reaches past it fails."""
    from perfseer_rt.predict import budget

    real = budget.predict

    def with_interval(*a, **k):
        out = real(*a, **k)
        for r in out:
            m = r["metrics"]["latency_ms"]
            m["interval"] = [m["value"] * 0.8, m["value"] * 1.3]
        return out

    monkeypatch.setattr(budget, "predict", with_interval)
    [r] = real(EXAMPLE, batch=1, device=DEVICE)
    v = r["metrics"]["latency_ms"]["value"]
    assert perfseer_rt.predict.check(EXAMPLE, DEVICE, max_latency_ms=v * 1.2)["ok"] is False
    assert perfseer_rt.predict.check(EXAMPLE, DEVICE, max_latency_ms=v * 1.4)["ok"] is True


def test_fit_is_exact_against_its_own_predictions(net):
    [r16] = perfseer_rt.predict.predict(net, batch=16, device=DEVICE)
    budget_mb = upper(r16["metrics"]["peak_mem_mb"]) * 1.3
    ans = fit(net, DEVICE, max_memory_mb=budget_mb)
    b = ans["value"]
    assert b is not None and b >= 16
    assert upper(ans["prediction"]["metrics"]["peak_mem_mb"]) <= budget_mb
    assert ans["next"]["batch"] == b + 1
    assert upper(ans["next"]["metrics"]["peak_mem_mb"]) > budget_mb
    res = run("fit", net, "--device", DEVICE, "--max-memory-mb", budget_mb, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["value"] == b
    # a latency limit can only lower the answer
    lat = upper(ans["prediction"]["metrics"]["latency_ms"]) / 2
    assert fit(net, DEVICE, max_memory_mb=budget_mb, max_latency_ms=lat)["value"] < b


def test_fit_exit_codes(net):
    res = run("fit", net, "--device", DEVICE, "--max-memory-mb", 0.001)
    assert res.exit_code == 1 and "nothing fits" in res.stdout
    res = run("fit", net, "--device", DEVICE, "--max-memory-mb", 100, "--dim", "seq")
    assert res.exit_code == 2 and "no input dim is named 'seq'" in res.stderr
    res = run("fit", net, "--device", "nb201-pixel3", "--max-memory-mb", 100)
    assert res.exit_code == 2 and "does not predict memory" in res.stderr
    with pytest.raises(MetricError):
        fit(net, "nb201-pixel3", max_memory_mb=100)
    with pytest.raises(PerfSeerError):
        fit(net, DEVICE, max_memory_mb=-5)


def test_fit_named_dim(tmp_path):
    p = tmp_path / "seq.onnx"
    onnx.save(convnet(seq_dim="S"), p)
    [r] = perfseer_rt.predict.predict(p, device=DEVICE, input_shapes={"x": (1, 3, 64, 32)})
    ans = fit(p, DEVICE, max_memory_mb=upper(r["metrics"]["peak_mem_mb"]) * 1.2, dim="S")
    assert ans["dim"] == "S" and ans["value"] >= 64
    assert ans["next"]["metrics"]["peak_mem_mb"]["value"] > \
        ans["prediction"]["metrics"]["peak_mem_mb"]["value"]


@pytest.mark.slow
def test_fit_against_measured_memory(net):
    """Budget: just under the memory measured at batch 32 (less twice the
    spread of repeated measurements). The batch fit names must really fit
    (measured). The next power of two must really not, or the prediction
    says why fit refused it: an interval (when the predictor gives one) that
    holds the measurement and reaches past the budget; without one, a
    prediction above the measurement (fit is conservative, never unsafe)."""
    from perfseer_rt.profile import MeasureSettings, ProfileWorker

    quick = MeasureSettings(min_runs=1, min_time_s=0.0, warmup_runs=0, warmup_time_s=0.0,
                            max_time_s=2.0)
    with ProfileWorker("cpu") as worker:
        def peaks(batch, n=2):
            recs = [worker.measure(str(net), batch=batch, settings=quick) for _ in range(n)]
            assert all(r["status"] == "ok" for r in recs), recs
            return [r["peak_mem_mb"] for r in recs]

        m32 = peaks(32)
        spread = max(m32) - min(m32)
        budget_mb = min(m32) - 2 * spread - 0.25
        ans = fit(net, DEVICE, max_memory_mb=budget_mb)
        b = ans["value"]
        assert b is not None, ans["checks"]
        mb = peaks(b)
        spread = max(spread, max(mb) - min(mb))
        assert max(mb) <= budget_mb + spread, (b, mb, budget_mb)   # the answer fits
        nxt = 2 ** math.ceil(math.log2(b + 1))
        m_next = m32 if nxt == 32 else peaks(nxt)
        if min(m_next) > budget_mb:
            return                                                   # and is tight
        [p] = perfseer_rt.predict.predict(net, batch=nxt, device=DEVICE)
        mem = p["metrics"]["peak_mem_mb"]
        assert upper(mem) > budget_mb                                # why fit refused it
        if mem.get("interval"):
            lo, hi = mem["interval"]
            assert lo <= max(m_next) + spread and hi > budget_mb, (mem, m_next)
        else:
            assert mem["value"] > max(m_next) + spread, (mem, m_next)
