"""kverify._internal.ppcache: a kept preprocessed prefix gives the very bytes of the real ``gcc -E``,
and pnvcc's lane runs its tool on the real output whenever they differ. Needs only gcc (the CUDA
lanes use nvcc's gcc commands; here plain C++ with a forced include, a system and a user header)."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from kverify._internal import pnvcc, ppcache

gxx = shutil.which("g++")
pytestmark = pytest.mark.skipif(gxx is None, reason="needs g++")

SYS_H = """#pragma once
#define SYS_INF (__builtin_inff ())
#define SYS_F(x) ((x) + 1)
#define SYS_COUNT __COUNTER__
int sys_decl(int);
"""
USER_H = """#ifndef USER_H
#define USER_H
#define USER_K 3
#undef __OPTIMIZE__
int user_decl(int);
#endif
"""
REST = """
float f() { return -SYS_INF + SYS_F(USER_K) + FORCED; }
const char *quoted = QUOTED;
#ifdef __OPTIMIZE__
int opt = 1;
#endif
int line = __LINE__;
"""


def _tree(tmp_path, headers=("sysmac.h", "user.h")):
    (tmp_path / "sys").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "sys" / "sysmac.h").write_text(SYS_H)
    (tmp_path / "inc" / "user.h").write_text(USER_H)
    (tmp_path / "forced.h").write_text("#define FORCED 1\n")
    return "".join(f"#include <{h}>\n" for h in headers) + "// the candidate's own code\n"


def _source(tmp_path, name, block, rest, blank=0):
    d = tmp_path / name
    d.mkdir()
    src = d / "cuda.cu"
    src.write_text(block + "\n" * blank + rest)
    return src


def _cmd(tmp_path, src, out, name="ext_a"):
    """A preprocessing command as nvcc -dryrun lists them: a define quoted with backslashes as
    torch's ninja file may write -DPYBIND11_COMPILER_TYPE=\\"_gcc\\" (this cache's first
    version refused any command with a backslash), and the extension's name, which differs from
    extension to extension (its first version keyed on it)."""
    return (shlex.join([gxx, "-E", "-x", "c++", "-O2", "-isystem", str(tmp_path / "sys"), "-I", str(tmp_path / "inc")])
            + ' "-DQUOTED=\\"_gcc\\"" ' + shlex.join([f"-DTORCH_EXTENSION_NAME={name}", "-include",
                                                    str(tmp_path / "forced.h"), str(src), "-o", str(out)]))


def _real(cmd):
    subprocess.run(cmd, shell=True, check=True)
    w = shlex.split(cmd)
    return open(w[w.index("-o") + 1], "rb").read()


def _kept(tmp_path, block, root):
    """An entry for ``block``: made from two sources (seen, then made)."""
    for k, name in enumerate(("m1", "m2")):
        src = _source(tmp_path, name, block, REST, blank=k)
        cmd = _cmd(tmp_path, src, src.with_suffix(".ii"))
        p = ppcache.plan(cmd, dict(os.environ), root)
        assert p is not None
        assert ppcache.make(p, dict(os.environ), _real(cmd)) == ("seen", "made")[k]
    assert ppcache.ready(p)
    return p


def test_the_include_block_is_the_leading_angle_includes_with_blanks_and_line_comments():
    assert ppcache.block(b"#include <a.h>\n\n// x\n#  include <b/c.h> // why\nint x;\n") == ([(1, "a.h"), (4, "b/c.h")], 5)
    assert ppcache.block(b'#include <a.h>\n#include "q.h"\n') == ([(1, "a.h")], 2)  # a quoted include ends it
    assert ppcache.block(b"#include <a.h>\n// a comment going on \\\n#include <b.h>\n") == ([(1, "a.h")], 2)
    assert ppcache.block(b"int x;\n#include <a.h>\n") is None
    assert ppcache.block(b"#include <a.h>\n") is None  # nothing after it: nothing to gain


@pytest.mark.parametrize("headers", [("sysmac.h", "user.h"), ("user.h", "sysmac.h")],
                         ids=["user-header-last", "system-header-last"])
@pytest.mark.parametrize("blank", [0, 3, 12])
def test_a_kept_prefix_and_the_rest_give_the_real_preprocessor_s_bytes(tmp_path, headers, blank):
    """Other sources with the same block: the rest starts with a system header's macro (the
    printer's system-header state), sits after 0-12 blank lines (newlines or a line marker), uses
    a macro the forced include defined and one a header undefined (__OPTIMIZE__, predefined at -O2)."""
    block = _tree(tmp_path, headers)
    root = str(tmp_path / "pch")
    _kept(tmp_path, block, root)
    for k, rest in enumerate([REST, "float g = SYS_INF;\n" + REST, "int h = USER_K;\n#define LOCAL 2\nint i = LOCAL;\n"]):
        src = _source(tmp_path, f"u{k}", block, rest + "int TORCH_EXTENSION_NAME;\n", blank)
        cmd = _cmd(tmp_path, src, src.with_suffix(".ii"), name=f"ext_{k}")  # each extension its own name
        p = ppcache.plan(cmd, dict(os.environ), root)
        assert ppcache.ready(p)
        real = _real(cmd)
        os.unlink(p.output)
        assert ppcache.splice(p, dict(os.environ))
        assert open(p.output, "rb").read() == real


def test_the_key_follows_the_block_and_the_command(tmp_path):
    block = _tree(tmp_path)
    a = _source(tmp_path, "a", block, REST)
    b = _source(tmp_path, "b", block + "#include <vector>\n", REST)
    c = _source(tmp_path, "c", block, "int other;\n")
    plan = lambda s, extra="": ppcache.plan(_cmd(tmp_path, s, s.with_suffix(".ii")) + extra, {}, "/r")  # noqa: E731
    assert plan(a).folder == plan(c).folder  # the rest is not in the key
    assert plan(a).folder != plan(b).folder
    assert plan(a).folder != plan(a, " -DX=1").folder
    assert plan(a).folder == ppcache.plan(_cmd(tmp_path, a, a.with_suffix(".ii"), name="other"), {}, "/r").folder
    assert ppcache.plan(_cmd(tmp_path, a, a.with_suffix(".ii")), {}, None) is None


def _lane(tmp_path, src, tool_bin):
    """A lane as pnvcc runs it: gcc -E into an .ii, then a tool named cicc copying its input."""
    ii, out = src.with_suffix(".cpp1.ii"), src.with_suffix(".tool")
    return [_cmd(tmp_path, src, ii), shlex.join([str(tool_bin / "cicc"), str(ii), str(out)])], ii, out


TOOL = """import os, shutil, sys, time
log = open(os.environ["FAKE_TOOL_LOG"], "a")
log.write("start\\n"); log.flush()
time.sleep(float(os.environ.get("FAKE_TOOL_SLEEP", "0.3")))
shutil.copy(sys.argv[1], sys.argv[2])
log.write("end\\n")
"""


@pytest.fixture
def tool_bin(tmp_path, monkeypatch):
    """A tool named cicc that copies its input, logging "start" and "end" to FAKE_TOOL_LOG."""
    b = tmp_path / "bin"
    b.mkdir()
    (b / "cicc").write_text(f"#!{sys.executable}\n" + TOOL)
    (b / "cicc").chmod(0o755)
    monkeypatch.setenv("FAKE_TOOL_LOG", str(tmp_path / "tool.log"))
    return b


def _tool_log(tmp_path):
    f = tmp_path / "tool.log"
    lines = f.read_text().split() if f.exists() else []
    f.unlink(missing_ok=True)
    return lines.count("start"), lines.count("end")


def _run_lane(cmds, tmp_path, monkeypatch, root):
    trace = tmp_path / f"trace{len(os.listdir(tmp_path))}.txt"
    monkeypatch.setenv("KVERIFY_PNVCC_TRACE", str(trace))
    monkeypatch.setenv("KVERIFY_PCH_DIR", root)
    out: list = []
    ok = pnvcc._run_lane(cmds, dict(os.environ), out, "device")
    return ok, trace.read_text() if trace.exists() else ""


def test_the_lane_makes_then_uses_an_entry_and_the_tool_reads_the_real_bytes(tmp_path, tool_bin, monkeypatch):
    block = _tree(tmp_path)
    root = str(tmp_path / "pch")
    said = []
    for k in range(3):
        cmds, ii, out = _lane(tmp_path, _source(tmp_path, f"s{k}", block, REST, blank=k), tool_bin)
        ok, trace = _run_lane(cmds, tmp_path, monkeypatch, root)
        assert ok
        said.append([x for x in ("pp device seen", "pp device made", "pp device used") if x in trace])
        real = _real(cmds[0].replace(str(ii), str(ii) + ".check"))
        assert open(out, "rb").read() == real == open(ii, "rb").read()
        assert not os.path.exists(str(ii) + ".kvreal")
    assert said == [["pp device seen"], ["pp device made"], ["pp device used"]]


@pytest.mark.parametrize("spoil", ["prefix", "counter"])
def test_a_splice_that_differs_is_caught_and_the_tool_runs_on_the_real_output(tmp_path, tool_bin, monkeypatch, spoil):
    """Positive controls: a kept prefix altered after it was made (a header changed since: the
    entry is removed), and a state -imacros cannot carry (__COUNTER__ went up in the block: the
    rest alone differs, the entry stays): the tool is stopped and its output is the real
    preprocessor's."""
    block = _tree(tmp_path)
    root = str(tmp_path / "pch")
    rest = REST
    if spoil == "counter":
        (tmp_path / "sys" / "sysmac.h").write_text(SYS_H + "enum { sys_first = __COUNTER__ };\n")
        rest = "int n = SYS_COUNT;\n" + REST
    p = _kept(tmp_path, block, root)
    if spoil == "prefix":
        f = os.path.join(p.folder, "prefix.ii")
        text = open(f, "rb").read()
        assert b"sys_decl" in text
        open(f, "wb").write(text.replace(b"sys_decl", b"sys_dec1"))
    cmds, ii, out = _lane(tmp_path, _source(tmp_path, "x", block, rest), tool_bin)
    _tool_log(tmp_path)
    monkeypatch.setenv("FAKE_TOOL_SLEEP", "2")  # the speculative run is stopped mid-way
    ok, trace = _run_lane(cmds, tmp_path, monkeypatch, root)
    time.sleep(2.5)  # a speculative run left going would end by now
    assert _tool_log(tmp_path)[1] == 1
    said = "pp device differs\n" if spoil == "prefix" else "pp device differs after the prefix\n"
    assert ok and said in trace and "pp device used" not in trace
    real = _real(cmds[0].replace(str(ii), str(ii) + ".check"))
    assert open(out, "rb").read() == real
    if spoil == "counter":  # the kept prefix is right; the rest's counter is this source's own
        assert b"int n = 1;" in real
        assert ppcache.ready(p)
        return
    assert not ppcache.ready(p)
    # made again when next seen, until it differed MAX_DIFFERS times
    px = ppcache.plan(cmds[0], dict(os.environ), root)
    assert px.folder == p.folder
    text = _real(cmds[0])
    assert ppcache.make(px, dict(os.environ), text) == "made"
    nonce = json.load(open(os.path.join(px.folder, "meta.json")))["nonce"]
    ppcache.forget(px, "another entry's")  # made again since that splice: left alone
    assert ppcache.ready(px)
    ppcache.forget(px, nonce)
    assert ppcache.make(px, dict(os.environ), text) == ""
    assert not [f for f in os.listdir(os.path.dirname(px.folder)) if ".tmp" in f or ".gone" in f]


