"""Installing perfseer-rt (no extras) pulls in no torch.

Walks the installed distributions' metadata from perfseer-rt's own runtime
requirements (markers evaluated for this machine, extras not taken), the
same closure pip resolves for `pip install perfseer-rt` in a fresh venv.
"""

from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def runtime_closure(dist: str = "perfseer-rt") -> set[str]:
    seen: set[str] = set()
    todo = [dist]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # another platform, or only with an extra
            todo.append(req.name)
    return seen


def test_runtime_install_has_no_torch():
    closure = runtime_closure()
    assert "onnx" in closure and "numpy" in closure and "onnxruntime" in closure
    assert not {n for n in closure if n == "torch" or n.startswith("torch-") or
                n.startswith("nvidia-cu")}, sorted(closure)


def test_exactly_one_onnxruntime_flavour():
    closure = runtime_closure()
    assert len({"onnxruntime", "onnxruntime-gpu"} & closure) == 1, sorted(closure)


def test_training_extra_does_bring_torch():
    """The walk is not vacuous: the training extra does require torch."""
    reqs = [Requirement(r) for r in metadata.requires("perfseer-rt") or []]
    extra_torch = [r for r in reqs if r.name == "torch" and r.marker is not None
                   and r.marker.evaluate({"extra": "training"})]
    assert extra_torch
