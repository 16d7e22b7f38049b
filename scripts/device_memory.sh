#!/usr/bin/env bash
# One device call: the GPU memory a single `kverify check` takes, per process of the check (the
# audit's scheduler needs it: kverify.audit.check_need_mib). For each row id in IDS (comma-separated,
# rows of .corpus/accepted_kernels.jsonl; carry .deps and .corpus), runs the check alone on GPU 0
# while nvidia-smi samples every process's memory every 0.5 s and ps names the processes; prints
# the peak per process role (the worker's job folder: gates, gates-b, G05, standard, G11-..., or
# the check's own process) and the peak of the GPU's total. Logs under $OUT.
source "$(dirname "$0")/device_common.sh"
[ "${SKIP_INSTALL:-0}" = 1 ] || install_kverify
export CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID KVERIFY_EMPTY_CACHE=1 KVERIFY_CUDA_SCHEDULE=block
gpu0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
: "${gpu0:?cannot read GPU 0s uuid from nvidia-smi}"
IFS=, read -ra ids <<< "${IDS:?IDS=row id[,row id...]}"
for id in "${ids[@]}"; do
  tag=$(echo "$id" | tr '/' '_')
  # every GPU's processes are listed: the summary keeps GPU 0's (an audit may run on the others)
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits -lms 500 > "$OUT/apps_$tag.csv" 2>/dev/null &
  smi=$!
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 500 > "$OUT/total_$tag.csv" 2>/dev/null &
  tot=$!
  ( while true; do ps -eo pid=,args= | grep -E "kverify|python3" | grep -v grep; echo "--"; sleep 0.5; done ) > "$OUT/ps_$tag.txt" 2>/dev/null &
  psl=$!
  t=$(date +%s)
  timeout "${CHECK_S:-240}" python3 -m kverify check --corpus .corpus/accepted_kernels.jsonl --id "$id" --device cuda \
    --json "$OUT/report_$tag.json" > "$OUT/check_$tag.txt" 2>&1
  echo "$id: check rc=$? in $(( $(date +%s) - t )) s"
  kill "$smi" "$tot" "$psl" 2>/dev/null; wait 2>/dev/null
  python3 - "$OUT/apps_$tag.csv" "$OUT/ps_$tag.txt" "$OUT/total_$tag.csv" "$gpu0" <<'PY'
import collections, re, sys
names = {}
for line in open(sys.argv[2], errors="replace"):
    parts = line.strip().split(None, 1)
    if len(parts) == 2 and parts[0].isdigit():
        m = re.search(r"kverify-[^/ ]+/([\w.-]+)", parts[1])
        names[parts[0]] = m.group(1) if m else ("check" if "kverify check" in parts[1] else parts[1][:40])
peak = collections.defaultdict(int)
for line in open(sys.argv[1], errors="replace"):
    p = [x.strip() for x in line.split(",")]
    if len(p) != 3 or p[0] != sys.argv[4]:  # another GPU's process
        continue
    p = p[1:]
    if len(p) == 2 and p[0].isdigit() and p[1].isdigit():
        role = names.get(p[0], "pid " + p[0])
        peak[role] = max(peak[role], int(p[1]))
tot = [int(x) for x in open(sys.argv[3]).read().split() if x.isdigit()]
for role, mib in sorted(peak.items(), key=lambda x: -x[1]):
    print(f"  {role:28} peak {mib:7d} MiB")
print(f"  GPU total peak {max(tot) if tot else 0} MiB")
PY
done
echo "total: $(( $(date +%s) - t0 )) s"
