#!/bin/sh
# The images' install step, one source for the Dockerfiles and for
# tests/test_docker.py (which also runs it in a fresh venv, without an engine).
# usage: sh docker/install.sh cpu|cuda SRC [VENV]
#   with VENV: makes that virtual environment with the python3 on PATH and
#   installs into it (the images: /opt/perfseer-rt); without: installs with the
#   `pip` on PATH (python -m benchmarks.install_size --command "sh docker/install.sh cpu .")
#   cpu:  perfseer-rt[serve] (CPU onnxruntime)
#   cuda: perfseer-rt-gpu[serve] (onnxruntime-gpu) with NVIDIA's CUDA 13 / cuDNN 9
#         pip libraries, for `perfseer-rt profile --provider cuda` in the container
set -eu
flavour=$1
src=$2
venv=${3:-}
pip=pip
if [ -n "$venv" ]; then
  python3 -m venv "$venv"
  pip="$venv/bin/pip"
fi
case "$flavour" in
  cpu)  "$pip" install --no-cache-dir --no-compile "$src[serve]" ;;
  cuda) "$pip" install --no-cache-dir --no-compile "$src/gpu[serve]" \
          "onnxruntime-gpu[cuda,cudnn]" "nvidia-cublas~=13.0" ;;
  *)    echo "install.sh: unknown flavour '$flavour' (cpu or cuda)" >&2; exit 2 ;;
esac
if [ -n "$venv" ]; then
  # setuptools only built the package; the service does not need it
  "$pip" uninstall --yes --quiet setuptools
fi
