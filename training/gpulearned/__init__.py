"""The learned whole-model layer of the GPU predictor: a per-kernel
correction of the roofline, trained on whole-model latencies measured by
others (``data/public-gpu``), validated leave-one-GPU-out and with whole
architecture families held out, exported to ONNX for the runtime
(:mod:`perfseer_rt.gpu.learned`).

``python -m training.gpulearned --help``.
"""
