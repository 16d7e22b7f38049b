"""Where the time of a compute-sanitizer run goes: PyTorch work a G11 worker does (CUDA init,
randn, a cuBLAS matmul, a cuDNN convolution, many small allocations) with the time each phase
ends, in seconds since start, flushed line by line (a run killed at its timeout still shows how
far it got). Run it plain and under each tool (scripts/device_g11_probe.sh) with G11's
environment (PYTORCH_NO_CUDA_MEMORY_CACHING=1) to compare."""
import time

t0 = time.monotonic()


def mark(what: str) -> None:
    print(f"{time.monotonic() - t0:8.2f} s  {what}", flush=True)


import torch  # noqa: E402

mark("import torch")
torch.zeros(1, device="cuda")
mark("CUDA context")
x = torch.randn(1 << 20, device="cuda")
torch.cuda.synchronize()
mark("randn 1M")
a = torch.randn(512, 512, device="cuda")
b = a @ a
torch.cuda.synchronize()
mark("matmul 512^3 (cuBLAS)")
conv = torch.nn.Conv2d(64, 64, 3).cuda()
y = conv(torch.randn(16, 64, 32, 32, device="cuda"))
torch.cuda.synchronize()
mark("conv2d 16x64x32x32 first (cuDNN)")
y = conv(torch.randn(16, 64, 32, 32, device="cuda"))
torch.cuda.synchronize()
mark("conv2d again")
for _ in range(200):
    torch.empty(1000, device="cuda").fill_(1.0)
torch.cuda.synchronize()
mark("200 x (alloc 4 KB, fill, free)")
free, total = torch.cuda.mem_get_info()
mark(f"GPU memory used by all processes: {(total - free) / 2**30:.1f} GiB")
