#!/usr/bin/env bash
# One device step: each corpus row of IDS (comma separated; carry .corpus) has its reference
# model (no candidate code) run by scripts/g11_cudnn_probe.py under compute-sanitizer racecheck
# with G11's options and environment and a --kernel-name filter that matches no kernel, with
# cuDNN on and off, all at once; per run: the exit status, the first tool error line and the
# summary. Logs in $OUT/g11_cudnn/. SKIP_INSTALL is not needed (no kverify import). FILES=a.py,b.py:
# KernelBench problem files (a control's reference.py) too.
source "$(dirname "$0")/device_common.sh"
dir=$OUT/g11_cudnn; mkdir -p "$dir"
cs=$(command -v compute-sanitizer)
IFS=, read -ra ids <<< "${IDS:-}"
IFS=, read -ra files <<< "${FILES:-}"
[ ${#ids[@]} -gt 0 ] || [ ${#files[@]} -gt 0 ] || { echo "IDS=row id[,...] or FILES=problem.py[,...]"; exit 2; }
for id in "${ids[@]}" "${files[@]}"; do
  src=(.corpus/accepted_kernels.jsonl "$id"); [[ "$id" == *.py ]] && src=("$id" -)
  for v in cudnn no-cudnn; do
    tag=$(echo "$id" | tr '/' '_')_$v
    flag=; [ "$v" = no-cudnn ] && flag=--no-cudnn
    ( PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "${PROBE_S:-150}" "$cs" --tool racecheck --print-limit 20 \
        --target-processes all --report-api-errors no --kernel-name kns=kverify_matches_no_kernel \
        python3 scripts/g11_cudnn_probe.py "${src[@]}" $flag > "$dir/$tag.log" 2>&1
      rc=$?
      echo "$id $v rc=$rc | $(grep -m1 -E '^========= (Internal|Error|Invalid|Race)' "$dir/$tag.log") | $(grep -m1 'reference ran' "$dir/$tag.log" | cut -c1-80) | $(grep -m1 'SUMMARY' "$dir/$tag.log")"
    ) &
  done
done
wait
echo "g11 cudnn probe: $(( $(date +%s) - t0 )) s"
