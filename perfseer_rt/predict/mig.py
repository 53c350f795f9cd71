"""MIG profile advice from predicted memory (paper 002, section 3.5).

DIPPM's rule picks the smallest MIG profile whose memory limit is above the
predicted memory; we add a safety margin on top of the prediction (stated
in every answer) because an under-prediction means an out-of-memory job.
Profiles are plain data: name, compute slices, memory limit in GB (as NVIDIA
names them; the usable memory of an instance is slightly below the name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfseer_rt.errors import DeviceError


@dataclass(frozen=True)
class MigProfile:
    name: str
    slices: int
    memory_gb: float


#: GPU -> its MIG profiles, smallest first.
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "a100-40gb": (MigProfile("1g.5gb", 1, 5), MigProfile("2g.10gb", 2, 10),
                  MigProfile("3g.20gb", 3, 20), MigProfile("4g.20gb", 4, 20),
                  MigProfile("7g.40gb", 7, 40)),
    "a100-80gb": (MigProfile("1g.10gb", 1, 10), MigProfile("1g.20gb", 1, 20),
                  MigProfile("2g.20gb", 2, 20), MigProfile("3g.40gb", 3, 40),
                  MigProfile("4g.40gb", 4, 40), MigProfile("7g.80gb", 7, 80)),
    "h100-80gb": (MigProfile("1g.10gb", 1, 10), MigProfile("1g.20gb", 1, 20),
                  MigProfile("2g.20gb", 2, 20), MigProfile("3g.40gb", 3, 40),
                  MigProfile("4g.40gb", 4, 40), MigProfile("7g.80gb", 7, 80)),
    "h200-141gb": (MigProfile("1g.18gb", 1, 18), MigProfile("1g.35gb", 1, 35),
                   MigProfile("2g.35gb", 2, 35), MigProfile("3g.71gb", 3, 71),
                   MigProfile("4g.71gb", 4, 71), MigProfile("7g.141gb", 7, 141)),
}

#: Usable share of an instance's nominal memory (an A100-40GB ``1g.5gb``
#: instance reports 4864 MiB = 95 % of 5 GiB; an assumption for the others).
USABLE_FRACTION = 0.95
#: Least safety margin over the predicted memory (fraction).
MIN_MARGIN = 0.10


def margin_for(memory_mape_pct: float | None) -> float:
    """Margin: twice the predictor's test MAPE on memory, at least 10 %."""
    if memory_mape_pct is None:
        return 2 * MIN_MARGIN
    return max(MIN_MARGIN, 2 * memory_mape_pct / 100.0)


def suggest(gpu: str, predicted_mem_mb: float, margin: float) -> dict[str, Any]:
    """The smallest profile of ``gpu`` holding ``predicted * (1 + margin)``.

    Returns a dict with ``profile`` (None when even the whole GPU is too
    small), ``required_mb`` and ``margin``.
    """
    need_mb = predicted_mem_mb * (1.0 + margin)
    for p in MIG_PROFILES[gpu]:
        if need_mb < p.memory_gb * 1000.0:
            return {"gpu": gpu, "profile": p.name, "required_mb": round(need_mb, 1),
                    "margin": round(margin, 3)}
    return {"gpu": gpu, "profile": None, "required_mb": round(need_mb, 1),
            "margin": round(margin, 3), "reason": "does not fit the whole GPU"}


def find_profile(gpu: str | None, profile: str) -> Any:
    """The :class:`~perfseer_rt.predict.mig.MigProfile` named ``profile`` in
    MIG table ``gpu`` (None: a GPU without MIG).

    Raises:
        DeviceError: no MIG table, or a profile the table does not have.
    """
    table = MIG_PROFILES.get(gpu or "")
    if not table:
        raise DeviceError(f"MIG profile {profile!r}: {gpu or 'this GPU'} has no MIG "
                          f"(MIG tables: {', '.join(MIG_PROFILES)})")
    for p in table:
        if p.name == profile:
            return p
    raise DeviceError(f"MIG profile {profile!r} is not one of {gpu}'s: " + ", ".join(p.name for p in table))


def usable_mib(memory_gb: float) -> float:
    """Usable MiB of an instance of ``memory_gb`` nominal GB (module doc)."""
    return memory_gb * 1024.0 * USABLE_FRACTION


def mem_fraction(gpu: str, memory_gb: float) -> float:
    """An instance's share of the whole GPU's memory (and bandwidth, L2)."""
    return memory_gb / MIG_PROFILES[gpu][-1].memory_gb
