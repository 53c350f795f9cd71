"""A timm model's architecture family (its timm module) and coarse kind.

``group`` is the timm module that registers the model (``resnet``,
``vision_transformer``, ``efficientnet``, ...; the rule of
:mod:`training.zoo.real.timm_scan`), so family-held-out validation holds out
every model one module defines. Names timm has renamed resolve through its
deprecation table to the module of the new name; the few names the installed
timm no longer knows get their module from :data:`GONE` (written by hand from
the name).

``arch_kind`` is one of :data:`KINDS`:

- ``cnn``: convolutional networks built from dense (or grouped) convolutions:
  ResNet and its variants, VGG, DenseNet, RegNet, NFNet, HRNet, DLA, CSPNet,
  VoVNet, Inception, NASNet, and the "modernised" large CNNs (ConvNeXt,
  InceptionNeXt, ConvMixer, RDNet, ConvFormer) even though their blocks hold a
  depthwise convolution;
- ``mobile-cnn``: networks built from depthwise-separable / inverted-residual
  (MBConv) blocks designed for efficiency: MobileNet v2/v3/v4 (conv
  variants), EfficientNet (v1, v2, Lite, the TF ports), MnasNet, MixNet,
  FBNet, TinyNet, LCNet, GhostNet, RepGhost, HardCoRe-NAS, ReXNet,
  MobileOne, RepViT, FastViT's pure-conv variants, Xception;
- ``vit``: transformers over patch tokens (ViT, DeiT, BEiT, EVA, CaiT,
  Swin, XCiT, VOLO, PVT v2, MViT v2, Hiera, NesT, TNT, ...);
- ``hybrid``: convolution stages and attention stages (or attention on a
  CNN backbone) in one network: BoTNet / HaloNet, CoAtNet / MaxViT, LeViT,
  MobileViT, EfficientFormer, EfficientViT, EdgeNeXt, TinyViT, NextViT,
  GCViT, CaFormer, ViT-hybrid, FastViT with attention, FocalNet (focal
  modulation built from depthwise convolutions);
- ``mlp-mixer``: MLP-Mixer, ResMLP, gMLP, gMixer;
- ``other``: token mixers that are none of these (PoolFormer's pooling,
  Sequencer's LSTMs);
- ``transformer``: text transformers over token ids (NeuSight's BERT, GPT-2,
  OPT; never a timm model).

The rule is per module (:data:`MODULE_KIND`) with name patterns for modules
that define several kinds (:data:`NAME_KIND`, first match wins). A module
missing from the table is an error (:func:`arch_kind`), never a silent
``other``.
"""

from __future__ import annotations

import re
from functools import cache

from training.zoo.real.torchvision_compat import import_timm

KINDS = ("cnn", "mobile-cnn", "vit", "hybrid", "mlp-mixer", "other", "transformer")

#: timm module -> kind.
MODULE_KIND: dict[str, str] = {
    **dict.fromkeys((
        "byobnet", "convmixer", "convnext", "cspnet", "densenet", "dla", "dpn", "hgnet", "hrnet",
        "inception_next", "inception_resnet_v2", "inception_v3", "inception_v4", "nasnet", "nfnet",
        "pnasnet", "rdnet", "regnet", "res2net", "resnest", "resnet", "resnetv2", "selecsls", "senet",
        "sknet", "tresnet", "vgg", "vovnet", "cspdarknet", "darknet", "gernet", "repvgg",
        "starnet", "shvit_cnn"), "cnn"),
    **dict.fromkeys((
        "efficientnet", "mobilenetv3", "mobilenetv4", "mobilenetv5", "ghostnet", "repghost",
        "hardcorenas", "rexnet", "repvit", "xception", "xception_aligned", "mnasnet", "mobileone",
        "lcnet", "fbnet"), "mobile-cnn"),
    **dict.fromkeys((
        "beit", "cait", "coat", "convit", "crossvit", "deit", "eva", "hiera", "mvitv2", "nest",
        "pit", "pvt_v2", "swin_transformer", "swin_transformer_v2", "swin_transformer_v2_cr",
        "tnt", "twins", "vision_transformer", "vision_transformer_relpos",
        "vision_transformer_sam", "volo", "xcit", "davit", "hieradet_sam2", "naflexvit"), "vit"),
    **dict.fromkeys((
        "byoanet", "coatnet", "maxxvit", "levit", "mobilevit", "efficientformer",
        "efficientformer_v2", "efficientvit_mit", "efficientvit_msra", "edgenext", "tiny_vit",
        "nextvit", "gcvit", "vision_transformer_hybrid", "vitamin", "fastvit", "focalnet",
        "visformer"), "hybrid"),
    "mlp_mixer": "mlp-mixer",
    "sequencer": "other",
    "metaformer": "other",
}

