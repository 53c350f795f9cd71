"""The sections of ``python -m benchmarks.real_exports`` whose exporters do
not share this project's environment: ``tf2onnx``, ``ultralytics``,
``optimum`` and ``jax2onnx``. Each runs its export script
(``benchmarks/<toolchain>_export.py``) under the interpreter given for it
and checks every file the script writes as the ``detection`` section is.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import onnx

from benchmarks.real_checks import attempt, bound_check, refused_by_onnxruntime
from perfseer_rt.graph.perfgraph import PerfGraph

HERE = Path(__file__).resolve().parent

#: Interpreters of the toolchains that do not share this project's
#: environment, by section (``--tf-python``, ``--ul-python``,
#: ``--optimum-python``, ``--jax-python``); a section without one is skipped.
TOOLCHAINS: dict[str, str] = {}
#: Each such section's export script (``ok NAME`` / ``failed NAME: error`` lines).
EXPORT_SCRIPTS = {"tf2onnx": "tf_export.py", "ultralytics": "ultralytics_export.py",
                  "optimum": "optimum_export.py", "jax2onnx": "jax_export.py"}


def exported_by(section: str, tmp: Path) -> Iterator[tuple[str, str | None]]:
    """Run ``section``'s export script under its interpreter into ``tmp``:
    (model name, None) per model written, (name, error) per failure."""
    script = HERE / EXPORT_SCRIPTS[section]
    run = subprocess.run([TOOLCHAINS[section], str(script), str(tmp)], capture_output=True,
                         text=True, timeout=3600, check=False)
    for line in run.stdout.splitlines():
        status, _, rest = line.partition(" ")
        if status in ("ok", "failed"):
            yield rest.split(":")[0], (rest if status == "failed" else None)


def toolchain_rows(section: str, key: str, tmp: Path,
                   check: Callable[[str, Path], dict]) -> Iterator[dict]:
    """One row per model ``section``'s export script writes: ``check(name,
    path)`` under ``key``, or the exporter's error."""
    for name, error in exported_by(section, tmp):
        row: dict = {"section": section, "model": name}
        if error is not None:
            row[f"{section}_export_error"] = error
        else:
            attempt(row, key, partial(check, name, tmp / f"{name}.onnx"))
        yield row


def tf2onnx_models(tmp: Path) -> Iterator[dict]:
    return toolchain_rows("tf2onnx", "tf2onnx", tmp, lambda name, path: (
        refused_by_onnxruntime(path), bound_check(path))[1])


def ultralytics_models(tmp: Path) -> Iterator[dict]:
    def check(name: str, path: Path) -> dict:
        static = name.endswith("-static")
        return bound_check(path, batch=None if static else 2,
                           dims=None if static else {"height": 640, "width": 640})

    return toolchain_rows("ultralytics", "yolo", tmp, check)


def jax2onnx_models(tmp: Path) -> Iterator[dict]:
    return toolchain_rows("jax2onnx", "jax2onnx", tmp, lambda name, path: bound_check(
        path, dims={"B": 2, "T": 12}, ids=1000))


#: The dims optimum's exports are extracted at (Whisper's encoder takes 3,000
#: frames, which its decoders see as 1,500 encoder states).
OPTIMUM_DIMS = {"batch_size": 2, "sequence_length": 8, "past_sequence_length": 5,
                "encoder_sequence_length": 16, "decoder_sequence_length": 8,
                "past_decoder_sequence_length": 5, "num_channels": 3, "height": 64,
                "width": 64, "feature_size": 80}
WHISPER_FRAMES = {"encoder_model.onnx": 3000, "*": 1500}


def _optimum_feeds(g: PerfGraph, proto: onnx.ModelProto) -> dict:
    """Inputs for an optimum export at the extracted shapes: ones for ids,
    masks and positions, random floats, and a merged decoder's
    ``use_cache_branch`` set to the branch extraction took."""
    rng = np.random.default_rng(0)
    took_cache = any("(then_branch)" in w for w in g.warnings)
    feeds = {}
    for vi in proto.graph.input:
        shape, elem = g.input_shapes[vi.name], vi.type.tensor_type.elem_type
        if elem == onnx.TensorProto.BOOL:
            feeds[vi.name] = np.full(shape, took_cache)
        elif elem == onnx.TensorProto.INT64:
            feeds[vi.name] = np.ones(shape, np.int64)
        else:
            feeds[vi.name] = rng.random(shape, dtype=np.float32)
    return feeds


def optimum_models(tmp: Path) -> Iterator[dict]:
    for name, error in exported_by("optimum", tmp):
        if error is not None:
            yield {"section": "optimum", "model": name, "optimum_export_error": error}
            continue
        for path in sorted((tmp / name).glob("*.onnx")):
            row: dict = {"section": "optimum", "model": f"{name}/{path.name}"}
            dims = dict(OPTIMUM_DIMS)
            if name == "whisper":
                dims["encoder_sequence_length"] = WHISPER_FRAMES.get(path.name,
                                                                     WHISPER_FRAMES["*"])
            attempt(row, "optimum", lambda path=path, dims=dims: bound_check(
                path, dims=dims, feeds_for=_optimum_feeds))
            yield row
