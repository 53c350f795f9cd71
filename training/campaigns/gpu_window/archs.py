"""The architectures a GPU window measures: plain data, in the order of their value.

Three sources, each rebuilt in-process on the GPU from a config (never from an
ONNX file):

* ``timm``: models from the public timm records' model list
  (``data/public-gpu/timm``, measured by others on RTX 3090/4090), at the
  image size those records use, so our H100/H200 rows pair with theirs.
  ``group`` (the timm module) and ``kind`` (``arch_kind``) are copied from
  those records; ``tests/test_gpu_window.py`` checks them against the records.
* ``hf``: text transformers of :mod:`training.zoo.real.hf_text` (the
  published checkpoints' hyper-parameters, random weights) at several
  sequence lengths.
* the zoo's generated families (:mod:`training.zoo`): one seeded draw per
  family (``sample_many(family, n, seed=ZOO_SEED)``).

Tier 1 is a spread (one or two per timm module, the common text models, one
draw per zoo family): the window measures it first. Tier 2 adds more of each,
measured once tier 1's settings are done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

#: Seed of the zoo draws (``training.zoo.sample_many``).
ZOO_SEED = 2026
#: Kinds whose convolutions make channels-last (NHWC) worth measuring.
CONV_KINDS = ("cnn", "mobile-cnn")


@dataclass(frozen=True)
class Arch:
    """One architecture: ``family`` + ``params`` is the zoo's config (``res`` /
    ``seq`` included), ``group`` the family-held-out unit, ``kind`` the coarse
    kind (``training.publicgpu.families.KINDS``), ``tier`` 1 or 2."""

    family: str
    params: dict = field(hash=False, compare=False)
    group: str
    kind: str
    tier: int
    spec: str = ""

    @property
    def text(self) -> bool:
        return self.kind == "transformer"

    @property
    def conv(self) -> bool:
        return self.kind in CONV_KINDS

    @property
    def build_key(self) -> str:
        """Architectures with one build key share one module (an HF model at
        several sequence lengths)."""
        if self.family == "hf":
            return f"hf:model={self.params['model']}"
        return self.spec


# (model, image size, timm module, kind): tier 1, a spread over timm's modules and kinds
TIMM_TIER1: tuple[tuple[str, int, str, str], ...] = (
    ("resnet50", 224, "resnet", "cnn"),
    ("vit_base_patch16_224", 224, "vision_transformer", "vit"),
    ("efficientnet_b0", 224, "efficientnet", "mobile-cnn"),
    ("convnext_tiny", 224, "convnext", "cnn"),
    ("swin_tiny_patch4_window7_224", 224, "swin_transformer", "vit"),
    ("mobilenetv3_large_100", 224, "mobilenetv3", "mobile-cnn"),
    ("deit_small_patch16_224", 224, "deit", "vit"),
    ("regnety_032", 224, "regnet", "cnn"),
    ("mixer_b16_224", 224, "mlp_mixer", "mlp-mixer"),
    ("densenet121", 224, "densenet", "cnn"),
    ("mobilevit_s", 256, "mobilevit", "hybrid"),
    ("poolformer_s12", 224, "metaformer", "other"),
    ("resnet18", 224, "resnet", "cnn"),
    ("xcit_tiny_12_p16_224", 224, "xcit", "vit"),
    ("cspresnet50", 256, "cspnet", "cnn"),
    ("efficientformer_l1", 224, "efficientformer", "hybrid"),
    ("nf_resnet50", 256, "nfnet", "cnn"),
    ("beit_base_patch16_224", 224, "beit", "vit"),
    ("rexnet_100", 224, "rexnet", "mobile-cnn"),
    ("hrnet_w18_small", 224, "hrnet", "cnn"),
    ("pvt_v2_b1", 224, "pvt_v2", "vit"),
    ("repvgg_a2", 224, "byobnet", "cnn"),
    ("edgenext_small", 256, "edgenext", "hybrid"),
    ("dla34", 224, "dla", "cnn"),
    ("cait_xxs24_224", 224, "cait", "vit"),
    ("tresnet_m", 224, "tresnet", "cnn"),
    ("tiny_vit_11m_224", 224, "tiny_vit", "hybrid"),
    ("gmlp_s16_224", 224, "mlp_mixer", "mlp-mixer"),
    ("inception_v4", 299, "inception_v4", "cnn"),
    ("crossvit_15_240", 240, "crossvit", "vit"),
    ("fastvit_sa12", 256, "fastvit", "hybrid"),
    ("xception41", 299, "xception_aligned", "mobile-cnn"),
    ("volo_d1_224", 224, "volo", "vit"),
    ("hgnet_tiny", 224, "hgnet", "cnn"),
    ("gcvit_tiny", 224, "gcvit", "hybrid"),
    ("sequencer2d_s", 224, "sequencer", "other"),
    ("botnet26t_256", 256, "byoanet", "hybrid"),
    ("resnest50d", 224, "resnest", "cnn"),
    ("mvitv2_tiny", 224, "mvitv2", "vit"),
    ("convmixer_768_32", 224, "convmixer", "cnn"),
)

TIMM_TIER2: tuple[tuple[str, int, str, str], ...] = (
    ("vit_small_patch16_224", 224, "vision_transformer", "vit"),
    ("mobilenetv2_100", 224, "efficientnet", "mobile-cnn"),
    ("resnet101", 224, "resnet", "cnn"),
    ("efficientnet_b3", 288, "efficientnet", "mobile-cnn"),
    ("convnext_small", 224, "convnext", "cnn"),
    ("vit_tiny_patch16_224", 224, "vision_transformer", "vit"),
    ("resnext50_32x4d", 224, "resnet", "cnn"),
    ("tf_efficientnetv2_s", 300, "efficientnet", "mobile-cnn"),
    ("deit_base_patch16_224", 224, "deit", "vit"),
    ("caformer_s18", 224, "metaformer", "hybrid"),
    ("lcnet_050", 224, "mobilenetv3", "mobile-cnn"),
    ("swinv2_cr_tiny_ns_224", 224, "swin_transformer_v2_cr", "vit"),
    ("wide_resnet50_2", 224, "resnet", "cnn"),
    ("efficientvit_b1", 224, "efficientvit_mit", "hybrid"),
    ("resmlp_12_224", 224, "mlp_mixer", "mlp-mixer"),
    ("regnetx_002", 224, "regnet", "cnn"),
    ("mnasnet_100", 224, "efficientnet", "mobile-cnn"),
    ("nextvit_small", 224, "nextvit", "hybrid"),
    ("hiera_tiny_224", 224, "hiera", "vit"),
    ("convformer_s18", 224, "metaformer", "cnn"),
    ("mobilenetv4_conv_small", 224, "mobilenetv3", "mobile-cnn"),
    ("tnt_s_patch16_224", 224, "tnt", "vit"),
    ("seresnext50_32x4d", 224, "resnet", "cnn"),
    ("focalnet_tiny_srf", 224, "focalnet", "hybrid"),
    ("hardcorenas_a", 224, "hardcorenas", "mobile-cnn"),
    ("vit_relpos_small_patch16_224", 224, "vision_transformer_relpos", "vit"),
    ("res2net50_26w_4s", 224, "res2net", "cnn"),
    ("visformer_tiny", 224, "visformer", "hybrid"),
    ("repghostnet_100", 224, "repghost", "mobile-cnn"),
    ("nest_tiny", 224, "nest", "vit"),
    ("dpn68", 224, "dpn", "cnn"),
    ("vitamin_small_224", 224, "vitamin", "hybrid"),
    ("repvit_m1_1", 224, "repvit", "mobile-cnn"),
    ("inception_next_tiny", 224, "inception_next", "cnn"),
    ("mobilevitv2_100", 256, "mobilevit", "hybrid"),
    ("skresnet18", 224, "sknet", "cnn"),
    ("efficientnet_lite0", 224, "efficientnet", "mobile-cnn"),
    ("ese_vovnet19b_dw", 224, "vovnet", "cnn"),
    ("vit_base_r50_s16_224", 224, "vision_transformer_hybrid", "hybrid"),
    ("selecsls42b", 224, "selecsls", "cnn"),
    ("fbnetv3_b", 224, "mobilenetv3", "mobile-cnn"),
    ("legacy_seresnet18", 224, "senet", "cnn"),
    ("rdnet_tiny", 224, "rdnet", "cnn"),
    ("resnet34", 224, "resnet", "cnn"),
    ("efficientnet_b1", 240, "efficientnet", "mobile-cnn"),
    ("resnet26d", 224, "resnet", "cnn"),
    ("regnety_016", 224, "regnet", "cnn"),
    ("vit_large_patch16_224", 224, "vision_transformer", "vit"),
)

# (model, sequence lengths, group): HF text models (training.zoo.real.hf_text names)
HF_TIER1: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("bert-base", (128, 512), "bert"),
    ("gpt2", (128, 1024), "gpt2"),
    ("distilbert-base", (128,), "distilbert"),
    ("smollm-135m", (128, 512), "llama"),
    ("roberta-base", (128,), "roberta"),
    ("opt-125m", (256,), "opt"),
    ("t5-small-encoder", (128,), "t5"),
    ("bert-L4-H256", (128,), "bert"),
)
HF_TIER2: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("bert-large", (128, 512), "bert"),
    ("gpt2-medium", (256,), "gpt2"),
    ("pythia-160m", (256,), "pythia"),
    ("qwen2-0.5b", (128,), "qwen2"),
    ("minilm-L12-H384", (128,), "minilm"),
    ("electra-base", (128,), "electra"),
    ("albert-base-v2", (128,), "albert"),
    ("modernbert-base", (512,), "modernbert"),
    ("mpnet-base", (128,), "mpnet"),
    ("deberta-v3-small", (128,), "deberta"),
)

#: zoo family -> (draws in tier 1, draws in tier 2, kind)
ZOO_FAMILIES: dict[str, tuple[int, int, str]] = {
    "perfseer": (2, 2, "cnn"),
    "resnet": (1, 1, "cnn"),
    "mobilenetv3": (1, 1, "mobile-cnn"),
    "efficientnet": (1, 1, "mobile-cnn"),
    "vit": (1, 1, "vit"),
    "bert": (1, 1, "transformer"),
    "gpt": (1, 1, "transformer"),
    "nb201": (1, 1, "cnn"),
    "densenet": (0, 1, "cnn"),
    "googlenet": (0, 1, "cnn"),
    "vgg": (0, 1, "cnn"),
    "mobilenetv2": (0, 2, "mobile-cnn"),
}


def timm_arch(model: str, res: int, group: str, kind: str, tier: int) -> Arch:
    return Arch("timm", {"model": model, "res": res}, group, kind, tier,
                spec=f"timm:model={model},res={res}")


def hf_arch(model: str, seq: int, group: str, tier: int) -> Arch:
    return Arch("hf", {"model": model, "seq": seq}, group, "transformer", tier,
                spec=f"hf:model={model},seq={seq}")


def zoo_archs(tier: int) -> list[Arch]:
    """The zoo draws of ``tier`` (tier 2 continues each family's seeded sequence)."""
    # lazy: the zoo imports torch, needed only when zoo architectures are asked for
    from training.zoo import sample_many, to_spec

    out = []
    for fam, (n1, n2, kind) in ZOO_FAMILIES.items():
        draws = sample_many(fam, n1 + n2, seed=ZOO_SEED)
        for cfg in draws[:n1] if tier == 1 else draws[n1:]:
            out.append(Arch(fam, dict(cfg.params), fam, kind, tier, spec=to_spec(cfg)))
    return out


def _interleave(*lists: list[Arch]) -> list[Arch]:
    """Round-robin over the lists, in proportion to their lengths (so every
    stretch of the order holds each source)."""
    total = sum(len(x) for x in lists)
    pos = [0] * len(lists)
    out: list[Arch] = []
    while len(out) < total:
        # the list furthest behind its share goes next
        i = min((k for k in range(len(lists)) if pos[k] < len(lists[k])),
                key=lambda k: (pos[k] + 1) / len(lists[k]))
        out.append(lists[i][pos[i]])
        pos[i] += 1
    return out


@cache
def archs(tier: int) -> tuple[Arch, ...]:
    """The architectures of ``tier``, interleaved timm / HF / zoo."""
    timm = [timm_arch(*t, tier=tier) for t in (TIMM_TIER1 if tier == 1 else TIMM_TIER2)]
    hf = [hf_arch(m, s, g, tier) for m, seqs, g in (HF_TIER1 if tier == 1 else HF_TIER2) for s in seqs]
    return tuple(_interleave(timm, hf, zoo_archs(tier)))


def dry_archs() -> tuple[Arch, ...]:
    """Tiny architectures for the CPU dry run (same sources, same code paths)."""
    # lazy: the zoo imports torch, needed only when zoo architectures are asked for
    from training.zoo import ModelConfig, to_spec

    zoo = [ModelConfig("resnet", {"depth": 18, "width": 0.125, "res": 32}),
           ModelConfig("bert", {"depth": 1, "dim": 32, "heads": 2, "seq": 8, "vocab": 101})]
    return (timm_arch("test_vit", 160, "vision_transformer", "vit", 1),
            hf_arch("bert-L2-H128", 8, "bert", 1),
            *(Arch(c.family, dict(c.params), c.family, "cnn" if c.family == "resnet" else "transformer", 1,
                   spec=to_spec(c)) for c in zoo),
            timm_arch("test_byobnet", 160, "byobnet", "cnn", 2))