def test_a_difference_after_the_prefix_keeps_the_entry(tmp_path, tool_bin, monkeypatch):
    """A source whose own text preprocesses otherwise when alone (its __BASE_FILE__ names the rest
    file) gets the real output, and the block's entry stays for the other sources."""
    block = _tree(tmp_path)
    root = str(tmp_path / "pch")
    p = _kept(tmp_path, block, root)
    cmds, ii, out = _lane(tmp_path, _source(tmp_path, "b", block, "const char *base = __BASE_FILE__;\n" + REST), tool_bin)
    ok, trace = _run_lane(cmds, tmp_path, monkeypatch, root)
    assert ok and "pp device differs after the prefix" in trace
    assert open(out, "rb").read() == _real(cmds[0].replace(str(ii), str(ii) + ".check"))
    assert ppcache.ready(p) and not os.path.exists(p.folder + ".differs")


def test_a_real_preprocessor_failing_where_the_splice_succeeds_fails_the_lane(tmp_path, tool_bin, monkeypatch):
    """A block header that now stops with #error (the kept state does not know): the lane fails,
    as nvcc's would, and the tool started on the splice is stopped."""
    block = _tree(tmp_path)
    root = str(tmp_path / "pch")
    _kept(tmp_path, block, root)
    (tmp_path / "inc" / "user.h").write_text(USER_H + "#error user.h is broken now\n")
    cmds, ii, out = _lane(tmp_path, _source(tmp_path, "bad", block, REST), tool_bin)
    _tool_log(tmp_path)
    monkeypatch.setenv("FAKE_TOOL_SLEEP", "2")
    ok, _ = _run_lane(cmds, tmp_path, monkeypatch, root)
    assert not ok
    time.sleep(2.5)  # a tool left going would end by now
    assert _tool_log(tmp_path)[1] == 0 and not out.exists()


