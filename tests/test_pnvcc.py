"""kverify._internal.pnvcc: nvcc's own commands in a host and a device lane. Listing logic on the
CPU; with nvcc on PATH, the object equals nvcc's (temporary file names aside) and errors are nvcc's."""
import os
import shutil
import subprocess
import sys

import pytest

from kverify._internal import pnvcc

T = "/tmp/kv/tmpxft_00001234_00000000"
# an `nvcc -dryrun -c a.cu -o a.o` listing of nvcc 13.0 (arguments shortened), deps options removed
LISTING = f"""#$ _NVVM_BRANCH_=nvvm
#$ TOP=/usr/local/cuda/bin/..
#$ CICC_PATH=$TOP/nvvm/bin
#$ INCLUDES="-I/usr/local/cuda/include"
#$ gcc -D__CUDA_ARCH_LIST__=900 -E -x c++ -D__CUDACC__ "a.cu" -o "{T}-5_a.cpp4.ii"
#$ cudafe++ --c++17 --gen_c_file_name "{T}-6_a.cudafe1.cpp" --stub_file_name "tmpxft_00001234_00000000-6_a.cudafe1.stub.c" --gen_module_id_file --module_id_file_name "{T}-4_a.module_id" "{T}-5_a.cpp4.ii"
#$ gcc -D__CUDA_ARCH__=900 -E -x c++ -D__CUDACC__ "a.cu" -o "{T}-7_a.cpp1.ii"
#$ "$CICC_PATH/cicc" --c++17 -arch compute_90 --module_id_file_name "{T}-4_a.module_id" --gen_c_file_name "{T}-6_a.cudafe1.c" --stub_file_name "{T}-6_a.cudafe1.stub.c" "{T}-7_a.cpp1.ii" -o "{T}-6_a.ptx"
#$ ptxas -arch=sm_90 -m64 "{T}-6_a.ptx" -o "{T}-8_a.cubin"
#$ fatbinary -64 "--image3=kind=elf,sm=90,file={T}-8_a.cubin" --embedded-fatbin="{T}-3_a.fatbin.c"
#$ rm {T}-3_a.fatbin
#$ gcc -D__CUDA_ARCH__=900 -c -x c++ -fPIC "{T}-6_a.cudafe1.cpp" -o "a.o"
"""


def test_the_listing_splits_into_a_host_and_a_device_lane():
    env, cmds = pnvcc.plan(LISTING, {"PATH": "/bin"})
    assert env["CICC_PATH"] == "/usr/local/cuda/bin/../nvvm/bin" and env["INCLUDES"] == "-I/usr/local/cuda/include"
    assert len(cmds) == 8
    host, device, as_nvcc, last = pnvcc.lanes(cmds)
    assert [pnvcc._tool(c) for c in host] == ["gcc", "cudafe++"]
    assert [pnvcc._tool(c) for c in device] == ["gcc", "cicc", "ptxas", "fatbinary", "rm"]
    assert last.endswith('-o "a.o"')
    cicc = device[1]
    assert f'--gen_module_id_file --module_id_file_name "{T}-4_a.module_id.cicc1"' in cicc  # its own copy
    assert as_nvcc[1] == cmds[3]  # the fallback lane is nvcc's, unchanged
    assert pnvcc._module_id_file(host[-1]) == f"{T}-4_a.module_id"


@pytest.mark.parametrize("change", ["two cudafe++", "filter step", "no module id", "unknown tool", "no -c"])
def test_a_chain_of_another_shape_is_left_to_nvcc(change):
    _, cmds = pnvcc.plan(LISTING, {})
    if change == "two cudafe++":
        cmds.insert(2, cmds[1])
    elif change == "filter step":
        cmds.insert(2, "-- Filter Dependencies -- > a.d")
    elif change == "no module id":
        cmds[1] = cmds[1].replace("--gen_module_id_file ", "")
    elif change == "unknown tool":
        cmds.insert(5, "nvdisasm x.cubin")
    else:
        cmds[-1] = cmds[-1].replace(" -c ", " ")
    assert pnvcc.lanes(cmds) is None


