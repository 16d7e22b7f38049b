#!/usr/bin/env bash
# One device call for the GDN issue: build kverify, the GPU tests of the chunked GDN, the accuracy
# sweep against the fp64 oracle beside fla (bench/gdn_accuracy.py), the speed benchmark against fla
# (BENCH=1, bench/gdn.py), and `kverify check` of the op and of fla's op on examples/gdn (CHECK=1).
# Carry .whl (flash_linear_attention and fla_core wheels). Logs and JSON under $OUT.
source "$(dirname "$0")/device_common.sh"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit 1
install_kverify
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gdn_chunk.py 2>&1 | tail -4
if [ "${ACC:-1}" = 1 ]; then
  timeout "${ACC_S:-240}" python3 bench/gdn_accuracy.py ${ACC_ARGS:-} --json "$OUT/gdn_accuracy.json" > "$OUT/gdn_accuracy.txt" 2>&1
  echo "accuracy rc=$?"; grep -v "^  (" "$OUT/gdn_accuracy.txt" | awk '{print}' | tail -80
fi
if [ "${BENCH:-0}" = 1 ]; then
  timeout "${BENCH_S:-300}" python3 bench/gdn.py --reps "${REPS:-3}" ${BENCH_ARGS:-} --json "$OUT/gdn_bench.json" 2>&1 | tee "$OUT/gdn_bench.txt"
fi
if [ "${CHECK:-0}" = 1 ]; then
  for c in kverify_chunk fla_chunk; do
    timeout "${CHECK_S:-120}" python3 -m kverify check examples/gdn/reference.py examples/gdn/$c.py --device cuda \
      --json "$OUT/check_gdn_$c.json" > "$OUT/check_gdn_$c.txt" 2>&1
    echo "check $c rc=$?"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print(' ', g['gate'], g['verdict'], g['summary'][:150]) for g in r['gates']]" "$OUT/check_gdn_$c.json" 2>/dev/null || tail -5 "$OUT/check_gdn_$c.txt"
  done
fi
# the device tool returns at most 8 files: the check outputs travel as one archive
(cd "$OUT" && ls check_gdn_* > /dev/null 2>&1 && tar czf check_gdn.tgz check_gdn_* && rm -f check_gdn_*.txt check_gdn_*.json)
echo "total: $(( $(date +%s) - t0 )) s"
