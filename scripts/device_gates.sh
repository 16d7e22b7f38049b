#!/usr/bin/env bash
# One device call for the twelve-gate issue: build, `kverify controls --device cuda`, and the
# twelve-gate check-time benchmark on level-1 corpus rows. Logs under $OUT. Carry .deps, .corpus.
source "$(dirname "$0")/device_common.sh"
export KVERIFY_CACHE=/tmp/kverify-cache
install_kverify; which compute-sanitizer
timeout "${CONTROLS_LIMIT:-420}" python3 -m kverify controls --device cuda --jobs "${JOBS:-8}" > "$OUT/controls_cuda.txt" 2>&1
echo "controls rc=$?"; tail -8 "$OUT/controls_cuda.txt"
if [ "${TIME_ROWS:-0}" -gt 0 ]; then
  python3 bench/check_time.py --corpus .corpus/level1_sel.jsonl --limit "$TIME_ROWS" --device cuda 2>&1 | tee "$OUT/check_time.txt"
fi
(cd /tmp && find . -path './kverify-*' -name '*.log' -size -2M | tar czf "$OUT/worker_logs.tgz" -T -) 2>/dev/null
echo "total: $(( $(date +%s) - t0 )) s"
