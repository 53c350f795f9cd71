"""Memory a PyTorch process holds on a GPU outside its tensors: library
workspaces (inside ``memory_reserved``) and the CUDA context (outside it,
seen only by ``nvidia-smi`` / NVML).

Workspaces (from the public PyTorch source, ``aten/src/ATen/cuda/
CublasHandlePool.cpp``, PyTorch 2.x): each cuBLAS handle gets a workspace
per stream from the caching allocator: ``CUBLAS_WORKSPACE_CONFIG``'s
default ``:4096:2:16:8`` (2 x 4096 KiB + 8 x 16 KiB = 8 MiB + 128 KiB) on
every GPU except compute capability 9.0 (Hopper), where it is 32 MiB; the
cuBLASLt path (``addmm`` with a bias) has its own 1 MiB workspace
(``CUBLASLT_WORKSPACE_SIZE``, 1024 KiB). The 8,519,680-byte figure is the
one ``torch.cuda.memory_allocated`` shows after a first ``nn.Linear`` on an
A10G (pytorch/pytorch issue 95668). Handles are per thread: the autograd
engine runs the backward on its own device thread, so a training step
holds two. cuDNN's convolution workspace is allocated per call and freed
after it; its size depends on the engine cuDNN's heuristics pick and is
not modelled: :func:`cudnn_workspace_bound` gives an upper bound.

The context (ESTIMATE, stated as such until NVML records of our own
calibrate it): the CUDA driver reserves local memory for every thread the
GPU can hold at the default stack size (1 KiB per thread:
``SMs x max resident threads per SM x 1 KiB``, CUDA programming guide,
``cudaLimitStackSize``), plus a fixed part (the runtime, the 8 MiB device
malloc heap and 1 MiB printf FIFO defaults, driver structures, the kernels
the process loaded). Since CUDA 11.7 kernels are loaded lazily
(``CUDA_MODULE_LOADING=LAZY``, PyTorch's default since 1.13, pytorch/pytorch
PR 86509: 274 MiB lazy vs 636 MiB eager for a process holding one tensor);
with eager loading every kernel of the libraries is loaded at start
(more than 1000 MiB for PyTorch before CUDA 11.7, pytorch/pytorch issue
107667). Public data points for the lazy context: 426 MiB on an RTX 6000
Ada with PyTorch 2.10 + CUDA 13.0 (unslothai/unsloth-zoo PR 1053), about
300-400 MiB (pytorch/pytorch issues 107667 and 109888). The fixed part
below (:data:`CONTEXT_COEFFS`) is derived from the RTX 6000 Ada point
(426 MiB less its 142 x 1536 x 1 KiB = 213 MiB of stack); the kernels the
step loads lazily (cuBLAS, cuDNN) are an ASSUMPTION of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = float(2**20)

#: Resident threads per SM by architecture (CUDA programming guide, compute capabilities table).
MAX_THREADS_PER_SM = {"pascal": 2048, "volta": 2048, "turing": 1024, "ampere": 2048,
                      "ampere-ga10x": 1536, "ada": 1536, "hopper": 2048, "blackwell": 2048,
                      "blackwell-gb20x": 1536}
#: Compute capability -> architecture key of :data:`MAX_THREADS_PER_SM`.
_BY_CC = {"6": "pascal", "7.0": "volta", "7.2": "volta", "7.5": "turing", "8.0": "ampere",
          "8.6": "ampere-ga10x", "8.7": "ampere-ga10x", "8.9": "ada", "9.0": "hopper",
          "10.0": "blackwell", "10.3": "blackwell", "12.0": "blackwell-gb20x", "12.1": "blackwell-gb20x"}


@dataclass(frozen=True)
class ContextCoeffs:
    """The context model's coefficients (MiB), the calibration hook: a fit
    on our own NVML records replaces this object per device."""

    stack_kib_per_thread: float = 1.0   #: CUDA's default cudaLimitStackSize
    fixed_mib: float = 213.0            #: runtime + heap + FIFO + driver (RTX 6000 Ada point)
    cublas_kernels_mib: float = 64.0    #: ASSUMPTION: cuBLAS kernels a step loads lazily
    cudnn_kernels_mib: float = 96.0     #: ASSUMPTION: cuDNN kernels a CNN step loads lazily
    eager_extra_mib: float = 760.0      #: eager module loading (CUDA < 11.7): ASSUMPTION from the
                                        #: PR 86509 difference (362 MiB, PyTorch kernels only) + libraries
    source: str = "estimate from public data points (see perfseer_rt/gpu/cuda_context.py)"


CONTEXT_COEFFS = ContextCoeffs()


def architecture(compute_capability: str | None, name: str = "") -> str:
    """Architecture key from a compute capability (``"8.0"``) or, lacking
    one, from the GPU's name; ``"ampere"`` when neither tells."""
    cc = (compute_capability or "").strip()
    if cc in _BY_CC:
        return _BY_CC[cc]
    if cc[:1] == "6":
        return "pascal"
    low = name.lower()
    for key, words in (("hopper", ("h100", "h200", "h800", "gh200")), ("blackwell", ("b200", "b100", "gb200")),
                       ("blackwell-gb20x", ("rtx 50", "5090", "5080", "rtx pro 6000")),
                       ("ada", ("l4", "l40", "4090", "4080", "6000 ada")),
                       ("ampere-ga10x", ("a10", "a40", "3090", "3080", "a6000", "a16", "a2")),
                       ("ampere", ("a100", "a30", "a800")), ("turing", ("t4", "2080", "rtx 6000", "rtx 8000")),
                       ("volta", ("v100", "titan v")), ("pascal", ("p100", "p40", "p4", "1080"))):
        if any(w in low for w in words):
            return key
    return "ampere"


def cublas_workspace_bytes(arch: str) -> int:
    """One cuBLAS handle's workspace (bytes): 32 MiB on Hopper (cc 9.0), else 8 MiB + 128 KiB."""
    return 32 * 2**20 if arch == "hopper" else 4096 * 1024 * 2 + 16 * 1024 * 8


CUBLASLT_WORKSPACE_BYTES = 1024 * 1024


def context_mib(sms: int, arch: str, *, uses_blas: bool, uses_cudnn: bool, lazy_loading: bool = True,
                coeffs: ContextCoeffs = CONTEXT_COEFFS) -> dict[str, float]:
    """The context's parts in MiB: ``stack`` (local memory reserved for
    every resident thread), ``runtime`` (fixed part), ``kernels`` (library
    kernels loaded). ESTIMATE: see the module doc."""
    threads = MAX_THREADS_PER_SM.get(arch, 2048)
    stack = sms * threads * coeffs.stack_kib_per_thread / 1024.0
    kernels = (coeffs.cublas_kernels_mib if uses_blas else 0.0) + (coeffs.cudnn_kernels_mib if uses_cudnn else 0.0)
    if not lazy_loading:
        kernels += coeffs.eager_extra_mib
    return {"stack": round(stack, 2), "runtime": coeffs.fixed_mib, "kernels": kernels}


def cudnn_workspace_bound(im2col_bytes: float, largest_free_bytes: float) -> float:
    """An upper bound on one convolution's cuDNN workspace (bytes): the
    implicit-GEMM engines cuDNN's heuristics favour need far less than the
    im2col matrix; PyTorch's benchmark mode limits it to the largest free
    cached block (``get_available_workspace`` in ``Conv_v8.cpp``)."""
    return float(min(im2col_bytes, max(largest_free_bytes, 0.0))) if largest_free_bytes else float(im2col_bytes)
