"""Speed of the chunked GDN: kverify's native kernels against fla's Triton kernels, same inputs,
same run, forward and backward medians from CUDA events, and the ratio fla/ours (> 1: ours faster).

Shapes (issue 5): B1 T32768 H16 HV32, B8 T4096 H16 HV16, B1 T32768 H16 HV16; K = V = 128;
q, k, v, beta in bf16, g float32; no initial state. Backward = torch.autograd.grad of o with
respect to q, k, v, g, beta (retain_graph, no .grad accumulation). fla's Triton<3.7.1-on-Hopper
guard on the gated backward is bypassed (its accuracy there: bench/gdn_accuracy.py).

    python bench/gdn.py [--reps 5] [--json out/gdn_bench.json] [--only 0,2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from kverify.gdn import chunk_gated_delta_rule

SHAPES = [dict(B=1, T=32768, H=16, HV=32), dict(B=8, T=4096, H=16, HV=16), dict(B=1, T=32768, H=16, HV=16)]


def make(s: dict, K=128, V=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    B, T, H, HV = s["B"], s["T"], s["H"], s["HV"]
    r = lambda *sh: torch.randn(*sh, generator=g, device="cuda")  # noqa: E731
    q = r(B, T, H, K).bfloat16()
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1).bfloat16()
    v = r(B, T, HV, V).bfloat16()
    gate = torch.nn.functional.logsigmoid(r(B, T, HV)) / 16
    beta = torch.rand(B, T, HV, generator=g, device="cuda").bfloat16()
    return [t.requires_grad_() for t in (q, k, v, gate, beta)]


def timed(fn, reps: int, warmup: int = 1) -> float:
    """Median milliseconds of fn() over reps, CUDA events around each call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure(op, xs, reps: int) -> tuple[float, float]:
    def fwd():
        return op(*xs, output_final_state=False)[0]
    f_ms = timed(fwd, reps)
    o = fwd()
    do = torch.randn_like(o)
    b_ms = timed(lambda: torch.autograd.grad(o, xs, do, retain_graph=True), reps)
    return f_ms, b_ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated shape indices")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/gdn.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla
    import fla.ops.common.chunk_o as chunk_o
    chunk_o.TRITON_ABOVE_3_7_1 = True  # bypass fla's Hopper/Triton<3.7.1 guard (see docstring)
    idx = range(len(SHAPES)) if a.only is None else [int(i) for i in a.only.split(",")]
    rows = []
    print(f"{'shape':26s} {'fla fwd':>9s} {'ours fwd':>9s} {'ratio':>6s} {'fla bwd':>9s} {'ours bwd':>9s} {'ratio':>6s}  (ms)")
    for i in idx:
        s = SHAPES[i]
        xs = make(s)
        ff, fb = measure(fla, xs, a.reps)
        of, ob = measure(chunk_gated_delta_rule, xs, a.reps)
        name = f"B{s['B']} T{s['T']} H{s['H']} HV{s['HV']}"
        rows.append(dict(shape=name, fla_fwd_ms=ff, ours_fwd_ms=of, fla_bwd_ms=fb, ours_bwd_ms=ob,
                         fwd_ratio=ff / of, bwd_ratio=fb / ob))
        print(f"{name:26s} {ff:9.2f} {of:9.2f} {ff / of:6.3f} {fb:9.2f} {ob:9.2f} {fb / ob:6.3f}", flush=True)
        del xs
        torch.cuda.empty_cache()
    print("ratio = fla ms / ours ms (above 1: ours faster); baseline: fla chunk_gated_delta_rule (Triton)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
