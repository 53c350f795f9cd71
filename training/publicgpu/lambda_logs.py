"""Lambda's published training-benchmark logs -> one record per log, with provenance.

Lambda (``lambdal/deeplearning-benchmark``) runs NVIDIA's DeepLearningExamples
(DLE) training scripts in NGC PyTorch containers on many GPUs and commits every
run's log under ``pytorch/results/<system>/<task>/<date>.txt`` (``_v1``
systems: NGC 22.09-era containers, 2022-2024) and
``pytorch/results_v2/<system>/...`` (2024-2025). None of these numbers were
measured by us. Read here, from the repository's git directory (``git show``):

* single-GPU systems only (a multi-GPU system's folder starts ``2x``/``4x``/``8x``
  or names ``_2x<GPU>``; v2's ``_1x<GPU>`` is one GPU of a larger machine);
* the tasks whose model we rebuild: ResNet-50 (DLE ``Classification/ConvNets``,
  synthetic data, ``--training-only``; AMP with a static loss scale or fp32)
  and BERT-base / BERT-large SQuAD fine-tuning (DLE ``LanguageModeling/BERT``
  ``run_squad.py``, sequence 384; fp16 is apex AMP O2, a half model with fp32
  master weights, or fp32);
* the figure Lambda's own ``compile_results_pytorch*.py`` reads from each log:
  ResNet-50's ``Summary: ... train.compute_ips`` (images/s over the run's
  iterations, data time excluded), BERT's ``training_sequences_per_second``
  (sequences over ``e2e_train_time`` of ``max_steps`` steps, warm-up
  included). One step is ``batch / throughput``.

The v0 folders (no suffix; NGC 20.01 / 20.10 with apex AMP, the container not
named per run) are not read. A log without the figure (out of memory, a timeout)
gives no record and is counted.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from perfseer_rt.gpu.spec_store import shipped_gpu_specs
from training.publicgpu import gitrepo
from training.publicgpu.record import Provenance, Setup, campaign_record

SOURCE = "Lambda deeplearning-benchmark log, measured by Lambda, not us"
REPOSITORY = "lambdal/deeplearning-benchmark"
LICENCE = "none stated (the repository has no licence file); the published figures are used as facts, with provenance"
RESULT_DIRS = ("pytorch/results", "pytorch/results_v2")


@dataclass(frozen=True)
class Task:
    """One Lambda task we read: the DLE model, how it ran, what one step does."""

    model: str        #: "resnet50" | "bert_base_squad" | "bert_large_squad"
    precision: str    #: ours (perfseer_rt.gpu.precision)
    optimizer: str    #: ours (perfseer_rt.gpu.optimizers)
    step: str         #: what one timed step does


_RN50_STEP = ("DLE ConvNets resnet50 (v1.5), synthetic data: forward + CE loss + backward + SGD step "
              "(momentum 0.9, weight decay 1e-4); NCHW; cudnn.benchmark")
_BERT_STEP = ("DLE run_squad.py BertForQuestionAnswering, sequence 384: forward + start/end CE loss + "
              "backward + Adam-family update (DLE's BertAdam / apex FusedAdam); materialised attention")
TASKS = {
    "PyTorch_resnet50_AMP": Task("resnet50", "amp-fp16", "sgd-momentum",
                                 _RN50_STEP + "; torch.cuda.amp autocast fp16, static loss scale 256"),
    "PyTorch_resnet50_FP32": Task("resnet50", "tf32", "sgd-momentum",
                                  _RN50_STEP + "; fp32 (TF32 on GPUs that have it: the NGC container's default)"),
    "PyTorch_bert_base_squad_FP16": Task("bert_base_squad", "fp16", "adam",
                                         _BERT_STEP + "; apex AMP O2 (fp16 model, fp32 master weights)"),
    "PyTorch_bert_base_squad_FP32": Task("bert_base_squad", "tf32", "adam",
                                         _BERT_STEP + "; fp32 (TF32 matmuls on GPUs that have it: NGC's default)"),
    "PyTorch_bert_large_squad_FP16": Task("bert_large_squad", "fp16", "adam",
                                          _BERT_STEP + "; apex AMP O2 (fp16 model, fp32 master weights)"),
    "PyTorch_bert_large_squad_FP32": Task("bert_large_squad", "tf32", "adam",
                                          _BERT_STEP + "; fp32 (TF32 matmuls on GPUs that have it: NGC's default)"),
}
#: A system folder's GPU -> our spec-sheet key, first match wins (the folder names of
#: Lambda's repository; V100 16GB on Lambda Cloud is an SXM2 part: its logs print
#: "Tesla V100-SXM2-16GB"; the one folder named "GH200_80GB" prints "NVIDIA GH200
#: 480GB" in its logs, the 96 GB part's name, as the "GH200_96GB" folders do).
GPUS: tuple[tuple[str, str], ...] = (
    (r"GH200_(96|80)GB", "gh200-96gb"), (r"(?<!G)H200", "h200-sxm"), (r"(?<!G)B200", "b200"),
    (r"H100_80GB_SXM5", "h100-sxm"), (r"H100_80GB_PCIe", "h100-pcie"),
    (r"A100_80GB_SXM4", "a100-80gb-sxm"), (r"A100_40GB_SXM4", "a100-40gb-sxm"),
    (r"A100_80GB_PCIe", "a100-80gb-pcie"), (r"A100_40GB_PCIe", "a100-40gb-pcie"),
    (r"AdaA6000", "rtx-6000-ada"), (r"(?<!Ada)A6000", "rtx-a6000"), (r"(^|_)A10_", "a10"),
    (r"V100_16GB", "v100-sxm2-16gb"), (r"^3090_v1$", "rtx-3090"), (r"^4090_v1$", "rtx-4090"),
    (r"QuadroRTX8000", "quadro-rtx-8000"),
)
#: NGC container build ids (``Container nvidia build =``, printed by the BERT logs)
#: whose PyTorch is known: first seen Oct / Nov 2022, before NGC 22.12, so NGC
#: 22.09-22.11 (PyTorch 1.13.0a0). Other builds are recorded as "unknown".
TORCH_OF_BUILD = {"44877844": "1.13", "46164382": "1.13"}
_MULTI = re.compile(r"(^|_)([2-9]|1[0-9])x")
_ONE_OF_MANY = re.compile(r"_1x[A-Z]")
_DATE = re.compile(r"(\d\d)-(\d\d)-(\d{4})_(\d\d)-(\d\d)-(\d\d)\.txt$")


class LambdaLogError(ValueError):
    """A log that is not what its task folder says it is."""


def device_of(system: str) -> str | None:
    """Our spec-sheet key of a system folder's GPU, None when unknown."""
    for pattern, key in GPUS:
        if re.search(pattern, system):
            return key
    return None