def test_commands_the_shell_would_expand_are_left_alone(tmp_path):
    block = _tree(tmp_path)
    src = _source(tmp_path, "a", block, REST)
    cmd = _cmd(tmp_path, src, src.with_suffix(".ii"))
    assert ppcache.plan(cmd, {}, str(tmp_path)) is not None
    for extra in (' "-DA=\\"$HOME\\""', " -DB=`id`", " -MD", " --include=x.h", " -imacros m.h"):
        assert ppcache.plan(cmd + extra, {}, str(tmp_path)) is None, extra
    assert ppcache.plan(cmd, {"DEPENDENCIES_OUTPUT": "d"}, str(tmp_path)) is None
    assert ppcache.plan(cmd, {}, "relative/root") is None


def test_a_started_tool_is_the_process_itself_in_the_build_s_group_and_session():
    """Whatever stops the build (a signal to its process group, as timeout and ninja send, or to
    its session, as the sandbox does) reaches a tool started beside the real preprocessor, and
    _stop kills the tool itself (started with exec: no shell left between). Only one simple
    command is started so."""
    p, t, _ = pnvcc._start("sleep 5", dict(os.environ))
    time.sleep(0.3)
    assert os.getpgid(p.pid) == os.getpgid(0) and os.getsid(p.pid) == os.getsid(0)
    assert open(f"/proc/{p.pid}/comm").read().strip() == "sleep"
    pnvcc._stop(p, t)
    assert p.returncode == -9
    assert pnvcc._simple('cicc "a; b" -o "x|y" --flag=1')
    assert not any(pnvcc._simple(c) for c in ("a && b", "a; b", "a > f", "a | b", "a & b", "(a)"))


