"""Lambda's training-benchmark logs as records (training/publicgpu/lambda_logs.py),
the committed records (data/public-gpu/lambda) and their labels (training/gpulearned/labels.py)."""

from __future__ import annotations

import json
import statistics
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from training.campaign.store import dataset_folders, iter_records
from training.gpulearned import labels as LB
from training.publicgpu import cli
from training.publicgpu import lambda_logs as L

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "public-gpu" / "lambda"

# The lines of a DLE ResNet-50 log and a run_squad.py log that the parser
# reads, in the logs' own format (values of a log of Lambda's A100 80GB SXM4 system).
RN50 = """DLL 2022-11-19 18:30:56.923362 - PARAMETER data : /data/imagenet  data_backend : synthetic  \
arch : resnet50  batch_size : 1280  optimizer : sgd  momentum : 0.9  amp : True  memory_format : nchw  world_size : 1
""" + "".join(f"DLL 2022-11-19 18:31:{i:02d} - Epoch: 0 Iteration: {i}  train.loss : 6.5 None "
              f"train.compute_ips : {1588.0 + (i % 3)} images/s train.total_ips : 1587.9 images/s\n"
              for i in range(1, 31)) + \
    "DLL 2022-11-19 18:34:02.894243 - Summary: train.loss : 4.01066 None train.compute_ips : 1582.44 " \
    "images/s train.total_ips : 1582.19 images/s train.lr : 0.1\n"
BERT = """Container nvidia build =  44877844
python run_squad.py --train_batch_size=320 --max_seq_length=384 --max_steps=100
DLL 2022-11-19 19:18:39.827245 - PARAMETER model_weights_num : 109488386
device: cuda n_gpu: 1, distributed training: False, 16-bits training: True
DLL 2022-11-19 19:18:49.312578 - PARAMETER train_batch_size : 320
DLL 2022-11-19 19:20:04.384920 -  e2e_train_time : 72.118  training_sequences_per_second : 443.7168  final_loss : 5.9
"""


def test_resnet_log_gives_batch_throughput_and_iteration_spread():
    run = L.parse_resnet(RN50)
    assert (run.batch, run.samples_per_s, run.unit) == (1280, 1582.44, "images/s")
    assert run.details["amp"] is True and run.details["iteration_lines"] == 30
    assert 1588.0 <= run.details["iteration_ips_median"] <= 1590.0
    assert 0 < run.details["iteration_ips_cv"] < 0.001


def test_bert_log_gives_batch_throughput_and_steps():
    run = L.parse_bert(BERT)
    assert (run.batch, run.samples_per_s, run.unit) == (320, 443.7168, "sequences/s")
    assert run.details["max_steps"] == 100 and run.details["fp16"] is True
    assert L.container_build([RN50, BERT]) == "44877844"


def test_a_cut_off_log_gives_no_run_and_a_wrong_setup_is_an_error():
    assert L.parse_resnet(RN50.split("DLL 2022-11-19 18:34")[0]) is None
    assert L.parse_bert(BERT.replace("training_sequences_per_second", "x")) is None
    with pytest.raises(L.LambdaLogError, match="data_backend"):
        L.parse_resnet(RN50.replace("synthetic", "dali-gpu"))
    with pytest.raises(L.LambdaLogError, match="max_seq_length"):
        L.parse_bert(BERT.replace("384", "128"))
    with pytest.raises(L.LambdaLogError, match="0 sequences/s"):
        L.parse_bert(BERT.replace("443.7168", "0"))
    with pytest.raises(L.LambdaLogError, match="fp16 False"):
        L.parse_bert(BERT, fp16=False)


@pytest.mark.parametrize("system,version,one", [
    ("A100_80GB_SXM4_v1", "v1", True), ("1cc_H100_80GB_SXM5_v1", "v1", True),
    ("2xA100_80GB_SXM4_v1", "v1", False), ("LambdaCloud_8xV100_16GB_v1", "v1", False),
    ("A100_SXM4", "v1", False),  # a v0 folder: its container is not named per run
    ("LambdaOD_2x_Texas_1xH100_80GB_SXM5_192-222-52-120_v2", "v2", True),
    ("LambdaOD_2x_Texas_2xH100_80GB_SXM5_192-222-52-120_v2", "v2", False),
    ("LambdaOD_1x_Test_1xGH200_96GB_192-222-56-184_v2_bk", "v2", False)])
def test_only_single_gpu_runs_are_read(system, version, one):
    assert L.single_gpu(system, version) is one


@pytest.mark.parametrize("system,device", [
    ("A100_80GB_SXM4_v1", "a100-80gb-sxm"), ("AdaA6000_v1", "rtx-6000-ada"), ("A6000_v1", "rtx-a6000"),
    ("LambdaCloud_A10_v1", "a10"), ("LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2", "h200-sxm"),
    ("LambdaOD_1x_1xGH200_96GB_192-222-57-0_v2", "gh200-96gb"), ("H100_80GB_PCIe5_v1", "h100-pcie"),
    ("3090_v1", "rtx-3090"), ("LambdaOD_1x_1xGH200_80GB_192-222-58-35_v2", "gh200-96gb"),
    ("LambdaOD_1x_1xGX300_99GB_v2", None)])
def test_system_folders_map_to_spec_sheets(system, device):
    assert L.device_of(system) == device


def _repo_with(tmp_path: Path, files: dict[str, str]) -> Path:
    work = tmp_path / "clone"
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "logs"], check=True)
    return work / ".git"


