#!/usr/bin/env bash
# One device call for the engine issue: build with tests, CTest (gpu label included), pytest -m gpu,
# the comparator benchmark, and `kverify check` on corpus rows. Logs under $OUT.
# Needs .deps (nlohmann include + googletest sources) and .corpus carried.
source "$(dirname "$0")/device_common.sh"
export KVERIFY_CACHE=/tmp/kverify-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
install_kverify --config-settings=cmake.define.KVERIFY_BUILD_TESTS=ON
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  ctest --test-dir build/py --output-on-failure > "$OUT/ctest.log" 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|FAILED" "$OUT/ctest.log" | head
  python3 -m pytest -q -m gpu tests > "$OUT/pytest_gpu.log" 2>&1; echo "pytest -m gpu rc=$?"; tail -2 "$OUT/pytest_gpu.log"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 bench/compare.py 2>&1 | tee "$OUT/bench_compare.txt"
fi
if [ -n "${CORPUS_LIMIT:-}" ]; then
  python3 scripts/check_corpus.py --corpus .corpus/level1_sel.jsonl --jobs "${CORPUS_JOBS:-8}" --out /tmp/corpus \
    --device cuda --timeout 300 --limit "$CORPUS_LIMIT" 2>&1 | tee "$OUT/corpus_summary.txt"
  tar czf "$OUT/corpus.tgz" -C /tmp corpus
fi
echo "total: $(( $(date +%s) - t0 )) s"
