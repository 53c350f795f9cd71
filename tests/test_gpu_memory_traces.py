"""The memory rules against real PyTorch allocation traces on this CPU
(training/memtrace): a small CNN and a small MLP, measured and predicted in
the test. Allocation sizes are deterministic, so the bounds are tight."""

import io

import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from torch import nn  # noqa: E402

from perfseer_rt.gpu import memory  # noqa: E402
from perfseer_rt.gpu.specs import GpuSpec  # noqa: E402
from perfseer_rt.graph import extract  # noqa: E402
from training.memtrace import measure  # noqa: E402
from training.memtrace.models import Case  # noqa: E402
from training.memtrace.trace import AllocTrace, peak  # noqa: E402

SPEC = GpuSpec("NVIDIA A100-SXM4-40GB", 40, 1555, 108, 64, 1410, 19500, 40)


def small_cnn(for_export: bool) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                      nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
                      nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.running_var.uniform_(0.5, 1.5)
    return m


def small_mlp(for_export: bool) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 10))


CASES = [Case("cnn", "test", "image", (3, 32, 32), build=small_cnn),
         Case("mlp", "test", "vector", (64,), build=small_mlp)]


def test_the_tracer_sees_allocations_and_frees_in_order():
    tr = AllocTrace()
    with tr:
        a = torch.empty(1000)
        b = a.view(10, 100)        # a view: no allocation
        c = a + 1
        del a, b
        del c
    kinds = [(e.kind, e.nbytes) for e in tr.events]
    assert kinds == [("+", 4000), ("+", 4000), ("-", 4000), ("-", 4000)]
    assert peak(tr.events)[0] == 8000


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("mode, opt", [("train", "adam"), ("train", "sgd-momentum"), ("inference", None)])
def test_predicted_peak_matches_the_traced_one(case, mode, opt):
    batch = 8
    measured = measure.run(case, batch, mode, opt, "fp32")
    model = case.build(True).eval()
    buf = io.BytesIO()
    x = torch.randn(batch, *case.shape)
    torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buf.getvalue())
    est = memory.predict_memory(extract(proto), proto, SPEC, mode=mode, optimizer=opt, policy="cpu",
                                workspaces=False, steps=measure.STEPS)
    assert est.tensor_peak_mib * 2**20 == pytest.approx(measured["tensor_peak_bytes"], rel=0.03)
