"""The build path (kverify.build + kverify._internal.fastbuild) on the CPU: a C++ load_inline
extension is built once into the content-addressed cache and found there by later processes; a
compile error is the status compile_error with the compiler's first error, also when the
candidate catches it and falls back to PyTorch; a build that failed is not repeated."""
import json

import pytest

from kverify._internal.fastbuild import first_compiler_error, read_state
from kverify.build import CAUGHT_MARK, cache_dir, precompile

REF = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
N = 1000
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
"""

CAND = """
import torch
from torch.utils.cpp_extension import load_inline
_ext = load_inline(name="kv_build_test", cpp_sources="torch::Tensor relu(torch::Tensor x) {{ return {body}; }}",
                   functions=["relu"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.relu(x)
"""

CAUGHT = """
import torch
from torch.utils.cpp_extension import load_inline
try:
    _ext = load_inline(name="kv_build_test", cpp_sources="torch::Tensor relu(torch::Tensor x) { return y; }",
                       functions=["relu"], verbose=True)  # verbose: torch prints the compiler's output
except Exception:
    _ext = None
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.relu(x) if _ext is not None else torch.relu(x)  # falls back to PyTorch
"""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KVERIFY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KVERIFY_PCH", "0")  # a precompiled header is ~0.8 GB; the device bench covers it
    return tmp_path / "cache"


def pre(candidate):
    return precompile(REF, "ref.py", candidate, "cand.py", device="cpu", timeout=120)


def test_first_compiler_error_picks_the_diagnostic():
    out = ("Error building extension 'x': [1/2] c++ -c main.cpp\nFAILED: main.o\n"
           "main.cpp: In function 'at::Tensor relu(at::Tensor)':\n"
           "main.cpp:3:54: error: 'y' was not declared in this scope\nninja: build stopped: subcommand failed.")
    assert first_compiler_error(out) == "main.cpp:3:54: error: 'y' was not declared in this scope"
    nv = "FAILED: cuda.cuda.o\n/tmp/x/cuda.cu(12): error: identifier \"foo\" is undefined\n1 error detected"
    assert first_compiler_error(nv).endswith('error: identifier "foo" is undefined')
    assert first_compiler_error("collect2: error: ld returned 1 exit status") == "collect2: error: ld returned 1 exit status"


@pytest.mark.slow
def test_built_once_then_found_in_the_cache():
    cand = CAND.format(body="x.clamp_min(0)")
    first = pre(cand)
    assert first.status == "ok", first.error
    (key, b), = first.builds.items()
    assert key.startswith("kv_build_test-") and b["mode"] == "fast" and b["ok"] is True
    log = cache_dir(cand) / key / ".ninja_log"
    before = log.read_text()
    second = pre(cand)
    assert second.status == "ok" and log.read_text() == before  # nothing rebuilt
    assert second.seconds < first.seconds
    other = CAND.format(body="x.clamp_min(0) ")  # one byte more: another cache folder
    assert cache_dir(other) != cache_dir(cand)


@pytest.mark.slow
def test_compile_error_is_a_status_with_the_first_error():
    bad = CAND.format(body="y")
    p = pre(bad)
    assert p.status == "compile_error"
    assert "was not declared" in p.error and "extension kv_build_test failed to build: " in p.error  # not caught
    (state,) = read_state(cache_dir(bad)).values()
    assert state["ok"] is False and state["diagnosed"] is True
    again = pre(bad)  # not rebuilt: the recorded diagnostic is raised at once
    assert again.status == "compile_error" and again.seconds < p.seconds


SECOND_TRY = """
import torch
from torch.utils.cpp_extension import load_inline
try:
    _ext = load_inline(name="kv_build_test", cpp_sources="torch::Tensor relu(torch::Tensor x) { return y; }",
                       functions=["relu"])
except Exception:  # the candidate's own second attempt, same name, other source (seen in CUDA-L1 rows)
    _ext = load_inline(name="kv_build_test", cpp_sources="torch::Tensor relu(torch::Tensor x) { return x.clamp_min(0); }",
                       functions=["relu"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.relu(x)
"""


@pytest.mark.slow
def test_second_try_that_builds_is_not_a_compile_error():
    p = pre(SECOND_TRY)
    assert p.status == "ok", p.error
    assert sorted(b["ok"] for b in p.builds.values()) == [False, True]
    again = pre(SECOND_TRY)  # a later process replays both calls and rebuilds nothing
    assert again.status == "ok" and again.seconds < p.seconds


@pytest.mark.slow
def test_caught_compile_error_is_still_a_compile_error():
    p = pre(CAUGHT)
    assert p.status == "compile_error", json.dumps(p.builds)
    assert "was not declared" in p.error  # also with verbose=True (the error then held no compiler output)
    assert f"failed to build ({CAUGHT_MARK}): " in p.error


def test_sanitizer_report_parsing():
    from kverify.gates.g11_memory_safety import parse_sanitizer

    clean = "========= COMPUTE-SANITIZER\nhello\n========= ERROR SUMMARY: 0 errors\n"
    assert parse_sanitizer(clean) == (0, "")
    race = ("========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at k+0x1c0\n"
            "=========     and Read access at k+0x1f0 [8 hazards]\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    n, first = parse_sanitizer(race)
    assert n == 1 and first.startswith("========= Error: Race reported")
    oob = ("========= Invalid __global__ read of size 4 bytes\n=========     at k+0x70\n"
           "========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 2 errors\n")
    assert parse_sanitizer(oob) == (2, "========= Invalid __global__ read of size 4 bytes")


@pytest.mark.slow
def test_build_killed_by_load_timeout_recovers_and_leaves_no_compiler():
    """A worker killed mid-build (load timeout) leaves torch's baton file `lock` behind; the next
    process must not wait on it for ever, and the killed build's compilers must be gone."""
    import subprocess
    import time

    cand = CAND.format(body="x.clamp_min(0) * 1")
    first = precompile(REF, "ref.py", cand, "cand.py", device="cpu", timeout=120, load_timeout=4)
    assert first.status == "load_error" and "longer than 4 s" in first.error
    leftovers = list(cache_dir(cand).glob("*/lock"))
    assert leftovers, "expected torch's baton file of the killed build"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and subprocess.run(["pgrep", "-f", str(cache_dir(cand))],
                                                         capture_output=True).returncode == 0:
        time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", str(cache_dir(cand))], capture_output=True).returncode != 0, \
        "compiler of the killed build still running"
    second = pre(cand)
    assert second.status == "ok", second.error


def test_cuda_build_tries_narrow_then_fast_then_stock_and_replays(tmp_path, monkeypatch):
    """The tiers of fastbuild's load_inline on a stand-in for torch's (no nvcc needed): the narrow
    header first, the shim on a compile error, the recorded mode straight away in a later call."""
    import functools

    import torch.utils.cpp_extension as cpp

    from kverify._internal import fastbuild

    calls, fail = [], {"narrow"}
    real = cpp.load_inline

    @functools.wraps(real)
    def fake(**kw):
        flags = " ".join(kw.get("extra_cuda_cflags") or [])
        mode = "narrow" if "kv_include" in flags else ("fast" if str(fastbuild.SHIM) in flags else "stock")
        calls.append(mode)
        if mode in fail:
            raise RuntimeError(f"Error building extension '{kw['name']}': cuda.cu(3): error: identifier \"foo\" is undefined")
        return mode

    monkeypatch.setattr(cpp, "load_inline", fake)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.delenv("KVERIFY_PCH_DIR", raising=False)
    monkeypatch.setenv("KVERIFY_NARROW_HEADERS", "1")  # opt-in (checked by kverify's nvcc)
    monkeypatch.delenv("PYTORCH_NVCC", raising=False)
    fake_nvcc = tmp_path / "cuda" / "bin" / "nvcc"  # the narrow build needs kverify's nvcc, which needs nvcc
    fake_nvcc.parent.mkdir(parents=True)
    fake_nvcc.write_text("")
    monkeypatch.setattr(cpp, "CUDA_HOME", str(tmp_path / "cuda"))
    fastbuild.install()
    kw = dict(name="e", cpp_sources="torch::Tensor f(torch::Tensor x);", functions=["f"],
              cuda_sources="torch::Tensor f(torch::Tensor x) { return torch::empty_like(x); }")
    assert cpp.load_inline(**kw) == "fast" and calls == ["narrow", "fast"]
    (key, entry), = fastbuild.read_state(tmp_path).items()
    assert entry["mode"] == "fast" and entry["ok"] is True and "foo" in entry["narrow_error"]
    assert "ATen/ops/empty_like.h" in (tmp_path / f"{key}-narrow" / "kv_include" / "torch" / "types.h").read_text()
    calls.clear()
    assert cpp.load_inline(**kw) == "fast" and calls == ["fast"]  # replayed: no narrow try

    calls.clear(), fail.clear()
    other = dict(kw, cuda_sources=kw["cuda_sources"] + " ")
    assert cpp.load_inline(**other) == "narrow" and calls == ["narrow"]

    calls.clear(), fail.update({"narrow", "fast", "stock"})
    bad = dict(kw, cuda_sources=kw["cuda_sources"] + "  ")
    with pytest.raises(RuntimeError, match="foo"):
        cpp.load_inline(**bad)
    assert calls == ["narrow", "fast", "stock"]
    with pytest.raises(RuntimeError, match="failed before"):  # a diagnosed failure is not rebuilt
        cpp.load_inline(**bad)
    assert calls == ["narrow", "fast", "stock"]
    for off in ("unset", "0", "parallel nvcc off", "no nvcc"):  # off by default, or without kverify's nvcc to check it
        if off == "unset":
            monkeypatch.delenv("KVERIFY_NARROW_HEADERS")
        elif off == "0":
            monkeypatch.setenv("KVERIFY_NARROW_HEADERS", "0")
        elif off == "parallel nvcc off":
            monkeypatch.setenv("KVERIFY_NARROW_HEADERS", "1")
            monkeypatch.setenv("KVERIFY_PARALLEL_NVCC", "0")
        else:
            monkeypatch.delenv("KVERIFY_PARALLEL_NVCC")
            monkeypatch.setattr(cpp, "CUDA_HOME", None)
        calls.clear(), fail.clear()
        kw["cuda_sources"] += " "
        assert cpp.load_inline(**dict(kw, cuda_sources=kw["cuda_sources"] + "   ")) == "fast" and calls == ["fast"]


CUDA_CAND = r'''
import torch
from torch.utils.cpp_extension import load_inline
cuda_src = """
#include <torch/extension.h>
__global__ void relu_k(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be on the GPU");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  auto g = torch::zeros({1}, xc.options().requires_grad(true));  // the factory's requires_grad path
  TORCH_CHECK(g.requires_grad(), "torch::zeros lost requires_grad");
  int64_t n = xc.numel();
  relu_k<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
_ext = load_inline(name="kv_narrow_gpu", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                   cuda_sources=cuda_src, functions=["relu"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.relu(x)
'''


@pytest.mark.gpu
@pytest.mark.slow
def test_cuda_candidate_builds_narrow_and_passes(tmp_path, monkeypatch):
    """On a GPU, narrow step on (KVERIFY_NARROW_HEADERS=1, checked by kverify's nvcc): a typical
    CUDA candidate is built by it and runs correctly."""
    from kverify.check import check

    monkeypatch.setenv("KVERIFY_NARROW_HEADERS", "1")
    p = precompile(REF, "ref.py", CUDA_CAND, "cand.py", device="cuda", timeout=120)
    assert p.status == "ok", p.error
    assert [b["mode"] for b in p.builds.values()] == ["narrow"], p.builds
    r = check(REF, "ref.py", CUDA_CAND, "cand.py", device="cuda", gates=["G01", "G02", "G07"])
    assert r["class"] == "CLEAN", [(g["gate"], g["verdict"], g["summary"]) for g in r["gates"]]


@pytest.mark.slow
def test_both_audit_modes_journal_a_caught_compile_error_with_the_mark(tmp_path):
    """A candidate that catches its failed build and loads without its extension is COMPILE_ERROR
    with CAUGHT_MARK; one whose failure propagates, without it; the sequential audit (the check
    loads the candidate) and the pipeline (precompile's warm-up) journal the same reasons."""
    import sqlite3

    from kverify.audit import run_audit

    rows = [{"id": "caught", "reference": REF, "candidate": CAUGHT},
            {"id": "raised", "reference": REF, "candidate": CAND.format(body="y")}]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reasons = []
    for k, mode in enumerate(({"jobs": 1}, {"jobs": 1, "compile_jobs": 1})):
        j = tmp_path / f"j{k}.sqlite"
        run_audit(str(corpus), str(j), device="cpu", gates=["G01"], **mode)
        with sqlite3.connect(j) as db:
            reasons.append(dict(db.execute("SELECT id, class || ': ' || reason FROM kernels").fetchall()))
    assert reasons[0] == reasons[1], reasons
    assert reasons[0]["caught"].startswith(f"COMPILE_ERROR: extension kv_build_test failed to build ({CAUGHT_MARK}): ")
    assert reasons[0]["raised"].startswith("COMPILE_ERROR: extension kv_build_test failed to build: ")


def test_a_build_the_machine_failed_is_not_a_compile_error(tmp_path, monkeypatch):
    """A compiler that could not write its output (a full disk on the H200 audit, stop 21) is the
    machine's failure: recorded as not diagnosed (a later call builds again), and failed_build
    gives a kverify-fault reason (the audit journals UNJUDGED, which --redo-faults judges again),
    not a compile error of the candidate."""
    import functools

    import torch.utils.cpp_extension as cpp

    from kverify._internal import fastbuild
    from kverify.build import failed_build
    from kverify.journal import FAULT_PREFIX

    calls, full = [], [True]
    real = cpp.load_inline

    @functools.wraps(real)
    def fake(**kw):
        calls.append(kw["name"])
        if full[0]:
            raise RuntimeError(f"Error building extension '{kw['name']}': /usr/include/c++/13/bits/ostream.tcc(183): "
                               "catastrophic error: error while writing generated C++ file: No space left on device")
        return "built"

    monkeypatch.setattr(cpp, "load_inline", fake)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("KVERIFY_FAST_BUILD", "1")
    fastbuild.install()
    kw = dict(name="e", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }", functions=["f"])
    with pytest.raises(RuntimeError, match="No space left"):
        cpp.load_inline(**kw)
    state = fastbuild.read_state(tmp_path)
    (entry,) = state.values()
    assert entry["ok"] is False and entry["diagnosed"] is False and entry["machine_fault"] == "error while writing"
    reason = failed_build(state)
    assert reason.startswith(f"{FAULT_PREFIX}: extension e could not be built on this machine (error while writing)"), reason
    assert "No space left on device" in reason
    full[0] = False  # disk freed: built again, not "failed before"
    assert cpp.load_inline(**kw) == "built" and len(calls) >= 2
    assert failed_build(fastbuild.read_state(tmp_path)) == ""
    # a compiler diagnostic of the candidate's stays a compile error
    diag = {"e-1": {"ok": False, "error": "cuda.cu(3): error: identifier \"foo\" is undefined", "diagnosed": True}}
    assert failed_build(diag).startswith("extension e failed to build: ")


#: a candidate whose build the "machine" fails: torch's compile step raises what a compiler on a
#: full disk printed on the H200 (stop 21)
FULL_DISK = """
import torch
import torch.utils.cpp_extension as cpp
def _full_disk(*a, **k):
    raise RuntimeError("Error building extension 'kv_full': /usr/include/c++/13/bits/ostream.tcc(183): "
                       "catastrophic error: error while writing generated C++ file: No space left on device")
cpp._jit_compile = _full_disk
_ext = cpp.load_inline(name="kv_full", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }", functions=["f"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.f(x)
"""


def test_both_audit_modes_journal_a_build_the_machine_failed_as_a_kverify_fault(tmp_path):
    """The sequential audit (check_row) and the pipeline (the build stage's "fault" status)
    journal such a row UNJUDGED with a kverify-fault reason (so --redo-faults selects it), never
    COMPILE_ERROR."""
    import sqlite3

    from kverify.audit import run_audit
    from kverify.journal import FAULT_PREFIX, Journal

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "full", "reference": REF, "candidate": FULL_DISK}) + "\n")
    for k, mode in enumerate(({"jobs": 1}, {"jobs": 1, "compile_jobs": 1})):
        j = tmp_path / f"j{k}.sqlite"
        run_audit(str(corpus), str(j), device="cpu", gates=["G01"], **mode)
        with sqlite3.connect(j) as db:
            (klass, reason), = db.execute("SELECT class, reason FROM kernels").fetchall()
        assert klass == "UNJUDGED", (mode, klass, reason)
        assert reason.startswith(f"{FAULT_PREFIX}: extension kv_full could not be built on this machine "
                                 "(error while writing): "), reason
        jr = Journal(str(j))
        try:
            assert jr.faults() == ["full"]
        finally:
            jr.close()
