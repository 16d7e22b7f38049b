"""CUDA paths of the engine against the CPU (marked gpu; skipped without a GPU)."""
import pytest
import torch

from kverify import engine
from kverify.engine import Dist

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_synthesis_bitwise_equal_cpu_gpu(dtype):
    d = Dist("normal", 0.0, 2.0, 0.01, ("nan", "+inf", "-inf")) if dtype.is_floating_point else Dist("uniform_int", -5, 5)
    a = engine.fill(torch.empty(1001, 33, dtype=dtype), 77, d, 3)
    b = engine.fill(torch.empty(1001, 33, dtype=dtype, device="cuda"), 77, d, 3)
    assert engine.digest(a) == engine.digest(b)
    assert torch.equal(a.view(torch.uint8) if dtype.itemsize == 1 else a.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[dtype.itemsize]),
                       b.cpu().view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[dtype.itemsize]))


def test_compare_gpu_matches_cpu():
    o = engine.fill(torch.empty(4097, dtype=torch.float64), 1, Dist("normal", 0, 1, 0.01, ("nan", "+inf")))
    c = (o * (1 + 1e-6)).float()
    c[5] = 0
    s_cpu = engine.compare(c, o, 1e-7, 1e-7)
    s_gpu = engine.compare(c.cuda(), o.cuda(), 1e-7, 1e-7)
    for k in ("nan_mismatch", "first_nan", "n_past_bound", "first_past_bound", "max_abs_idx", "max_ulp"):
        assert s_cpu[k] == s_gpu[k], k
    assert s_gpu["sum_sq_err"] == pytest.approx(s_cpu["sum_sq_err"], rel=1e-12)


def test_sentinels_on_gpu():
    t = torch.empty(1000, device="cuda")
    engine.fill_sentinel(t)
    t[10:] = 1
    assert engine.count_sentinel(t) == (10, 0)


@pytest.mark.parametrize("mode,flags", [("block", 0x4), ("", 0x0)])
def test_cuda_schedule_sets_the_primary_contexts_wait_mode(mode, flags):
    """KVERIFY_CUDA_SCHEDULE=block makes the process's primary context wait on an OS primitive
    (CU_CTX_SCHED_BLOCKING_SYNC) once torch creates it; unset (the control), CUDA's auto mode (0)."""
    import subprocess
    import sys
    code = ("import torch; from kverify._internal import cuda_schedule as s; print(repr(s.apply())); "
            "torch.zeros(1, device='cuda').add_(1); torch.cuda.synchronize(); print(s.primary_flags(0))")
    env = {k: v for k, v in __import__("os").environ.items() if k != "KVERIFY_CUDA_SCHEDULE"}
    if mode:
        env["KVERIFY_CUDA_SCHEDULE"] = mode
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    applied, got = r.stdout.split()
    assert applied == repr(mode), r.stdout  # "" when unset: nothing applied
    assert int(got) == flags, r.stdout


def test_g09_judges_on_the_oracles_device_as_on_the_host():
    """G09's pieces run where the oracle's outputs are (the GPU in an audit), the candidate's and
    the reference's outputs on the host: the same counts as all on the host (stop 28)."""
    from kverify.gates.g09_sensitivity import _misses

    g = torch.Generator().manual_seed(1)
    rb = torch.randn(5000, generator=g, dtype=torch.float64)
    rp = rb.clone()
    rp[::7] += 0.5
    cb, cp = rb.float(), rp.float()
    cp[::21] = cb[::21]
    host = _misses(rb, rp, rb.float(), rp.float(), cb, cp)
    assert host[1] > 0 and _misses(rb.cuda(), rp.cuda(), rb.float(), rp.float(), cb, cp) == host


def test_gpu_peak_of_this_process():
    from kverify.check import gpu_peak_mib

    keep = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # 64 MiB
    assert gpu_peak_mib("cuda") >= 64 and gpu_peak_mib("cpu") == 0
    del keep