def test_records_from_a_clone_name_their_log_and_commit(tmp_path, capsys):
    repo = _repo_with(tmp_path, {
        "pytorch/results/A100_80GB_SXM4_v1/PyTorch_resnet50_AMP/19-11-2022_18-30-46.txt": RN50,
        "pytorch/results/A100_80GB_SXM4_v1/PyTorch_bert_base_squad_FP16/19-11-2022_19-18-25.txt": BERT,
        "pytorch/results/2xA100_80GB_SXM4_v1/PyTorch_resnet50_AMP/19-11-2022_18-30-46.txt": RN50,
        "pytorch/results/A100_80GB_SXM4_v1/PyTorch_bert_large_squad_FP16/19-11-2022_19-00-00.txt": "OOM\n"})
    recs, skipped = L.records(repo)
    assert skipped == {"log without the throughput line (out of memory or cut off)": 1}
    by = {r["config"]["params"]["model"]: r for r in recs}
    assert set(by) == {"resnet50", "bert_base_squad"}
    rn = by["resnet50"]
    assert rn["measured_by"] == "others" and rn["device"] == "a100-80gb-sxm"
    assert rn["env"]["gpu_name"] == "NVIDIA A100-SXM4-80GB" and rn["env"]["torch_version"] == "1.13"
    assert rn["metrics"]["step_ms"] == pytest.approx(1280 / 1582.44 * 1e3)
    assert rn["setup"]["precision"] == "amp-fp16" and rn["measured_at"] == "2022-11-19T18:30:46"
    assert rn["provenance"]["file"].endswith("PyTorch_resnet50_AMP/19-11-2022_18-30-46.txt")
    commit = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert rn["provenance"]["commits"] == [commit]
    assert by["bert_base_squad"]["setup"]["precision"] == "fp16"
    out = tmp_path / "out"
    assert cli.main(["lambda", "--repo", str(repo), "--out", str(out)]) == 0
    assert sorted(str(f.relative_to(out)) for f in dataset_folders([out])) == [
        "a100-80gb-sxm/train-amp-fp16-resnet50", "a100-80gb-sxm/train-fp16-bert_base_squad"]


def test_committed_records_are_consistent():
    recs = [r for f in dataset_folders([DATA]) for r in iter_records(f)]
    assert len(recs) > 500
    for r in recs:
        task = r["provenance"]["file"].split("/")[3]
        assert r["measured_by"] == "others" and r["provenance"]["repository"] == L.REPOSITORY
        assert L.TASKS[task].precision == r["setup"]["precision"]
        assert L.TASKS[task].model == r["config"]["params"]["model"]
        assert r["metrics"]["step_ms"] == pytest.approx(r["batch"] / r["metrics"]["samples_per_s"] * 1e3)
        assert L.device_of(r["published"]["system"]) == r["device"]
    assert len({r["device"] for r in recs}) >= 12


def test_labels_are_one_per_gpu_task_batch_and_container_the_median_of_its_runs(tmp_path):
    recs = [r for f in dataset_folders([DATA]) for r in iter_records(f)]
    plain, layered, skipped = LB.lambda_labels(recs, tmp_path)  # no rebuild in an empty cache
    assert plain == [] and skipped["lambda: no rebuild of resnet50@224 yet"] > 0
    runs: dict[tuple, list[float]] = {}
    for r in recs:
        if r["config"]["params"]["model"] != "resnet50":
            runs.setdefault((r["device"], r["setup"]["precision"], r["config"]["params"]["model"], r["batch"]),
                            []).append(r["metrics"]["step_ms"])
    by_key = Counter((lab.gpu, lab.precision, m.name, lab.batch) for lab, m in layered)
    assert set(by_key) == set(runs)
    builds = {(r["device"], r["batch"], r["config"]["params"]["model"], r["setup"]["precision"]):
              set() for r in recs}
    for r in recs:
        builds[(r["device"], r["batch"], r["config"]["params"]["model"], r["setup"]["precision"])].add(
            r["published"]["container_build"])
    for (gpu, prec, model, batch), n in by_key.items():
        assert n == len(builds[(gpu, batch, model, prec)])  # one label per container build
        if n == 1:
            [lab] = [lab for lab, m in layered if (lab.gpu, lab.precision, m.name, lab.batch) ==
                     (gpu, prec, model, batch)]
            assert lab.ms == pytest.approx(statistics.median(runs[(gpu, prec, model, batch)]))
    assert max(len(v) for v in runs.values()) > 3  # the fleet's H100s: many runs, few labels
    for lab, m in layered:
        assert lab.source == "lambda" and lab.mode == "train" and lab.sdpa is False
        assert m.layers == json.loads((DATA / "configs" / f"{m.name}.json").read_text())["num_hidden_layers"]


def test_a_clone_without_usable_logs_leaves_the_records_alone(tmp_path, capsys):
    repo = _repo_with(tmp_path, {"pytorch/results/A100_80GB_SXM4_v1/PyTorch_resnet50_AMP/x.txt": "OOM\n"})
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    (out / "keep" / "README.md").write_text("card")
    assert cli.main(["lambda", "--repo", str(repo), "--out", str(out)]) == 2
    assert "no usable Lambda logs" in capsys.readouterr().err
    assert (out / "keep" / "README.md").read_text() == "card"
    assert cli.main(["lambda", "--repo", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert ".git directory" in capsys.readouterr().err


def test_a_log_that_contradicts_its_task_folder_names_the_log(tmp_path):
    repo = _repo_with(tmp_path, {
        "pytorch/results/A100_80GB_SXM4_v1/PyTorch_resnet50_FP32/19-11-2022_18-30-46.txt": RN50})
    with pytest.raises(L.LambdaLogError, match="PyTorch_resnet50_FP32/19-11-2022_18-30-46.txt: .*amp True"):
        L.records(repo)
