"""The options of a prediction, in one place.

``perfseer-rt predict`` / ``check`` (their click options, built by
:func:`perfseer_rt.cli.spec.spec_options`) and the service (``POST
/predict`` / ``/check``: query parameters, JSON and multipart fields, the
OpenAPI page, :mod:`perfseer_rt.serve.params`) read this table; each
option's value goes to the library call as the keyword the call takes
(:func:`perfseer_rt.predict`, :func:`~perfseer_rt.predict.many.predict_many`,
:func:`~perfseer_rt.predict.budget.check`). A command offers exactly the
options whose keyword its call accepts (:func:`options_for`), so an option
added here (with its keyword added to the call) appears on the command line,
over HTTP and on the OpenAPI page at once.

Every value arrives as text (a flag's value, a query parameter, a form
field): ``--dim seq=128`` on the command line is ``?dim=seq=128`` over HTTP
(repeatable both ways) and ``dims={"seq": 128}`` in Python. A bad value is
an :class:`~perfseer_rt.errors.OptionError` naming the option, the value and
what was expected.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfseer_rt.errors import OptionError
from perfseer_rt.gpu.backward import OPTIMIZERS
from perfseer_rt.gpu.layouts import ATTENTION, LAYOUTS
from perfseer_rt.gpu.precision import ALIASES as PRECISION_ALIASES
from perfseer_rt.gpu.precision import PRECISIONS
from perfseer_rt.option_parsers import (
    choice,
    parse_batch,
    parse_batches,
    parse_bool,
    parse_dims,
    parse_input_shapes,
    parse_limit,
    parse_list,
    parse_name,
    parse_power,
)
from perfseer_rt.predict import api
from perfseer_rt.predict.manifest import MODES


@dataclass(frozen=True)
class Option:
    """One option.

    Attributes:
        name: the command-line flag without ``--`` and the HTTP parameter
            (``dim``; ``max_memory_mb`` is ``--max-memory-mb``).
        keywords: the library keywords it may go to, first match wins
            (``predict`` names the device's predictor ``model``, ``check``
            ``predictor_model``).
        help: one line for ``--help`` and the OpenAPI page.
        parse: the texts given (one per use) -> the keyword's value.
        multiple: repeatable (each use adds one value).
        choices: the accepted values, when they are a fixed set.
        metavar: how the value is written, for help texts.
        example: a value for the OpenAPI page.
        default: the value when not given, for help texts.
        switch: a yes/no option: a bare flag on the command line, ``true`` or
            ``false`` over HTTP.
    """

    name: str
    keywords: tuple[str, ...]
    help: str
    parse: Callable[[str, Sequence[str]], Any]
    multiple: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    example: str | None = None
    default: str | None = field(default=None)
    switch: bool = False


    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# ------------------------------------------------------------------ the table
_PRECISIONS = tuple(PRECISIONS) + tuple(PRECISION_ALIASES)

OPTIONS: tuple[Option, ...] = (
    Option("batch", ("batches",), "Batch size(s), e.g. 8 or 1,8,32 (default: the model's "
           "own, else 1).", parse_batches, metavar="N[,N...]", example="1,8"),
    Option("batch", ("batch",), "Batch size (default: the model's own, else 1).",
           parse_batch, metavar="N", example="8"),
    Option("input", ("input_shapes",), "Shape of one graph input (repeatable).",
           parse_input_shapes, multiple=True, metavar="NAME:D1xD2x...",
           example="pixel_values:1x3x224x224"),
    Option("dim", ("dims",), "Size of every input dim with this symbolic name (repeatable); "
           "dims named by an expression of these take its value; a switch input of this "
           "name (a merged decoder's use_cache_branch) takes the value.",
           parse_dims, multiple=True, metavar="NAME=VALUE", example="seq=128"),
    Option("device", ("device",), "Predictor device (see `perfseer-rt devices`, GET "
           "/devices); default: the first shipped of the default devices.", parse_name,
           example="cpu-amd-epyc-1t"),
    Option("metrics", ("metrics",), "Comma-separated subset of the device's metrics.",
           parse_list, metavar="NAME[,NAME...]", example="latency_ms,peak_mem_mb"),
    Option("model", ("model", "model_name", "predictor_model"), "Which of the device's "
           "predictors (default: the most accurate).", parse_name),
    Option("precision", ("precision",), "GPU devices: how PyTorch runs the model: fp32 "
           "(PyTorch's defaults: TF32 convolutions), tf32, fp32-strict, amp-fp16, amp-bf16 "
           "(autocast), fp16, bf16 (half models); default fp32.",
           choice(_PRECISIONS), choices=_PRECISIONS),
    Option("mode", ("mode",), "inference: one inference call (default); train: one training "
           "step (forward, loss, backward, optimizer update): a CPU device's training-step "
           "predictor, a GPU's step as PyTorch eager runs it (--optimizer).",
           choice(MODES), choices=MODES, default="inference"),
    Option("optimizer", ("optimizer",), "GPU devices, mode train: the optimizer of the step "
           "(default adamw).", choice(tuple(OPTIMIZERS)), choices=tuple(OPTIMIZERS)),
    Option("layout", ("layout",), "GPU devices: memory format (nhwc: channels-last); default "
           "nchw.", choice(LAYOUTS), choices=LAYOUTS),
    Option("attention", ("attention",), "GPU devices: how the model's attention runs: fused "
           "(its code calls PyTorch's scaled_dot_product_attention; default) or materialised (it "
           "computes softmax(q k^T) v itself: Hugging Face's eager attention, PyTorch < 2.0).",
           choice(ATTENTION), choices=ATTENTION),
    Option("power_limit", ("power_limit_w",), "GPU devices: a power cap in watts.", parse_power,
           metavar="W", example="300"),
    Option("mig_profile", ("mig_profile",), "MIG-capable GPU devices: predict on this slice "
           "(e.g. 1g.10gb); check and fit take its usable memory as the memory budget unless "
           "one is given.", parse_name, metavar="PROFILE", example="1g.10gb"),
    Option("extrapolate", ("extrapolate",), "Predict a model far outside what the device's "
           "predictor was trained on (refused by default); its interval then spans the factor "
           "by which it lies outside, with no stated coverage.", parse_bool, switch=True,
           example="true"),
    Option("max_latency_ms", ("max_latency_ms",), "Latency budget, ms (a training step's "
           "with mode train).", parse_limit, metavar="MS", example="50"),
    Option("max_memory_mb", ("max_memory_mb",), "Memory budget, MiB (over the process "
           "baseline, as predicted).", parse_limit, metavar="MIB", example="2048"),
)


def accepted(fn: Callable[..., Any]) -> tuple[set[str], set[str]]:
    """The keywords ``fn`` takes, but its first parameter (the model or
    models, never an option): its own, and those a ``**kwargs`` of ``fn``
    passes on to :func:`perfseer_rt.predict` (as
    :func:`~perfseer_rt.predict.many.predict_many` does; empty without one)."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    own = {p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}
    passed = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    return own, (set().union(*accepted(api.predict)) - own if passed else set())


