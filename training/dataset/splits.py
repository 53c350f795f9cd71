"""Dataset splits, by architecture: every batch size of one architecture
falls in the same split (DESIGN.md section 4).

* ``split_arch``: 2:1:1 train/val/test by a hash of the architecture id.
* ``split_family``: the families in :data:`HELD_OUT_FAMILIES` are the test
  set (never seen in training); the other architectures split 3:1
  train/val by the same hash.
* ``split_real``: the real-model check. Published architectures (timm, HF
  transformers) of the groups in :data:`HELD_OUT_REAL_GROUPS` are the test
  set; every other architecture, generated or published, splits 3:1
  train/val. A predictor trained on this split has never seen a ConvNeXt,
  RegNet, MobileViT, OPT or ELECTRA.
"""

from __future__ import annotations

import hashlib

#: Families held out entirely by the family split: one CNN family, one
#: transformer family, covering both kinds of graphs.
HELD_OUT_FAMILIES: frozenset[str] = frozenset({"densenet", "gpt"})


#: Published architecture groups (timm modules, HF model types) held out by
#: :func:`split_real`: three CNN families, a CNN/attention hybrid, a
#: pyramid vision transformer, a decoder and two encoders.
HELD_OUT_REAL_GROUPS: frozenset[str] = frozenset({"convnext", "regnet", "mobilevit", "ghostnet",
                                                   "pvt_v2", "opt", "electra", "roberta"})
#: The zoo families whose architectures are published ones.
REAL_FAMILIES: frozenset[str] = frozenset({"timm", "hf"})


def _bucket(arch_id: str) -> int:
    """0..3, uniform over architecture ids, stable across runs."""
    return hashlib.sha256(arch_id.encode()).digest()[0] % 4


def split_arch(arch_id: str) -> str:
    """'train' (2/4), 'val' (1/4) or 'test' (1/4) by architecture."""
    return ("train", "train", "val", "test")[_bucket(arch_id)]


def split_family(arch_id: str, family: str,
                 held_out: frozenset[str] = HELD_OUT_FAMILIES) -> str:
    """'test' for held-out families, else 'train' (3/4) or 'val' (1/4)."""
    if family in held_out:
        return "test"
    return "val" if _bucket(arch_id) == 2 else "train"


def split_real(arch_id: str, family: str, group: str,
               held_out: frozenset[str] = HELD_OUT_REAL_GROUPS) -> str:
    """'test' for published architectures of held-out groups, else 'train' (3/4) or 'val'."""
    if family in REAL_FAMILIES and group in held_out:
        return "test"
    return "val" if _bucket(arch_id) == 2 else "train"
