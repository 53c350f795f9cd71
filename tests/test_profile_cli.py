"""``perfseer-rt profile`` exit codes and output, in-process with click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from perfseer_rt.cli import main
from tests.test_profile import _gpu_visible, matmul_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return matmul_model(tmp_path_factory.mktemp("cli") / "tiny.onnx")


FAST = ["--min-runs", "3", "--min-time", "0.02", "--max-time", "1"]


def _run(*args):
    return CliRunner().invoke(main, ["profile", *args])


def test_json_output_exit_0(tiny):
    res = _run(tiny, "--batch", "2", "--json", *FAST)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["status"] == "ok" and rec["latency_ms"] > 0 and rec["runs"] >= 3
    assert rec["provider_used"] == "CPUExecutionProvider" and rec["env"]["cpu_cores"] >= 1


def test_readable_summary(tiny):
    res = _run(tiny, "--input", "x:3x64", *FAST)
    assert res.exit_code == 0, res.output
    assert "latency" in res.stdout and "ms median" in res.stdout and "x:3x64" in res.stdout


@pytest.mark.parametrize("args, message", [
    (["--provider", "tpu", "--batch", "1"], "unknown provider 'tpu'"),
    (["--batch", "1", "--input", "x:bad"], "--input"),
    ([], "dim 0"),
    (["--dim", "N"], "--dim 'N'"),
])
def test_user_errors_exit_2_with_one_line(tiny, args, message):
    res = _run(tiny, *args)
    assert res.exit_code == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert res.stdout == ""


def test_missing_file_exit_2(tmp_path):
    res = _run(str(tmp_path / "nope.onnx"), "--batch", "1")
    assert res.exit_code == 2 and "no such file" in res.stderr


@pytest.mark.skipif(_gpu_visible(), reason="an NVIDIA GPU is visible: CUDA is available here")
def test_cuda_unavailable_exit_2(tiny):
    res = _run(tiny, "--provider", "cuda", "--batch", "1")
    assert res.exit_code == 2 and res.stderr.startswith("perfseer-rt: error:")


def test_failed_run_prints_record_and_exits_1(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not onnx")
    res = _run(str(bad), "--batch", "1", "--json")
    assert res.exit_code == 1
    rec = json.loads(res.stdout)
    assert rec["status"] == "error" and rec["latency_ms"] is None


def test_named_dims_set_the_shapes_measured(tiny):
    res = _run(tiny, "--dim", "N=3", "--json", *FAST)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["input_shapes"] == {"x": [3, 64]}
