#!/usr/bin/env bash
# Samples what the machine is doing every ${1:-30} s until killed: load, GPU use, processes by
# command with their CPU share over the last 2 s and thread counts (top), zombies, host memory
# (and resident memory per command), disk use, into stdout.
# device_audit.sh runs it beside the audit (SAMPLE_S) to see where the CPU goes.
every=${1:-30}
while true; do
  echo "=== $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
  # second iteration of top: %CPU over the 2 s between them; per command: processes, summed %CPU
  top -b -d 2 -n 2 -w 400 -c | awk '/^top -/{n++} n==2 && $1 ~ /^[0-9]+$/ {c=$12; for(i=13;i<=NF && i<17;i++) c=c" "$i; cpu[c]+=$9; k[c]++} END {for (c in cpu) if (cpu[c] > 5) printf "%7.0f%% %3d  %s\n", cpu[c], k[c], substr(c,1,110)}' | sort -rn | head -25
  echo "threads: $(ps -eo nlwp= | awk '{s+=$1} END {print s}')  processes: $(ps -e --no-headers | wc -l)  zombies: $(ps -eo stat= | grep -c '^Z')"
  # host memory: two rows' check processes died by SIGKILL mid-check on the H200 (stop 25), cause
  # not seen (the kernel's OOM killer is one candidate)
  echo "memory: $(free -m | awk '/^Mem:/ {printf "used %.0f GiB, available %.0f GiB of %.0f GiB", $3/1024, $7/1024, $2/1024}')"
  # where it goes (stop 26: 106 GiB used by 6 checks and 6 builds, three checks SIGKILLed then):
  # resident GiB per command (first words; pages shared between processes count in each), the largest 10
  # (a kverify worker by its job, e.g. G05 or gates: its 4th word is its job folder)
  ps -eo rss=,args= | awk '{c=$2; for(i=3;i<=NF && i<6;i++) c=c" "$i; if ($4 == "kverify._internal.worker") {j=$5; sub(/.*\//, "", j); c=$2" "$3" "$4" "j}
    m[c]+=$1; k[c]++} END {for (c in m) if (m[c] > 262144) printf "  rss %6.1f GiB %3d  %s\n", m[c]/1048576, k[c], substr(c,1,100)}' | sort -k2 -rn | head -10
  # GPU memory per command, as the rss above (stop 28: the GPU full at 142 GB with 6 checks, whose
  # estimates said 8-20 GiB each; which processes hold it); a pid ps does not know (another PID
  # namespace) by its number
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | while IFS=', ' read -r pid mib; do
    c=$(ps -o args= -p "$pid" 2>/dev/null | awk '{c=$1; for(i=2;i<=NF && i<5;i++) c=c" "$i; if ($3 == "kverify._internal.worker") {j=$4; sub(/.*\//, "", j); c=$1" "$2" "$3" "j} print c}')
    echo "${mib} ${c:-pid $pid}"
  done | awk '{m=$1; $1=""; g[$0]+=m; k[$0]++} END {for (c in g) printf "  gpu %6.1f GiB %3d %s\n", g[c]/1024, k[c], substr(c,1,100)}' | sort -k2 -rn | head -10
  # disk: a full disk made compilers and workers fail (stop 21); where it goes: the audit's work
  # folders under /tmp, the build cache
  echo "disk: $(df -h --output=used,avail / | tail -1 | tr -s ' ')  tmp $(du -sh /tmp 2>/dev/null | cut -f1)  cache $(du -sh ~/.cache/kverify 2>/dev/null | cut -f1)"
  sleep "$every"
done