def test_each_architectures_cicc_writes_its_own_module_id():
    _, cmds = pnvcc.plan(LISTING, {})
    second = cmds[3].replace("compute_90", "compute_80").replace("-6_a.ptx", "-9_a.ptx")
    cmds.insert(4, second)
    host, device, as_nvcc, _ = pnvcc.lanes(cmds)
    own = [pnvcc._module_id_file(c) for c in device if pnvcc._tool(c) == "cicc"]
    assert own == [f"{T}-4_a.module_id.cicc1", f"{T}-4_a.module_id.cicc2"]  # compared one by one


def test_the_dependency_file_options_are_taken_out():
    argv = ["--generate-dependencies-with-compile", "--dependency-output", "x.o.d", "-O3", "-c", "a.cu", "-o", "x.o"]
    assert pnvcc._without_depfile(argv) == (["-O3", "-c", "a.cu", "-o", "x.o"], "x.o.d")
    argv = ["-MD", "-MF", "x.o.d", "-c", "a.cu", "-o", "x.o"]  # the form torch 2.13's ninja file uses
    assert pnvcc._without_depfile(argv) == (["-c", "a.cu", "-o", "x.o"], "x.o.d")
    assert pnvcc._without_depfile(["-c", "a.cu"]) == (["-c", "a.cu"], None)


def test_the_dependency_file_names_every_header_the_preprocessor_read(tmp_path):
    pre = tmp_path / "a.cpp4.ii"
    pre.write_text('# 1 "/src/a.cu"\n# 1 "<built-in>"\n# 1 "/inc/my header.h" 1\nint x;\n# 7 "/inc/b.h" 1 3\n')
    dep = tmp_path / "a.o.d"
    pnvcc.write_depfile(str(dep), "a.o", "/src/a.cu", [str(pre), None])
    text = dep.read_text()
    assert text.startswith("a.o: /src/a.cu") and "/inc/my\\ header.h" in text and "/inc/b.h" in text
    assert "built-in" not in text


nvcc = shutil.which("nvcc")
KERNEL = "__global__ void add(const float* a, float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] += a[i]; }\n" \
         "void launch(const float* a, float* b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }\n"


def _compile(cmd, src, tmp_path, tag):
    obj, dep = tmp_path / f"{tag}.o", tmp_path / f"{tag}.o.d"
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    r = subprocess.run([*cmd, "--generate-dependencies-with-compile", "--dependency-output", str(dep), "-O3",
                        "-gencode=arch=compute_90,code=sm_90", "--compiler-options", "-fPIC", "-c", str(src), "-o", str(obj)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(scratch)})
    return r, obj, dep


@pytest.mark.skipif(nvcc is None, reason="needs nvcc")
def test_a_trace_file_it_cannot_write_changes_nothing(tmp_path, monkeypatch):
    """KVERIFY_PNVCC_TRACE names a file in a folder that does not exist: the build is the lanes'
    all the same (no step counted as failed, no fall back to nvcc, no traceback). Without a trace,
    the fallback shows in nvcc's calls: the lanes call it only with -dryrun (KVERIFY_REAL_NVCC, a
    wrapper here that logs its arguments), the fallback without."""
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    calls = tmp_path / "nvcc_calls.txt"
    wrapper = tmp_path / "nvcc_wrapper.sh"
    wrapper.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "$*" >> "{calls}"\nexec "{nvcc}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("KVERIFY_REAL_NVCC", str(wrapper))
    monkeypatch.setenv("KVERIFY_PNVCC_TRACE", str(tmp_path / "no" / "such" / "trace.txt"))
    r, obj, _ = _compile([sys.executable, str(pnvcc.__file__)], src, tmp_path, "ours")
    assert r.returncode == 0 and obj.exists() and "Traceback" not in r.stderr, r.stderr
    made = calls.read_text().splitlines()
    assert len(made) == 1 and " -dryrun " in f" {made[0]} ", made  # nvcc listed the steps, ran none


