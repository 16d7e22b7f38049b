#!/usr/bin/env bash
# One device call: build kverify, optionally re-run `kverify controls --device cuda` (CONTROLS=1)
# and the G05 evidence of one twin, then audit shards of the corpus until AUDIT_S seconds
# have passed (a killed audit keeps every finished kernel; the next call resumes it).
# Carry .deps and .corpus (accepted_kernels.jsonl). SHARD=i/n, or i/n,j/n,... : those shards by one
# `kverify audit --shard` (in that order, the next one's rows filling the GPUs while one's last rows
# end), each resuming its journal from results/audit/shards/ if there. Journals and audit.log under $OUT. On
# nvidia-h200-x2 the checks spread over both GPUs (kverify audit --gpus defaults to every GPU).
# GPUS=1,2,3 limits the checks to those GPUs (kverify audit --gpus; default every GPU).
# ROW_BUDGET=S bounds each row's calls (kverify audit --row-budget).
# IDS=ID[,ID...] (commas between ids) checks only those rows of the shards (kverify audit --id, once per id): e.g. the rows
# booked for a whole GPU, which on one GPU wait until no other row is left and so never start in a
# short call beside the others.
# REDO=ID[,ID...] checks those journalled rows again where that could change them (kverify audit
# --redo-if-needed: the log says which it leaves and why; an id journalled in none of SHARD's shards
# makes the audit refuse, exit 2). REDO_ELSEWHERE=NAME (e.g. "NVIDIA H200", as the report's "Judged on" names GPUs):
# every row of the shards (of IDS, if given) judged on another GPU than NAME (kverify audit
# --redo-elsewhere; refused on a call whose GPU is not NAME). REDO_STALE=1 every row
# judged by older rules (kverify audit --redo-stale). REDO_FILE=F: each shard's rows to check again from F's
# lines "i/n ID,ID,..." for it (or blanks between ids; results/audit/redo.txt; # comments), besides REDO,
# the same way (ids outside IDS, if given, left for another call).
# The audit log (progress, per-row failures) and a tail of it come back, and in logs.tgz the build
# and controls logs, CPU samples and the Python stacks of the checks still in flight when the time
# ran out (stacks.tgz: where slow rows spend their time).
# END=epoch seconds: when the call must be over (its start + 570 for the 600 s limit); the audit
# gets what is left of it after the install and controls, less 70 s for its own stop and the
# packing (AUDIT_S is then ignored). A call killed at its limit brings back only what is in $OUT
# then, and at most 8 files: the journals live there (with their -wal until the end checkpoints
# them), the other logs elsewhere until packed, so use at most 2 shards a call.
# (Stop 25: AUDIT_S computed before the controls ran overran the limit; two shards' work was lost.)
LOG_DIR=${LOG_DIR:-/tmp/kverify-logs}
[ "$LOG_DIR" = "${OUT:-out}" ] || rm -rf "$LOG_DIR"  # stale logs of an earlier call out (never $OUT itself)
source "$(dirname "$0")/device_common.sh"
[ -z "${END:-}" ] || [[ "$END" =~ ^[0-9]+$ ]] || { echo "END=$END: not a whole number of seconds since the epoch"; exit 2; }
# whatever ends the script (an early exit too), the logs come back packed
trap '[ "$LOG_DIR" = "$OUT" ] || tar czf "$OUT/logs.tgz" -C "$LOG_DIR" . 2>/dev/null' EXIT
[ -n "${SHARD:-}" ] || { echo "SHARD=i/n[,j/n...] is needed"; exit 2; }
[ -z "${REDO_FILE:-}" ] || [ -r "$REDO_FILE" ] || { echo "REDO_FILE=$REDO_FILE: not a readable file"; exit 2; }
[ -z "${REDO:-}" ] || [ -n "${REDO//[,[:space:]]/}" ] || { echo "REDO=$REDO names no id"; exit 2; }
# REDO_ELSEWHERE on a machine whose GPUs are named otherwise: stop before the install (kverify audit
# --redo-elsewhere refuses it too, by the GPUs it uses: GPUS)
if [ -n "${REDO_ELSEWHERE:-}" ] && [ -z "${GPUS:-}" ] && command -v nvidia-smi > /dev/null; then
  gpu_models=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null) \
    && gpu_models=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//; /^$/d' <<< "$gpu_models" | sort -u) || gpu_models=""
  [ -z "$gpu_models" ] || [ "$gpu_models" = "$REDO_ELSEWHERE" ] || {
    echo "REDO_ELSEWHERE=$REDO_ELSEWHERE: this machine's GPUs are ${gpu_models//$'\n'/, }: no audit"; exit 2; }
