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
    #: dense fp16/bf16 tensor-core peak, GFLOP/s (None: no tensor cores or
    #: not known); used only behind the documented fp16 assumption.
    tc16_gflops: float | None = None

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
                       l2_mb=self.l2_mb * l2_fraction)
