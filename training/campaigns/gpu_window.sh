#!/usr/bin/env bash
# One GPU window: started as the FIRST command on a lent GPU machine (timeout_s 600),
# it measures for GPU_WINDOW_BUDGET_S seconds (default 510, counted from this script's
# start) and stops itself. Records stream to $OUT (records-NN.jsonl, archs.jsonl,
# window.json, log.txt), so a call cut off at its limit still returns what it measured.
# A fatal CUDA error ends the measuring process with exit code 3; it is then restarted
# (at most 3 times) and resumes after the last record. Extra arguments go to `run`.
# See training/campaigns/README.md ("When a GPU is lent").
set -u -o pipefail
start=$(date +%s)
budget=${GPU_WINDOW_BUDGET_S:-510}
out=${OUT:-/tmp/gpu-window}
mkdir -p "$out"
cd "$(dirname "$0")/../.." || exit 2
export PYTHONUNBUFFERED=1
# no network there: anything that would reach the Hugging Face hub fails at once instead of timing out
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
py=${PYTHON:-python3}
echo "gpu_window.sh: start $(date -u +%FT%TZ) budget ${budget}s out $out commit ${GPU_WINDOW_COMMIT:-unknown}" | tee -a "$out/log.txt"
timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv 2>&1 | tee -a "$out/log.txt"
rc=0
for attempt in 0 1 2 3; do
  if [ $(( start + budget - $(date +%s) )) -lt 20 ]; then
    echo "gpu_window.sh: less than 20 s left, not starting attempt $attempt" | tee -a "$out/log.txt"
    break
  fi
  "$py" -m training.campaigns.gpu_window run --out "$out" --deadline $(( start + budget )) --quiet "$@" 2>&1 | tee -a "$out/log.txt"
  rc=${PIPESTATUS[0]}
  echo "gpu_window.sh: attempt $attempt exit $rc after $(( $(date +%s) - start )) s" | tee -a "$out/log.txt"
  [ "$rc" -eq 3 ] || break
done
ls -l "$out"
exit "$rc"