def single_gpu(system: str, version: str) -> bool:
    """Whether a system folder (of ``results`` or ``results_v2``) ran on one GPU."""
    if system.endswith("_bk") or "sonantic" in system:
        return False  # a kept backup of a rerun; a customer's own configuration
    if version == "v2":
        return bool(_ONE_OF_MANY.search(system)) and not re.search(r"_([2-9]|1[0-9])x[A-Z]", system)
    return system.endswith("_v1") and not _MULTI.search(system)


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


@dataclass(frozen=True)
class Run:
    """What one log says: batch, samples/s and the run's details."""

    batch: int
    samples_per_s: float
    unit: str
    details: dict


def _batch_and_rate(text: str, batch_re: str, rate_re: str, what: str, unit: str
                    ) -> tuple[float, float] | None:
    """(batch, samples per second) a log states (None where it states
    either not: the run did not finish); a log of a rate <= 0 or a batch
    < 1 is an error."""
    batch, rate = _num(batch_re, text), _num(rate_re, text)
    if batch is None or rate is None:
        return None
    if rate <= 0 or batch < 1:
        raise LambdaLogError(f"{what} log with batch {batch:g} and {rate:g} {unit}")
    return batch, rate


def parse_resnet(text: str, amp: bool | None = None) -> Run | None:
    """A ResNet-50 log: ``batch_size`` and the first ``Summary`` line's
    ``train.compute_ips``; None without a summary (the run did not finish).
    ``amp``: what the task folder says (a log saying otherwise is an error)."""
    found = _batch_and_rate(text, r"PARAMETER data [^\n]*? batch_size : (\d+)",
                            r"Summary: train\.loss[^\n]*?train\.compute_ips : ([0-9.]+) images/s",
                            "resnet50", "images/s")
    if found is None:
        return None
    batch, ips = found
    for key, want in (("data_backend", "synthetic"), ("memory_format", "nchw")):
        got = re.search(rf" {key} : (\S+)", text)
        if got is None or got.group(1) != want:
            raise LambdaLogError(f"resnet50 log with {key} {got.group(1) if got else None!r} (expected {want})")
    iters = [float(x) for x in re.findall(r"Iteration: \d+\s+train\.loss[^\n]*?train\.compute_ips : ([0-9.]+)", text)]
    details: dict = {"amp": " amp : True" in text, "iteration_lines": len(iters)}
    if amp is not None and details["amp"] != amp:
        raise LambdaLogError(f"resnet50 log with amp {details['amp']} in a task folder of amp {amp}")
    steady = iters[10:]
    if len(steady) >= 5:
        details["iteration_ips_median"] = statistics.median(steady)
        details["iteration_ips_cv"] = round(statistics.pstdev(steady) / statistics.mean(steady), 5)
    return Run(int(batch), ips, "images/s", details)


