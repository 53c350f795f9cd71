#!/bin/sh
# The images' install step, one source for the Dockerfiles and for
# tests/test_docker.py (which runs it in a fresh venv: no docker engine there).
# usage: sh docker/install.sh cpu|cuda SRC   (installs with the `pip` on PATH)
#   cpu:  perfseer-rt[serve] (CPU onnxruntime)
#   cuda: perfseer-rt-gpu[serve] (onnxruntime-gpu) with NVIDIA's CUDA 13 / cuDNN 9
#         pip libraries, for `perfseer-rt profile --provider cuda` in the container
set -eu
flavour=$1
src=$2
case "$flavour" in
  cpu)  pip install --no-cache-dir --no-compile "$src[serve]" ;;
  cuda) pip install --no-cache-dir --no-compile "$src/gpu[serve]" \
          "onnxruntime-gpu[cuda,cudnn]" "nvidia-cublas~=13.0" ;;
  *)    echo "install.sh: unknown flavour '$flavour' (cpu or cuda)" >&2; exit 2 ;;
esac
