"""Benchmark: the fused comparator against the plain PyTorch way, on the GPU.

Claim (issue "engine"): on a 2 GiB fp32 pair and a 2 GiB bf16 pair (each tensor 2 GiB), the core
comparator reaches >= 3 TB/s effective bandwidth (bytes of both inputs / time), is >= 3x faster
than the PyTorch way, and needs O(1) extra device memory.

The PyTorch way (baseline, same run, same tensors): torch.allclose(c, o, atol, rtol) +
torch.equal of isnan / isposinf / isneginf masks + torch.linalg.vector_norm(c - o) / ||o||.

A third row times ours on its slowest input (fp32, an absolute error growing along the tensor:
every 8-element chunk may hold a new maximum, so each takes the exact second pass).

Timing: CUDA events, median of REPEAT runs after WARMUP (METHOD.md); inputs are far larger than
the 60 MB L2, so every run streams from HBM. Extra memory: torch.cuda.max_memory_allocated above
the inputs, plus for ours the fixed workspace it takes with cudaMallocAsync (reported by the core).

Usage: python bench/compare.py [--gib 2] [--repeat 20] [--prefetch 0,2,4,8]
"""
from __future__ import annotations

import argparse
import os
import statistics

import torch

from kverify import _core, engine
from kverify.engine import Dist


def torch_way(c, o, atol, rtol):
    ok = torch.allclose(c, o, atol=atol, rtol=rtol)
    nan = torch.equal(torch.isnan(c), torch.isnan(o))
    pinf = torch.equal(torch.isposinf(c), torch.isposinf(o))
    ninf = torch.equal(torch.isneginf(c), torch.isneginf(o))
    rel = (torch.linalg.vector_norm((c - o).float()) / torch.linalg.vector_norm(o.float())).item()
    return ok, nan, pinf, ninf, rel


def ours(c, o, atol, rtol):
    return engine.compare(c, o, atol, rtol)


def timed(fn, *args, warmup=3, repeat=20):
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def peak_extra(fn, *args):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(*args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2.0, help="size of EACH tensor of the pair")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--prefetch", default="",
                    help="comma-separated L2 prefetch distances to time ours at (KVERIFY_COMPARE_PREFETCH; "
                         "0 = off); default: the core's default only")
    a = ap.parse_args()
    distances = [int(x) for x in a.prefetch.split(",") if x.strip()] or [None]
    rows = []
    for dtype, worst in ((torch.float32, False), (torch.bfloat16, False), (torch.float32, True)):
        n = int(a.gib * 2**30) // torch.tensor([], dtype=dtype).element_size()
        o = engine.fill(torch.empty(n, dtype=dtype, device="cuda"), 1, Dist("normal", 0, 1, 1e-6, ("nan", "+inf", "-inf")))
        if worst:
            # the comparator's slowest input: an absolute error that grows along the tensor, so
            # every chunk may hold a new maximum and takes the second, exact pass
            c = torch.arange(n, dtype=dtype, device="cuda").mul_(1e-3 / n).add_(o)
        else:
            # a candidate that differs from the oracle in most elements by a few ulps (realistic:
            # no bitwise-equal shortcut can help), plus a perturbed head so some elements fail
            # the bound
            c = engine.fill(torch.empty(n, dtype=dtype, device="cuda"), 3, Dist("uniform", -4, 4))
            c.mul_(torch.finfo(dtype).eps).add_(1).mul_(o)
            engine.fill(c[: n // 1000], 2, Dist("normal", 0, 1))
        changed = (c != o).float().mean().item()
        atol = rtol = 1e-2
        # both must agree on what they measure before timing
        s = ours(c, o, atol, rtol)
        t = torch_way(c, o, atol, rtol)
        assert (s["nan_mismatch"] == 0) == t[1] and (s["posinf_mismatch"] == 0) == t[2], (s, t)
        t_torch = timed(torch_way, c, o, atol, rtol, repeat=a.repeat)
        bytes_in = 2 * n * c.element_size()
        print(f"{dtype}: {changed:.1%} of elements differ from the oracle", flush=True)
        for dist in distances:
            if dist is not None:
                os.environ["KVERIFY_COMPARE_PREFETCH"] = str(dist)
                assert ours(c, o, atol, rtol) == s, "the prefetch distance changed the result"
            t_ours = timed(ours, c, o, atol, rtol, repeat=a.repeat)
            name = str(dtype).replace("torch.", "") + (" worst" if worst else "") + (f" pf{dist}" if dist is not None else "")
            rows.append((name, n, t_ours, t_torch, bytes_in,
                         peak_extra(ours, c, o, atol, rtol) + _core.compare_workspace_bytes(n),
                         peak_extra(torch_way, c, o, atol, rtol)))
        os.environ.pop("KVERIFY_COMPARE_PREFETCH", None)
        del o, c
        torch.cuda.empty_cache()
    print(f"device: {torch.cuda.get_device_name()}  (each tensor {a.gib:g} GiB; median of {a.repeat})")
    print(f"{'dtype':15} {'elements':>12} {'ours ms':>9} {'torch ms':>9} {'ours TB/s':>10} {'torch TB/s':>11} "
          f"{'ratio':>6} {'ours extra':>11} {'torch extra':>12}")
    ratios = []
    for name, n, to, tt, b, mo, mt in rows:
        ratios.append(tt / to)
        print(f"{name:15} {n:12d} {to*1e3:9.3f} {tt*1e3:9.3f} {b/to/1e12:10.2f} {b/tt/1e12:11.2f} {tt/to:6.2f}x "
              f"{mo/2**10:9.1f}KiB {mt/2**30:10.2f}GiB")
    print(f"geometric mean ratio: {statistics.geometric_mean(ratios):.2f}x (worst-case row included)")


if __name__ == "__main__":
    main()