#: (module, name pattern, kind): modules that define several kinds of network.
NAME_KIND: tuple[tuple[str, str, str], ...] = (
    ("byobnet", r"^mobileone", "mobile-cnn"),
    ("mobilenetv4", r"hybrid", "hybrid"),
    ("fastvit", r"^fastvit_(t8|t12|s12)$", "mobile-cnn"),
    ("metaformer", r"^caformer", "hybrid"),
    ("metaformer", r"^convformer", "cnn"),
    ("vision_transformer", r"^test_", "vit"),
)

#: Names in the shared CSVs that the installed timm no longer registers -> module.
GONE: dict[str, str] = {
    "convnext_nano_hnf": "convnext", "convnext_tiny_hnfd": "convnext",
    "densenet121d": "densenet", "densenet264": "densenet", "densenet264d_iabn": "densenet",
    "ese_vovnet99b_iabn": "vovnet", "gluon_xception65": "xception_aligned",
    "regnety_040s_gn": "regnet", "resnetv2_50d_evob": "resnetv2", "semobilevit_s": "mobilevit",
    "vit_base_patch16_reg8_gap_256": "vision_transformer",
    "vit_medium_patch16_reg4_256": "vision_transformer",
}


class UnknownFamilyError(KeyError):
    """A model whose timm module has no kind in :data:`MODULE_KIND`."""


@cache
def _deprecations() -> dict[str, tuple[str, str]]:
    """old name -> (new name, module) from timm's deprecation table."""
    timm = import_timm()
    registry = timm.models._registry
    out = {}
    for module, table in registry._module_to_deprecated_models.items():
        for old, new in table.items():
            out[old] = (new or old, module.rsplit(".", 1)[-1])
    return out


@cache
def timm_module(name: str) -> str:
    """The timm module that defines ``name`` (deprecated names: that of the new name)."""
    timm = import_timm()
    if name in _deprecations():
        new, module = _deprecations()[name]
        base = new.split(".", 1)[0]
        return timm_module(base) if timm.models.is_model(base) else module
    if timm.models.is_model(name):
        return timm.models.model_entrypoint(name).__module__.rsplit(".", 1)[-1]
    if name in GONE:
        return GONE[name]
    raise UnknownFamilyError(f"{name!r} is not a timm {timm.__version__} model and not in GONE")


def arch_kind(module: str, name: str) -> str:
    """The coarse kind of model ``name`` of timm module ``module`` (see module doc)."""
    for mod, pattern, kind in NAME_KIND:
        if mod == module and re.search(pattern, name):
            return kind
    try:
        return MODULE_KIND[module]
    except KeyError:
        raise UnknownFamilyError(
            f"timm module {module!r} (model {name!r}) has no kind: add it to "
            "training.publicgpu.families.MODULE_KIND") from None


def renamed_to(name: str) -> str | None:
    """The name timm now uses for a deprecated ``name`` (None when not deprecated)."""
    return _deprecations()[name][0] if name in _deprecations() else None
