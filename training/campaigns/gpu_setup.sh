#!/usr/bin/env bash
# On the GPU machine: gather the carried onnxruntime-gpu wheel parts, join them,
# check the SHA-256 and install the wheel into /tmp/site (pip --target).
#
#   bash training/campaigns/gpu_setup.sh stash     # copy the parts carried with this command
#   bash training/campaigns/gpu_setup.sh install   # stash, join, verify, install, print version
#
# Parts come from training/campaigns/split_wheel.sh (.whl/ort/partN + MANIFEST),
# one per device command; /tmp keeps them while the machine stays warm (30 s
# after each command), so send them back to back. See README.md.
set -euo pipefail
PARTS=/tmp/ortparts
SITE=/tmp/site

stash() {
    mkdir -p "$PARTS"
    for f in .whl/ort/part* .whl/ort/MANIFEST; do
        [ -f "$f" ] && cp "$f" "$PARTS/" && echo "stashed $f ($(stat -c %s "$f") bytes)"
    done
    ls -l "$PARTS"
}

install() {
    stash
    [ -f "$PARTS/MANIFEST" ] || { echo "gpu_setup: MANIFEST missing (carry .whl/ort/MANIFEST)"; exit 1; }
    # shellcheck disable=SC1091
    . "$PARTS/MANIFEST"
    for p in $parts; do
        [ -f "$PARTS/$p" ] || { echo "gpu_setup: $p missing: send it first (stash)"; exit 1; }
    done
    (cd "$PARTS" && cat $parts > "/tmp/$wheel")
    got=$(sha256sum "/tmp/$wheel" | cut -d' ' -f1)
    [ "$got" = "$sha256" ] || { echo "gpu_setup: sha256 mismatch ($got != $sha256)"; exit 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "/tmp/$wheel"
    PYTHONPATH="$SITE" python3 -c "import onnxruntime as o; print('installed', o.__version__, o.__file__, o.get_available_providers())"
}

case "${1:-}" in
    stash) stash ;;
    install) install ;;
    *) echo "usage: gpu_setup.sh stash|install"; exit 2 ;;
esac