@pytest.mark.skipif(nvcc is None, reason="needs nvcc")
def test_the_object_is_nvccs_and_errors_are_nvccs(tmp_path, monkeypatch):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    ours = [sys.executable, str(pnvcc.__file__)]
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("KVERIFY_PNVCC_TRACE", str(trace))
    a, obj_a, _ = _compile([nvcc], src, tmp_path, "nvcc")
    b, obj_b, dep_b = _compile(ours, src, tmp_path, "ours")
    assert a.returncode == 0 and b.returncode == 0, b.stderr
    # not nvcc itself, no second device lane (besides each step's "step LANE TOOL SECONDS" line)
    assert [ln for ln in trace.read_text().splitlines() if not ln.startswith("step ")] == ["lanes"], trace.read_text()
    norm = lambda p: pnvcc.normalised(p.read_bytes())  # noqa: E731
    assert norm(obj_a) == norm(obj_b)  # nvcc's objects differ run to run only in those names
    assert dep_b.read_text().startswith(f"{obj_b}: {src}")
    assert "cuda_runtime.h" in dep_b.read_text()  # the headers it read
    assert not list((tmp_path / "scratch").iterdir())  # its temporary folder is gone
    # a compile error: nvcc's own message and status
    bad = tmp_path / "bad.cu"
    bad.write_text(KERNEL.replace("b[i] += a[i];", "b[i] += undeclared;"))
    a, *_ = _compile([nvcc], bad, tmp_path, "nvcc_bad")
    b, *_ = _compile(ours, bad, tmp_path, "ours_bad")
    assert a.returncode != 0 and b.returncode == a.returncode
    assert "undeclared" in b.stderr and "error" in b.stderr
    assert trace.read_text().splitlines()[-1] == "nvcc: a step failed"


def test_its_temporary_folder_goes_under_the_audits_folder_and_is_removed(tmp_path, monkeypatch):
    """In an audit (KVERIFY_WORKDIR_ROOT set) nvcc's temporary files go under the audit's own
    folder, which the audit removes: a build killed mid-step leaves no /tmp/kverify-pnvcc-*. The
    real nvcc here is a stand-in that records its TMPDIR and fails its -dryrun (pnvcc then hands
    the call to it, as to nvcc)."""
    seen = tmp_path / "tmpdirs.txt"
    fake = tmp_path / "nvcc"
    fake.write_text(f"#!/bin/sh\necho \"$TMPDIR\" >> {seen}\ncase \" $* \" in *' -dryrun '*) exit 1;; esac\nexit 0\n")
    fake.chmod(0o755)
    root = tmp_path / "audit"
    root.mkdir()
    monkeypatch.setenv("KVERIFY_REAL_NVCC", str(fake))
    monkeypatch.setenv("KVERIFY_WORKDIR_ROOT", str(root))
    monkeypatch.delenv(pnvcc.CHECK_REDUCED, raising=False)
    assert pnvcc.main(["-c", "a.cu", "-o", "a.o"]) == 0
    dryrun_tmp = seen.read_text().splitlines()[0]
    assert os.path.dirname(dryrun_tmp) == str(root) and os.path.basename(dryrun_tmp).startswith("kverify-pnvcc-")
    assert not list(root.iterdir())  # removed when the call ended


def test_objects_are_compared_with_only_nvccs_temporary_names_made_one():
    """normalised makes every tmpxft_<8 hex>_<8 hex> name one name and changes nothing else, so two
    builds that differ only there compare equal and any other difference still shows."""
    a = b"\x00obj tmpxft_00001234_00000000-6_a.cudafe1.cpp tmpxft_0000abcd_00000001\x7f"
    b = b"\x00obj tmpxft_00009999_0000ffff-6_a.cudafe1.cpp tmpxft_00000001_00000002\x7f"
    assert a != b and pnvcc.normalised(a) == pnvcc.normalised(b)
    assert pnvcc.normalised(b"tmpxft_0000123_00000000") == b"tmpxft_0000123_00000000"  # 7 digits: not a name
    assert pnvcc.normalised(a) != pnvcc.normalised(a.replace(b"obj", b"obk"))


