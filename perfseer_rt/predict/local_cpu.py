"""Is a CPU device's predictor this machine's CPU?

A CPU predictor is right only on the CPU it was measured on. A device's
manifest carries the environment block of its measurements
(:func:`perfseer_rt.profile.env.environment`): newer ones the CPU signature
(``cpu_vendor``, ``cpu_family``, ``cpu_model_id``, ``cpu_stepping``,
``cpu_isa``), older ones only ``cpu_model`` (a name, e.g. "AMD EPYC").
Signatures are compared when the manifest has one (vendor, family, model and
ISA level; stepping differences are ignored), names otherwise.
"""

from __future__ import annotations

from typing import Any

from perfseer_rt.profile.env import cpu_model, cpu_signature

SIGNATURE_KEYS = ("cpu_vendor", "cpu_family", "cpu_model_id", "cpu_isa")


def device_environment(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The environment block of a predictor's manifest (None when it has only words)."""
    desc = manifest.get("device", {}).get("description")
    return desc if isinstance(desc, dict) else None


def is_cpu_device(manifest: dict[str, Any]) -> bool:
    env = device_environment(manifest)
    return bool(env and env.get("cpu_model") and not env.get("gpu_name"))


def local_cpu() -> dict[str, Any]:
    return {"cpu_model": cpu_model(), **cpu_signature()}


def describe(env: dict[str, Any]) -> str:
    """``AMD EPYC (AuthenticAMD family 25 model 17, avx512_bf16)`` or the bare name."""
    name = env.get("cpu_model") or "unknown CPU"
    if env.get("cpu_family") is None:
        return name
    return (f"{name} ({env.get('cpu_vendor')} family {env.get('cpu_family')} model "
            f"{env.get('cpu_model_id')}, {env.get('cpu_isa')})")


def matches_local(manifest: dict[str, Any], local: dict[str, Any] | None = None) -> bool | None:
    """True/False for a CPU device, None when the question does not apply
    (a GPU device, or a manifest without an environment block)."""
    if not is_cpu_device(manifest):
        return None
    env = device_environment(manifest) or {}
    local = local if local is not None else local_cpu()
    if all(env.get(k) is not None for k in SIGNATURE_KEYS[:3]):
        return all(str(env.get(k)) == str(local.get(k)) for k in SIGNATURE_KEYS if env.get(k) is not None)
    return (env.get("cpu_model") or "").strip() == (local.get("cpu_model") or "").strip()


def mismatch_warning(device: str, manifest: dict[str, Any], local: dict[str, Any] | None = None) -> str | None:
    """The warning ``predict`` adds when a CPU device is not this machine's CPU."""
    local = local if local is not None else local_cpu()
    if matches_local(manifest, local) is not False:
        return None
    return (f"device {device!r} was measured on {describe(device_environment(manifest) or {})}, "
            f"this machine has {describe(local)}: latency can be far off; run `perfseer-rt calibrate` "
            "for a predictor of this CPU")
