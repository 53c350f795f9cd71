"""GPU predictions from a prior: public per-operator kernel measurements
(NeuSight, PyTorch 2.1, fp32) and the device's spec sheet; no GPU records of
ours. See ``reports/gpu-prior/README.md`` and ``training/gpuprior/``."""
