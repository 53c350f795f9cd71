"""SM utilization from a kernel timeline (perfseer_rt/gpu/utilization.py, timeline.py)."""

import numpy as np
import pytest

from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu import step as S
from perfseer_rt.gpu.precision import get_precision
from perfseer_rt.gpu.timeline import KernelTimeline, concat, from_step, grid_ctas, host_gaps
from perfseer_rt.gpu.utilization import sm_active_fraction, utilization
from perfseer_rt.graph import extract
from tests.gpu_models import transformer


def tl(busy, ctas, gaps=None, **kw):
    n = len(busy)
    return KernelTimeline(["elem"] * n, np.array(busy, float), np.zeros(n), np.zeros(n),
                          np.array(ctas, float), np.array(gaps if gaps is not None else [0.0] * n), **kw)


def test_nvml_is_the_busy_share_of_the_wall_time():
    u = utilization(tl([1.0, 1.0], [1000, 1000], gaps=[0.5, 0.5], tail_gap_ms=1.0), sms=100)
    assert u["nvml"]["value"] == pytest.approx(50.0)
    assert u["nvml"]["unit"] == "%" and "utilization.gpu" in u["nvml"]["meaning"]
    assert utilization(tl([1.0], [1000]), sms=100)["nvml"]["value"] == pytest.approx(100.0)


def test_a_grid_smaller_than_the_gpu_leaves_sms_idle():
    # 54 CTAs on 108 SMs: busy by NVML, half idle by SM activity
    u = utilization(tl([2.0], [54]), sms=108)
    assert u["nvml"]["value"] == pytest.approx(100.0)
    assert u["sm_active"]["value"] == pytest.approx(50.0)


def test_waves_and_tail_effects():
    f = sm_active_fraction(np.array([108, 216, 162, 109, 0]), np.ones(5), 108)
    assert f[0] == pytest.approx(1.0) and f[1] == pytest.approx(1.0)
    assert f[2] == pytest.approx((1 + 0.5) / 2)       # one full wave, a half-full tail
    assert f[3] == pytest.approx((1 + 1 / 108) / 2)   # a wave plus one straggler CTA
    assert f[4] == 1.0                                 # grid unknown: taken as filling the GPU
    # two CTAs resident per SM: 216 CTAs are one wave
    assert sm_active_fraction(np.array([216.0]), np.array([2.0]), 108)[0] == pytest.approx(1.0)
    assert sm_active_fraction(np.array([108.0]), np.array([2.0]), 108)[0] == pytest.approx(1.0)


def test_sm_activity_never_exceeds_nvml_and_falls_with_fewer_sms():
    t = tl([1.0, 3.0, 0.5], [40, 5000, 300], gaps=[0.2, 0.1, 0.3])
    for sms in (14, 54, 132):
        u = utilization(t, sms)
        assert u["sm_active"]["value"] <= u["nvml"]["value"] + 1e-9
    assert utilization(t, 132)["sm_active"]["value"] < utilization(t, 14)["sm_active"]["value"]


def test_host_gaps_of_a_launch_bound_queue():
    # kernels shorter than the host's 10 us per launch: the GPU waits for each one
    gaps = host_gaps(np.full(4, 0.004), 0.010)
    assert gaps[0] == pytest.approx(0.010)
    assert gaps[1:] == pytest.approx([0.006] * 3)
    # kernels longer than the launch cost: the queue runs ahead, no gap after the first
    assert host_gaps(np.full(4, 1.0), 0.010)[1:] == pytest.approx([0.0] * 3)


def test_grid_from_shapes():
    assert grid_ctas("linear", m=4096, n=4096) == 32 * 32
    assert grid_ctas("linear", m=128, n=256) == 2 * 4          # small output: 64 x 64 tiles
    assert grid_ctas("bmm", m=512, n=512, batch=12) == 8 * 8 * 12
    assert grid_ctas("elem", elems=1 << 20) == 1024


def test_bad_timelines_are_refused():
    with pytest.raises(PerfSeerError, match="busy_ms"):
        KernelTimeline(["elem"], np.array([1.0, 2.0]), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1))
    with pytest.raises(PerfSeerError, match="gap_ms"):
        tl([1.0], [10], gaps=[-1.0])
    with pytest.raises(PerfSeerError, match="sms"):
        utilization(tl([1.0], [10]), sms=0)


def test_a_timeline_from_the_latency_predictors_step():
    """The predictor's step becomes a timeline that lasts the step's
    predicted time: host-bound gaps stretched to it, tensor-core kernels
    where the step's precision puts them."""
    graph = extract(transformer(seq=64, dim=64, heads=4, layers=1), batch=2)
    table = S.kernels(graph, S.StepConfig(get_precision("amp-fp16")))
    busy = np.full(len(table), 0.01)
    host = np.full(len(table), 0.02)
    total = 1.5 * float(host.sum())
    t = from_step(table, busy, host, total)
    assert len(t) == len(table) and t.busy_total_ms == pytest.approx(0.01 * len(table))
    assert t.total_ms == pytest.approx(total)  # launch-bound: the gaps fill the step
    assert t.gap_ms.sum() > 0
    gemm = np.isin(table["family"], ["linear", "bmm"])
    assert t.tensor_core[gemm].all() and not t.tensor_core[~gemm].any()
    strict = S.kernels(graph, S.StepConfig(get_precision("fp32-strict")))
    n = len(strict)
    fp32 = from_step(strict, np.full(n, 0.01), np.full(n, 0.02), total)
    assert not fp32.tensor_core.any()
    both = concat([t, t], tail_gap_ms=0.5)
    assert len(both) == 2 * len(t) and both.total_ms == pytest.approx(2 * t.total_ms + 0.5)