def test_a_header_changed_since_the_entry_was_made_is_seen_before_use(tmp_path, tool_bin, monkeypatch):
    """A header changes only a macro's value (the kept prefix prints the same, the kept state is
    stale): the entry is removed before use (not counted as a difference), made again from the
    headers as they are, and used."""
    block = _tree(tmp_path)
    root = str(tmp_path / "pch")
    p = _kept(tmp_path, block, root)
    (tmp_path / "inc" / "user.h").write_text(USER_H.replace("#define USER_K 3", "#define USER_K 4"))
    said = []
    for k in range(2):
        cmds, ii, out = _lane(tmp_path, _source(tmp_path, f"c{k}", block, REST), tool_bin)
        ok, trace = _run_lane(cmds, tmp_path, monkeypatch, root)
        assert ok and open(out, "rb").read() == _real(cmds[0].replace(str(ii), str(ii) + ".check"))
        said.append([ln for ln in trace.splitlines() if ln.startswith("pp ")])
    assert said == [["pp device stale", "pp device made"], ["pp device used"]]
    assert not os.path.exists(p.folder + ".differs")


def test_code_right_after_the_last_include_makes_an_entry_that_serves_every_layout(tmp_path):
    """The maker's last include is followed by code at once (its header's return marker is at
    the rest's first line); sources with blank lines there use the entry all the same."""
    block = _tree(tmp_path).replace("// the candidate's own code\n", "")
    root = str(tmp_path / "pch")
    for k in range(2):
        src = _source(tmp_path, f"m{k}", block, REST.lstrip("\n"))
        cmd = _cmd(tmp_path, src, src.with_suffix(".ii"))
        assert ppcache.make(ppcache.plan(cmd, dict(os.environ), root), dict(os.environ), _real(cmd)) == ("seen", "made")[k]
    for blank in (0, 1, 10):
        src = _source(tmp_path, f"u{blank}", block, REST.lstrip("\n"), blank)
        cmd = _cmd(tmp_path, src, src.with_suffix(".ii"))
        p = ppcache.plan(cmd, dict(os.environ), root)
        real = _real(cmd)
        assert ppcache.splice(p, dict(os.environ)) and open(p.output, "rb").read() == real


