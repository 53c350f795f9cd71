"""What a CPU campaign measures: a deterministic stream of architectures.

The families' own samplers give the architectures; image models get a CPU
resolution (so one run lands between ~1 ms and ~2 s on one core) and
transformers a CPU sequence length. Batch sizes are chosen per
architecture by the builder from a measured batch-1 probe.
"""

from __future__ import annotations

import random
from typing import Iterator

from training.zoo import ModelConfig, sample

#: Share of each family in the stream (normalised).
FAMILY_WEIGHTS: dict[str, float] = {
    "perfseer": 0.30, "nb201": 0.14,
    "vgg": 0.05, "resnet": 0.06, "mobilenetv2": 0.05, "mobilenetv3": 0.05,
    "densenet": 0.05, "efficientnet": 0.05, "googlenet": 0.04,
    "vit": 0.07, "bert": 0.07, "gpt": 0.07,
    # published architectures (timm, HF transformers): a third of the stream
    "timm": 0.35, "hf": 0.15,
}

#: CPU input resolutions (pixels) of image families; NAS-Bench-201 is 32x32.
CPU_RESOLUTIONS = (32, 48, 64, 96, 128, 160, 192, 224)
#: CPU sequence lengths of text transformers.
CPU_SEQ_LENS = (16, 32, 64, 128)
#: Candidate batch sizes.
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def cpu_variant(config, rng: random.Random):
    """The config with a CPU-sized resolution / sequence length."""
    params = dict(config.params)
    if config.family in ("nb201", "timm", "hf"):
        return config  # NB201 is 32x32; the published families sample their own input sizes
    if "res" in params:
        choices = [r for r in CPU_RESOLUTIONS if r >= 32 + (32 if config.family in
                   ("googlenet", "vit") else 0)]
        params["res"] = rng.choice(choices)
        if config.family == "vit":
            patch = params.get("patch", 16)
            params["res"] = max(patch * 2, params["res"] // patch * patch)
    if "seq" in params:
        params["seq"] = rng.choice(CPU_SEQ_LENS)
    return ModelConfig(config.family, params)


def architecture_stream(seed: int, families: tuple[str, ...] | None = None) -> Iterator:
    """An endless deterministic stream of CPU-sized zoo configs, drawn from
    ``families`` (default: all of :data:`FAMILY_WEIGHTS`) by their weights."""
    rng = random.Random(seed)
    names = sorted(families or FAMILY_WEIGHTS)
    unknown = [f for f in names if f not in FAMILY_WEIGHTS]
    if unknown:
        raise ValueError(f"unknown families {unknown}; choose from {sorted(FAMILY_WEIGHTS)}")
    weights = [FAMILY_WEIGHTS[f] for f in names]
    while True:
        family = rng.choices(names, weights)[0]
        yield cpu_variant(sample(family, rng), rng)


def pick_batches(probe_latency_ms: float, rng: random.Random, per_arch: int = 3,
                 lo_ms: float = 1.0, hi_ms: float = 2000.0) -> list[int]:
    """Batch sizes (besides 1) expected to run within [lo_ms, hi_ms].

    Latency is assumed to grow at most linearly with batch from the batch-1
    probe (a conservative estimate on one CPU core); the measured values are
    what the dataset records.
    """
    fits = [b for b in BATCHES[1:] if lo_ms <= probe_latency_ms * b <= hi_ms * 0.75]
    rng.shuffle(fits)
    return sorted(fits[: max(per_arch - 1, 0)])
