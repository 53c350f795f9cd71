"""Real allocation traces of PyTorch training steps and inferences (on CPU),
the ground truth for the GPU memory rules in :mod:`perfseer_rt.gpu`.

``trace.py`` records every tensor storage PyTorch allocates and frees, in
order; ``models.py`` builds the measured models; ``run.py`` measures them and
writes ``data/memtrace/``; ``evaluate.py`` exports each model to ONNX,
predicts it with the rules and writes ``reports/gpu-memory/``.
"""
