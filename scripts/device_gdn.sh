#!/usr/bin/env bash
# One device call for the GDN issue: build kverify, the GPU tests of the chunked GDN, the speed
# benchmark against fla (BENCH=1, bench/gdn.py; alone on the GPU), then at once: the accuracy sweep
# against the fp64 oracle beside fla (ACC=1, bench/gdn_accuracy.py, one process per configuration
# because fla compiles and autotunes its Triton kernels per shape) and `kverify check` of the op and
# of fla's op on examples/gdn (CHECK=1, CHECK_CANDS="kverify_chunk fla_chunk" by default; CHECK_SPLIT=1 checks fla one gate per
# process (SPLIT_GATES, default G02..G12), all at once
# after a G01 check has filled Triton's caches, so a slow gate costs only itself).
# Everything ends by DEADLINE_S seconds after the start; GPU_TESTS=0 skips the pytest step.
# Carry .whl (flash_linear_attention and fla_core wheels). Logs and JSON under $OUT.
source "$(dirname "$0")/device_common.sh"
left() { echo $(( t0 + ${DEADLINE_S:-550} - $(date +%s) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit 1
install_kverify
if [ "${GPU_TESTS:-1}" = 1 ]; then
  python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gdn_chunk.py 2>&1 | tail -4
  echo "gpu tests done: $(( $(date +%s) - t0 )) s"
fi
if [ "${BENCH:-0}" = 1 ]; then
  timeout "${BENCH_S:-300}" python3 bench/gdn.py --reps "${REPS:-3}" ${BENCH_ARGS:-} --json "$OUT/gdn_bench.json" 2>&1 | tee "$OUT/gdn_bench.txt"
  echo "bench done: $(( $(date +%s) - t0 )) s"
fi
pids=()
check_gdn() {  # check_gdn CANDIDATE TAG [kverify check args...]
  local c=$1 tag=$2; shift 2
  timeout "$(left)" python3 -m kverify check examples/gdn/reference.py examples/gdn/$c.py --device cuda \
    --json "$OUT/check_gdn_$tag.json" "$@" > "$OUT/check_gdn_$tag.txt" 2>&1
}
if [ "${CHECK_SPLIT:-0}" = 1 ]; then
  check_gdn fla_chunk fla_chunk_G01 --gates G01 --timeout 300; echo "fla G01 (cache fill) done: $(( $(date +%s) - t0 )) s"
  for g in ${SPLIT_GATES:-G02 G03 G04 G05 G06 G07 G08 G09 G10 G11 G12}; do check_gdn fla_chunk fla_chunk_$g --gates $g --timeout 300 & pids+=($!); done
fi
if [ "${CHECK:-0}" = 1 ]; then
  for c in ${CHECK_CANDS:-kverify_chunk fla_chunk}; do check_gdn $c $c & pids+=($!); done
fi
if [ "${ACC:-1}" = 1 ]; then
  python3 bench/gdn_accuracy.py --jobs "${ACC_JOBS:-9}" --timeout "$(( $(left) - 10 ))" ${ACC_ARGS:-} \
    --json "$OUT/gdn_accuracy.json" > "$OUT/gdn_accuracy.txt" 2>&1
  echo "accuracy rc=$?"; cat "$OUT/gdn_accuracy.txt" | tail -90
fi
for p in "${pids[@]}"; do wait "$p"; done
for f in "$OUT"/check_gdn_*.txt; do
  [ -f "$f" ] || continue
  echo "check ${f##*/check_gdn_}:"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' class', r['class'], '| standard', r['standard']['verdict']); [print(' ', g['gate'], g['verdict'], g['summary'][:150]) for g in r['gates']]" "${f%.txt}.json" 2>/dev/null || { echo "  no report (timed out or failed):"; tail -3 "$f"; }
done
# the device tool returns at most 8 files: the check outputs travel as one archive
(cd "$OUT" && ls check_gdn_* > /dev/null 2>&1 && tar czf check_gdn.tgz check_gdn_* && rm -f check_gdn_*.txt check_gdn_*.json)
echo "total: $(( $(date +%s) - t0 )) s"
