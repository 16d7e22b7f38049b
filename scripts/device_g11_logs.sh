#!/usr/bin/env bash
# One device step: G11 alone on corpus rows IDS (comma separated; carry .corpus), at once, with
# their sandboxes kept (KVERIFY_KEEP=1), so that the sanitizer workers' own logs come back whole
# in $OUT/g11_logs.tgz (a G11 record keeps only 200 characters of a tool's output), with each
# row's G11 line and compute-sanitizer's version and racecheck options. SKIP_INSTALL=1 when an
# earlier step installed kverify.
source "$(dirname "$0")/device_common.sh"
[ "${SKIP_INSTALL:-0}" = 1 ] || install_kverify
keep=/tmp/kverify-g11-logs; rm -rf "$keep"; mkdir -p "$keep"
{ compute-sanitizer --version | tail -2; compute-sanitizer --help | grep -i -A2 "racecheck"; } > "$OUT/sanitizer_help.txt" 2>&1
IFS=, read -ra ids <<< "${IDS:?IDS=row id[,row id...]}"
for id in "${ids[@]}"; do
  tag=$(echo "$id" | tr '/' '_')
  ( KVERIFY_KEEP=1 KVERIFY_WORKDIR_ROOT="$keep" timeout "${CHECK_S:-200}" python3 -m kverify check --corpus .corpus/accepted_kernels.jsonl \
      --id "$id" --device cuda --gates G11 --json "$keep/$tag.json" > "$keep/$tag.txt" 2>&1
    python3 - "$keep/$tag.json" "$id" <<'PY'
import json, sys
try:
    g = json.load(open(sys.argv[1]))["gates"][0]
except Exception as e:  # noqa: BLE001
    print(sys.argv[2], "no report:", e); sys.exit()
print(sys.argv[2], g["verdict"], g["summary"][:300])
PY
  ) &
done
wait
# the workers' logs (sanitizer output included) and the reports, without the candidates' builds
(cd "$keep" && { find . -path "*/G11-*/worker_*.log"; find . -maxdepth 1 \( -name "*.json" -o -name "*.txt" \); } \
   | tar czf "$OUT/g11_logs.tgz" -T -)
echo "sanitizer worker logs kept: $(tar tzf "$OUT/g11_logs.tgz" | grep -c worker_)"
echo "g11 logs: $(( $(date +%s) - t0 )) s"
