#!/usr/bin/env bash
# One device call for the comparator (issue 2): build with tests, the CUDA CTest (label gpu), the
# benchmark against the PyTorch way, then bench/profile_compare.sh (ncu + opcode mix of the
# fp32/bf16 kernels). Needs .deps carried. Back under $OUT: build.log, ctest_gpu.log,
# bench_compare.txt, profile.tgz (ncu text, opcode mixes, the SASS of the bf16 kernel); PYTEST_GPU=1
# adds `pytest -m gpu tests` (pytest_gpu.log); BENCH_ARGS are passed to bench/compare.py (say --prefetch 0,2).
source "$(dirname "$0")/device_common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
install_kverify --config-settings=cmake.define.KVERIFY_BUILD_TESTS=ON
ctest --test-dir build/py -L gpu --output-on-failure > "$OUT/ctest_gpu.log" 2>&1; echo "ctest -L gpu rc=$?"
grep -E "tests passed|tests failed|Failed|FAILED" "$OUT/ctest_gpu.log" | head
python3 bench/compare.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_compare.txt"
if [ "${PYTEST_GPU:-0}" = 1 ]; then  # PYTEST_GPU=1: the pytest GPU tests too (pytest_gpu.log)
  python3 -m pytest -m gpu tests -q -p no:cacheprovider > "$OUT/pytest_gpu.log" 2>&1; echo "pytest -m gpu rc=$?"
  tail -4 "$OUT/pytest_gpu.log"
fi
mkdir -p /tmp/prof
OUT=/tmp/prof bash bench/profile_compare.sh
awk '$0 ~ "Function : " {f = index($0, "compare_kernelILNS_5DTypeE3ELS3_3E") > 0} f' /tmp/prof/core.sass > /tmp/prof/bf16_kernel.sass
rm -f /tmp/prof/core.sass
tar czf "$OUT/profile.tgz" -C /tmp prof
echo "total: $(( $(date +%s) - t0 )) s"
