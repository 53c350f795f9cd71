"""Prove that onnxruntime's CUDA execution provider really runs here, before measuring.

``python -m training.campaign --check-cuda --out DIR`` (or
``python -m training.campaigns.check_cuda DIR``) checks, and prints as JSON
(also written to ``DIR/check_cuda.json``):

1. versions: onnxruntime (package, file, build's CUDA), providers, NVML
   driver / CUDA / GPU, torch and cuDNN if importable;
2. a Conv model's session runs on ``CUDAExecutionProvider`` first
   (``session.get_providers()[0]``), not a silent CPU fallback;
3. its output through IO binding on the GPU matches the CPU provider
   (TF32 off; relative error under 1e-4);
4. NVML lists this process with device memory while the session lives;
5. a batch-256 run on the GPU against the same on the CPU (median of 5,
   ms), as a sanity check that the work ran on the device.

Exit code 0 when 2-4 hold, 1 otherwise (the JSON names what failed).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

from perfseer_rt.profile.cuda import bind_device, tiny_conv_model
from perfseer_rt.profile.env import environment
from perfseer_rt.profile.nvml import Device
from perfseer_rt.profile.session import build_session, preload_cuda_libraries

try:  # not in every onnxruntime build
    from onnxruntime.capi import build_and_package_info as _build_info
except ImportError:
    _build_info = None


def _median_ms(fn, n: int = 5) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def run_check(out_dir: str | None = None) -> dict:
    """Run the checks; returns the report (``passed`` and ``failures`` inside)."""
    report: dict = {"failures": []}
    fail = report["failures"].append
    report["preloaded_libraries"] = preload_cuda_libraries()
    report["onnxruntime"] = {
        "version": ort.__version__, "file": ort.__file__,
        "available_providers": ort.get_available_providers(), "device": ort.get_device()}
    if _build_info is not None:
        report["onnxruntime"]["build_cuda_version"] = getattr(_build_info, "cuda_version", None)
    report["env"] = environment()
    try:
        import torch  # lazy: optional here (reported when installed) and heavy

        report["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version(),
                           "cuda_available": torch.cuda.is_available()}
    except ImportError:
        report["torch"] = None

    model = tiny_conv_model()
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    try:
        handle = build_session(model, "cuda", threads=None, strict=False,
                               provider_options={"use_tf32": 0})
    except Exception as exc:
        fail(f"CUDA session could not be created: {type(exc).__name__}: {exc}")
        return _finish(report, out_dir)
    sess = handle.session
    report["session_providers"] = sess.get_providers()
    report["provider_options"] = handle.provider_options
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        fail(f"session runs on {sess.get_providers()[0]}, not CUDAExecutionProvider")
        return _finish(report, out_dir)

    cpu = build_session(model, "cpu").session
    ref = cpu.run(None, {"x": x})[0]
    iob, _values = bind_device(sess, {"x": x})
    sess.run_with_iobinding(iob)
    out = iob.copy_outputs_to_cpu()[0]
    rel = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))
    report["output_rel_error"] = rel
    if not np.isfinite(out).all() or rel > 1e-4:
        fail(f"CUDA output differs from CPU: relative error {rel:.3g}")

    try:
        dev = Device(0)
        mem = dev.process_mem_mb()
        report["nvml_process_mem_mb"] = mem
        report["nvml_device_used_mb"] = dev.used_mem_mb()
        if not mem:
            fail("NVML does not list this process with device memory (PID namespace?); "
                 "peak memory falls back to device-used memory")
    except Exception as exc:
        fail(f"NVML failed: {type(exc).__name__}: {exc}")

    big = np.random.default_rng(1).standard_normal((256, 3, 32, 32)).astype(np.float32)
    iob_big, _vb = bind_device(sess, {"x": big})
    report["batch256_gpu_ms"] = _median_ms(lambda: sess.run_with_iobinding(iob_big))
    report["batch256_cpu_ms"] = _median_ms(lambda: cpu.run(None, {"x": big}))
    return _finish(report, out_dir)


def _finish(report: dict, out_dir: str | None) -> dict:
    report["passed"] = not report["failures"]
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "check_cuda.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
    return report


def main(out_dir: str | None = None) -> int:
    report = run_check(out_dir)
    print(json.dumps(report, indent=1, default=str))
    print("CUDA CHECK " + ("PASSED" if report["passed"] else
                           "FAILED: " + "; ".join(report["failures"])))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
