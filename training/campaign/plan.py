"""What a campaign measures: work items drawn deterministically from a seed.

Two plans, one item type (:class:`Item`):

- :class:`CpuPlan`: the endless CPU stream of
  :func:`training.dataset.plan.architecture_stream`; each architecture is
  probed at batch 1 and measured at up to ``per_arch - 1`` more batch sizes
  chosen from the probe (:func:`training.dataset.plan.pick_batches`, with the
  architecture's own ``random.Random(f"{seed}/{arch_id}")``, as the first
  builder did, so old dataset folders resume with the same configurations);
- :class:`FixedPlan`: ``count`` architectures drawn by
  :data:`GPU_FAMILY_WEIGHTS`, each at ``batches_per_arch`` batch sizes from
  1..256 (the GPU campaigns).

The reference set (re-measured through a campaign to show drift) is part of
the plan: CPU: :data:`REFERENCE_SPECS` at batch 1; fixed: the first
``reference_count`` architectures at their first batch size.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from typing import Iterator, Sequence

from training.campaign.zoo_cases import zoo
from training.dataset.plan import FAMILY_WEIGHTS, architecture_stream

#: Architectures the CPU stream re-measures to detect drift.
REFERENCE_SPECS = (
    "resnet:depth=18,width=1.0,res=64",
    "mobilenetv2:width=1.0,depth=1.0,res=96",
    "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|",
)
#: GPU batch sizes (DESIGN.md section 4: 1..256).
GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Families of the fixed (GPU) plan and their shares.
GPU_FAMILY_WEIGHTS = {
    "perfseer": 8, "resnet": 1, "vgg": 1, "mobilenetv2": 1, "mobilenetv3": 1, "densenet": 1,
    "efficientnet": 1, "googlenet": 1, "vit": 1, "bert": 1, "gpt": 1,
}


@dataclass(frozen=True)
class Item:
    """One architecture to measure.

    Attributes:
        config: the zoo config as a dict (``ModelConfig.to_dict``).
        arch_id, family, spec: its identity.
        group: its architecture family (``Family.group_of``: a published
            model's lineage, else the zoo family); decides ``split_real``.
        batches: the batch sizes, or None: probe batch 1, then pick more.
        reference: a reference re-measurement (never counted as done).
        seed: seed of the probe's batch choice.
        per_arch, max_ms: the probe's batch count and latency ceiling.
    """

    config: dict
    arch_id: str
    family: str
    spec: str | None
    batches: tuple[int, ...] | None
    group: str = ""
    reference: bool = False
    seed: str = ""
    per_arch: int = 3
    max_ms: float = 1000.0
    skip: frozenset = field(default_factory=frozenset)  # batches already recorded

    def with_skip(self, batches) -> "Item":
        return Item(**{**self.__dict__, "skip": frozenset(batches)})


def _item(cfg, batches, reference=False, **kw) -> Item:
    z = zoo()
    spec = z.to_spec(cfg) if hasattr(z, "to_spec") else None
    return Item(config=json.loads(json.dumps(cfg.to_dict())), arch_id=cfg.arch_id,
                family=cfg.family, spec=spec,
                group=z.get_family(cfg.family).group_of(cfg.params),
                batches=tuple(batches) if batches is not None else None,
                reference=reference, **kw)


class CpuPlan:
    """The CPU stream (see module doc)."""

    def __init__(self, seed: int = 0, families: Sequence[str] | None = None, per_arch: int = 3,
                 max_latency_ms: float = 1000.0, reference_specs: Sequence[str] = REFERENCE_SPECS):
        unknown = sorted(set(families or ()) - set(FAMILY_WEIGHTS))
        if unknown:
            raise ValueError(f"unknown families {unknown}; choose from {sorted(FAMILY_WEIGHTS)}")
        self.seed, self.families = seed, tuple(families) if families else None
        self.per_arch, self.max_ms = per_arch, max_latency_ms
        self.reference_specs = tuple(reference_specs)

    def items(self) -> Iterator[Item]:
        seen: set[str] = set()
        for cfg in architecture_stream(self.seed, self.families):
            if cfg.arch_id in seen:
                continue
            seen.add(cfg.arch_id)
            yield _item(cfg, None, seed=f"{self.seed}/{cfg.arch_id}", per_arch=self.per_arch,
                        max_ms=self.max_ms)

    def references(self) -> list[Item]:
        return [_item(zoo().parse_spec(s), (1,), reference=True) for s in self.reference_specs]

    def describe(self) -> dict:
        return {"plan": "cpu", "seed": self.seed, "families": self.families,
                "per_arch": self.per_arch, "max_latency_ms": self.max_ms,
                "reference_specs": list(self.reference_specs)}


class FixedPlan:
    """``count`` architectures at fixed batch sizes (the GPU campaigns).

    Families are drawn by ``weights`` from ``random.Random(seed)``; each
    family samples from its own ``random.Random(f"{seed}:{family}")`` so
    adding a family does not change the others' configs; the PerfSeer space
    is fixed to ``perfseer_res`` pixels. ``specs`` (zoo spec strings) come
    first. A family the zoo cannot build is skipped.
    """

    def __init__(self, seed: int = 0, count: int = 2000, families: Sequence[str] | None = None,
                 batches: Sequence[int] = GPU_BATCHES, batches_per_arch: int = 3,
                 perfseer_res: int = 224, specs: Sequence[str] = (), reference_count: int = 3,
                 weights: dict[str, float] | None = None):
        self.seed, self.count, self.batches = seed, count, tuple(batches)
        self.batches_per_arch, self.perfseer_res = batches_per_arch, perfseer_res
        self.specs, self.reference_count = tuple(specs), reference_count
        self.weights = dict(weights or GPU_FAMILY_WEIGHTS)
        self.families = list(families or self.weights)
        self._items: list[Item] | None = None

    def _plan(self) -> list[Item]:
        if self._items is not None:
            return self._items
        z = zoo()
        usable = []
        for fam in self.families:
            try:
                z.get_family(fam)
                usable.append(fam)
            except Exception:  # noqa: BLE001 - a family the zoo lacks is left out of the plan
                continue
        pick = random.Random(self.seed)
        batch_rng = random.Random(f"{self.seed}:batches")
        fam_rngs = {f: random.Random(f"{self.seed}:{f}") for f in usable}
        k = min(self.batches_per_arch, len(self.batches))
        items: list[Item] = []
        seen: set[str] = set()
        for text in self.specs:
            cfg = z.parse_spec(text)
            items.append(_item(cfg, sorted(batch_rng.sample(list(self.batches), k))))
            seen.add(cfg.arch_id)
        weights = [self.weights.get(f, 1) for f in usable]
        attempts = 0
        while usable and len(items) < self.count + len(self.specs) \
                and attempts < 20 * (self.count + 1):
            attempts += 1
            fam = pick.choices(usable, weights)[0]
            cfg = z.sample(fam, fam_rngs[fam])
            if fam == "perfseer" and "res" in cfg.params and cfg.params["res"] != self.perfseer_res:
                cfg = z.ModelConfig(fam, {**cfg.params, "res": self.perfseer_res})
            chosen = sorted(batch_rng.sample(list(self.batches), k))
            if cfg.arch_id in seen:
                continue
            seen.add(cfg.arch_id)
            items.append(_item(cfg, chosen))
        self._items = items
        return items

    def items(self) -> Iterator[Item]:
        return iter(self._plan())

    def references(self) -> list[Item]:
        return [replace(it, batches=None if it.batches is None else it.batches[:1], reference=True)
                for it in self._plan()[:self.reference_count]]

    def describe(self) -> dict:
        return {"plan": "fixed", "seed": self.seed, "count": self.count,
                "families": self.families, "batches": list(self.batches),
                "batches_per_arch": self.batches_per_arch, "perfseer_res": self.perfseer_res,
                "specs": list(self.specs), "reference_count": self.reference_count}
