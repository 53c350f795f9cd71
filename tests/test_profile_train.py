"""Training-step profiler (training/profile_train.py) on tiny torch models."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from perfseer_rt.profile import MeasureSettings, hostmem  # noqa: E402
from training.profile_train import (  # noqa: E402
    TRAIN_FIELDS,
    _is_oom,
    default_loss,
    finish_train_record,
    measure_train_step,
)

FAST = MeasureSettings(min_runs=5, min_time_s=0.05, max_time_s=2.0, warmup_runs=1,
                       warmup_time_s=0.0)


def tiny():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return net, [torch.randn(8, 16)]


def wide():
    """4096 x 4096 weights: 64 MiB of weights, as much again of gradients and momentum."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.Linear(4096, 10)), \
        [torch.randn(4, 4096)]


def test_cpu_step_record():
    rec = finish_train_record(measure_train_step(tiny, settings=FAST, threads=1, batch=8))
    assert set(TRAIN_FIELDS) <= set(rec)
    assert rec["status"] == "ok" and rec["error"] is None
    assert rec["step_ms"] > 0 and rec["runs"] >= 5 and rec["window_s"] >= 0.05
    assert math.isfinite(rec["step_cv"]) and rec["step_cv"] >= 0
    assert rec["timing"] == "perf_counter" and rec["threads"] == 1 and rec["optimizer"] == "sgd"
    assert rec["params_count"] == 16 * 16 + 16 + 16 * 4 + 4
    assert rec["input_shapes"] == [[8, 16]] and rec["batch"] == 8
    assert rec["env"]["torch_version"] == torch.__version__ and "cudnn_version" in rec["env"]
    assert rec["energy_mj"] is None and rec["sm_util_pct"] is None  # not measured on CPU


def test_peak_memory_counts_weights_gradients_and_optimizer_state():
    small = measure_train_step(tiny, settings=FAST, threads=1)
    big = measure_train_step(wide, settings=FAST, threads=1, optimizer="adam")
    assert small["status"] == big["status"] == "ok"
    # the label says how this process reads its peak: glibc's default ("vmhwm", as in the
    # campaign's training child) unless an earlier test here fixed the mmap threshold
    assert small["peak_mem_mb"] is not None and big["peak_mem_method"] == hostmem.peak_method()
    # weights, gradients and two Adam moments of 64 MiB each
    assert big["peak_mem_mb"] > small["peak_mem_mb"] + 200


def test_a_failing_step_is_recorded_not_zero():
    def broken():
        net, _ = tiny()
        return net, [torch.randn(8, 5)]  # wrong width: matmul fails

    rec = measure_train_step(broken, settings=FAST, threads=1)
    assert rec["status"] == "error" and "RuntimeError" in rec["error"]
    assert rec["step_ms"] is None and rec["peak_mem_mb"] is None


def test_oom_classification():
    assert _is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert _is_oom(MemoryError("cannot allocate memory"))
    assert not _is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_default_loss_shapes():
    assert default_loss(torch.randn(4, 10, requires_grad=True)).dim() == 0
    assert default_loss((torch.randn(2, 7, 50, requires_grad=True), None)).dim() == 0
    assert default_loss(torch.randn(3, requires_grad=True)).dim() == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_cuda_step_record():
    rec = measure_train_step(tiny, device="cuda",
                             settings=MeasureSettings(min_runs=20, min_time_s=1.0))
    assert rec["status"] == "ok", rec["error"]
    assert rec["timing"] == "cuda_events" and rec["step_ms"] > 0 and rec["window_s"] >= 1.0
    assert rec["torch_max_allocated_mb"] > 0 and rec["peak_mem_process_mb"] > 0
    assert rec["sm_util_pct"] is not None and rec["energy_mj"] is not None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_cuda_oom_is_recorded():
    free, _total = torch.cuda.mem_get_info()

    def huge():
        n = int((free * 2 / 4) ** 0.5)  # a float32 weight of twice the free memory, on the GPU
        return torch.nn.Linear(n, n, bias=False, device="cuda"), [torch.randn(1, n)]

    rec = measure_train_step(huge, device="cuda", settings=FAST)
    assert rec["status"] == "oom" and rec["step_ms"] is None
    assert torch.cuda.memory_allocated() < free / 2  # cache emptied


def test_the_training_child_reads_peaks_with_glibcs_default_threshold():
    """The campaign's cpu-train target measures in a TrainWorker child: its records say
    ``vmhwm``, the method of the shipped CPU training-step data (data/cpu_train)."""
    from training.profile_train import TrainWorker

    with TrainWorker("cpu", timeout_s=120) as worker:
        rec = worker.measure({"family": "nb201", "params": {}}, 1, builder="tests.test_profile_train:tiny_case",
                             settings=FAST, threads=1)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["peak_mem_method"] == "vmhwm"


def tiny_case(config, batch):
    """Builder for the child (``module:function``): the tiny model of these tests."""
    return tiny()
