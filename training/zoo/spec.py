"""Spec strings: the command-line spelling of a :class:`ModelConfig`.

Syntax: ``FAMILY[:TOKEN[,TOKEN...]]`` where each token is ``name=value``.

- ``resnet:depth=50,width=1.0,res=224``
- ``vit:depth=12,dim=768,heads=12,patch=16,res=224``
- ``nb201:|nor_conv_3x3~0|+|...|`` (the cell string is a bare token)
- ``perfseer:res=224,s1=resnet-d2-w64-k3-r0.25,...`` (one token per stage)
- ``efficientnet:variant=b2`` (a preset, expanded into width/depth/res)
- ``batch=N`` may be given in any spec; it sets ``config.batch`` and is not
  part of the architecture.

A spec starting with ``{`` is read as config JSON (:meth:`ModelConfig.from_json`).
Omitted parameters take their defaults; :func:`to_spec` writes every major
parameter and the minor ones (``classes``, ``vocab``, ...) only when they
differ from the default, so ``parse_spec(to_spec(c)) == c``.
"""

from __future__ import annotations

from training.zoo.config import ModelConfig
from training.zoo.errors import SpecError
from training.zoo.registry import family_names, get_family


def parse_spec(text: str) -> ModelConfig:
    """Parse a spec string (or config JSON) into a normalized :class:`ModelConfig`.

    Raises:
        SpecError: unknown family, unknown parameter, bad value or malformed
            token; the message names the bad token and the valid choices.
    """
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"empty model spec {text!r}; expected FAMILY:name=value,... with FAMILY one of "
                        + ", ".join(family_names()))
    text = text.strip()
    if text.startswith("{"):
        return ModelConfig.from_json(text)
    name, _, rest = text.partition(":")
    fam = get_family(name.strip().lower())
    raw: dict = {}
    batch = None
    for token in rest.split(","):
        token = token.strip()
        if not token:
            continue
        if "=" in token:
            key, _, value = token.partition("=")
            key, value = key.strip(), value.strip()
        elif fam.bare_param is not None:
            key, value = fam.bare_param, token
        else:
            raise SpecError(f"bad token '{token}' in spec '{text}': expected name=value; valid names for "
                            f"'{fam.name}': " + ", ".join(p.name for p in fam.params))
        if key in raw or (key == "batch" and batch is not None):
            raise SpecError(f"parameter '{key}' given twice in spec '{text}'")
        if key == "batch":
            try:
                batch = int(value)
            except ValueError:
                raise SpecError(f"bad token '{token}' in spec '{text}': batch must be a positive integer") from None
            continue
        if key != "variant":
            fam.param(key)  # unknown names raise here, naming the token
        raw[key] = value
    try:
        return ModelConfig(fam.name, raw, batch)
    except SpecError as exc:
        raise SpecError(f"in spec '{text}': {exc}") from None


def to_spec(config: ModelConfig, with_batch: bool = False) -> str:
    """The spec string of ``config`` (``batch=`` appended only if ``with_batch``)."""
    fam = get_family(config.family)
    tokens = []
    for p in fam.params:
        value = config.params[p.name]
        if not p.in_spec and value == p.coerce(p.default, fam.name):
            continue
        text = p.fmt(value)
        tokens.append(text if p.name == fam.bare_param else f"{p.name}={text}")
    if with_batch and config.batch is not None:
        tokens.append(f"batch={config.batch}")
    return f"{fam.name}:" + ",".join(tokens)
