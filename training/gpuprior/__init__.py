"""GPU prior: per-operator latency as a fraction of the device's roofline,
learned from NeuSight's public kernel measurements (5 GPUs, PyTorch 2.1,
fp32) and evaluated leave-one-GPU-out. ``python -m training.gpuprior``."""
