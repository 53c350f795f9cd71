"""GPU campaigns end to end on the CPU (--dry-run) with a small stand-in zoo.

The stand-in zoo (written to a temporary folder) has the zoo's API
(``sample``, ``parse_spec``, ``to_spec``, ``ModelConfig``, ``export_onnx``,
``build_model``, ``example_inputs``, ``get_family``) and tiny MLPs, so the
whole pipeline (plan, export pool, measuring child, streaming, resume,
reference re-measures, failures) runs in seconds. A last test runs one real
zoo config when the zoo is importable.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from training.campaigns import common, gpu_inference, gpu_training

STUB_ZOO = textwrap.dedent('''
    """A stand-in zoo for campaign tests: MLPs ``mlp``/``wide``, and ``broken`` (export fails)."""
    import hashlib
    import json

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    FAMILIES = ("mlp", "wide", "broken")


    class ModelConfig:
        def __init__(self, family, params, batch=None):
            self.family, self.params, self.batch = family, dict(params), batch

        @property
        def arch_id(self):
            text = json.dumps({"family": self.family, "params": self.params}, sort_keys=True)
            return hashlib.sha256(text.encode()).hexdigest()[:16]

        def with_batch(self, batch):
            return ModelConfig(self.family, self.params, batch)

        def to_dict(self, include_arch_id=False):
            d = {"family": self.family, "params": dict(self.params)}
            if include_arch_id:
                d["arch_id"] = self.arch_id
            return d

        @classmethod
        def from_dict(cls, d):
            return cls(d["family"], d["params"], d.get("batch"))


    def get_family(name):
        if name not in FAMILIES:
            raise KeyError(f"unknown family {name}")
        return name


    def sample(family, rng):
        return ModelConfig(family, {"width": rng.choice([8, 16, 32, 48, 64]),
                                    "depth": rng.randint(1, 4)})


    def parse_spec(text):
        family, _, rest = text.partition(":")
        get_family(family)
        return ModelConfig(family, {k: int(v) for k, v in
                                    (t.split("=") for t in rest.split(",") if t)})


    def to_spec(cfg):
        return cfg.family + ":" + ",".join(f"{k}={v}" for k, v in sorted(cfg.params.items()))


    def export_onnx(cfg, path, batch=None):
        if cfg.family == "broken":
            raise RuntimeError("this family cannot be exported")
        w, d = cfg.params["width"], cfg.params["depth"]
        nodes, inits, x = [], [], "x"
        for i in range(d):
            inits.append(numpy_helper.from_array(np.full((w, w), 0.01, np.float32), f"w{i}"))
            nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                      helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
            x = f"r{i}"
        nodes[-1].output[0] = "y"
        b = "batch" if batch is None else batch
        g = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, w])],
                              inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        onnx.save(m, str(path))
        return path


    def build_model(cfg):
        import torch

        w, d = cfg.params["width"], cfg.params["depth"]
        layers = []
        for _ in range(d):
            layers += [torch.nn.Linear(w, w), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers).eval()


    def example_inputs(cfg, batch, seed=0):
        rng = np.random.default_rng(seed)
        return {"x": rng.standard_normal((batch, cfg.params["width"])).astype(np.float32)}
''')


@pytest.fixture
def stub_zoo(tmp_path, monkeypatch):
    d = tmp_path / "stubpkg"
    d.mkdir()
    (d / "stub_zoo.py").write_text(STUB_ZOO)
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(d)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    sys.modules.pop("stub_zoo", None)
    yield "stub_zoo"
    sys.modules.pop("stub_zoo", None)


def _records(out):
    return list(common.iter_records([str(out)]))


BASE = ["--dry-run", "--zoo", "stub_zoo", "--batches", "1,2,4", "--batches-per-arch", "2",
        "--reference-count", "1", "--reference-every", "3"]


def test_inference_dry_run_streams_records_and_resumes(stub_zoo, tmp_path, capsys):
    out = tmp_path / "out"
    args = BASE + ["--out", str(out), "--families", "mlp,wide,broken", "--count", "4"]
    assert gpu_inference.main(args + ["--spec", "mlp:width=16,depth=2"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recs = _records(out)
    assert summary["records"] == len(recs) > 0
    main = [r for r in recs if not r["reference"]]
    refs = [r for r in recs if r["reference"]]
    keys = [r["key"] for r in main]
    assert len(keys) == len(set(keys)) == 10  # 5 architectures x 2 batch sizes
    assert refs and all(r["key"] == main[0]["key"] for r in refs)  # the first case re-measured
    assert main[0]["spec"] == "mlp:depth=2,width=16"
    for r in main:
        assert r["campaign"] == "gpu_inference" and r["device"] == "cpu-1t"
        assert r["env"]["onnxruntime_version"] and r["config"]["arch_id"] == r["arch_id"]
        if r["family"] == "broken":
            assert r["status"] == "error" and r["stage"] == "export"
            assert "cannot be exported" in r["error"] and r["latency_ms"] is None
            assert r["metrics"] == {}
        else:
            assert r["status"] == "ok", r["error"]
            assert r["latency_ms"] > 0 and r["runs"] >= 3 and r["peak_mem_mb"] > 0
            assert r["provider_used"] == "CPUExecutionProvider"
            assert r["metrics"]["latency_ms"] == r["latency_ms"]
            assert r["input_shapes"]["x"][0] == r["batch"] and r["export_s"] > 0
            assert r["noisy"] == (r["latency_cv"] > common.CV_MAX)
    assert not os.listdir(out) or all(f.startswith("inference-") for f in os.listdir(out))

    # a second command with the same plan measures nothing again
    assert gpu_inference.main(args + ["--spec", "mlp:width=16,depth=2"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["ok"] + again["error"] + again["oom"] == 0 and again["skipped_done"] == 10
    assert len(_records(out)) == len(recs)


def test_inference_resume_from_other_folder_extends_plan(stub_zoo, tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    base = BASE + ["--families", "mlp,wide", "--reference-every", "0"]
    assert gpu_inference.main(base + ["--out", str(first), "--count", "2"]) == 0
    assert gpu_inference.main(base + ["--out", str(second), "--count", "3",
                                      "--resume", str(first)]) == 0
    capsys.readouterr()
    a = [r["key"] for r in _records(first) if not r["reference"]]
    b = [r["key"] for r in _records(second) if not r["reference"]]
    assert len(a) == 4 and len(b) == 2 and not set(a) & set(b)  # only the new architecture


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"campaign": "gpu_inference", "key": "a/b1", "reference": false}\n'
                    '{"campaign": "gpu_inference", "key": "a/b2", "refer')
    assert common.load_done([str(tmp_path)], "gpu_inference") == {"a/b1"}


def test_time_budget_stops_cleanly(stub_zoo, tmp_path, capsys):
    out = tmp_path / "out"
    rc = gpu_inference.main(BASE + ["--out", str(out), "--families", "mlp", "--count", "50",
                                    "--time-budget", "4.0"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["stopped_by_budget"] and summary["records"] == len(_records(out))
    # the last measurement may run past the estimate by its own timeout floor (5 s)
    assert summary["elapsed_s"] < 4.0 + 5.0


def test_plan_is_deterministic_and_fixes_perfseer_resolution():
    class Cfg:
        def __init__(self, family, params, batch=None):
            self.family, self.params = family, dict(params)

        arch_id = property(lambda self: f"{self.family}-{sorted(self.params.items())}")
        with_batch = lambda self, b: self  # noqa: E731
        to_dict = lambda self, include_arch_id=False: {"family": self.family,  # noqa: E731
                                                       "params": self.params}

    class Zoo:
        ModelConfig = Cfg

        @staticmethod
        def get_family(name):
            if name not in ("perfseer", "resnet"):
                raise KeyError(name)

        @staticmethod
        def sample(family, rng):
            return Cfg(family, {"res": rng.choice([96, 128, 160]), "w": rng.random()})

    a = common.plan_archs(Zoo, seed=3, count=6, families=["perfseer", "resnet", "vit"])
    b = common.plan_archs(Zoo, seed=3, count=6, families=["perfseer", "resnet", "vit"])
    assert [x.arch_id for x in a] == [x.arch_id for x in b] and len(a) == 6
    assert all(x.config["params"]["res"] == 224 for x in a if x.family == "perfseer")
    assert all(len(x.cases) == 3 and len({c.batch for c in x.cases}) == 3 for x in a)
    assert all(c.batch in common.BATCHES for x in a for c in x.cases)


def test_training_dry_run_and_resume(stub_zoo, tmp_path, capsys):
    out = tmp_path / "out"
    args = BASE + ["--out", str(out), "--families", "mlp,wide", "--count", "2", "--cv-max", "10",
                   "--builder", "training.campaigns.zoo_cases:build_train_case"]
    assert gpu_training.main(args) == 0
    recs = _records(out)
    main = [r for r in recs if not r["reference"]]
    assert len({r["key"] for r in main}) == len(main) == 4
    assert any(r["reference"] for r in recs)
    for r in main:
        assert r["status"] == "ok", r["error"]
        assert r["campaign"] == "gpu_training" and r["timing"] == "perf_counter"
        assert r["step_ms"] > 0 and r["runs"] >= 3 and r["peak_mem_mb"] is not None
        assert r["input_shapes"][0][0] == r["batch"] and r["env"]["torch_version"]
        assert r["metrics"]["step_ms"] == r["step_ms"]
    assert gpu_training.main(args) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["skipped_done"] == 4 and again["ok"] == 0


def test_bad_spec_is_one_line_exit_2(stub_zoo, tmp_path, capsys):
    rc = gpu_inference.main(BASE + ["--out", str(tmp_path), "--spec", "nope:width=1"])
    assert rc == 2
    assert "gpu_inference: error:" in capsys.readouterr().err


def _real_zoo_ok() -> bool:
    try:
        import training.zoo as zoo

        zoo.parse_spec("resnet:depth=18,width=0.25,res=32")
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _real_zoo_ok(), reason="training.zoo (resnet family) not importable")
def test_inference_dry_run_with_the_real_zoo(tmp_path, capsys):
    out = tmp_path / "out"
    rc = gpu_inference.main(["--dry-run", "--out", str(out), "--count", "0",
                             "--spec", "resnet:depth=18,width=0.25,res=32", "--batches", "2",
                             "--batches-per-arch", "1", "--reference-every", "0"])
    assert rc == 0
    recs = [r for r in _records(out) if not r["reference"]]
    assert len(recs) == 1 and recs[0]["status"] == "ok", recs[0]["error"]
    assert recs[0]["input_shapes"]["input"] == [2, 3, 32, 32] and recs[0]["family"] == "resnet"