def parse_bert(text: str, fp16: bool | None = None) -> Run | None:
    """A BERT SQuAD log: ``train_batch_size`` and ``training_sequences_per_second``.
    ``fp16``: what the task folder says (a log saying otherwise is an error)."""
    found = _batch_and_rate(text, r"PARAMETER train_batch_size : (\d+)",
                            r"training_sequences_per_second : ([0-9.]+)", "BERT", "sequences/s")
    if found is None:
        return None
    batch, sps = found
    seq = _num(r"max_seq_length[=:]\s*(\d+)", text)
    if seq != 384:
        raise LambdaLogError(f"BERT log with max_seq_length {seq} (expected 384)")
    details = {"e2e_train_time_s": _num(r"e2e_train_time : ([0-9.]+)", text),
               "model_weights_num": _num(r"model_weights_num : (\d+)", text),
               "fp16": "16-bits training: True" in text,
               "max_steps": _num(r"max_steps[=:]\s*([0-9.]+)", text)}
    if fp16 is not None and details["fp16"] != fp16:
        raise LambdaLogError(f"BERT log with 16-bits training {details['fp16']} in a task folder of fp16 {fp16}")
    return Run(int(batch), sps, "sequences/s", details)


def container_build(texts: list[str]) -> str | None:
    """The NGC build id a system's logs print (the BERT logs do)."""
    for text in texts:
        m = re.search(r"Container nvidia build =\s+(\d+)", text)
        if m:
            return m.group(1)
    return None


def _measured_at(path: str) -> str | None:
    m = _DATE.search(path)
    if m is None:
        return None
    d, mo, y, h, mi, s = m.groups()
    return f"{y}-{mo}-{d}T{h}:{mi}:{s}"


def _record(path: str, task: Task, run: Run, device: str, gpu_name: str, build: str | None,
            commit: str, system: str) -> dict:
    torch_version = TORCH_OF_BUILD.get(build or "", "unknown")
    layout = "nchw" if task.model == "resnet50" else "n/a"
    setup = Setup(device=device, gpu_name=gpu_name, framework="PyTorch", framework_version=torch_version,
                  cuda_version=None, runtime="PyTorch eager (NVIDIA DeepLearningExamples, NGC container)",
                  precision=task.precision, layout=layout, mode="train", step=task.step)
    prov = Provenance(source=SOURCE, repository=REPOSITORY, licence=LICENCE, file=path, line=0,
                      commits=(commit,))
    if task.model == "resnet50":
        params: dict = {"model": "resnet50", "res": 224}
        shapes = {"input": [run.batch, 3, 224, 224]}
        group, kind = "resnet", "cnn"
    else:
        params = {"model": task.model, "seq": 384}
        shapes = {"input_ids": [run.batch, 384]}
        group, kind = "bert", "transformer"
    quality = ({"statistic": "DLE summary train.compute_ips (images/s over the run's iterations)",
                "runs": run.details.get("iteration_lines") or None}
               if task.model == "resnet50" else
               {"statistic": "sequences / e2e_train_time over max_steps steps (warm-up included)",
                "runs": int(run.details["max_steps"]) if run.details.get("max_steps") else None})
    published = {"throughput": run.samples_per_s, "unit": run.unit, "system": system,
                 "container_build": build, "optimizer": task.optimizer, **run.details}
    rec = campaign_record(
        family="lambda", params=params, spec="lambda:" + ",".join(f"{k}={v}" for k, v in params.items()),
        group=group, arch_kind=kind, batch=run.batch, time_ms=run.batch / run.samples_per_s * 1e3,
        samples_per_s=run.samples_per_s, input_shapes=shapes, setup=setup, provenance=prov,
        quality={k: v for k, v in quality.items() if v is not None}, published=published, onnx=None)
    rec["measured_at"] = _measured_at(path)
    return rec


def records(repo: Path) -> tuple[list[dict], dict[str, int]]:
    """(one record per usable log of a single-GPU system, counts of what was left out and why)."""
    commit = gitrepo.head_commit(repo)
    sheets = shipped_gpu_specs()
    out: list[dict] = []
    skipped: dict[str, int] = {}

    def skip(reason: str, n: int = 1) -> None:
        skipped[reason] = skipped.get(reason, 0) + n

    for top, version in zip(RESULT_DIRS, ("v1", "v2")):
        by_system: dict[str, list[str]] = {}
        for path in gitrepo.files_under(repo, top):
            parts = path.split("/")
            if len(parts) == 5 and parts[4].endswith(".txt") and parts[3] in TASKS:
                by_system.setdefault(parts[2], []).append(path)
        for system, paths in sorted(by_system.items()):
            if not single_gpu(system, version):
                continue
            device = device_of(system)
            if device is None or device not in sheets:
                skip(f"no spec sheet for the GPU of {system}", len(paths))
                continue
            texts = {p: gitrepo.show(repo, p) for p in sorted(paths)}
            build = container_build(list(texts.values()))
            for path, text in texts.items():
                task = TASKS[path.split("/")[3]]
                half = task.precision != "tf32"
                try:
                    run = parse_resnet(text, half) if task.model == "resnet50" else parse_bert(text, half)
                except LambdaLogError as exc:
                    raise LambdaLogError(f"{path}: {exc}") from None
                if run is None:
                    skip("log without the throughput line (out of memory or cut off)")
                    continue
                out.append(_record(path, task, run, device, sheets[device][1].name, build, commit, system))
    return out, skipped


def folder_of(record: dict) -> str:
    """Dataset folder: ``<device>/train-<precision>-<model>``."""
    return f"{record['device']}/train-{record['setup']['precision']}-{record['config']['params']['model']}"
