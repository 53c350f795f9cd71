"""The lead's entry point and MIG slices (perfseer_rt/gpu/resources.py, mig_advice.py)."""

import numpy as np
import pytest

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import memory, mig_advice, resources
from perfseer_rt.gpu.kernels import map_graph
from perfseer_rt.gpu.specs import GpuSpec
from perfseer_rt.gpu.timeline import KernelTimeline, grid_ctas
from perfseer_rt.graph import extract
from perfseer_rt.graph.load import load_model


class Spec(GpuSpec):
    """The prior's spec sheet plus the board power the power model needs."""

    tdp_w = 400.0


A100 = Spec("NVIDIA A100-SXM4-40GB", 40, 1555, 108, 64, 1410, 19500, 40, tc16_gflops=312000)


def timeline_for(graph, spec):
    """A roofline timeline of the graph's kernels on ``spec`` (a stand-in for the latency predictor's)."""
    k = map_graph(graph)
    fams, flops, nbytes, ctas = [], [], [], []
    for fam, shape in k.shapes.items():
        for i in range(len(shape["flops"])):
            fams.append(fam)
            flops.append(shape["flops"][i])
            nbytes.append(shape["bytes"][i])
            if "m" in shape:
                ctas.append(grid_ctas(fam, m=shape["m"][i], n=shape["n"][i], batch=shape["batch"][i]))
            else:
                ctas.append(grid_ctas(fam, elems=shape["bytes"][i] / 8))
    flops, nbytes = np.array(flops), np.array(nbytes)
    busy = np.maximum(flops / (spec.fp32_gflops * 1e6), nbytes / (spec.mem_bw_gbs * 1e6)) + 0.003
    return KernelTimeline(fams, busy, flops, nbytes, np.array(ctas), np.full(len(fams), 0.004))


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
    with pytest.raises(PerfSeerError, match="MIG profiles"):
        mig_advice.profile_budget("t4", A100, "1g.5gb")