fi
[ "${SKIP_INSTALL:-0}" = 1 ] || install_kverify  # SKIP_INSTALL=1: an earlier step of the same call installed it
if [ "${CONTROLS:-0}" = 1 ]; then
  # CONTROLS_ONLY=g11 (say): only the controls whose name contains it
  python3 -m kverify controls --device cuda --jobs "${CONTROL_JOBS:-12}" ${CONTROLS_ONLY:+--only "$CONTROLS_ONLY"} \
    > "$LOG_DIR/controls_cuda.txt" 2>&1
  echo "controls rc=$?"; tail -6 "$LOG_DIR/controls_cuda.txt"
  [ -z "${CONTROLS_ONLY:-}" ] && for k in 1 2; do
    python3 -m kverify check controls/g09_cached_weight/reference.py controls/g09_cached_weight/twin.py \
      --device cuda --gates G05 --json "$LOG_DIR/g05_twin_$k.json" > /dev/null 2>&1
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); g=r['gates'][0]; print('G05 twin', g['verdict'], g['summary'][:300])" "$LOG_DIR/g05_twin_$k.json"
  done
fi
scripts/proc_sample.sh "${SAMPLE_S:-30}" > "$LOG_DIR/proc_samples.txt" 2>&1 &  # where the CPU goes
sampler=$!
# rows still in flight at the end write their Python stacks here (kverify.audit.STACK_ENV)
export KVERIFY_STACK_DIR=/tmp/kverify-stacks; rm -rf "$KVERIFY_STACK_DIR"; mkdir -p "$KVERIFY_STACK_DIR"
t_audit=$(date +%s)
: > "$OUT/audit.log"
# every shard's journal resumes from results/audit/shards/ if there; the rows to judge again are
# REDO's and each shard's lines of REDO_FILE (the fields after the shard, commas or blanks between
# ids; CR, BOM dropped; those outside IDS, if given, left for another call), passed to kverify audit
# --redo-if-needed, which judges again only those not judged by this kverify's rules yet or with a
# gate record that is a fault of kverify's or the GPU's (rows without a report, e.g. COMPILE_ERROR,
# always), names each other one in the log with why, and refuses (exit 2, before any row) an id
# journalled in none of the shards or outside IDS (naming the shard that holds it). Stopped here:
# a REDO that names no id, a named shard with no journal under a REDO option.
redo=${REDO:-}
file_ids=""  # REDO_FILE's ids for the named shards
journals=()  # the named shards' journals (only those: $OUT may hold others)
fresh=()  # named shards with no journal to resume: every row of theirs would be judged afresh
[ -z "${REDO_FILE:-}" ] || awk '{sub(/^\xef\xbb\xbf/, ""); sub(/\r$/, "")} !/^[ \t]*(#|$)/ && $1 !~ /^[0-9]+\/[0-9]+$/ {
    printf "REDO_FILE %s line %d: not \"i/n ID,ID,...\": ignored\n", FILENAME, NR}' "$REDO_FILE" | tee -a "$OUT/audit.log"
