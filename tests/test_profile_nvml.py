"""NVML counter logic (perfseer_rt.profile.nvml) against a scripted pynvml.

No GPU here: the pynvml functions are replaced by scripted stand-ins with
``monkeypatch.setattr`` (which fails if a name does not exist in the
installed nvidia-ml-py, so the API names are checked too). The numbers are
test inputs for the arithmetic, never stored as measurements. The real
counters run in tests/test_profile_gpu.py on a machine with a GPU.
"""

from __future__ import annotations

import itertools
import os
import time
from types import SimpleNamespace

import pytest

pynvml = pytest.importorskip("pynvml")

from perfseer_rt.profile import nvml  # noqa: E402
from perfseer_rt.profile.env import gpu_info  # noqa: E402


@pytest.fixture
def scripted(monkeypatch):
    pid = os.getpid()
    mem = itertools.chain([100, 100, 300, 500, 400], itertools.repeat(400))
    energy = itertools.count(1_000_000, 2_000)  # +2000 mJ per read
    calls = {"freed": 0}

    def set_(name, fn):
        monkeypatch.setattr(pynvml, name, fn)  # raising=True: the name must exist

    set_("nvmlInit", lambda: None)
    set_("nvmlShutdown", lambda: None)
    set_("nvmlDeviceGetCount", lambda: 1)
    set_("nvmlDeviceGetHandleByIndex", lambda i: "h0")
    set_("nvmlDeviceGetName", lambda h: "NVIDIA H100 80GB HBM3")
    set_("nvmlSystemGetDriverVersion", lambda: "580.159.04")
    set_("nvmlSystemGetCudaDriverVersion", lambda: 13000)
    set_("nvmlDeviceGetCudaComputeCapability", lambda h: (9, 0))
    set_("nvmlDeviceGetMigMode", lambda h: (0, 0))
    set_("nvmlDeviceGetPowerManagementLimit", lambda h: 700_000)
    set_("nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(used=2 * 2**30, total=80 * 2**30))
    set_("nvmlDeviceGetComputeRunningProcesses", lambda h: [
        SimpleNamespace(pid=pid, usedGpuMemory=next(mem) * 2**20),
        SimpleNamespace(pid=pid + 1, usedGpuMemory=7 * 2**30)])
    set_("nvmlDeviceGetTotalEnergyConsumption", lambda h: next(energy))
    set_("nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=80, memory=30))
    set_("nvmlDeviceGetProcessUtilization", lambda h, ts: [
        SimpleNamespace(pid=pid, timeStamp=ts + 10, smUtil=70),
        SimpleNamespace(pid=pid, timeStamp=ts + 20, smUtil=74),
        SimpleNamespace(pid=pid + 1, timeStamp=ts + 20, smUtil=5)])
    set_("nvmlGpmQueryDeviceSupport", lambda h: SimpleNamespace(isSupportedDevice=1))
    set_("nvmlGpmSampleAlloc", lambda: pynvml.c_nvmlGpmSample_t())
    set_("nvmlGpmSampleGet", lambda h, s: s)

    def metrics_get(mg):
        assert mg.version == pynvml.NVML_GPM_METRICS_GET_VERSION and mg.numMetrics == 2
        values = {pynvml.NVML_GPM_METRIC_SM_UTIL: 55.0, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0}
        for i in range(mg.numMetrics):
            mg.metrics[i].value = values[mg.metrics[i].metricId]
            mg.metrics[i].nvmlReturn = pynvml.NVML_SUCCESS
        return mg

    def sample_free(s):
        calls["freed"] += 1

    set_("nvmlGpmMetricsGet", metrics_get)
    set_("nvmlGpmSampleFree", sample_free)
    return calls


def test_memory_sampler_keeps_this_process_peak(scripted):
    dev = nvml.Device(0)
    with nvml.MemorySampler(dev, interval_s=0.001) as sampler:
        time.sleep(0.05)
    assert sampler.method == "nvml_process"
    assert sampler.baseline_mb == 100 and sampler.peak_mb == 500  # other pid ignored


def test_window_counters(scripted):
    dev = nvml.Device(0)
    window = nvml.Window(dev)
    window.begin()
    time.sleep(nvml.LEAD_IN_S + 0.2)
    out = window.end(runs=10)
    assert out["sm_util_pct"] == 80.0
    assert out["proc_sm_util_pct"] == 72.0
    assert out["gpm_sm_active_pct"] == 55.0 and out["gpm_sm_occupancy_pct"] == 40.0
    assert out["energy_mj"] == pytest.approx(2_000 / 10)  # one counter step over 10 runs
    assert out["power_w"] > 0
    assert scripted["freed"] == 2 and window.notes == []


def test_window_without_gpm_notes_why(scripted, monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlGpmQueryDeviceSupport",
                        lambda h: SimpleNamespace(isSupportedDevice=0))
    window = nvml.Window(nvml.Device(0))
    window.begin()
    out = window.end(runs=1)
    assert out["gpm_sm_active_pct"] is None
    assert any("GPM not supported" in n for n in window.notes)


def test_gpu_info_reads_versions(scripted):
    info = gpu_info(0)
    assert info["gpu_name"] == "NVIDIA H100 80GB HBM3" and info["cuda_version"] == "13.0"
    assert info["gpu_driver"] == "580.159.04" and info["gpu_memory_mb"] == 80 * 1024
    assert info["gpu_compute_capability"] == "9.0" and info["gpu_power_limit_w"] == 700.0
