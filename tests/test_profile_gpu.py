"""The CUDA inference path on a real GPU (skipped where none can run).

Runs on the GPU machine (training/campaigns/README.md says how). The skip
condition is a real check: NVML sees a GPU and an onnxruntime session on the
CUDA provider really attaches.
"""

from __future__ import annotations

import numpy as np
import pytest


def _cuda_runs() -> tuple[bool, str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            return False, "NVML sees no GPU"
    except Exception as exc:
        return False, f"no NVIDIA driver ({type(exc).__name__})"
    try:
        from perfseer_rt.profile.cuda import tiny_conv_model
        from perfseer_rt.profile.session import build_session

        build_session(tiny_conv_model(), "cuda", strict=True)
    except Exception as exc:
        return False, f"the CUDA provider does not attach: {exc}"
    return True, ""


CUDA_OK, WHY = _cuda_runs()
pytestmark = pytest.mark.skipif(not CUDA_OK, reason=WHY or "CUDA runs")


def test_cuda_record(tmp_path):
    from perfseer_rt.profile import MeasureSettings, profile
    from perfseer_rt.profile.cuda import tiny_conv_model

    path = tmp_path / "conv.onnx"
    path.write_bytes(tiny_conv_model())
    rec = profile(str(path), "cuda", batch=64,
                  settings=MeasureSettings(min_runs=20, min_time_s=1.0, warmup_runs=5))
    assert rec["status"] == "ok", rec["error"]
    assert rec["provider_used"] == "CUDAExecutionProvider"
    assert rec["latency_ms"] > 0 and rec["runs"] >= 20 and rec["window_s"] >= 1.0
    assert rec["peak_mem_mb"] > 0 and rec["peak_mem_process_mb"] > rec["peak_mem_mb"]
    assert rec["sm_util_pct"] is not None and rec["energy_mj"] is not None
    assert rec["provider_options"]["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    assert rec["env"]["gpu_name"] and rec["env"]["cuda_version"]


def test_cuda_output_matches_cpu():
    import onnxruntime as ort

    from perfseer_rt.profile.cuda import bind_device, tiny_conv_model
    from perfseer_rt.profile.session import build_session

    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    cpu = build_session(tiny_conv_model(), "cpu").session.run(None, {"x": x})[0]
    sess = build_session(tiny_conv_model(), "cuda", provider_options={"use_tf32": 0}).session
    iob, _ = bind_device(sess, {"x": x})
    sess.run_with_iobinding(iob)
    gpu = iob.copy_outputs_to_cpu()[0]
    assert isinstance(ort.get_device(), str)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-4)
