"""Energy and power from the kernel timeline (perfseer_rt/gpu/power.py)."""

import numpy as np
import pytest

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import power
from perfseer_rt.gpu.timeline import KernelTimeline

SPEC = {"name": "NVIDIA A100-SXM4-40GB", "tdp_w": 400.0, "fp32_tflops": 19.5, "tf32_tensor_tflops": 156.0,
        "fp16_tensor_fp32acc_tflops": 312.0, "bf16_tensor_fp32acc_tflops": 312.0,
        "memory_bandwidth_gbs": 1555.0, "sms": 108}


def kernel(ms, compute, mem, ctas=1e5, tensor=False, gap=0.0):
    """One kernel of ``ms`` reaching ``compute`` and ``mem`` shares of the peaks."""
    peak = (312.0 if tensor else 19.5) * 1e12
    return KernelTimeline(["linear"], np.array([ms]), np.array([compute * peak * ms / 1e3]),
                          np.array([mem * 1555e9 * ms / 1e3]), np.array([ctas]), np.array([gap]),
                          tensor_core=np.array([tensor]))


def test_energy_is_power_times_time():
    out = power.energy(kernel(10.0, 0.5, 0.2), SPEC)
    assert out["energy_j"]["value"] == pytest.approx(out["power_w"]["value"] * 0.010, rel=1e-3)
    assert out["energy_j"]["value_mj"] == pytest.approx(1e3 * out["energy_j"]["value"], rel=1e-6)
    assert out["energy_j"]["unit"] == "J" and out["power_w"]["unit"] == "W"
    assert sum(out["energy_j"]["parts"].values()) == pytest.approx(out["energy_j"]["value"], rel=1e-4)


def test_compute_bound_work_draws_more_than_memory_bound_work_at_the_same_time():
    compute = power.energy(kernel(5.0, 0.9, 0.1, tensor=True), SPEC, precision="amp-fp16")
    memory = power.energy(kernel(5.0, 0.1, 0.9, tensor=True), SPEC, precision="amp-fp16")
    assert compute["energy_j"]["value"] > memory["energy_j"]["value"]


def test_idle_gaps_draw_idle_power_and_lower_the_average():
    busy = power.energy(kernel(5.0, 0.6, 0.3), SPEC)
    gappy = power.energy(kernel(5.0, 0.6, 0.3, gap=5.0), SPEC)
    co = power.default_coeffs(power.power_spec(SPEC))
    assert gappy["energy_j"]["value"] == pytest.approx(busy["energy_j"]["value"] + co.idle_w * 0.005, rel=1e-6)
    assert gappy["power_w"]["value"] < busy["power_w"]["value"]


def test_full_use_stays_near_the_board_power_and_idle_below_it():
    hot = power.energy(kernel(5.0, 1.0, 0.6, tensor=True), SPEC, precision="amp-bf16")
    assert 0.8 * SPEC["tdp_w"] < hot["power_w"]["value"] < 1.3 * SPEC["tdp_w"]
    tiny = power.energy(kernel(5.0, 0.0, 0.0, ctas=1), SPEC)
    assert tiny["power_w"]["value"] < 0.25 * SPEC["tdp_w"]


def test_a_power_limit_slows_the_step_and_holds_the_average():
    free = power.energy(kernel(5.0, 1.0, 0.3, tensor=True), SPEC, precision="amp-fp16")
    limit = 0.7 * free["power_w"]["value"]
    capped = power.energy(kernel(5.0, 1.0, 0.3, tensor=True), SPEC, precision="amp-fp16", power_limit_w=limit)
    t = capped["throttle"]
    assert t["capped"] and t["clock_scale"] < 1.0 and t["latency_factor"] > 1.0
    assert capped["power_w"]["value"] <= limit * 1.001
    # a limit above the draw changes nothing
    loose = power.energy(kernel(5.0, 1.0, 0.3, tensor=True), SPEC, precision="amp-fp16", power_limit_w=2000)
    assert not loose["throttle"]["capped"] and loose["throttle"]["latency_factor"] == 1.0


def test_memory_bound_work_slows_less_under_the_same_cap():
    def factor(c, m):
        e = power.energy(kernel(5.0, c, m, tensor=True), SPEC, precision="amp-fp16")
        return power.energy(kernel(5.0, c, m, tensor=True), SPEC, precision="amp-fp16",
                            power_limit_w=0.6 * e["power_w"]["value"])["throttle"]["latency_factor"]
    assert factor(0.2, 0.9) < factor(0.95, 0.2)


def test_spec_sheets_without_power_and_bad_limits_are_refused():
    with pytest.raises(PerfSeerError, match="tdp_w"):
        power.energy(kernel(1.0, 0.5, 0.5), {k: v for k, v in SPEC.items() if k != "tdp_w"})
    with pytest.raises(PerfSeerError, match="power limit"):
        power.energy(kernel(1.0, 0.5, 0.5), SPEC, power_limit_w=-5)
    with pytest.raises(PerfSeerError, match="idle"):
        power.energy(kernel(1.0, 0.5, 0.5), SPEC, power_limit_w=10)


def test_calibrated_coefficients_replace_the_defaults():
    co = power.PowerCoeffs(idle_w=50, sm_w=0, compute_w=0, mem_w=0, source="fit")
    out = power.energy(kernel(10.0, 0.9, 0.9), SPEC, coeffs=co)
    assert out["power_w"]["value"] == pytest.approx(50.0)
    assert "fit" in out["assumptions"][0]
