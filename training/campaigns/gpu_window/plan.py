"""What a GPU window measures, in order: configurations (architecture x setting).

A *setting* is one way a user runs a model: mode (inference / train step),
precision (:mod:`perfseer_rt.gpu.precision` names), layout (``nchw``,
``nhwc`` = channels-last, ``n/a`` for token inputs), optimizer (train only:
:mod:`perfseer_rt.gpu.backward` names) and batch. ``energy`` settings also
get the long window (NVML utilization, GPM, energy counter); the others are
timed with short repeats (time and memory only).

Phases, in this order (each phase walks the architectures in their order, so
the first minutes hold every family):

A. tier-1 architectures x the core settings (most of the energy windows);
B. tier-1 architectures x more precisions, batches and optimizers;
C. tier-2 architectures x the core settings;
D. large batches on tier-1 architectures: the batch sizes of the public
   records (inference 1024) and ladders that run into out-of-memory.

Tables are plain data: ``(mode, precision, layout, optimizer, batch, energy)``;
vision layouts ``nchw`` apply to every vision architecture, ``nhwc`` rows to
convolutional kinds only (:data:`training.campaigns.gpu_window.archs.CONV_KINDS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from training.campaigns.gpu_window.archs import Arch, archs, dry_archs

E, T = True, False
SGD, ADAMW = "sgd-momentum", "adamw"


@dataclass(frozen=True)
class Setting:
    mode: str  #: "inference" | "train"
    precision: str  #: fp32 | tf32 | fp32-strict | amp-fp16 | amp-bf16
    layout: str  #: nchw | nhwc | n/a
    optimizer: str | None  #: sgd-momentum | adamw (train); None (inference)
    batch: int
    energy: bool  #: the long window (utilization, GPM, energy) too


@dataclass(frozen=True)
class Config:
    """One configuration: what one record measures."""

    arch: Arch
    setting: Setting
    phase: str

    @property
    def key(self) -> str:
        """Unique per configuration (resume and de-duplication key)."""
        s = self.setting
        return f"{self.arch.spec}|{s.mode}|{s.precision}|{s.layout}|{s.optimizer or '-'}|b{s.batch}"

    @property
    def ladder(self) -> str:
        """Configurations that differ only in batch share a ladder: an OOM at
        one batch masks the larger batches of its ladder."""
        s = self.setting
        return f"{self.arch.spec}|{s.mode}|{s.precision}|{s.layout}|{s.optimizer or '-'}"


Row = tuple[str, str, str, "str | None", int, bool]

VISION_CORE: tuple[Row, ...] = (
    ("inference", "amp-fp16", "nchw", None, 32, E),
    ("inference", "amp-fp16", "nchw", None, 256, E),
    ("inference", "fp32", "nchw", None, 32, E),
    ("train", "amp-fp16", "nchw", SGD, 64, E),
    ("inference", "amp-fp16", "nchw", None, 1, T),
    ("inference", "fp32", "nchw", None, 1, T),
    ("inference", "amp-bf16", "nchw", None, 32, T),
    ("inference", "fp32", "nchw", None, 128, T),
    ("train", "fp32", "nchw", ADAMW, 32, T),
    ("train", "amp-bf16", "nchw", ADAMW, 64, T),
    ("inference", "amp-fp16", "nhwc", None, 256, T),
    ("train", "amp-fp16", "nhwc", SGD, 64, T),
)
VISION_MORE: tuple[Row, ...] = (
    ("inference", "amp-bf16", "nchw", None, 256, E),
    ("train", "amp-bf16", "nchw", SGD, 128, E),
    ("inference", "tf32", "nchw", None, 32, T),
    ("inference", "tf32", "nchw", None, 256, T),
    ("inference", "fp32-strict", "nchw", None, 32, T),
    ("inference", "amp-bf16", "nchw", None, 1, T),
    ("inference", "amp-fp16", "nchw", None, 8, T),
    ("inference", "amp-fp16", "nchw", None, 128, T),
    ("inference", "fp32", "nchw", None, 8, T),
    ("train", "fp32", "nchw", SGD, 32, T),
    ("train", "tf32", "nchw", SGD, 64, T),
    ("train", "amp-fp16", "nchw", ADAMW, 64, E),
    ("train", "amp-fp16", "nchw", SGD, 32, T),
    ("train", "amp-fp16", "nchw", SGD, 128, T),
    ("inference", "amp-bf16", "nhwc", None, 256, T),
    ("inference", "amp-fp16", "nhwc", None, 32, T),
    ("train", "amp-bf16", "nhwc", ADAMW, 64, T),
)
VISION_LARGE: tuple[Row, ...] = (
    ("inference", "amp-fp16", "nchw", None, 1024, T),
    ("train", "amp-fp16", "nchw", SGD, 256, T),
    ("train", "amp-fp16", "nchw", SGD, 512, T),
    ("train", "amp-fp16", "nchw", SGD, 1024, T),
    ("train", "amp-fp16", "nchw", SGD, 2048, T),
)
TEXT_CORE: tuple[Row, ...] = (
    ("inference", "amp-bf16", "n/a", None, 8, E),
    ("inference", "fp32", "n/a", None, 8, E),
    ("inference", "amp-fp16", "n/a", None, 32, E),
    ("train", "amp-bf16", "n/a", ADAMW, 8, E),
    ("inference", "amp-bf16", "n/a", None, 1, T),
    ("inference", "fp32", "n/a", None, 1, T),
    ("inference", "amp-bf16", "n/a", None, 32, T),
    ("train", "fp32", "n/a", ADAMW, 8, T),
    ("train", "amp-fp16", "n/a", SGD, 8, T),
    ("train", "amp-bf16", "n/a", ADAMW, 32, T),
)
TEXT_MORE: tuple[Row, ...] = (
    ("inference", "tf32", "n/a", None, 8, E),
    ("inference", "tf32", "n/a", None, 32, T),
    ("inference", "fp32-strict", "n/a", None, 8, T),
    ("inference", "amp-fp16", "n/a", None, 1, T),
    ("inference", "amp-fp16", "n/a", None, 8, T),
    ("inference", "fp32", "n/a", None, 32, T),
    ("train", "tf32", "n/a", ADAMW, 8, E),
    ("train", "amp-bf16", "n/a", SGD, 16, T),
    ("train", "amp-fp16", "n/a", ADAMW, 16, T),
)
TEXT_LARGE: tuple[Row, ...] = (
    ("inference", "amp-bf16", "n/a", None, 128, T),
    ("train", "amp-bf16", "n/a", ADAMW, 64, T),
    ("train", "amp-bf16", "n/a", ADAMW, 128, T),
    ("train", "amp-bf16", "n/a", ADAMW, 256, T),
    ("train", "amp-bf16", "n/a", ADAMW, 512, T),
)
#: The dry run's settings (CPU: autocast bf16 / fp16 both run; the TF32 flags change nothing there).
DRY: tuple[Row, ...] = (
    ("inference", "fp32", "nchw", None, 1, E),
    ("inference", "amp-bf16", "nchw", None, 2, T),
    ("train", "fp32", "nchw", SGD, 2, T),
    ("train", "amp-bf16", "nchw", ADAMW, 2, T),
    ("inference", "fp32", "nhwc", None, 2, T),
    ("inference", "fp32", "nchw", None, 4, T),
    ("inference", "fp32", "nchw", None, 8, T),
    # the window's other precisions, so that each of their code paths has run before a GPU sees it
    ("inference", "tf32", "nchw", None, 2, T),
    ("inference", "fp32-strict", "nchw", None, 2, T),
    ("train", "amp-fp16", "nchw", SGD, 2, T),
)

PHASES = ("A", "B", "C", "D")


def settings_for(arch: Arch, rows: tuple[Row, ...]) -> list[Setting]:
    """The rows that apply to ``arch`` (token inputs: ``n/a`` rows; images:
    ``nchw`` rows, and ``nhwc`` rows for convolutional kinds)."""
    out = []
    for mode, precision, layout, opt, batch, energy in rows:
        if arch.text != (layout == "n/a"):
            continue
        if layout == "nhwc" and not arch.conv:
            continue
        out.append(Setting(mode, precision, layout, opt, batch, energy))
    return out


def _phase(name: str, arch_list: tuple[Arch, ...], vision: tuple[Row, ...],
           text: tuple[Row, ...]) -> Iterator[Config]:
    for arch in arch_list:
        for s in settings_for(arch, text if arch.text else vision):
            yield Config(arch, s, name)


def window_plan() -> list[Config]:
    """Every configuration of a GPU window, in the order it is measured."""
    t1, t2 = archs(1), archs(2)
    return [*_phase("A", t1, VISION_CORE, TEXT_CORE), *_phase("B", t1, VISION_MORE, TEXT_MORE),
            *_phase("C", t2, VISION_CORE, TEXT_CORE), *_phase("D", t1, VISION_LARGE, TEXT_LARGE)]


def dry_plan() -> list[Config]:
    """The CPU dry run's configurations: tiny models, the same code paths."""
    rows = DRY + tuple((m, p, "n/a", o, b, e) for m, p, lay, o, b, e in DRY if lay == "nchw")
    return list(_phase("A", dry_archs(), rows, rows))


PLANS = {"window": window_plan, "dry": dry_plan}


def get_plan(name: str) -> list[Config]:
    if name not in PLANS:
        raise ValueError(f"plan {name!r}: choose one of {', '.join(PLANS)}")
    return PLANS[name]()
