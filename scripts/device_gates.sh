#!/usr/bin/env bash
# One device call for the twelve-gate issue: build, `kverify controls --device cuda` (CONTROLS=0
# skips it), G11_PROBE=1: memcheck on the out-of-bounds-read control with and without the caching
# allocator and its G11 check (defect and twin), TIME_ROWS=N: the twelve-gate check-time benchmark
# on N level-1 corpus rows. Logs under $OUT. Carry .deps, .corpus.
source "$(dirname "$0")/device_common.sh"
export KVERIFY_CACHE=/tmp/kverify-cache
install_kverify; which compute-sanitizer
if [ "${CONTROLS:-1}" = 1 ]; then
  timeout "${CONTROLS_LIMIT:-420}" python3 -m kverify controls --device cuda --jobs "${JOBS:-8}" > "$OUT/controls_cuda.txt" 2>&1
  echo "controls rc=$?"; tail -8 "$OUT/controls_cuda.txt"
fi
if [ "${G11_PROBE:-0}" = 1 ]; then
  c=controls/cuda/g11_oob_tail_read_cuda
  cat > /tmp/g11_probe.py <<'PY'
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("cand", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
x = torch.randn(9, 2053, device="cuda"); y = m.ModelNew()(x); torch.cuda.synchronize()
print("max err", (y - x.relu()).abs().max().item())
PY
  python3 /tmp/g11_probe.py $c/defect.py > /dev/null 2>&1  # build once, outside the sanitizer
  for cache in 0 1; do for pad in 0 512; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=$cache compute-sanitizer --tool memcheck --padding $pad --print-limit 3 \
      python3 /tmp/g11_probe.py $c/defect.py > "$OUT/g11_probe_nocache${cache}_pad${pad}.txt" 2>&1
    echo "memcheck NO_CACHING=$cache padding=$pad: $(grep -c 'Invalid __global__ read' "$OUT/g11_probe_nocache${cache}_pad${pad}.txt") invalid reads; $(grep 'ERROR SUMMARY' "$OUT/g11_probe_nocache${cache}_pad${pad}.txt")"
  done; done
  for f in defect twin; do
    python3 -m kverify check $c/reference.py $c/$f.py --device cuda --gates G11 --json "$OUT/g11_$f.json" > "$OUT/g11_$f.txt" 2>&1
    echo "G11 check $f rc=$?"; grep -E "G11" "$OUT/g11_$f.txt" | cut -c1-220
  done
  # the device tool returns a limited number of files: one archive for the probe's
  (cd "$OUT" && tar czf g11_probe.tgz g11_* && rm -f g11_probe_*.txt g11_defect.* g11_twin.*)
fi
if [ "${TIME_ROWS:-0}" -gt 0 ]; then
  timeout "${TIME_S:-300}" python3 bench/check_time.py --corpus .corpus/level1_sel.jsonl --limit "$TIME_ROWS" --device cuda --serial-baseline 2>&1 | tee "$OUT/check_time.txt"
fi
(cd /tmp && find . -path './kverify-*' -name '*.log' -size -2M | tar czf "$OUT/worker_logs.tgz" -T -) 2>/dev/null
echo "total: $(( $(date +%s) - t0 )) s"
