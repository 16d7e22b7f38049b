#!/usr/bin/env bash
# One device call for the compile benchmark (bench/compile.py): build kverify, then precompile
# LIMIT corpus candidates with stock load_inline and with kverify's build path, JOBS processes in
# all; then (CUH=1, default) bench/cu_headers.py on CUH_N sources. Carry .deps and .corpus
# (accepted_kernels.jsonl). WARM=N: kverify's pool first builds N other candidates, untimed
# (bench/compile.py --warm). HOSTPCH=1 adds bench/host_pch_local.py on HOSTPCH_SOURCES. Logs and
# JSON under $OUT.
source "$(dirname "$0")/device_common.sh"
install_kverify
echo "nproc $(nproc); $(c++ --version | head -1); $(nvcc --version | tail -1)"
# NARROW=1: kverify's builds try the opt-in narrow header first, checked (KVERIFY_NARROW_HEADERS=1)
KVERIFY_NARROW_HEADERS="${NARROW:-0}" timeout "${BENCH_LIMIT:-480}" python3 bench/compile.py --corpus .corpus/accepted_kernels.jsonl \
  --limit "${LIMIT:-12}" --jobs "${JOBS:-8}" --warm "${WARM:-0}" --json "$OUT/compile_bench.json" --deadline "$(( ${BENCH_LIMIT:-480} - 40 ))" 2>&1 | tee "$OUT/compile_bench.txt"
if [ "${CUH:-1}" = 1 ]; then  # the CUDA file alone: fast-build headers vs narrow header, cuobjdump -sass compared
  timeout "${CUH_LIMIT:-120}" python3 bench/cu_headers.py --corpus .corpus/accepted_kernels.jsonl \
    --limit "${CUH_N:-16}" --reps 1 --jobs "${JOBS:-8}" --source bench/narrow_controls/overload_var_std.cu \
    --source bench/narrow_controls/adl_c10_load.cu 2>&1 | tee "$OUT/cu_headers.txt"
fi
if [ "${HOSTPCH:-0}" = 1 ]; then  # the CUDA file alone: nvcc, kverify's nvcc, and with its precompiled host prefix
  CORPUS=.corpus/accepted_kernels.jsonl timeout "${HOSTPCH_LIMIT:-300}" python3 bench/host_pch_local.py \
    ${HOSTPCH_SOURCES:-0 1 2 3 4 5} 2>&1 | tee "$OUT/host_pch.txt"
fi
echo "total: $(( $(date +%s) - t0 )) s"