def options_for(fn: Callable[..., Any]) -> list[tuple[Option, str]]:
    """The options a command whose library call is ``fn`` offers, each with
    the keyword it goes to: those with a keyword ``fn`` accepts (one of its
    own before one it passes on), in table order, one per name."""
    own, passed = accepted(fn)
    out: list[tuple[Option, str]] = []
    names: set[str] = set()
    for opt in OPTIONS:
        kw = next((k for k in opt.keywords if k in own), None) or \
            next((k for k in opt.keywords if k in passed), None)
        if kw is not None and opt.name not in names:
            out.append((opt, kw))
            names.add(opt.name)
    return out


def parse_options(fn: Callable[..., Any], given: Mapping[str, Sequence[str]],
                  flag: Callable[[Option], str] = lambda o: o.flag) -> dict[str, Any]:
    """The keyword arguments for ``fn`` from the texts ``given`` by option
    name (options not given are left out: ``fn``'s defaults apply).
    ``flag``: how an option is named in messages (``--dim`` on the command
    line, ``dim`` over HTTP).

    Raises:
        OptionError: a bad value, or a name ``fn`` offers no option for.
    """
    offered = {opt.name: (opt, kw) for opt, kw in options_for(fn)}
    unknown = sorted(set(given) - offered.keys())
    if unknown:
        raise OptionError(f"unknown option {unknown[0]!r}; this call takes "
                          f"{', '.join(sorted(offered))}")
    out: dict[str, Any] = {}
    for name, values in given.items():
        if not values:
            continue
        opt, kw = offered[name]
        out[kw] = opt.parse(flag(opt), list(values))
    return out