def test_the_tools_run_with_huge_pages_unless_told_otherwise(monkeypatch):
    """tool_env adds glibc's huge-page malloc tunable to the tools' environment, after any tunables
    already set; KVERIFY_THP=0, or a GLIBC_TUNABLES that sets that tunable itself, leaves it as is."""
    monkeypatch.delenv("KVERIFY_THP", raising=False)
    assert pnvcc.tool_env({"PATH": "/bin"}) == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert pnvcc.tool_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})["GLIBC_TUNABLES"] \
        == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert pnvcc.tool_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    # another tunable whose name only starts the same, and a trailing separator
    assert pnvcc.tool_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb_x=1:"})["GLIBC_TUNABLES"] \
        == "glibc.malloc.hugetlb_x=1:glibc.malloc.hugetlb=1"
    assert pnvcc.tool_env({"PATH": "/bin", "KVERIFY_THP": "0"}) == {"PATH": "/bin", "KVERIFY_THP": "0"}
    monkeypatch.setenv("KVERIFY_THP", "0")  # the environment it is given decides, not this process's
    assert pnvcc.tool_env({"PATH": "/bin"})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"


FAKE_TOOL = """#!{python}
import os, sys
with open({log!r}, "a") as f:
    f.write(os.path.basename(sys.argv[0]) + " " + os.environ.get("GLIBC_TUNABLES", "-") + "\\n")
outs = ("-o", "--gen_c_file_name", "--stub_file_name", "--module_id_file_name")
for flag, name in zip(sys.argv, sys.argv[1:]):
    if flag in outs:
        with open(name, "w") as f:
            f.write("module id\\n" if flag == "--module_id_file_name" else "")
"""


@pytest.mark.parametrize("thp", ["on", "off"])
def test_every_tool_of_the_chain_gets_the_tools_environment(tmp_path, monkeypatch, thp):
    """End to end through pnvcc.main with stand-in tools (a fake nvcc whose -dryrun lists gcc,
    cudafe++, cicc, ptxas, fatbinary and the host compile, each a script that logs its name and
    GLIBC_TUNABLES and writes its outputs): every tool of both lanes and the last step runs with
    the huge-page tunable, none with KVERIFY_THP=0, and the build is the lanes' (no fallback)."""
    bin_, log, trace = tmp_path / "bin", tmp_path / "tools.log", tmp_path / "trace.txt"
    bin_.mkdir()
    for name in ("gcc", "cudafe++", "cicc", "ptxas", "fatbinary"):
        (bin_ / name).write_text(FAKE_TOOL.format(python=sys.executable, log=str(log)))
        (bin_ / name).chmod(0o755)
    listing = LISTING.replace('"$CICC_PATH/cicc"', "cicc").replace("/tmp/kv/", f"{tmp_path}/")
    listing = "\n".join(ln if not ln.startswith("#$ ") or "=" in ln.split()[1] or ln.startswith("#$ rm")
                        else f"#$ {bin_}/{ln[3:]}" for ln in listing.splitlines() if "CICC_PATH" not in ln) + "\n"
    (tmp_path / "listing.txt").write_text(listing)
    fake = tmp_path / "nvcc"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'listing.txt'} >&2\ncase \" $* \" in *' -dryrun '*) exit 0;; esac\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KVERIFY_REAL_NVCC", str(fake))
    monkeypatch.setenv("KVERIFY_PNVCC_TRACE", str(trace))
    monkeypatch.delenv("KVERIFY_PCH_DIR", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv(pnvcc.CHECK_REDUCED, raising=False)
    monkeypatch.setenv("KVERIFY_THP", "1" if thp == "on" else "0")
    monkeypatch.chdir(tmp_path)
    assert pnvcc.main(["-c", "a.cu", "-o", "a.o"]) == 0
    assert [ln for ln in trace.read_text().splitlines() if not ln.startswith("step ")] == ["lanes"], trace.read_text()
    ran = log.read_text().splitlines()
    assert sorted(ln.split()[0] for ln in ran) == ["cicc", "cudafe++", "fatbinary", "gcc", "gcc", "gcc", "ptxas"]
    want = "glibc.malloc.hugetlb=1" if thp == "on" else "-"
    assert all(ln.split()[1] == want for ln in ran), ran
