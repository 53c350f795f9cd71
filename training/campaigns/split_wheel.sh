#!/usr/bin/env bash
# Download the onnxruntime-gpu wheel for the GPU machine (CPython 3.12, manylinux
# x86_64, CUDA 13 build) and split it into parts small enough to travel with one
# device command each (the working tree plus carried paths must stay under 64 MiB).
#
#   bash training/campaigns/split_wheel.sh            # -> .whl/ort/part0 .. partN, MANIFEST
#   ORT_VERSION=1.31.1 PART_MB=52 bash training/campaigns/split_wheel.sh
#
# .whl/ is ignored by git (.gitignore), so the parts never enter a commit; they
# travel only when a device call names them in `carry`. gpu_setup.sh joins them
# on the GPU machine, checks the SHA-256 in MANIFEST and installs the wheel.
set -euo pipefail

VERSION="${ORT_VERSION:-1.31.1}"
PART_MB="${PART_MB:-52}"
ROOT="$(git rev-parse --show-toplevel)"
cd "$ROOT"
DL=.whl/download
DEST=.whl/ort
mkdir -p "$DL"
rm -rf "$DEST"
mkdir -p "$DEST"

# The flags the device README gives for wheels that must run on that machine.
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$DL" "onnxruntime-gpu==${VERSION}"

WHEEL="$(ls "$DL"/onnxruntime_gpu-"${VERSION}"-cp312-cp312-*.whl | head -n1)"
[ -f "$WHEEL" ] || { echo "split_wheel: no cp312 wheel of onnxruntime-gpu ${VERSION}" >&2; exit 1; }
SHA="$(sha256sum "$WHEEL" | cut -d' ' -f1)"
split -b "${PART_MB}M" -d -a 1 "$WHEEL" "$DEST/part"
{
    echo "wheel=$(basename "$WHEEL")"
    echo "sha256=${SHA}"
    echo "bytes=$(stat -c %s "$WHEEL")"
    echo "parts=\"$(cd "$DEST" && ls part* | tr '\n' ' ' | sed 's/ $//')\""
} > "$DEST/MANIFEST"
cat "$DEST/MANIFEST"
ls -l "$DEST"
