"""One campaign engine for every measurement target: plan -> targets -> store -> loop.

- :mod:`~training.campaign.plan`: what to measure, deterministically from a
  seed (the CPU stream with probe-chosen batch sizes, or the fixed GPU plan),
  and the reference set re-measured to watch drift;
- :mod:`~training.campaign.targets`: how one configuration is measured
  (onnxruntime CPU, onnxruntime CUDA + NVML, a torch training step on CPU or
  CUDA);
- :mod:`~training.campaign.worker`: one device's work on one architecture:
  export (ahead of time), PerfGraph extraction, measurement, noisy re-measure,
  OOM masking, the record;
- :mod:`~training.campaign.store`: the dataset folder (``records/*.jsonl`` +
  ``graphs/*.npz``, the layout :mod:`training.seernet.data` reads), atomic
  shards, resume, and the guards against mixing measurement methods or CPUs;
- :mod:`~training.campaign.loop`: the loop (skip what is done, references
  every N records, time budget, progress bar), the same for one local worker
  or many on Ray (:mod:`~training.campaign.distributed`).

Command line: ``python -m training.campaign --help``.
"""
