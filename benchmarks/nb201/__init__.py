"""NAS-Bench-201 latency benchmarks on HELP's 19-device data (HELP protocol).

- ``python -m benchmarks.nb201 fewshot --csv FILE``: a new device from 10
  measurements after multi-device pre-training (:mod:`benchmarks.nb201.fewshot`).
- ``python -m benchmarks.nb201 seernet --csv FILE``: SeerNet per device at 900
  samples, the SeerNet-Multi few-shot variant, FLOPs baseline
  (:mod:`benchmarks.nb201.seernet`).
"""
