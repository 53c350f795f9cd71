"""The lead's entry point and MIG slices (perfseer_rt/gpu/resources.py, mig_advice.py)."""

import numpy as np
import pytest

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import memory, mig_advice, resources, step
from perfseer_rt.gpu.precision import get_precision
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.gpu.timeline import from_step, host_gaps
from perfseer_rt.graph import extract
from perfseer_rt.graph.load import load_model

A100 = GpuSpec("NVIDIA A100-SXM4-40GB", 40, 1555, 108, 64, 1410, 19500, 40, tc16_gflops=312000, tdp_w=400.0)


def timeline_for(graph, spec):
    """A roofline timeline of the graph's forward kernels on ``spec`` (a stand-in for the latency predictor's)."""
    table = step.kernels(graph, step.StepConfig(get_precision("fp32")))
    busy = np.maximum(table["flops"] / (spec.fp32_gflops * 1e6), table["bytes"] / (spec.mem_bw_gbs * 1e6)) + 0.003
    host = np.full(len(table), 0.004)
    return from_step(table, busy, host, float(busy.sum() + host_gaps(busy, host).sum()))


@pytest.fixture(scope="module")
def cnn():
    proto = load_model("examples/resnet18.onnx")[0]
    return extract(proto, batch=32), proto


def test_resource_metrics_answer_every_block_with_unit_and_meaning(cnn):
    g, proto = cnn
    out = resources.resource_metrics(g, proto, timeline_for(g, A100), A100, mode="train", optimizer="adam")
    assert out["peak_mem_mb"]["unit"] == "MiB" and out["peak_mem_mb"]["parts"]
    assert set(out["peak_mem_mb"]["views"]) == {"nvml", "torch_allocated", "torch_reserved"}
    for key in ("nvml", "sm_active"):
        assert out["sm_util_pct"][key]["unit"] == "%" and out["sm_util_pct"][key]["meaning"]
    assert out["energy_j"]["unit"] == "J" and out["energy_j"]["value"] > 0
    assert out["power_w"]["unit"] == "W" and "ESTIMATE" in out["power_w"]["meaning"]
    assert "training step" in out["energy_j"]["meaning"]


def test_a_power_cap_stretches_the_timeline_utilization_is_computed_on(cnn):
    g, proto = cnn
    tl = timeline_for(g, A100)
    free = resources.resource_metrics(g, proto, tl, A100)
    capped = resources.resource_metrics(g, proto, tl, A100, power_limit_w=0.6 * free["power_w"]["value"])
    assert capped["throttle"]["capped"] and capped["throttle"]["latency_factor"] > 1
    assert capped["sm_util_pct"]["busy_ms"] > free["sm_util_pct"]["busy_ms"]


def test_every_mig_slice_gets_memory_utilization_and_energy(cnn):
    g, proto = cnn
    est = memory.predict_memory(g, proto, A100, mode="train")
    extra = resources.slice_metrics(g, proto, A100, lambda s: timeline_for(g, s), mode="train")
    advice = mig_advice.advise("a100-40gb", A100, est.peak_mib, 0.2,
                               lambda s: timeline_for(g, s).total_ms, extra_on=extra)
    rows = advice["profiles"]
    assert [r["profile"] for r in rows][0] == "1g.5gb"
    for r in rows:
        assert r["peak_mem_mb"]["value"] > 0 and r["energy_j"] > 0 and 0 <= r["sm_util_pct"]["sm_active"] <= 100
    # fewer SMs: a smaller context (stack reservation) and lower draw
    assert rows[0]["peak_mem_mb"]["value"] < rows[-1]["peak_mem_mb"]["value"]
    assert rows[0]["power_w"] < rows[-1]["power_w"]
    assert advice["profile"] is not None


def test_a_mig_profile_is_a_budget(cnn):
    g, proto = cnn
    b = mig_advice.profile_budget("a100-40gb", A100, "1g.5gb")
    assert b["sms"] == 14 and b["usable_mib"] < 5 * 1024
    est = memory.predict_memory(g, proto, b["spec"], mode="train", capacity_mib=b["usable_mib"])
    assert est.views["nvml"] <= b["usable_mib"] and est.fits
    big = extract(proto, batch=512)
    assert not memory.predict_memory(big, proto, b["spec"], mode="train", capacity_mib=b["usable_mib"]).fits
    with pytest.raises(PerfSeerError, match="3g.40gb"):
        mig_advice.profile_budget("a100-40gb", A100, "3g.40gb")
    with pytest.raises(PerfSeerError, match="no MIG"):
        mig_advice.profile_budget("t4", A100, "1g.5gb")
