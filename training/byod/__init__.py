"""Bring your own device: a CSV of someone's measurements -> a predictor.

- ``python -m training.byod train --csv FILE --model-column COL --metric latency_ms
  --device NAME``: builds the graphs of the models named in the CSV (ONNX
  paths or zoo specs), trains SeerNet, exports ``exported_models/NAME/``.

The NAS-Bench-201 benchmark on HELP's data lives in :mod:`benchmarks.nb201`.
"""

from training.byod.errors import ByodError

__all__ = ["ByodError"]
