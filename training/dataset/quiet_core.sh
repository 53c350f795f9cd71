#!/usr/bin/env bash
# Keep one core quiet for a measurement campaign: run COMMAND pinned to CPU
# $CORE (default 1) and, every 3 s while it runs, move every other process of
# the machine to the remaining cores. Usage: quiet_core.sh COMMAND [ARGS...]
set -u
CORE=${CORE:-1}
OTHERS=$(python3 -c "import os; print(','.join(str(c) for c in sorted(os.sched_getaffinity(0)) if c != $CORE))")
taskset -c "$CORE" "$@" &
root=$!
tree() {  # the campaign's process tree (its pids, recursively)
  local p=$1; echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
}
while kill -0 "$root" 2>/dev/null; do
  keep=" $(tree "$root" | tr '\n' ' ') "
  for p in $(ls /proc | grep -E '^[0-9]+$'); do
    case "$keep" in *" $p "*) continue ;; esac
    taskset -a -p -c "$OTHERS" "$p" >/dev/null 2>&1
  done
  sleep 3
done
wait "$root"