for shard in ${SHARD//,/ }; do
  J="$OUT/audit_shard_${shard//\//-of-}.sqlite"
  journals+=("$J")
  if [ -f "results/audit/shards/$(basename "$J")" ]; then
    cp "results/audit/shards/$(basename "$J")" "$J"
  elif [ -f "$J" ]; then
    echo "shard $shard: resuming $J (left by an earlier step of this call)" | tee -a "$OUT/audit.log"
  else
    fresh+=("$shard")
    echo "shard $shard: no journal at results/audit/shards/$(basename "$J"): every row of it is judged afresh" | tee -a "$OUT/audit.log"
  fi
  if [ -n "${REDO_FILE:-}" ]; then  # its ids, the fields after the shard (commas or blanks between them)
    line=$(awk -v s="$shard" '{sub(/^\xef\xbb\xbf/, ""); sub(/\r$/, "")} $1 == s {for (i = 2; i <= NF; i++) printf ",%s", $i}' "$REDO_FILE")
    [ -n "${line//,/}" ] || echo "REDO_FILE $REDO_FILE: no ids for shard $shard" | tee -a "$OUT/audit.log"
    file_ids="$file_ids$line"
  fi
done
if [ -n "${IDS:-}" ]; then  # REDO_FILE's rows outside IDS: for other calls (a REDO id outside IDS: the audit refuses)
  IFS=, read -ra listed <<< "$file_ids"
  file_ids=""
  for id in "${listed[@]}"; do
    [ -n "$id" ] || continue
    if [[ ",${IDS//[[:space:]]/}," == *",$id,"* ]]; then file_ids="$file_ids,$id"
    else echo "REDO_FILE: '$id': not in IDS: left for another call" | tee -a "$OUT/audit.log"; fi
  done
fi
redo=$(printf '%s' "$redo$file_ids" | tr -s ',[:space:]' ',' | sed 's/^,//; s/,$//')  # blanks and newlines too part ids
if [ "${#fresh[@]}" -gt 0 ] && [ -n "${REDO:-}${REDO_FILE:-}${REDO_ELSEWHERE:-}${REDO_STALE:-}" ]; then
  echo "SHARD names shards with no journal (${fresh[*]}) and a REDO option is set: no audit (copy their journals into results/audit/shards/, or name them without REDO*)" | tee -a "$OUT/audit.log"
  kill "$sampler" 2>/dev/null; exit 2
fi
if [ -n "${END:-}" ]; then
  left=$(( END - 70 - $(date +%s) ))
else
  left=$(( ${AUDIT_S:-300} - ($(date +%s) - t_audit) ))
fi
echo "=== shards $SHARD, $left s left${redo:+, judging again where needed: $redo}${REDO_ELSEWHERE:+, and every row${IDS:+ of IDS} judged elsewhere than $REDO_ELSEWHERE}" >> "$OUT/audit.log"
[ "$left" -ge 60 ] || { echo "only $left s left for the audit after the setup ($([ -n "${END:-}" ] && echo "END less 70 s" || echo "AUDIT_S")): no audit"; kill "$sampler" 2>/dev/null; exit 2; }
# one scheduler over all the shards, each row journalled in its shard's journal ({shard}): the next
# shard's rows keep the GPUs busy while one shard's last rows end. --time-limit: the audit starts
# nothing that cannot end in the time left and stops at it; the timeout is a backstop.
# --foreground: TERM goes to the audit alone (not its process group), which then has its checks
# write their stacks before it ends them
ids=()
IFS=, read -ra named_ids <<< "${IDS:-}"  # no word splitting or globbing of the ids
for id in "${named_ids[@]}"; do
  id="${id#"${id%%[![:space:]]*}"}"; id="${id%"${id##*[![:space:]]}"}"
  [ -z "$id" ] || ids+=(--id "$id")
done
timeout --foreground -k 30 -s TERM "$(( left + 20 ))" python3 -m kverify audit --time-limit "$left" .corpus/accepted_kernels.jsonl \
  --journal "$OUT/audit_shard_{shard}.sqlite" --shard "$SHARD" \
  --device cuda --jobs "${JOBS:-8}" --compile-jobs "${COMPILE_JOBS:-10}" --gpu-gib "${GPU_GIB:-8}" ${GPUS:+--gpus "$GPUS"} ${redo:+--redo-if-needed "$redo"} ${REDO_STALE:+--redo-stale} ${REDO_ELSEWHERE:+--redo-elsewhere "$REDO_ELSEWHERE"} ${ROW_BUDGET:+--row-budget "$ROW_BUDGET"} "${ids[@]}" >> "$OUT/audit.log" 2>&1
audit_rc=$?
echo "audit of shards $SHARD rc=$audit_rc after $(( $(date +%s) - t0 )) s"
[ "$audit_rc" != 2 ] || echo "(exit 2: the audit refused its arguments, or stopped on an error: its log says which; the journals as they are:)"
python3 - "${journals[@]}" <<'PY'  # (its connection, the last, checkpoints each WAL)
import os, sqlite3, statistics, sys
for path in filter(os.path.exists, sys.argv[1:]):  # a shard the audit did not begin has none
    db = sqlite3.connect(path)  # closing the last connection also checkpoints the WAL
    secs = [r[0] for r in db.execute("select seconds from kernels")]
    print(path.rsplit("/", 1)[-1], len(secs), "kernels:", dict(db.execute("select class, count(*) from kernels group by class").fetchall()),
          "median seconds per kernel", statistics.median(secs) if secs else "n/a")
    db.close()
PY
kill "$sampler" 2>/dev/null
tar czf "$LOG_DIR/stacks.tgz" -C "$KVERIFY_STACK_DIR" .  # the checks' stacks
python3 - "$OUT/audit.log" <<'PY'
import re, statistics, sys
text = open(sys.argv[1], errors="replace").read()
checks = [(float(a), float(b)) for a, b in re.findall(r"\[check (\d+)s, cpu (\d+)s", text)]
builds = [float(x) for x in re.findall(r"built \S+ +([\d.]+)s", text)]
if checks:
    print(f"checks journalled this call: {len(checks)}; median wall {statistics.median(c[0] for c in checks):.0f} s, "
          f"median CPU {statistics.median(c[1] for c in checks):.0f} s")
if builds:
    print(f"builds: {len(builds)}; median {statistics.median(builds):.0f} s")
print("out-of-memory deferrals:", text.count("out of GPU memory"), "(over the row's own cap:",
      str(text.count("over its own cap")) + ")")  # the rest: beside other checks, or alone
# the largest GPU memory a check's own process held against its booking (kverify.audit.check_cap_mib)
gpu = sorted((float(g) / float(n), rid, g, n) for rid, g in
             re.findall(r"^ *[\d.]+s [A-Z_]+ +[\d.]+s (\S+) .*\[check .*own GPU ([\d.]+) GiB", text, re.M)
             for n in re.findall(r"need (\d+) GiB " + re.escape(rid) + r"\b", text)[-1:] if float(n) > 0)
if gpu:
    print(f"GPU memory: highest own-process peak / booking {gpu[-1][0]:.1f} ({gpu[-1][1]}: {gpu[-1][2]} of "
          f"{gpu[-1][3]} GiB) of {len(gpu)}")
# the host-memory guard: its waits, and each check process's peak against what it expected of the
# row (kverify.audit.host_need_mib, from the sizes its build logged, rounded to 0.01 GiB; outputs
# of 0.00 as the inputs, as the audit takes uncounted ones): above 1, the estimate was too low
from kverify.audit import host_need_mib
sizes = {rid: [float(v) * 2**30 for v in m] for *m, rid in re.findall(
    r"inputs ([\d.]+) GiB params ([\d.]+) GiB outputs ([\d.]+) GiB need \d+ GiB (\S+)", text)}
peaks = re.findall(r"^ *[\d.]+s [A-Z_]+ +[\d.]+s (\S+) .*\[check .*, host ([\d.]+) GiB", text, re.M)
ratios = sorted((float(h) * 1024 / host_need_mib("check", i, p, o or i), rid)
                for rid, h in peaks if rid in sizes for i, p, o in [sizes[rid]])
print(f"host memory: {text.count('host memory:')} wait(s);",
      f"highest check peak / expected {ratios[-1][0]:.2f} ({ratios[-1][1]}) of {len(ratios)}" if ratios else "no peaks")
PY
tail -c 600 "$OUT/audit.log"
echo "total: $(( $(date +%s) - t0 )) s"
[ "$audit_rc" != 2 ] || exit 2  # the audit refused its arguments (its log says why)
