#!/usr/bin/env bash
# One device call: what G11's sanitizer runs cost. scripts/g11_probe.py plain and under each
# compute-sanitizer tool (G11's options and environment), one at a time on an idle GPU; then G11
# alone on the racecheck control (per-tool errors and seconds) and on ROWS (corpus ids, comma
# separated; carry .corpus). SKIP_INSTALL=1 when an earlier step installed kverify.
# PROBE_TOOLS="racecheck" (say) probes those tools only ("" none); CONTROL=controls/cuda/DIR another
# control pair (none: no G11 check at all); GEMM_PROBE=1 runs racecheck on scripts/g11_gemm_probe.py
# (PyTorch's fp16 GEMMs) once per option set of GEMM_OPTS (";" between sets; an empty set, the
# default, checks every kernel). Stop 36: GEMM_OPTS=";--kernel-name-exclude kns=nvjet_;--kernel-name kns=zzzz"
# (results/audit/logs/h200_stop36/g11_gemm_probe.txt).
source "$(dirname "$0")/device_common.sh"
TOP=$OUT; OUT=$OUT/g11; mkdir -p "$OUT"  # many small files: one archive comes back
# packed however the script ends (a `timeout` around it too: TERM exits through the EXIT trap)
trap 'tar czf "$TOP/g11_probe.tgz" -C "$TOP" g11 && rm -rf "$OUT"' EXIT
trap 'exit 143' TERM
[ "${SKIP_INSTALL:-0}" = 1 ] || install_kverify
cs=$(command -v compute-sanitizer)
for tool in ${PROBE_TOOLS-none memcheck initcheck racecheck synccheck}; do
  echo "== $tool"
  wrap=(); [ "$tool" = none ] || wrap=("$cs" --tool "$tool" --print-limit 20 --target-processes all --report-api-errors no)
  s=$(date +%s.%N)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${PROBE_S:-120}" "${wrap[@]}" python3 scripts/g11_probe.py 2>&1 | grep -v "^========= *$" | tail -12
  echo "   total $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$s") s"
done
if [ "${GEMM_PROBE:-0}" = 1 ]; then
  IFS=';' read -ra sets <<< "${GEMM_OPTS:-}"
  [ "${#sets[@]}" -gt 0 ] || sets=("")
  for set in "${sets[@]}"; do
    read -ra opts <<< "$set"
    scope=$(printf '%s' "${set:-every}" | tr -c 'A-Za-z0-9_=-' _ | cut -c1-60)
    s=$(date +%s)
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${PROBE_S:-120}" "$cs" --tool racecheck --print-limit 20 \
      --target-processes all --report-api-errors no "${opts[@]}" python3 scripts/g11_gemm_probe.py > "$OUT/gemm_$scope.txt" 2>&1
    echo "gemm racecheck, $scope: rc=$? $(( $(date +%s) - s )) s, $(grep -c 'Race reported' "$OUT/gemm_$scope.txt") race lines;" \
      "$(grep -o 'RACECHECK SUMMARY.*' "$OUT/gemm_$scope.txt" | tail -1)"
    grep -m2 'Race reported\|rror' "$OUT/gemm_$scope.txt" | cut -c1-200
  done
fi
[ "${CONTROL:-}" = none ] && exit 0
g11() {  # g11 NAME ARGS...: G11 alone, per-tool line
  local name=$1; shift
  s=$(date +%s)
  python3 -m kverify check "$@" --device cuda --gates G11 --json "$OUT/g11_$name.json" > "$OUT/g11_$name.txt" 2>&1
  python3 - "$OUT/g11_$name.json" "$name" "$(( $(date +%s) - s ))" <<'PY'
import json, sys
try:
    g = json.load(open(sys.argv[1]))["gates"][0]
except Exception as e:  # noqa: BLE001
    print(sys.argv[2], "no report:", e); sys.exit()
print(f"{sys.argv[2]}: {g['verdict']} in {sys.argv[3]} s  {g['summary'][:200]}")
for t in g.get("evidence", {}).get("sanitizer", {}).get("tools", []):
    print(f"   {t['tool']:<10} errors {t.get('errors', '-')!s:>6}  {t.get('seconds', '-')!s:>6} s  "
          f"{t.get('not_applicable') or t.get('unfinished') or t.get('first', '')[:110]}")
PY
}
c=${CONTROL:-controls/cuda/g11_missing_syncthreads_cuda}
export KVERIFY_SANITIZER_TIMEOUT=${SANITIZER_S:-150}
g11 race_defect "$c/reference.py" "$c/defect.py" > "$OUT/race_defect.sum" &
g11 race_twin "$c/reference.py" "$c/twin.py" > "$OUT/race_twin.sum" &
IFS=, read -ra rows <<< "${ROWS:-}"  # all at once: per-tool seconds are under each other's load
for r in "${rows[@]}"; do g11 "$(echo "$r" | tr '/' '_')" --corpus .corpus/accepted_kernels.jsonl --id "$r" > "$OUT/row_$(echo "$r" | tr '/' '_').sum" & done
wait; cat "$OUT"/race_*.sum; cat "$OUT"/row_*.sum 2>/dev/null
echo "probe total: $(( $(date +%s) - t0 )) s"
