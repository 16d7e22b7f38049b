"""PyTorch's fp16 GEMMs with bias, the kind racecheck reported races in for audit row
cudal1/a100/L3/T43 on the H200 (stop 34: nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_bias_TNT,
from nn.Linear under autocast): the row's two projections (768 -> 2304, 768 -> 768) at a few row
counts, and an fp16 nn.Linear. No kernel of its own: every race racecheck reports here is in a
library's kernel. Run under racecheck by scripts/device_g11_probe.sh (GEMM_PROBE=1, GEMM_OPTS: the
options of each run, e.g. a kernel filter that leaves those kernels unchecked)."""
import torch

torch.manual_seed(0)
with torch.no_grad():
    for rows in (67, 512, 2048):
        x = torch.randn(rows, 768, device="cuda")
        for out in (2304, 768):
            fc = torch.nn.Linear(768, out).cuda()
            with torch.autocast("cuda", dtype=torch.float16):
                fc(x)
    fc = torch.nn.Linear(768, 768).half().cuda()
    fc(torch.randn(512, 768, device="cuda").half())
    torch.cuda.synchronize()
print("gemm probe done", flush=True)
