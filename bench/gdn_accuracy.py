"""Accuracy sweep of the chunked GDN against the fp64 oracle, ours beside fla's.

For each configuration, the same inputs (q, k, v, do in --dtype; g float32 log decay; beta in
--dtype; h0, dht float32) go to kverify.gdn.chunk_gated_delta_rule, to fla's
chunk_gated_delta_rule (when importable; its Triton<3.7.1-on-Hopper guard bypassed, see --no-bypass)
and, upcast, to the fp64 oracle. Printed per configuration and tensor: relative L2 error
‖x − x_oracle‖ / ‖x_oracle‖ of ours and of fla, and whether ours is bitwise identical over two
runs. Results also go to --json (rewritten after each configuration, and after ours before fla
runs, so a run killed by a timeout keeps what it measured).

fla compiles and autotunes its Triton kernels on first use of each shape, one process at a time:
`--jobs N` runs the configurations in N child processes (this script with --only) and merges
them; `--timeout S` then bounds the whole sweep, and a configuration still running is reported
as not finished with what it had measured.

    python bench/gdn_accuracy.py --json out/gdn_accuracy.json [--quick] [--jobs 9 --timeout 300]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from kverify.gdn import chunk_gated_delta_rule, oracle_backward, oracle_forward

TENSORS = ("o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0")


def configs(quick: bool) -> list[dict]:
    base = dict(B=1, H=2, HV=4, K=128, V=128, gmin=-0.5, h0=True, l2=False, cu=None)
    rows = [dict(base, name="T1", T=1),
            dict(base, name="T63_l2_noh0", T=63, l2=True, h0=False),
            dict(base, name="T64_l2", T=64, l2=True),
            dict(base, name="T65_noh0", T=65, h0=False),
            dict(base, name="T1000_l2", T=1000, l2=True),
            dict(base, name="T4096", T=4096),
            dict(base, name="varlen_ragged", T=1000, cu=[0, 1, 100, 100, 163, 1000], l2=True),
            dict(base, name="strong_decay_g-20", T=1000, gmin=-20.0),
            dict(base, name="fla_ref_B2T512H4HV8", B=2, T=512, H=4, HV=8)]
    return rows[:4] if quick else rows


def inputs(c: dict, dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    B, T, H, HV, K, V = c["B"], c["T"], c["H"], c["HV"], c["K"], c["V"]
    N = B if c["cu"] is None else len(c["cu"]) - 1
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    k = r(B, T, H, K)
    if not c["l2"]:
        k = torch.nn.functional.normalize(k, dim=-1)  # the delta rule's stable regime
    x = dict(q=r(B, T, H, K).to(dtype), k=k.to(dtype), v=r(B, T, HV, V).to(dtype),
             g=c["gmin"] * torch.rand(B, T, HV, generator=gen), beta=torch.rand(B, T, HV, generator=gen).to(dtype),
             h0=r(N, HV, K, V) if c["h0"] else None)
    return x, r(B, T, HV, V).to(dtype), r(N, HV, K, V)


def run(op, x: dict, do, dht, c: dict, device: str):
    leaves = {n: (None if t is None else t.to(device).requires_grad_()) for n, t in x.items()}
    cu = None if c["cu"] is None else torch.tensor(c["cu"], dtype=torch.int64, device=device)
    o, ht = op(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"], scale=c["K"] ** -0.5,
               initial_state=leaves["h0"], output_final_state=True, use_qk_l2norm_in_kernel=c["l2"], cu_seqlens=cu)
    names = [n for n in ("q", "k", "v", "g", "beta", "h0") if leaves[n] is not None]
    grads = torch.autograd.grad((o.float() * do.to(device).float()).sum() + (ht.float() * dht.to(device)).sum(),
                                [leaves[n] for n in names])
    out = {"o": o, "ht": ht, **{("d" + n if n != "h0" else "dh0"): gr for n, gr in zip(names, grads)}}
    torch.cuda.synchronize() if device == "cuda" else None
    return {n: t.detach() for n, t in out.items()}


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def fla_op(bypass: bool):
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla
    except Exception as e:  # noqa: BLE001
        print(f"fla not importable ({type(e).__name__}: {e}); fla columns left empty", file=sys.stderr)
        return None
    if bypass:  # fla refuses the gated backward on Hopper with Triton < 3.7.1 (wrong dbeta/dg there)
        import fla.ops.common.chunk_o as chunk_o
        chunk_o.TRITON_ABOVE_3_7_1 = True
    return fla


def summary(results: list[dict]) -> str:
    worse = [r for r in results if r["ours_le_fla"] is False]
    compared = sum(r["ours_le_fla"] is not None for r in results)
    return (f"tensors: {len(results)}; compared with fla: {compared}; ours worse than fla: {len(worse)} "
            f"{[(r['config'], r['tensor']) for r in worse]}; not bitwise reproducible: "
            f"{sum(not r['bitwise_repeat'] for r in results)}")


def row_text(r: dict) -> str:
    e_fla, ok = r["fla"], r["ours_le_fla"]
    return (f"{r['config']:24s} {r['tensor']:6s} {r['ours']:9.2e} {'' if e_fla is None else f'{e_fla:9.2e}':>9s}  "
            f"{'' if ok is None else ok!s:9s}  {r['bitwise_repeat']}")


def dump(path: str | None, a, results: list[dict], **extra) -> None:
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(dtype=a.dtype, device=a.device, rows=results, **extra), f, indent=1)
        os.replace(tmp, path)


def parallel(a, argv: list[str]) -> int:
    """Run each selected configuration in its own child process (a.jobs at a time), merge."""
    names = [c["name"] for c in configs(a.quick) if not a.only or c["name"] in a.only.split(",")]
    passthrough = [x for x in argv if x not in ("--quick",)]
    drop = {"--jobs", "--timeout", "--json", "--only"}
    kept, skip = [], False
    for x in passthrough:  # the child gets the same options minus the ones the parent owns
        if skip:
            skip = False
        elif x in drop:
            skip = True
        elif x.split("=")[0] not in drop:
            kept.append(x)
    deadline = time.time() + a.timeout if a.timeout else None
    tmpdir = tempfile.mkdtemp(prefix="gdn_acc_")
    pending, running, done, unfinished = list(names), {}, {}, []
    while pending or running:
        while pending and len(running) < a.jobs:
            n = pending.pop(0)
            js, log = os.path.join(tmpdir, n + ".json"), open(os.path.join(tmpdir, n + ".txt"), "w")
            running[n] = (subprocess.Popen([sys.executable, __file__, "--only", n, "--json", js, *kept],
                                           stdout=log, stderr=subprocess.STDOUT), js, log)
        time.sleep(0.5)
        for n, (proc, js, log) in list(running.items()):
            late = deadline is not None and time.time() > deadline
            if proc.poll() is None and not late:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                unfinished.append(n)
            log.close()
            del running[n]
            done[n] = json.load(open(js))["rows"] if os.path.exists(js) else []
        if deadline is not None and time.time() > deadline:
            unfinished += pending
            pending = []
    print(f"{'config':24s} {'tensor':6s} {'ours':>9s} {'fla':>9s}  ours<=fla  bitwise-repeat")
    results = [r for n in names for r in done.get(n, [])]
    for n in names:
        for r in done.get(n, []):
            print(row_text(r))
        log = open(os.path.join(tmpdir, n + ".txt")).read()
        for line in log.splitlines():
            if "failed on" in line or "Error" in line:
                print("  " + line.strip()[:200])
        if n in unfinished:
            print(f"  {n}: not finished within --timeout {a.timeout:g} s "
                  f"({'fla missing' if done.get(n) else 'nothing measured'})")
    print(summary(results) + (f"; configurations not finished: {unfinished}" if unfinished else ""))
    dump(a.json, a, results, unfinished=unfinished)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="only the first four configurations")
    ap.add_argument("--only", default=None, help="comma-separated configuration names")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--no-bypass", action="store_true", help="keep fla's Triton version guard")
    ap.add_argument("--json", default=None)
    ap.add_argument("--jobs", type=int, default=1, help="configurations run at once, each in its own process")
    ap.add_argument("--timeout", type=float, default=None, help="seconds for the whole sweep (with --jobs)")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args(argv)
    if a.jobs > 1:
        return parallel(a, argv)
    dtype = getattr(torch, a.dtype)
    fla = None if a.no_fla or a.device != "cuda" else fla_op(not a.no_bypass)
    if fla is None:
        why = "--no-fla" if a.no_fla else ("fla's kernels need CUDA" if a.device != "cuda" else "not importable")
        print(f"fla: not run ({why}); its column stays empty", flush=True)
    results = []
    print(f"{'config':24s} {'tensor':6s} {'ours':>9s} {'fla':>9s}  ours<=fla  bitwise-repeat", flush=True)
    for c in configs(a.quick):
        if a.only and c["name"] not in a.only.split(","):
            continue
        t0 = time.time()
        x, do, dht = inputs(c, dtype)
        ro, rht = oracle_forward(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=c["K"] ** -0.5, initial_state=x["h0"],
                                 use_qk_l2norm_in_kernel=c["l2"], cu_seqlens=c["cu"])
        rg = oracle_backward(x["q"], x["k"], x["v"], x["g"], x["beta"], do, dht, scale=c["K"] ** -0.5,
                             initial_state=x["h0"], use_qk_l2norm_in_kernel=c["l2"], cu_seqlens=c["cu"])
        ref = {"o": ro, "ht": rht, **rg}
        ours, again = run(chunk_gated_delta_rule, x, do, dht, c, a.device), run(chunk_gated_delta_rule, x, do, dht, c, a.device)
        dump(a.json, a, results + [dict(config=c["name"], tensor=n, ours=rel(ours[n], ref[n]), fla=None,
                                        ours_le_fla=None, bitwise_repeat=bool(torch.equal(ours[n], again[n])))
                                   for n in TENSORS if n in ours])
        theirs = None
        if fla is not None:
            try:
                theirs = run(fla, x, do, dht, c, a.device)
            except Exception as e:  # noqa: BLE001
                print(f"  fla failed on {c['name']}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        for n in TENSORS:
            if n not in ours:
                continue
            e_ours = rel(ours[n], ref[n])
            e_fla = rel(theirs[n], ref[n]) if theirs is not None and n in theirs else None
            same = bool(torch.equal(ours[n], again[n]))
            ok = None if e_fla is None else e_ours <= e_fla
            results.append(dict(config=c["name"], tensor=n, ours=e_ours, fla=e_fla, ours_le_fla=ok, bitwise_repeat=same))
            print(row_text(results[-1]), flush=True)
        dump(a.json, a, results)
        print(f"  ({time.time() - t0:.1f} s)", flush=True)
    print(summary(results))
    dump(a.json, a, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
