"""Export small Flax (nnx) models and a jax.numpy function with jax2onnx,
for ``benchmarks.real_exports``' ``jax2onnx`` section. Runs under an
interpreter that has jax, flax and jax2onnx (their own venv; on 2026-11-25:
``python -m venv V && V/bin/pip install jax2onnx flax onnx==1.23.2
onnxruntime``):
``python benchmarks/jax_export.py OUT_DIR [NAME ...]``. Random weights,
opset 21, symbolic dims ``B`` (batch) and ``T`` (tokens); one line per model
on stdout: ``ok NAME`` or ``failed NAME: error``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path


def _models() -> dict[str, tuple[Callable[[], object], list]]:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    rngs = nnx.Rngs(0)

    class CNN(nnx.Module):
        def __init__(self) -> None:
            self.c1 = nnx.Conv(3, 16, (3, 3), rngs=rngs)
            self.bn = nnx.BatchNorm(16, rngs=rngs)
            self.c2 = nnx.Conv(16, 32, (3, 3), strides=2, rngs=rngs)
            self.fc = nnx.Linear(32, 10, rngs=rngs)

        def __call__(self, x):
            x = jax.nn.relu(self.bn(self.c1(x), use_running_average=True))
            return self.fc(jax.nn.gelu(self.c2(x)).mean(axis=(1, 2)))

    class Block(nnx.Module):
        def __init__(self) -> None:
            self.ln1, self.ln2 = nnx.LayerNorm(64, rngs=rngs), nnx.LayerNorm(64, rngs=rngs)
            self.att = nnx.MultiHeadAttention(num_heads=4, in_features=64, decode=False,
                                              rngs=rngs)
            self.l1, self.l2 = nnx.Linear(64, 256, rngs=rngs), nnx.Linear(256, 64, rngs=rngs)

        def __call__(self, x):
            x = x + self.att(self.ln1(x))
            return x + self.l2(jax.nn.gelu(self.l1(self.ln2(x))))

    class LM(nnx.Module):
        def __init__(self) -> None:
            self.emb = nnx.Embed(1000, 64, rngs=rngs)
            self.b1, self.b2 = Block(), Block()
            self.head = nnx.Linear(64, 1000, rngs=rngs)

        def __call__(self, ids):
            return self.head(self.b2(self.b1(self.emb(ids))))

    def attention_fn(x):
        scores = jnp.einsum("btd,bsd->bts", x, x) / 4.0
        return jnp.einsum("bts,bsd->btd", jax.nn.softmax(scores, axis=-1), x).cumsum(axis=1)

    return {
        "cnn": (CNN, [("B", 32, 32, 3)]),
        "transformer-block": (Block, [("B", "T", 64)]),
        "lm": (LM, [jax.ShapeDtypeStruct((2, 16), jnp.int32)]),
        "attention-fn": (lambda: attention_fn, [("B", "T", 16)]),
    }


def main() -> int:
    warnings.filterwarnings("ignore")
    from export_lines import report
    from jax2onnx import to_onnx

    out, names = Path(sys.argv[1]), sys.argv[2:]
    models = _models()

    def export(name: str) -> None:
        build, inputs = models[name]
        to_onnx(build(), inputs, return_mode="file", output_path=str(out / f"{name}.onnx"),
                opset=21)

    return report(names or list(models), export)


if __name__ == "__main__":
    sys.exit(main())
