"""A stand-in zoo for campaign tests: MLPs ``mlp``/``wide``, ``broken`` (export fails) and
``crash`` (the export process dies)."""
import hashlib
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAMILIES = ("mlp", "wide", "broken", "crash")


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


class _Family:
    def __init__(self, name):
        self.name = name

    def group_of(self, params):
        return self.name


def get_family(name):
    if name not in FAMILIES:
        raise KeyError(f"unknown family {name}")
    return _Family(name)


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
    if cfg.family == "crash":
        import os
        os._exit(3)  # as a segfault or the OOM killer would end the export process
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
