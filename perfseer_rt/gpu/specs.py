"""GPU spec sheets: the only thing the prior knows about a device.

Units: memory in GB (as sold), bandwidth in GB/s, clock in MHz, peaks in
GFLOP/s, L2 in MB. The NeuSight spec sheets
(``external/neusight-kernels/device_configs``) are copied verbatim into each
device's manifest (``exported_models/<device>/manifest.json``, ``spec``);
this module reads them from a dict and adds nothing of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from perfseer_rt.errors import PerfSeerError


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's spec sheet (fields as in NeuSight's device configs)."""

    name: str
    mem_gb: float          #: device memory, GB
    mem_bw_gbs: float      #: memory bandwidth, GB/s
    sms: int               #: streaming multiprocessors
    cores_per_sm: int      #: fp32 cores per SM
    clock_mhz: float       #: boost clock, MHz
    fp32_gflops: float     #: fp32 peak (non-tensor-core), GFLOP/s
    l2_mb: float           #: L2 cache, MB
    #: dense fp16 tensor-core peak with fp32 accumulate, GFLOP/s (None: no
    #: tensor cores or not known): what PyTorch's fp16 matmuls and AMP run at
    tc16_gflops: float | None = None
    #: dense TF32 tensor-core peak, GFLOP/s (None: no TF32: before Ampere)
    tf32_gflops: float | None = None
    #: dense bf16 tensor-core peak with fp32 accumulate, GFLOP/s (None: no bf16)
    bf16_gflops: float | None = None
    #: architecture (``volta``, ``turing``, ``ampere``, ``ada``, ``hopper``,
    #: ``blackwell``, ``pascal``); None: not given
    arch: str | None = None
    #: board power (TDP / TGP), W; None: not given
    tdp_w: float | None = None

    @classmethod
    def from_config(cls, doc: dict[str, Any]) -> "GpuSpec":
        """From a NeuSight-style config (``Device``, ``Mem_Bw``, ...)."""
        return cls(name=doc["Device"], mem_gb=float(doc["Dev_Mem"]),
                   mem_bw_gbs=float(doc["Mem_Bw"]), sms=int(doc["Num_Sm"]),
                   cores_per_sm=int(doc["Core_Per_SM"]), clock_mhz=float(doc["Freq"]),
                   fp32_gflops=float(doc["SingleFLOPs"]), l2_mb=float(doc["L2Cache"]),
                   tc16_gflops=(float(doc["TC16_FLOPs"]) if doc.get("TC16_FLOPs") else None))

    def to_config(self) -> dict[str, Any]:
        doc = {"Device": self.name, "Dev_Mem": self.mem_gb, "Mem_Bw": self.mem_bw_gbs,
               "Num_Sm": self.sms, "Core_Per_SM": self.cores_per_sm, "Freq": self.clock_mhz,
               "SingleFLOPs": self.fp32_gflops, "L2Cache": self.l2_mb,
               "TC16_FLOPs": self.tc16_gflops or None}  # null: no tensor-core peak known
        return doc

    def peak_gflops(self, peak: str) -> float:
        """GFLOP/s of the math a kernel runs on (``fp32``, ``tf32``, ``fp16``,
        ``bf16``): TF32 falls back to fp32 on GPUs without it (PyTorch's
        flags then change nothing), fp16 to fp32 on GPUs without tensor cores.

        Raises:
            PerfSeerError: bf16 on a GPU without bf16 tensor cores (PyTorch
                refuses bf16 autocast there).
        """
        if peak == "tf32":
            return self.tf32_gflops or self.fp32_gflops
        if peak == "fp16":
            return self.tc16_gflops or self.fp32_gflops
        if peak == "bf16":
            if not self.bf16_gflops:
                raise PerfSeerError(f"{self.name} has no bf16 tensor cores on its spec sheet "
                                    "(bf16 needs Ampere or newer); use fp16 or fp32")
            return self.bf16_gflops
        return self.fp32_gflops

    @property
    def ridge(self) -> float:
        """Ridge point of the fp32 roofline, FLOP/byte."""
        return self.fp32_gflops / self.mem_bw_gbs

    def share(self, sms: int, bw_fraction: float, l2_fraction: float) -> "GpuSpec":
        """The spec of a slice (MIG instance) with ``sms`` SMs and the given
        fractions of memory bandwidth and L2; peak scales with the SMs."""
        return replace(self, name=f"{self.name} [{sms} SMs]", sms=sms,
                       mem_bw_gbs=self.mem_bw_gbs * bw_fraction,
                       fp32_gflops=self.fp32_gflops * sms / self.sms,
                       tc16_gflops=(self.tc16_gflops * sms / self.sms
                                    if self.tc16_gflops else None),
                       tf32_gflops=(self.tf32_gflops * sms / self.sms
                                    if self.tf32_gflops else None),
                       bf16_gflops=(self.bf16_gflops * sms / self.sms
                                    if self.bf16_gflops else None),
                       l2_mb=self.l2_mb * l2_fraction)
