"""The published-architecture families (training/zoo/real): timm and HF transformers."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("torch")
compat = pytest.importorskip("training.zoo.real.torchvision_compat")
compat.importable_torchvision()  # before timm / transformers are looked for
pytest.importorskip("timm")
pytest.importorskip("transformers")

from training.dataset.splits import HELD_OUT_REAL_GROUPS, split_real
from training.zoo import ModelConfig, sample
from training.zoo.real import hf_text, timm_scan, timm_vision
from training.zoo.real.torchvision_compat import import_timm, import_transformers
from training.zoo.registry import get_family


def test_timm_and_transformers_import_under_cpu_torch():
    timm = import_timm()
    assert timm.__version__ == "1.0.31"  # the version timm_models.json was scanned with
    assert hasattr(import_transformers(), "BertConfig")


def test_timm_candidates_follow_the_scan_rules():
    models = timm_vision.models()
    assert len(models) >= 150
    assert all(m["params"] <= timm_vision.MAX_PARAMS and m["res"] <= timm_scan.MAX_RES
               for m in models.values())
    assert not [n for n in models if n.startswith("test_")]
    # the groups held out for the real-model split exist among the candidates
    groups = {m["group"] for m in models.values()} | {a[0] for a in hf_text.ARCHITECTURES.values()}
    assert HELD_OUT_REAL_GROUPS <= groups


def test_fixed_size_models_run_at_their_size():
    fixed = next(n for n, m in sorted(timm_vision.models().items()) if m["fixed"])
    cfg = ModelConfig("timm", {"model": fixed, "res": 96})
    assert cfg.params["res"] == timm_vision.models()[fixed]["res"]


@pytest.mark.parametrize("family", ["timm", "hf"])
def test_sampling_is_deterministic_and_grouped(family):
    a = [sample(family, random.Random(7)).arch_id for _ in range(3)]
    b = [sample(family, random.Random(7)).arch_id for _ in range(3)]
    assert a == b
    fam = get_family(family)
    groups = {fam.group_of(sample(family, random.Random(i)).params) for i in range(40)}
    assert len(groups) >= 8  # a group is drawn first, uniformly


def test_real_split_holds_out_whole_groups():
    assert split_real("0" * 16, "timm", "convnext") == "test"
    assert split_real("0" * 16, "hf", "opt") == "test"
    assert split_real("0" * 16, "resnet", "resnet") != "test"  # generated families never
    assert split_real("0" * 16, "timm", "resnet") != "test"
