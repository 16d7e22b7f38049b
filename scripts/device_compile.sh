#!/usr/bin/env bash
# One device call for the compile benchmark (bench/compile.py): build kverify, then precompile
# LIMIT corpus candidates with stock load_inline and with kverify's build path, JOBS processes in
# all; then (CUH=1, default) bench/cu_headers.py on CUH_N sources. Carry .deps and .corpus
# (accepted_kernels.jsonl). WARM=N: kverify's pool first builds N other candidates, untimed
# (bench/compile.py --warm). TOOLENV=1: see below. HOSTPCH=1 adds bench/host_pch_local.py on HOSTPCH_SOURCES. Logs and
# JSON under $OUT.
source "$(dirname "$0")/device_common.sh"
install_kverify
echo "nproc $(nproc); $(c++ --version | head -1); $(nvcc --version | tail -1)"
# TOOLENV=1: first, on the idle machine, nvcc's tools with and without glibc's huge-page malloc
# (bench/tool_env.py, TOOLENV_REPS runs per mode on each of TOOLENV_SOURCES; TOOLENV_ARGS=--whole:
# kverify's nvcc on the whole file, KVERIFY_THP=0 against its default; defaults: TOOLENV_REPS=2,
# TOOLENV_SOURCES="0 1", TOOLENV_LIMIT=300 s). TOOLENV_ONLY=1 (with TOOLENV=1): nothing else, and the
# call's status is the script's.
toolenv_rc=0
if [ "${TOOLENV:-0}" = 1 ]; then
  CORPUS=.corpus/accepted_kernels.jsonl timeout "${TOOLENV_LIMIT:-300}" python3 bench/tool_env.py \
    --reps "${TOOLENV_REPS:-2}" ${TOOLENV_ARGS:-} ${TOOLENV_SOURCES:-0 1} 2>&1 | tee "$OUT/tool_env.txt"
  toolenv_rc=${PIPESTATUS[0]}  # the script's own status (1: an output differed), not tee's
  echo "bench/tool_env.py: exit $toolenv_rc"
fi
[ "${TOOLENV_ONLY:-0}" = 1 ] && { echo "total: $(( $(date +%s) - t0 )) s"; exit "$toolenv_rc"; }
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
