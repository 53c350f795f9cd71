"""One GPU window: a lent H100/H200 turned into our own GPU records in one call.

``bash training/campaigns/gpu_window.sh`` (the first command on the GPU
machine, 600 s limit) runs ``python -m training.campaigns.gpu_window run``:
PyTorch eager on the GPU, models rebuilt in-process from their configs, for
a wall-clock budget (default 510 s), records streamed to ``$OUT``.

Modules, one job each:

- :mod:`.archs`: the architectures (timm from the public records' list, HF
  text models, the zoo's families), tiers 1 and 2;
- :mod:`.plan`: settings (mode, precision, layout, optimizer, batch, energy
  window) and the ordered configurations;
- :mod:`.build`: modules, inputs, precision flags and layouts in torch;
- :mod:`.measure`: one configuration: CUDA-event timing, memory, NVML window;
- :mod:`.record`: the record format (campaign format, measured by us);
- :mod:`.shards`: records streamed to disk (append + fsync, size limits);
- :mod:`.runner`: the loop (resume, deadline, OOM ladders, fatal errors);
- :mod:`.estimate` / :mod:`.table`: the window's cost, estimated on the CPU;
- :mod:`.ingest`: returned records into ``data/gpu/<gpu>/<setup>/``;
- :mod:`.preflight`: what the device call would send, and the exact command.

See ``training/campaigns/README.md``.
"""
