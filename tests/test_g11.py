"""G11's sanitizer orchestration on the CPU: which kernels are the candidate's own, which tools run
with which kernel filters, and how an unfinished or failing tool becomes the gate's verdict (the
sanitizers themselves run only on a GPU: tests/test_gpu.py and `kverify controls --device cuda`)."""
import json
import os
import re
from types import SimpleNamespace

import pytest

from kverify import engine
from kverify.gates import g11_memory_safety as g11
from kverify.sandbox import Outcome

CUDA_SRC = r'''
import torch
from torch.utils.cpp_extension import load_inline
src = """
template <typename T, int BLOCK>
__global__ void __launch_bounds__(256) scaled_add(const T* a, T* b, int n) { }
__global__ static void plain(float* x) { }
extern "C" __global__ void c_linkage(float* x) { }
void __global__ void_first(float* x) { }
__global__ __launch_bounds__(128, 2) void bounded(float* x) { }
__device__ float helper(float v) { return v; }
__global__ void declared_only(float*);
"""
'''
TRITON_SRC = '''
import triton
import triton.language as tl

@triton.autotune(configs=[], key=["n"])
@triton.jit
def add_kernel(x, y, n, BLOCK: tl.constexpr):
    pass

@triton.jit(do_not_specialize=["n"])
def other(x, n):
    pass

def not_a_kernel():
    pass
'''
TORCH_SRC = '''
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def test_own_kernels_are_the_kernels_the_source_defines():
    assert g11.own_kernels(CUDA_SRC) == sorted(["scaled_add", "plain", "c_linkage", "void_first", "bounded",
                                                "declared_only"])
    assert g11.own_kernels(TRITON_SRC) == ["add_kernel", "other"]
    assert g11.own_kernels(TORCH_SRC) == []


@pytest.mark.parametrize("src", [
    "#define KNAME relu_k\n__global__ void KNAME(float* x) {}\n",  # a macro name: the filter would match nothing
    "#define DEF(n) __global__ void n##_fwd(float* x) {}\nDEF(relu)\n",  # a __global__ no definition parse finds
    "relu = triton.jit(_relu)\n",  # Triton without the decorator
    "from numba import cuda\n@cuda.jit\ndef k(x): pass\n",
    "import cupy\nk = cupy.ElementwiseKernel('float32 x', 'float32 y', 'y = x', 'k')\n",
    "from torch.utils import cpp_extension\nm = cpp_extension.load(name='m', sources=['m.cu'])\n",
    # kernel DSLs whose kernels get generated names, and loaders of code from anywhere (stop 36)
    "import tilelang\n@tilelang.jit\ndef matmul(M, N, K): pass\n",
    "import cutlass.cute as cute\n@cute.kernel\ndef k(a: cute.Tensor): pass\n",
    "import warp as wp\n@wp.kernel\ndef k(a: wp.array(dtype=float)): pass\n",
    "from pycuda.compiler import SourceModule\nm = SourceModule(open('k.cu').read())\n",
    "from cuda.core.experimental import Program\np = Program(code, 'c++')\n",
    "from cuda import cuda\ncuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, 0)\n",
])
def test_kernels_kverify_cannot_name_for_sure_are_all_checked(src, monkeypatch):
    monkeypatch.delenv("KVERIFY_SANITIZE_ALL", raising=False)
    assert g11.kernel_scope(src) is None
    assert g11._tools(g11.kernel_scope(src)) == list(g11.TOOLS)  # not N/A
    assert "--kernel-name" not in g11._sanitized_worker("racecheck", "cs", src)["wrapper"]  # unfiltered


def test_a_kernel_with_an_attribute_is_parsed():
    src = "__global__ __attribute__((noinline)) void relu(float* x) {}\n"
    assert g11.own_kernels(src) == ["relu"] and g11.kernel_scope(src) == ["relu"]


def test_kernel_filters_match_each_own_kernel_by_its_mangled_or_plain_name():
    assert g11.kernel_filters(TORCH_SRC) == []
    f = g11.kernel_filters(CUDA_SRC)
    assert "kns=10scaled_add" in f and "kne=scaled_add" in f  # _Z10scaled_addIfLi256EEvPKT_PS0_i ...
    assert "kns=9c_linkage" in f and "kne=c_linkage" in f  # extern "C": the plain name
    assert len(f) == 2 * len(g11.own_kernels(CUDA_SRC))
    assert g11.kernel_filters(TRITON_SRC) == ["kns=add_kernel", "kns=other"]


def test_only_racecheck_and_synccheck_are_filtered_to_own_kernels(monkeypatch):
    monkeypatch.delenv("KVERIFY_SANITIZE_ALL", raising=False)
    assert "--kernel-name" not in g11._sanitized_worker("memcheck", "cs", CUDA_SRC)["wrapper"]  # every kernel
    for tool in ("racecheck", "synccheck"):
        w = g11._sanitized_worker(tool, "cs", CUDA_SRC)["wrapper"]
        assert w[:3] == ["cs", "--tool", tool]
        given = [w[i + 1] for i, x in enumerate(w) if x == "--kernel-name"]
        assert given == g11.kernel_filters(CUDA_SRC)  # one option per filter: a kernel matching any is checked
    ks = g11.own_kernels(CUDA_SRC)
    assert g11._tools(ks) == ["memcheck", "racecheck", "synccheck"]  # no initcheck (module docstring)
    assert g11._tools([]) == ["memcheck"]

    def limit(tool, source):
        w = g11._sanitized_worker(tool, "cs", source)["wrapper"]
        return int(w[w.index("--print-limit") + 1])
    # racecheck on every kernel prints up to LIBRARY_PRINT_LIMIT findings (library_findings must see them all)
    assert limit("racecheck", CUDA_SRC) == limit("synccheck", OPAQUE_SRC) == limit("memcheck", OPAQUE_SRC) == g11.PRINT_LIMIT
    assert limit("racecheck", OPAQUE_SRC) == g11.LIBRARY_PRINT_LIMIT
    monkeypatch.setenv("KVERIFY_SANITIZE_ALL", "1")
    assert "--kernel-name" not in g11._sanitized_worker("racecheck", "cs", CUDA_SRC)["wrapper"]
    assert limit("racecheck", CUDA_SRC) == g11.LIBRARY_PRINT_LIMIT
    assert g11._tools([]) == list(g11.ALL_TOOLS) and "initcheck" in g11.ALL_TOOLS


def _run_start(monkeypatch, source: str, outcome_of):
    """G11's start() on a fake CUDA context whose sandbox answers each tool's run with
    ``outcome_of(tool, wrapper)``; returns (sanitizer measurements, the wrappers used)."""
    monkeypatch.delenv("KVERIFY_SANITIZE_ALL", raising=False)
    monkeypatch.setattr(g11.shutil, "which", lambda name: "/fake/compute-sanitizer")
    used = {}

    def run(jobs, timeout, tag, env, wrapper):
        tool = wrapper[wrapper.index("--tool") + 1]
        used[tool] = wrapper
        return [outcome_of(tool, wrapper)]
    ctx = SimpleNamespace(device="cuda", binding=None, specs_at=lambda b: [],
                          job_at=lambda kind, label, b, specs: {"kind": kind, "id": label},
                          sandbox=SimpleNamespace(candidate_source=source, run=run))
    return g11.start(ctx)(), used


def _verdict(sanitizer: dict) -> dict:
    return engine.judge("G11", {"guard": {"band_writes": 0, "output_depends_on_bands": False},
                                "sanitizer": sanitizer})


def _log(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _racecheck_times_out(tmp_path, racecheck_log: str):
    """Outcomes: racecheck timed out with ``racecheck_log`` so far, the other tools clean."""
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    slow = _log(tmp_path, "race.log", racecheck_log)
    return lambda tool, wrapper: (Outcome("timeout", detail="no result after 300 s", log=slow) if tool == "racecheck"
                                  else Outcome("ok", result={}, log=clean))


def test_a_tool_that_times_out_is_not_a_finding_but_leaves_g11_unestablished(monkeypatch, tmp_path):
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    s, used = _run_start(monkeypatch, CUDA_SRC, _racecheck_times_out(tmp_path, "========= COMPUTE-SANITIZER\n"))
    race = next(t for t in s["tools"] if t["tool"] == "racecheck")
    assert race["errors"] == 0 and "did not finish" in race["unfinished"]
    assert race["kernels"] == g11.own_kernels(CUDA_SRC)
    r = _verdict(s)
    assert r["verdict"] == "ERROR" and "racecheck did not finish" in r["summary"], r["summary"]
    # twin: every tool finishes clean -> PASS
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("ok", result={}, log=clean))
    assert _verdict(s)["verdict"] == "PASS"


def test_a_call_that_raised_under_a_sanitizer_is_not_clean(monkeypatch, tmp_path):
    """A sanitized call that raised launched nothing for the tool to see: unfinished (G11 ERROR,
    not established), never a clean PASS; with a finding it still fails."""
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    s, _ = _run_start(monkeypatch, CUDA_SRC,
                      lambda tool, w: Outcome("ok", result={"exception": "AssertionError: built for dim 4099"}, log=clean))
    assert all("raised under the tool" in t["unfinished"] for t in s["tools"]), s
    r = _verdict(s)
    assert r["verdict"] == "ERROR", r["summary"]


def test_findings_still_fail_g11_even_when_the_run_then_times_out(monkeypatch, tmp_path):
    found = "========= Error: Race reported between Write access at k+0x10\n"
    s, _ = _run_start(monkeypatch, CUDA_SRC, _racecheck_times_out(tmp_path, found))
    r = _verdict(s)
    assert r["verdict"] == "FAIL" and "Race reported" in r["summary"], r["summary"]


def test_a_candidate_without_kernels_of_its_own_runs_memcheck_only(monkeypatch, tmp_path):
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    s, used = _run_start(monkeypatch, TORCH_SRC, lambda tool, w: Outcome("ok", result={}, log=clean))
    assert list(used) == ["memcheck"] and "--kernel-name" not in used["memcheck"]
    skipped = [t["tool"] for t in s["tools"] if "not_applicable" in t]
    assert skipped == ["racecheck", "synccheck"]
    r = _verdict(s)
    assert r["verdict"] == "PASS" and "N/A (no kernel of its own)" in r["summary"], r["summary"]
    # a memcheck finding in PyTorch's kernels, caused by the candidate's call, still fails
    oob = _log(tmp_path, "oob.log", "========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 1 errors\n")
    s, _ = _run_start(monkeypatch, TORCH_SRC, lambda tool, w: Outcome("ok", result={}, log=oob))
    assert _verdict(s)["verdict"] == "FAIL"


def test_a_crash_under_a_sanitizer_fails_only_with_a_finding(monkeypatch, tmp_path):
    """A process that ends during the call under a tool is a finding when the tool named one (an
    invalid read before the crash); with none it is not established (ERROR): on the H200 audit
    racecheck ended 6 of 30 rows' workers ("exited with code 6") whose memcheck and synccheck were
    clean, and the job itself runs to its end without the tool."""
    empty = _log(tmp_path, "empty.log", "")
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("crash", detail="SIGSEGV", log=empty))
    assert all("ended under the tool (SIGSEGV)" in t["unfinished"] and t["errors"] == 0 for t in s["tools"])
    r = _verdict(s)
    assert r["verdict"] == "ERROR", json.dumps(s)[:300]
    found = _log(tmp_path, "found.log", "========= Invalid __global__ read of size 4 bytes\n")
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("crash", detail="SIGSEGV", log=found))
    r = _verdict(s)
    assert r["verdict"] == "FAIL" and "Invalid __global__ read" in r["summary"], r["summary"]


def test_every_cuda_control_has_kernels_of_its_own():
    """So the filtered tools run on them: `kverify controls --device cuda` then shows that the
    racecheck control (g11_missing_syncthreads_cuda) is still caught through the filter."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "controls" / "cuda"
    files = sorted(root.glob("*/defect.py")) + sorted(root.glob("*/twin.py"))
    assert len(files) >= 20
    for f in files:
        assert g11.own_kernels(f.read_text()), f
    race = (root / "g11_missing_syncthreads_cuda" / "defect.py").read_text()
    assert "kns=1k" in g11.kernel_filters(race)  # its kernel is `k`: matched as the name, not any "k"


RACE = "========= Error: Race reported between Write access at k+0x10"


def _exit_lines_name_nothing_but_a_race_counts(text: str) -> str:
    """parse_sanitizer finds nothing in ``text`` (process-exit lines and their ERROR SUMMARY), and
    exactly the race once a race line is added to it and to its count; returns that output."""
    assert g11.parse_sanitizer(text) == (0, "")
    n = int(re.search(r"ERROR SUMMARY: (\d+)", text).group(1))
    race = RACE + "\n" + re.sub(r"ERROR SUMMARY: \d+ errors?", f"ERROR SUMMARY: {n + 1} errors", text)
    assert g11.parse_sanitizer(race) == (1, RACE)
    return race


def test_the_exit_status_of_a_finished_worker_is_not_a_finding(monkeypatch, tmp_path):
    """compute-sanitizer reports a followed process that ended with a non-zero status as an error
    (racecheck did so on the H200, stop 14, for a worker that had finished its job): with the
    worker's job done that is no finding; with the job not done and no finding, G11 is not
    established."""
    text = ("========= Error: process didn't terminate successfully\n"
            "=========     The application may have hit an error when dereferencing Unified Memory from the host.\n"
            "========= ERROR SUMMARY: 1 error\n")
    _exit_lines_name_nothing_but_a_race_counts(text)
    log = _log(tmp_path, "exit.log", text)
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("ok", result={}, log=log))
    assert all(t["errors"] == 0 and "terminate" in t["process_exit"] for t in s["tools"])
    assert _verdict(s)["verdict"] == "PASS"
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("crash", detail="exit code 1", log=log))
    r = _verdict(s)  # ended during the call, no finding: not established
    assert r["verdict"] == "ERROR" and "exit code 1" in json.dumps(s), r["summary"]


#: the shape of the racecheck log of 3 H200 audit rows (stop 21, kept with scripts/device_g11_logs.sh;
#: the C++ stack cut): the tool failed inside cuDNN, the worker aborted, no hazard line, and the
#: summary counts the tool's own error as a hazard
INTERNAL_LOG = """========= COMPUTE-SANITIZER
========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.
========= 
terminate called after throwing an instance of 'c10::AcceleratorError'
  what():  CUDA error: an illegal memory access was encountered
frame #7: at::native::cudnn_convolution(at::Tensor const&, at::Tensor const&, ...)

========= Error: process didn't terminate successfully
========= Target application returned an error
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_racechecks_own_failure_is_not_a_finding(monkeypatch, tmp_path):
    """23 H200 audit rows (stop 20) FAILed G11 through racecheck's own internal error inside cuDNN
    ("exited with code 6"), which its summary counts as an error hazard; memcheck and synccheck of
    the same kernels were clean. Now the tool's error is not counted: the run is unfinished
    (G11 ERROR, not established) with what the tool said kept, and a named race still FAILs."""
    assert g11.parse_sanitizer(INTERNAL_LOG) == (0, "")
    race = INTERNAL_LOG.replace("========= Error: process", RACE + "\n========= Error: process").replace(
        "1 hazard displayed (1 error", "2 hazards displayed (2 errors")
    assert g11.parse_sanitizer(race) == (1, RACE)
    log = _log(tmp_path, "internal.log", INTERNAL_LOG)
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: (Outcome("crash", detail="exited with code 6 during the call", log=log)
                                                              if tool == "racecheck" else Outcome("ok", result={}, log=clean)))
    race_rec = next(t for t in s["tools"] if t["tool"] == "racecheck")
    assert race_rec["errors"] == 0 and "Internal Sanitizer Error" in race_rec["unfinished"], race_rec
    assert race_rec["cudnn"] == "off" and "Target application returned an error" in race_rec["log_tail"]
    r = _verdict(s)
    assert r["verdict"] == "ERROR", r["summary"]
    found = _log(tmp_path, "race.log", race)
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("crash", detail="exited with code 6", log=found))
    assert _verdict(s)["verdict"] == "FAIL"
    # the same error in a run that finished its job: still nothing checked after the tool failed
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("ok", result={}, log=log))
    assert all("own error" in t["unfinished"] for t in s["tools"]) and _verdict(s)["verdict"] == "ERROR"


def test_racecheck_runs_without_cudnn_and_the_other_tools_with_it(monkeypatch):
    """The racecheck worker gets KVERIFY_CUDNN=0 (the worker then turns cuDNN off before the
    candidate loads); memcheck checks the candidate as it runs, cuDNN included; every tool keeps
    G11's allocator setting."""
    monkeypatch.delenv("KVERIFY_SANITIZE_ALL", raising=False)
    for tool in g11.ALL_TOOLS:
        env = g11._sanitized_worker(tool, "cs", CUDA_SRC)["env"]
        assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
        assert (env.get("KVERIFY_CUDNN") == "0") == (tool == "racecheck"), (tool, env)
    assert "KVERIFY_CUDNN" not in g11.SANITIZED_ENV  # not changed for every tool by the update


def test_hardware_exceptions_are_named_and_only_the_tools_exit_lines_are_taken_out():
    """memcheck's hardware-exception reports are findings by name, so a summary that counts them
    and not the process-exit lines cannot be emptied by taking those out; an exit phrase printed by
    the candidate itself (no tool prefix) is not taken out of the count."""
    hw = ("========= COMPUTE-SANITIZER\n========= Warp Illegal Address\n=========     at k+0x30\n"
          "========= Warp Misaligned Address\n=========     at k+0x50\n"
          "========= Error: process didn't terminate successfully\n========= Target application returned an error\n"
          "========= ERROR SUMMARY: 2 errors\n")
    assert g11.parse_sanitizer(hw) == (2, "========= Warp Illegal Address")
    printed = ("========= COMPUTE-SANITIZER\nTarget application returned an error\n"
               "========= ERROR SUMMARY: 1 error\n")
    assert g11.parse_sanitizer(printed) == (1, "")


def test_a_sanitizer_run_cut_by_the_checks_budget_is_unfinished_unless_it_found_something(monkeypatch, tmp_path):
    cut = _log(tmp_path, "cut.log", "========= COMPUTE-SANITIZER\n")
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("budget", detail="budget", log=cut))
    assert all("time budget" in t["unfinished"] and t["errors"] == 0 for t in s["tools"])
    assert _verdict(s)["verdict"] == "ERROR"
    found = _log(tmp_path, "found.log", "========= Invalid __global__ read of size 4 bytes\n")
    s, _ = _run_start(monkeypatch, CUDA_SRC, lambda tool, w: Outcome("budget", detail="budget", log=found))
    r = _verdict(s)
    assert r["verdict"] == "FAIL" and "Invalid __global__ read" in r["summary"], r["summary"]


def test_racecheck_output_and_a_cut_guard_job(monkeypatch, tmp_path):
    """racecheck prints hazards in its own summary (no ERROR SUMMARY): a process-exit error beside
    it is not counted, a race is. When the check's budget cut G11's guard-band job, a sanitizer
    finding made before still FAILs G11 (judge_cut); without one the caller records ERROR."""
    exit_line = "========= Error: process didn't terminate successfully\n"
    clean = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert g11.parse_sanitizer(exit_line + clean) == (0, "")
    race = ("========= Error: Race reported between Write access at k(float *)+0x10\n" + exit_line
            + "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    assert g11.parse_sanitizer(race) == (1, "========= Error: Race reported between Write access at k(float *)+0x10")
    for tools, verdict in (([{"tool": "memcheck", "errors": 2, "first": "========= Invalid __global__ read"}], "FAIL"),
                           ([{"tool": "memcheck", "errors": 0, "first": ""}], None)):
        ctx = SimpleNamespace(background_result=lambda gate, start, t=tools: {"tools": t})
        r = g11.judge_cut(ctx, "the check's time budget (3 s) was spent")
        assert (r or {}).get("verdict") == verdict, r


def test_a_sanitizer_run_can_be_confined_to_a_few_cpus(monkeypatch):
    """KVERIFY_SANITIZER_CPUS=N (the audit: 2) puts each tool on N of the allowed CPUs, the same
    N for the same tool in one process (a prestarted worker is matched by its wrapper); the tool
    and the worker it starts inherit the set (checked here on a real child)."""
    import subprocess
    import sys

    from kverify.check import check
    from kverify.errors import UsageError

    monkeypatch.delenv(g11.CPUS_ENV, raising=False)
    assert g11.cpu_cap("racecheck") == []
    monkeypatch.setenv(g11.CPUS_ENV, "1")
    prefix = g11.cpu_cap("racecheck")
    assert prefix and prefix == g11.cpu_cap("racecheck")
    assert g11._sanitized_worker("racecheck", "cs", CUDA_SRC)["wrapper"][:len(prefix) + 3] == [*prefix, "cs", "--tool", "racecheck"]
    out = subprocess.run([*prefix, sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
    monkeypatch.setenv(g11.CPUS_ENV, str(len(os.sched_getaffinity(0))))  # all of them: no prefix
    assert g11.cpu_cap("racecheck") == []
    monkeypatch.setenv(g11.CPUS_ENV, "0")  # 0: no confinement, said so
    assert g11.cpu_cap("racecheck") == []
    monkeypatch.setenv(g11.CPUS_ENV, "-2")  # was silently no confinement (stop 22's note)
    with pytest.raises(ValueError, match="KVERIFY_SANITIZER_CPUS must be a whole number.*got '-2'"):
        g11.cpu_cap("racecheck")
    monkeypatch.setenv(g11.CPUS_ENV, "two")
    with pytest.raises(ValueError, match="KVERIFY_SANITIZER_CPUS must be a whole number"):
        g11.cpu_cap("racecheck")
    with pytest.raises(UsageError, match="KVERIFY_SANITIZER_CPUS"):  # before any worker starts
        check("x", "r.py", "y", "c.py", device="cpu")


#: racecheck's output on the H200 (stop 36, scripts/device_g11_probe.sh GEMM_PROBE=1: every kernel
#: checked) for scripts/g11_gemm_probe.py (PyTorch's fp16 GEMMs with bias under autocast and an fp16
#: nn.Linear, no code of ours): 4 races, all inside cuBLAS's nvjet GEMM kernels
H200_NVJET = """========= COMPUTE-SANITIZER
========= Error: Race reported between Read access at nvjet_sm90_hsh_144x64_64x8_1x2_h_bz_bias_TNN+0xa50
=========     and Write access at nvjet_sm90_hsh_144x64_64x8_1x2_h_bz_bias_TNN+0x47b0 [512 hazards]
========= 
========= Error: Race reported between Read access at nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN+0x9c0
=========     and Write access at nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN+0x5c10 [1584 hazards]
=========     and Write access at nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN+0x6390 [528 hazards]
========= 
========= Error: Race reported between Read access at nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN+0x4dc0
=========     and Write access at nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN+0x5c10 [528 hazards]
========= 
========= Error: Race reported between Read access at nvjet_sm90_hsh_96x128_64x7_2x1_v_bz_bias_TNN+0xa60
=========     and Write access at nvjet_sm90_hsh_96x128_64x7_2x1_v_bz_bias_TNN+0x4e30 [512 hazards]
========= 
gemm probe done
"""
#: a race in a kernel of the candidate's (racecheck's format of the same run)
OWN_RACE = """========= Error: Race reported between Read access at fused_kernel(const float *, float *, int)+0x3f0
=========     and Write access at fused_kernel(const float *, float *, int)+0x500 [8 hazards]
========= 
"""
#: a candidate whose kernels kverify cannot name for sure (kernel_scope None): it loads CUDA files
OPAQUE_SRC = CUDA_SRC + "\nfrom torch.utils.cpp_extension import load\nm = load(name='x', sources=['k.cu'])\n"


def _summary(n: int, e: int | None = None) -> str:
    e = n if e is None else e
    return f"========= RACECHECK SUMMARY: {n} hazards displayed ({e} errors, 0 warnings)\n"


def test_races_racecheck_reports_inside_cublas_kernels_only_are_the_librarys():
    """library_findings counts the findings of racecheck's real H200 output for PyTorch's GEMMs
    (all inside nvjet kernels) and is None as soon as any finding is, or may be, elsewhere."""
    assert g11.parse_sanitizer(H200_NVJET + _summary(4))[0] == 4
    assert g11.library_findings(H200_NVJET + _summary(4), OPAQUE_SRC) == 4
    nvjet = "nvjet_sm90_hsh_144x64_64x8_1x2_h_bz_bias_TNN"
    for text in (H200_NVJET + OWN_RACE + _summary(5),  # one race of the candidate's among them
                 OWN_RACE + _summary(1),
                 RACE + "\n" + _summary(1),  # "k+0x10": the candidate's kernel k
                 # an access without a plain nvjet symbol: a device function, a mangled-looking
                 # look-alike, the older "at 0xOFFSET in FILE:LINE:NAME" format, no name at all
                 H200_NVJET.replace(f"Write access at {nvjet}+0x47b0", "Write access at cub::BlockReduce<float>::Sum(float)+0x47b0"),
                 H200_NVJET.replace(f"Read access at {nvjet}+0xa50", f"Read access at void {nvjet}<float>(float *)+0xa50"),
                 H200_NVJET.replace(f"Read access at {nvjet}+0xa50", f"Read access at {nvjet}::mine+0xa50"),
                 H200_NVJET.replace(f"Read access at {nvjet}+0xa50", f"Read access at 0xa50 in /x/k.cu:12:{nvjet}"),
                 H200_NVJET.replace(f"Read access at {nvjet}+0xa50", "Read access at nvjet_fake+0xa50"),
                 # the third access line of a finding (its second detail line) in a kernel of the candidate's
                 H200_NVJET.replace("coopB_bias_TNN+0x6390", "coopB_bias_TNN_mine(float *)+0x6390"),
                 # two accesses on one line, the first the candidate's
                 H200_NVJET.replace(f"Read access at {nvjet}+0xa50", f"Read access at k+0x1 and Read access at {nvjet}+0xa50"),
                 H200_NVJET.replace(f"Read access at {nvjet}+0xa50", f"Read access at mine(float *)+0x1 and Read access at {nvjet}+0xa50"),
                 # a finding line the worker's own output broke (printed without a newline before it),
                 # and a detail line left without its finding: both may hide a race of the candidate's
                 H200_NVJET + "progress: " + OWN_RACE + _summary(5),
                 H200_NVJET + "progress: ========= Error: Race reported\n" + _summary(5),
                 OWN_RACE.split("\n", 1)[1] + H200_NVJET + _summary(4),
                 H200_NVJET + _summary(4) + _summary(1),  # two processes' summaries
                 "========= Error: Race reported somewhere\n" + _summary(1),
                 _summary(0)):
        assert g11.library_findings(text, OPAQUE_SRC) is None, text
    # a source that spells the word may define such a kernel itself
    assert g11.library_findings(H200_NVJET, OPAQUE_SRC + f"\n// __global__ void {nvjet.upper()}(float* x)\n") is None
    # as many findings as racecheck on every kernel prints (LIBRARY_PRINT_LIMIT): more may be hidden
    block = H200_NVJET.split("========= \n")[0] + "========= \n"
    limit = g11.print_limit("racecheck", every_kernel=True)
    assert limit == g11.LIBRARY_PRINT_LIMIT > g11.PRINT_LIMIT == g11.print_limit("racecheck", False) == g11.print_limit("memcheck", True)
    many = block.split("\n", 1)[1] * limit
    assert many.count("Error: Race") == limit and g11.library_findings(many, OPAQUE_SRC) is None
    fewer = block.split("\n", 1)[1] * (limit - 1)
    assert g11.library_findings(fewer, OPAQUE_SRC) == limit - 1
    # 103 of them (cudal1/3090/L3/T11 on the H200, stop 37: more than PRINT_LIMIT)
    assert g11.library_findings(block.split("\n", 1)[1] * 103 + _summary(103), OPAQUE_SRC) == 103


def test_own_findings_split_racechecks_findings_by_whose_kernel_they_are():
    """own_findings: a finding is the candidate's when an access names one of its kernels, demangled
    (with return type, namespace, template arguments, parameters), plain (extern "C") or mangled
    (length-prefixed name), or a Triton kernel by prefix; or when an access line does not parse.
    None for a stray race line or as many findings as the print limit."""
    nvjet = H200_NVJET
    race = lambda name: OWN_RACE.replace("fused_kernel(const float *, float *, int)", name)  # noqa: E731
    for name in ("void scaled_add<float, 256>(const T1 *, T1 *, int)", "void ns::bounded(float *)", "c_linkage",
                 "_Z5plainPf", "_Z10void_firstPf", "_ZN2ns7boundedEPf",
                 # a kernel in an anonymous namespace (a review's find: "(" before the name), and a
                 # __device__ helper the compiler did not inline, which racecheck may name
                 "void (anonymous namespace)::bounded<(int)2>(float *)", "helper(float)", "_Z6helperf"):
        assert g11.own_findings(nvjet + race(name) + _summary(5), CUDA_SRC)[:2] == (1, 4), name
    for name in ("fused_kernel(const float *, float *, int)", "void plain_more(float *)", "_Z10plain_morePf",
                 "at::native::reduce_kernel<512, 1>(float *)", "plain_x", "void (anonymous namespace)::plainer(float *)",
                 "void my_plain(float *)", "_Z15scaled_add_moreIfEvPf"):
        assert g11.own_findings(race(name) + _summary(1), CUDA_SRC)[:2] == (0, 1), name
    # a length prefix is not read inside a longer one (a review's find: own "add" in "13add_kernel")
    add = "__global__ void add(float* x) { }\n__global__ void k(float* x) { }\n"
    for name in ("_ZN2at6native13add_kernelEv", "_Z21kernel_of_someone_elsePf", "void at::native::add_kernel(float *)"):
        assert g11.own_findings(race(name) + _summary(1), add)[:2] == (0, 1), name
    assert g11.own_findings(race("_Z3addPf") + _summary(1), add)[:2] == (1, 0)
    # a Triton kernel by its name, alone or before "_" (not every name that starts with its letters)
    assert g11.own_findings(race("add_kernel_0d1d2d") + _summary(1), TRITON_SRC)[:2] == (1, 0)
    assert g11.own_findings(race("add_kernel") + _summary(1), TRITON_SRC)[:2] == (1, 0)
    assert g11.own_findings(race("add_kernelx(float *)") + _summary(1), TRITON_SRC)[:2] == (0, 1)
    # an access line that does not parse may be the candidate's
    assert g11.own_findings(race("fused_kernel").replace("+0x3f0", " somewhere") + _summary(1), CUDA_SRC)[:2] == (1, 0)
    split = g11.own_findings(nvjet + race("plain(float *)") + _summary(5), CUDA_SRC)
    assert split[2].startswith("========= Error: Race reported between Read access at plain(") and "nvjet" in split[3]
    assert g11.own_findings("progress: " + OWN_RACE + _summary(1), CUDA_SRC) is None  # a broken line
    block = nvjet.split("========= \n")[0].split("\n", 1)[1] + "========= \n"
    assert g11.own_findings(block * g11.LIBRARY_PRINT_LIMIT, CUDA_SRC) is None
    assert g11.own_findings(block * (g11.LIBRARY_PRINT_LIMIT - 1), CUDA_SRC)[:2] == (0, g11.LIBRARY_PRINT_LIMIT - 1)


def _racecheck_run(monkeypatch, tmp_path, source: str, racecheck_text: str, tool: str = "racecheck",
                   status: str = "ok"):
    """start() where ``tool`` prints ``racecheck_text`` and ends with ``status`` and the other tools
    are clean: (its record, the gate's verdict)."""
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    found = _log(tmp_path, "found.log", racecheck_text)
    s, _ = _run_start(monkeypatch, source, lambda t, w: (Outcome(status, result={}, detail="SIGSEGV", log=found) if t == tool
                                                         else Outcome("ok", result={}, log=clean)))
    return next(t for t in s["tools"] if t["tool"] == tool), _verdict(s)["verdict"]


def test_races_inside_cublas_do_not_fail_a_candidate_whose_kernels_were_all_checked(monkeypatch, tmp_path):
    """Where racecheck checked every kernel (kernel_scope None), races all inside cuBLAS's kernels
    are kept as library_findings and G11 passes; positive controls: one race of the candidate's
    among them, a summary that counts more errors than were printed, the same output where only
    the candidate's kernels were checked (its filters chose what racecheck saw), and the same
    output from synccheck all FAIL; with the tool's own failure after them, or a crashed worker,
    G11 is not PASS; with KVERIFY_SANITIZE_ALL=1 they are library_findings whatever the source."""
    assert g11.kernel_scope(OPAQUE_SRC) is None and g11.kernel_scope(CUDA_SRC) is not None
    rec, verdict = _racecheck_run(monkeypatch, tmp_path, OPAQUE_SRC, H200_NVJET + _summary(4))
    assert verdict == "PASS" and rec["errors"] == 0 and rec["first"] == "", rec
    assert rec["library_findings"] == {"findings": 4, "first": H200_NVJET.splitlines()[1].strip()[:200]}
    for source, text, tool in ((OPAQUE_SRC, H200_NVJET + OWN_RACE + _summary(5), "racecheck"),
                               (OPAQUE_SRC, H200_NVJET + _summary(6), "racecheck"),
                               (CUDA_SRC, H200_NVJET + _summary(4), "racecheck"),
                               # the same lines from synccheck (not its real format): only racecheck's are looked at
                               (OPAQUE_SRC, H200_NVJET.replace("Race reported", "Barrier error") + "========= ERROR SUMMARY: 4 errors\n", "synccheck")):
        rec, verdict = _racecheck_run(monkeypatch, tmp_path, source, text, tool)
        assert verdict == "FAIL" and rec["errors"] >= 4 and "library_findings" not in rec, (text, rec)
    # the same findings with the tool's own failure after them, or a worker that crashed: not PASS
    internal = H200_NVJET + "========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.\n" + _summary(5)
    rec, verdict = _racecheck_run(monkeypatch, tmp_path, OPAQUE_SRC, internal)
    assert verdict == "ERROR" and "unfinished" in rec, rec
    rec, verdict = _racecheck_run(monkeypatch, tmp_path, OPAQUE_SRC, H200_NVJET + _summary(4), status="crash")
    assert verdict != "PASS"
    monkeypatch.setattr(g11, "_sanitize_all", lambda: True)  # KVERIFY_SANITIZE_ALL=1: every kernel checked
    rec, _ = _racecheck_run(monkeypatch, tmp_path, CUDA_SRC, H200_NVJET + _summary(4))
    assert rec["errors"] == 0 and rec["library_findings"]["findings"] == 4, rec


def test_a_filtered_racecheck_that_fails_inside_the_tool_runs_again_on_every_kernel(monkeypatch, tmp_path):
    """H200, stop 36: racecheck filtered to the candidate's own kernels ends in the tool's own error
    when cuBLAS's fp16 GEMMs run unchecked (audit row cudal1/3090/L3/T11 was G11 ERROR so). Such a
    run is repeated with every kernel checked: races there all inside cuBLAS are the library's (PASS,
    the first run's failure kept); positive controls: a race of the candidate's in the second run
    FAILs, a second run that fails inside the tool too leaves G11 ERROR; no second run after a
    finding, a timeout or the check's budget, for synccheck, or where every kernel was checked."""
    internal = _log(tmp_path, "internal.log", INTERNAL_LOG)
    clean = _log(tmp_path, "clean.log", "========= ERROR SUMMARY: 0 errors\n")
    printed = []  # each run's --print-limit

    def runs(second_text: str, first=("crash", internal), tool="racecheck"):
        second = _log(tmp_path, "second.log", second_text)
        calls = []
        printed.clear()

        def outcome(t, wrapper):
            if t != tool:
                return Outcome("ok", result={}, log=clean)
            calls.append("--kernel-name" in wrapper)
            printed.append(int(wrapper[wrapper.index("--print-limit") + 1]))
            if len(calls) == 1:  # the first run of the tool
                return Outcome(first[0], result={}, detail="exited with code 6", log=first[1])
            return Outcome("ok", result={}, log=second)
        s, _ = _run_start(monkeypatch, CUDA_SRC, outcome)
        return next(r for r in s["tools"] if r["tool"] == tool), _verdict(s)["verdict"], calls
    rec, verdict, calls = runs(H200_NVJET + _summary(4))
    assert calls == [True, False] and verdict == "PASS" and rec["library_findings"]["findings"] == 4, rec
    # the second run prints every finding up to LIBRARY_PRINT_LIMIT (the first, filtered, PRINT_LIMIT)
    assert printed == [g11.PRINT_LIMIT, g11.LIBRARY_PRINT_LIMIT]
    assert "every kernel" in rec["kernels"] and "unfinished" not in rec
    assert rec["filtered_run"]["kernels"] == g11.own_kernels(CUDA_SRC)
    assert "Internal Sanitizer Error" in rec["filtered_run"]["unfinished"]
    # a race in a kernel of the candidate's among them: FAIL, counting only its own (own_findings)
    own = OWN_RACE.replace("fused_kernel(const float *, float *, int)", "void scaled_add<float, 256>(const T1 *, T1 *, int)")
    rec, verdict, calls = runs(H200_NVJET + own + _summary(5))
    assert calls == [True, False] and verdict == "FAIL" and rec["errors"] == 1 and "library_findings" not in rec
    assert rec["first"].startswith("========= Error: Race reported between Read access at void scaled_add<")
    assert rec["other_findings"]["findings"] == 4 and "nvjet" in rec["other_findings"]["first"]
    # only races in a kernel that is neither the candidate's nor cuBLAS's: not counted, not established
    rec, verdict, calls = runs(H200_NVJET + OWN_RACE + _summary(5))
    assert calls == [True, False] and verdict == "ERROR" and rec["errors"] == 0 and rec["other_findings"]["findings"] == 5
    assert "not the candidate's" in rec["unfinished"]
    # a summary counting more than were printed: the split cannot be trusted, every finding counts
    rec, verdict, calls = runs(H200_NVJET + OWN_RACE + _summary(7))
    assert verdict == "FAIL" and rec["errors"] == 7 and "other_findings" not in rec
    rec, verdict, calls = runs(INTERNAL_LOG)
    assert calls == [True, False] and verdict == "ERROR" and "Internal Sanitizer Error" in rec["unfinished"]
    # no second run: the first named a finding, timed out or was cut by the budget
    found = _log(tmp_path, "found.log", INTERNAL_LOG.replace("========= Error: process", RACE + "\n========= Error: process"))
    rec, verdict, calls = runs(H200_NVJET + _summary(4), first=("crash", found))
    assert calls == [True] and verdict == "FAIL" and "filtered_run" not in rec
    for status in ("timeout", "budget"):
        rec, verdict, calls = runs(H200_NVJET + _summary(4), first=(status, internal))
        assert calls == [True] and verdict == "ERROR" and "filtered_run" not in rec, status
    # synccheck's own failure: not repeated
    rec, verdict, calls = runs(H200_NVJET + _summary(4), tool="synccheck")
    assert calls == [True] and verdict == "ERROR"
    # every kernel checked already (KVERIFY_SANITIZE_ALL=1): nothing to repeat
    monkeypatch.setattr(g11, "_sanitize_all", lambda: True)
    rec, verdict, calls = runs(H200_NVJET + _summary(4))
    assert calls == [False] and verdict == "ERROR" and "filtered_run" not in rec
