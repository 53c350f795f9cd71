#!/usr/bin/env bash
# A Docker engine and a local Debian base image on a machine without an image
# registry (CI's machines, docs/container.md): run as root.
#   1. apt-get installs Debian's docker.io (engine) and debootstrap, if missing;
#   2. starts dockerd in the background, unless an engine already answers;
#   3. builds the base image $PERFSEER_RT_BASE_IMAGE (default perfseer-rt-base:bookworm),
#      unless it exists: a minimal Debian bookworm rootfs (debootstrap --variant=minbase)
#      with python3, python3-pip and python3-venv, the machine's CA bundle copied in
#      (so pip inside the image reaches the package index through this machine's TLS
#      proxy), imported with `docker import`.
# Prints the seconds each step took. Exit 0 only when `docker info` answers and the
# base image exists.
set -euo pipefail

BASE_IMAGE=${PERFSEER_RT_BASE_IMAGE:-perfseer-rt-base:bookworm}
MIRROR=${PERFSEER_RT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
CA_BUNDLE=${PERFSEER_RT_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
LOG=${PERFSEER_RT_DOCKERD_LOG:-/tmp/perfseer-rt-dockerd.log}

step() { echo "ci_setup: $*" >&2; }
t0=$SECONDS

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  step "installing docker.io and debootstrap with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends docker.io debootstrap >/dev/null
fi
step "packages ready ($((SECONDS - t0)) s)"

if ! docker info >/dev/null 2>&1; then
  step "starting dockerd (log: $LOG)"
  setsid nohup dockerd >"$LOG" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { tail -20 "$LOG" >&2; step "dockerd did not start"; exit 1; }
fi
step "engine answers ($((SECONDS - t0)) s)"

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  rootfs=$(mktemp -d /tmp/perfseer-rt-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' ERR INT TERM
  step "debootstrap $SUITE into $rootfs"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv \
    "$SUITE" "$rootfs" "$MIRROR" >/dev/null
  cp "$CA_BUNDLE" "$rootfs/etc/ssl/certs/ca-certificates.crt"
  # what the image does not need: apt lists, caches, docs, man pages, locales
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  find "$rootfs"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' \
    -exec rm -rf {} + 2>/dev/null || true
  step "docker import as $BASE_IMAGE ($((SECONDS - t0)) s)"
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  trap - ERR INT TERM
  (rm -rf "$rootfs" &)  # tens of thousands of files: removed while the caller goes on
fi
step "base image $BASE_IMAGE ready ($((SECONDS - t0)) s)"