nvcc = shutil.which("nvcc")
NV_KERNEL = """#include <cuda_runtime.h>
#include <cstdio>

__global__ void add(const float* a, float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] += a[i] * OFFSET; }
void launch(const float* a, float* b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); printf("%d", TORCH_EXTENSION_NAME); }
"""


@pytest.mark.skipif(nvcc is None, reason="needs nvcc")
def test_through_kverifys_nvcc_a_kept_prefix_serves_and_the_object_is_nvccs(tmp_path):
    """Three CUDA sources with one include block, each its own extension name, through kverify's
    nvcc with a cache folder: seen, made, then both lanes served from the kept prefix, and the
    last object equals nvcc's (temporary file names aside)."""
    root, trace, scratch = tmp_path / "pch", tmp_path / "trace.txt", tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "KVERIFY_PNVCC_TRACE": str(trace), "KVERIFY_PCH_DIR": str(root), "KVERIFY_HOST_PCH": "0",
           "TMPDIR": str(scratch)}

    def build(cmd, tag, k):
        src = tmp_path / f"s{k}" / "cuda.cu"  # the module id follows the source's path and text
        src.parent.mkdir(exist_ok=True)
        src.write_text(NV_KERNEL.replace("OFFSET", str(k)))
        obj = tmp_path / f"{tag}{k}.o"
        r = subprocess.run([*cmd, f"-DTORCH_EXTENSION_NAME={k}", "-O3", "-gencode=arch=compute_90,code=sm_90",
                            "--compiler-options", "-fPIC", "-c", str(src), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        return obj
    ours = [sys.executable, str(pnvcc.__file__)]
    for k in range(3):
        trace.write_text("")
        used = build(ours, "ours", k)
        said = sorted(ln for ln in trace.read_text().splitlines() if ln.startswith("pp "))
        assert said == [["pp device seen", "pp host seen"], ["pp device made", "pp host made"], ["pp device used", "pp host used"]][k], said
    theirs = build([nvcc], "nvcc", 2)
    norm = lambda p: re.sub(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}", b"tmpxft_X", p.read_bytes())  # noqa: E731
    assert norm(used) == norm(theirs)
