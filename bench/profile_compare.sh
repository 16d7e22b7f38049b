#!/usr/bin/env bash
# Profile the comparator kernel (device machine): SASS instruction mix of the fp32/bf16 kernels and
# an ncu run on a 256 MiB pair. Writes under $OUT. Run after building (pip install .).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
so=$(python3 -c "import kverify._core as c; print(c.__file__)")
cuobjdump -sass "$so" > "$OUT/core.sass" 2>&1 || true
for t in 1 3; do  # DType::F32 = 1, DType::BF16 = 3
  awk -v pat="compare_kernelILNS_5DTypeE${t}ELS3_${t}E" '$0 ~ "Function : " {f = index($0, pat) > 0} f' "$OUT/core.sass" \
    | grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[^;]*' | sed -E 's/^\s+\/\*[0-9a-f]+\*\/\s+//; s/^@!?U?P[0-9T] //' \
    | awk '{print $1}' | sort | uniq -c | sort -rn | head -25 > "$OUT/mix_$t.txt"
  echo "== dtype $t: $(awk '{s+=$1} END {print s}' "$OUT/mix_$t.txt") instructions (top 25 opcodes)"; head -12 "$OUT/mix_$t.txt"
done
cat > /tmp/prof.py <<'PY'
import torch
from kverify import engine
from kverify.engine import Dist
for dt in (torch.float32, torch.bfloat16):
    n = (256 << 20) // torch.tensor([], dtype=dt).element_size()
    o = engine.fill(torch.empty(n, dtype=dt, device="cuda"), 1, Dist("normal", 0, 1))
    c = engine.fill(torch.empty(n, dtype=dt, device="cuda"), 3, Dist("uniform", -4, 4)).mul_(torch.finfo(dt).eps).add_(1).mul_(o)
    engine.compare(c, o, 1e-2, 1e-2)
PY
ncu --clock-control none -k regex:compare_kernel --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section LaunchStats --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  python3 /tmp/prof.py > "$OUT/ncu.txt" 2>&1
grep -E "compare_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|Stall|Warp Cycles Per Issued|Block Limit|pipeline|Active Threads Per Warp" "$OUT/ncu.txt" | head -60
