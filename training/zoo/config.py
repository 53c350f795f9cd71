"""The zoo's model configuration: a frozen, validated, hashable description.

``ModelConfig(family, params, batch=None)`` is normalized on construction
(defaults filled, values canonical, see :meth:`Family.normalize`), so

- :meth:`ModelConfig.arch_json` is the canonical JSON of the *architecture*
  (family + params; sorted keys, no spaces) and
- :attr:`ModelConfig.arch_id` is the first 16 hex digits of its SHA-256.

``batch`` is carried for convenience (dataset rows, CLI) but is *not* part of
the architecture: configs differing only in batch share ``arch_id``. Input
resolution and sequence length *are* architecture parameters.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from training.zoo.errors import SpecError
from training.zoo.registry import get_family


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text: sorted keys, compact separators, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


@dataclass(frozen=True, eq=False)
class ModelConfig:
    """One architecture of one family, optionally with a batch size.

    Attributes:
        family: registered family name (see :func:`training.zoo.families`).
        params: normalized parameters (do not mutate; a private copy is kept).
        batch: batch size or ``None`` (dynamic); not part of ``arch_id``.

    Equality and hashing follow :meth:`to_json` (architecture and batch).
    """

    family: str
    params: dict = field(default_factory=dict)
    batch: int | None = None

    def __post_init__(self) -> None:
        fam = get_family(self.family)
        params = fam.normalize(copy.deepcopy(dict(self.params)))
        # JSON round trip: tuples -> lists, so equal configs compare equal.
        object.__setattr__(self, "params", json.loads(canonical_json(params)))
        if self.batch is not None and (
                isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1):
            raise SpecError(f"bad batch {self.batch!r}: expected a positive integer or None")

    # --- identity ----------------------------------------------------------
    def arch_json(self) -> str:
        """Canonical JSON of ``{"family", "params"}``: what :attr:`arch_id` hashes."""
        return canonical_json({"family": self.family, "params": self.params})

    @property
    def arch_id(self) -> str:
        """Stable architecture id: first 16 hex digits of sha256(:meth:`arch_json`)."""
        return hashlib.sha256(self.arch_json().encode("ascii")).hexdigest()[:16]

    def with_batch(self, batch: int | None) -> ModelConfig:
        """The same architecture with another batch size."""
        return ModelConfig(self.family, self.params, batch)

    # --- serialization -----------------------------------------------------
    def to_dict(self, include_arch_id: bool = False) -> dict:
        """Plain dict: family, params, batch (when set), arch_id (when asked)."""
        out: dict[str, Any] = {"family": self.family, "params": copy.deepcopy(self.params)}
        if self.batch is not None:
            out["batch"] = self.batch
        if include_arch_id:
            out["arch_id"] = self.arch_id
        return out

    def to_json(self, include_arch_id: bool = False) -> str:
        """Canonical JSON of :meth:`to_dict` (one line)."""
        return canonical_json(self.to_dict(include_arch_id))

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        """Inverse of :meth:`to_dict`; an ``arch_id`` key, if present, must match."""
        if not isinstance(data, dict) or "family" not in data:
            raise SpecError(f"bad config {data!r}: expected an object with 'family' and 'params'")
        unknown = set(data) - {"family", "params", "batch", "arch_id"}
        if unknown:
            raise SpecError(
                f"unknown config key(s) {sorted(unknown)}; valid keys: family, params, batch, arch_id"
            )
        cfg = cls(data["family"], dict(data.get("params") or {}), data.get("batch"))
        if "arch_id" in data and data["arch_id"] != cfg.arch_id:
            raise SpecError(
                f"config arch_id {data['arch_id']!r} does not match its params (computed "
                f"{cfg.arch_id!r}); the zoo's defaults may have changed since it was written"
            )
        return cfg

    @classmethod
    def from_json(cls, text: str) -> ModelConfig:
        """Inverse of :meth:`to_json`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"bad config JSON {text[:80]!r}: {exc}") from None
        return cls.from_dict(data)

    # --- dunder ------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ModelConfig):
            return NotImplemented
        return self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(self.to_json())

    def __repr__(self) -> str:
        # the constructor's spelling; training.zoo.spec.to_spec gives the spec string
        # (spec imports this module, so this one does not import spec)
        return f"ModelConfig({self.family!r}, {self.params!r}, batch={self.batch!r})"
