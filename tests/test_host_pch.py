"""kverify._internal.hostpch: the host compile of cudafe++'s output with a precompiled prefix.

The logic runs on the CPU with g++ on a synthetic cudafe++ output (a prefix of header code with an
anonymous namespace named after the unit's module id, then the unit's own code); with nvcc on
PATH, a real unit through kverify's nvcc gives nvcc's object but for that namespace's name."""
import fcntl
import os
import re
import shutil
import subprocess
import sys

import pytest

from kverify._internal import hostpch, pnvcc

gxx = shutil.which("g++")
nvcc = shutil.which("nvcc")
MID = "_a1b2c3d4_4_a_cu_f00d"  # a module id of cudafe++'s form
ANON = "_GLOBAL__N_" + MID


MEMBERS = ("int counter = 7; inline int hidden_twice(int x) { return 2 * x; }\n"
           "inline int bump() { static int n = 0; return ++n; }\n")


def prefix(anon: str, n: int = 2100, members: str = MEMBERS, tail: str = "") -> str:
    """Header code as cudafe++ writes it: an anonymous namespace in ``lib`` (named ``anon``, with
    the using-directive cudafe++ adds) holding ``members``, ``n`` more lines, then ``tail``."""
    body = "".join(f"inline int f{i}() {{ return {i}; }}\n" for i in range(n))
    return (f'# 1 "/usr/include/lib.h" 3\nnamespace lib {{ namespace {anon} __attribute__((visibility("hidden"))) {{ }}; '
            f"using namespace ::lib::{anon}; \nnamespace {anon} __attribute__((visibility(\"hidden\"))) {{ \n"
            f"{members}}}\n}}\n" + body + tail)


def unit(anon: str, own: str, src: str = "/work/a.cu", tail: str = "", tag: str = "") -> str:
    """cudafe++'s output for a source ``src`` whose own code is ``own``, after the header code;
    the last line names the header's namespace as the stub does (``lib::<anon>::counter``)."""
    return (f'# 1 "{src}"\n#pragma GCC diagnostic push\n#pragma GCC diagnostic ignored "-Wattributes"\n'
            f'{prefix(anon, tail=tail)}# 5 "{src}"\n{own}\n'
            f"int *registered{tag}() {{ return &::lib::{anon}::counter; }}\n")


def test_split_takes_the_header_code_up_to_the_first_marker_back_into_the_source():
    text = unit(ANON, "int mine() { return f3() + lib::counter; }")
    first, pre, suf = hostpch.split(text)
    assert first == '# 1 "/work/a.cu"'
    assert pre.startswith("#pragma") and pre.endswith("inline int f2099() { return 2099; }\n")
    assert suf.startswith('# 5 "/work/a.cu"\nint mine()')
    assert first + "\n" + pre + suf == text  # nothing lost or added
    assert hostpch.split(text.replace('# 5 "/work/a.cu"', '# 5 "/work/b.cu"')) is None  # never back into the source
    assert hostpch.split("int x;\n" + text) is None  # not cudafe++'s first line
    short = f'# 1 "/work/a.cu"\n{prefix(ANON, 10)}# 5 "/work/a.cu"\nint y;\n'
    assert hostpch.split(short) is None  # too little header code to be worth a header


def test_normalise_puts_the_units_namespaces_in_a_real_anonymous_namespace():
    pre = prefix(ANON)
    norm = hostpch.normalise(pre, MID)
    fixed = f'namespace {hostpch.FIXED} __attribute__((visibility("hidden"))) {{'
    assert ANON not in norm
    # the declaration with its using-directive, then the members' block, closed one level deeper
    assert f"namespace {{ {fixed} }} }} using namespace ::lib::{hostpch.FIXED};" in norm
    assert f"namespace {{ {fixed} \n{MEMBERS}}} }}\n}}\n" in norm
    assert hostpch.normalise(prefix("_GLOBAL__N_" + "_other_id"), MID) == prefix("_GLOBAL__N_" + "_other_id")
    assert hostpch.normalise(pre + f"int _INTERNAL{MID}_x;\n", MID) is None  # a name made from the id otherwise
    assert hostpch.normalise(pre, "") is None and hostpch.normalise(pre, "a b") is None
    # a block holding a literal is not scanned (its braces could be in the literal): no header
    assert hostpch.normalise(prefix(ANON, members='const char *s = "}";\n'), MID) is None
    assert hostpch.normalise(prefix(ANON, members="int c = '{';\n"), MID) is None
    # nested braces and directive lines (with their quotes) inside a block are fine
    nested = 'struct P { int x{1}; };\n# 12 "/usr/include/lib.h" 3\n#pragma GCC diagnostic ignored "-Wshadow"\n'
    assert f"namespace {{ {fixed} \n{nested}}} }}" in hostpch.normalise(prefix(ANON, members=nested), MID)
    # two units' prefixes are the same text once normalised: that is what makes the header shared
    assert hostpch.normalise(prefix("_GLOBAL__N__ffff_9_b_cu_beef"), "_ffff_9_b_cu_beef") == norm


def test_directives_replays_diagnostic_pragmas_and_refuses_what_would_outlive_the_header():
    diag = ['#pragma GCC diagnostic push', '#pragma GCC diagnostic ignored "-Wunused-function"']
    text = "\n".join([diag[0], '# 7 "/usr/include/x.h" 3', "#define X 1", "#pragma GCC visibility push(default)",
                      "int f();", "#pragma GCC visibility pop", "#if 0", "#pragma pack(push, 1)", "#include <x.h>",
                      "#if 1", "#endif", "#endif", diag[1], ""])
    assert hostpch.directives(text) == diag  # in order; what cudafe++'s "#if 0" leaves out is not read
    assert hostpch.directives(text + '#include "crt/host_runtime.h"\n') == diag  # its files: in the manifest
    # any other include could leave pragmas in force that are not read here (a review's find: pack)
    assert hostpch.directives(text + '#include "/usr/include/other.h"\n') is None
    for bad in ["#pragma pack(push, 1)", "#pragma GCC target(\"avx2\")", "#pragma GCC optimize(\"O0\")",
                "#pragma GCC push_options", "#pragma GCC visibility push(hidden)",
                "#if 0\n#else\n#pragma GCC diagnostic warning \"-Wall\"\n#endif",
                "#ifdef X\n#pragma GCC diagnostic warning \"-Wall\"\n#endif", "#if 0", "#endif",
                "#pragma GCC visibility pop\n#pragma GCC visibility push(hidden)"]:
        assert hostpch.directives(text + bad + "\n") is None, bad


def test_aliases_name_the_fixed_namespace_in_each_scope_of_the_prefix():
    norm = hostpch.normalise(prefix(ANON), MID) + f"using namespace ::{hostpch.FIXED}; using namespace ::{hostpch.FIXED};\n"
    got = hostpch.aliases(norm, MID)
    assert got == (f"namespace lib {{ namespace {ANON} = ::lib::{hostpch.FIXED}; }} "
                   f"namespace {ANON} = ::{hostpch.FIXED}; ")
    assert hostpch.aliases("int x;", MID) == ""


def test_header_command_is_the_compile_with_header_input_and_output():
    words = ["g++", "-O2", "-c", "-x", "c++", "-fPIC", "/t/a.cudafe1.cpp", "-o", "/t/a.o"]
    assert hostpch.header_command(words, "/t/a.cudafe1.cpp", "/h/prefix.h", "/h/p.gch") == \
        ["g++", "-O2", "-c", "-x", "c++-header", "-fPIC", "/h/prefix.h", "-o", "/h/p.gch"]
    assert hostpch.header_command(words[:3] + words[5:], "/t/a.cudafe1.cpp", "h", "o") is None  # no -x c++
    assert hostpch.header_command(words[:-2], "/t/a.cudafe1.cpp", "h", "o") is None  # no -o
    assert hostpch.header_command(words, "/t/b.cudafe1.cpp", "h", "o") is None  # not its input


def _compile(tmp_path, tag, anon, own, root, flags=("-O2",), tail=""):
    """compile_final on a synthetic unit in its own folder (``tail``: more header code at the end
    of its prefix); (ok, how, object path, output, folder)."""
    d = tmp_path / tag
    d.mkdir()
    src = d / "a.cudafe1.cpp"
    text = unit(anon, own, tail=tail)
    src.write_text(text, errors="surrogateescape")
    obj = d / "a.o"
    last = " ".join(["g++", *flags, "-c", "-x", "c++", "-fPIC", f'"{src}"', "-o", f'"{obj}"'])
    out: list = []
    ok, how = hostpch.compile_final(last, str(src), anon[len("_GLOBAL__N_"):], root, pnvcc._run, dict(os.environ), out)
    assert src.read_text(errors="surrogateescape") == text  # the unit's own file as cudafe++ wrote it, whatever happened
    return ok, how, obj, out, d


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_a_key_is_precompiled_on_its_second_sight_and_used_on_the_third(tmp_path, monkeypatch):
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    own = "int mine() { return f3() + lib::counter + lib::hidden_twice(4); }"
    assert _compile(tmp_path, "one", ANON, own, root)[:2] == (True, hostpch.SEEN)
    (folder,) = (tmp_path / "pch" / "cudafe").iterdir()
    (folder / "prefix.h.gch.999").write_text("left by a precompile killed mid-way")
    assert _compile(tmp_path, "two", "_GLOBAL__N__0f0f_1_b_cu_1", own, root)[:2] == (True, hostpch.MADE)
    assert (folder / "prefix.h.gch").exists() and hostpch.FIXED in (folder / "prefix.h").read_text()
    assert sorted(p.name for p in folder.iterdir()) == ["lock", "manifest.json", "prefix.h", "prefix.h.gch", "seen"]
    other = "int theirs(int k) { return f2000() * k - lib::counter; }"  # another source, the same headers
    ok, how, obj, _, d = _compile(tmp_path, "three", "_GLOBAL__N__7777_2_c_cu_2", other, root)
    assert (ok, how) == (True, hostpch.USED)
    monkeypatch.setenv("KVERIFY_HOST_PCH", "0")  # the same unit compiled as nvcc does
    ok2, how2, plain, _, _ = _compile(tmp_path, "plain", "_GLOBAL__N__7777_2_c_cu_2", other, root)
    assert (ok2, how2) == (True, hostpch.NONE)
    assert hostpch.comparable(str(obj)) == hostpch.comparable(str(plain))
    names = subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout
    assert hostpch.FIXED in names and "_7777_" not in names  # the one difference: that namespace's name


@pytest.mark.skipif(gxx is None, reason="needs g++")
@pytest.mark.parametrize("case", ["reopens the namespace", "header refused", "error in the source"])
def test_a_failed_compile_with_the_header_falls_back_to_the_plain_compile(tmp_path, monkeypatch, case):
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    own = "int mine() { return f3(); }"
    _compile(tmp_path, "one", ANON, own, root)
    assert _compile(tmp_path, "two", ANON, own, root)[1] == hostpch.MADE
    anon = "_GLOBAL__N__5555_3_d_cu_3"
    if case == "reopens the namespace":  # the source's own anonymous namespace in lib: the alias clashes
        own = f"namespace lib {{ namespace {anon} {{ int more = 1; }} }} int mine() {{ return lib::more; }}"
    elif case == "header refused":  # GCC will not use it: it must fail, not be read as text
        gch = next((tmp_path / "pch" / "cudafe").iterdir()) / "prefix.h.gch"
        gch.write_bytes(b"not a precompiled header" * 10)
    else:
        own = "int mine() { return undeclared_name; }"
    ok, how, obj, out, _ = _compile(tmp_path, "three", anon, own, root)
    assert how == hostpch.REFUSED
    if case == "error in the source":
        assert not ok and not obj.exists()
        err = "".join(e for _, e in out)
        assert "undeclared_name" in err and "prefix.h" not in err  # the plain compile's own message only
    else:
        assert ok and obj.exists()


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_no_header_without_a_folder_when_off_or_past_the_cap(tmp_path, monkeypatch):
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    own = "int mine() { return 1; }"
    assert _compile(tmp_path, "nofolder", ANON, own, None)[:2] == (True, hostpch.NONE)
    root = str(tmp_path / "pch")
    monkeypatch.setattr(hostpch, "MAX_HEADERS", 0)
    for tag in ("a", "b", "c"):
        assert _compile(tmp_path, tag, ANON, own, root)[:2] == (True, hostpch.SEEN)
    assert not list((tmp_path / "pch").rglob("*.gch"))
    monkeypatch.setattr(hostpch, "MAX_HEADERS", 6)
    monkeypatch.setenv("KVERIFY_HOST_PCH", "0")
    assert _compile(tmp_path, "off", ANON, own, root)[:2] == (True, hostpch.NONE)
    assert not list((tmp_path / "pch").rglob("*.gch"))
    monkeypatch.delenv("KVERIFY_HOST_PCH")
    # other flags are another key: what was seen with -O2 is not seen with -O1
    assert _compile(tmp_path, "o1", ANON, own, root, flags=("-O1",))[:2] == (True, hostpch.SEEN)
    # header code that does not precompile on its own (it ends inside a block the source closes):
    # tried once, then marked and left alone
    tail, closing = 'extern "C" {\n', "}\nint g() { return 1; }"
    assert _compile(tmp_path, "x1", ANON, closing, root, tail=tail)[:2] == (True, hostpch.SEEN)
    assert _compile(tmp_path, "x2", ANON, closing, root, tail=tail)[:2] == (True, hostpch.SEEN)
    (folder,) = [f for f in (tmp_path / "pch" / "cudafe").iterdir() if (f / "failed").exists()]
    assert not (folder / "prefix.h").exists()
    assert _compile(tmp_path, "x3", ANON, closing, root, tail=tail)[:2] == (True, hostpch.NONE)
    assert not (folder / "prefix.h").exists()  # not written again


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_units_built_with_the_header_keep_their_own_anonymous_members(tmp_path, monkeypatch):
    """Two units with the same header code, linked into one program: each keeps its own copy of
    the header's anonymous-namespace members (a function's static local, a variable), as with
    nvcc's unit-unique names. A review found the first version (one shared name) linked them
    together: 3 where nvcc's objects print 1, and ``multiple definition`` of a variable."""
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    for tag in ("w1", "w2"):
        _compile(tmp_path, tag, ANON, "int w() { return 0; }", root)
    own = {"a": "int a() { return lib::bump() * 10 + ++lib::counter; }",
           "b": "int b() { return lib::bump() * 10 + ++lib::counter; }"}
    (tmp_path / "main.cpp").write_text('#include <cstdio>\nint a(); int b();\n'
                                       'int main() { a(); a(); std::printf("%d %d\\n", a(), b()); }\n')
    runs = {}
    for mode in ("header", "plain"):
        if mode == "plain":
            monkeypatch.setenv("KVERIFY_HOST_PCH", "0")
        objs = []
        for name, anon in (("a", "_GLOBAL__N__1111_1_a_cu_1"), ("b", "_GLOBAL__N__2222_1_b_cu_2")):
            d = tmp_path / f"{mode}_{name}"
            d.mkdir()
            src = d / "a.cudafe1.cpp"
            src.write_text(unit(anon, own[name], tag=name))
            obj = d / "a.o"
            ok, how = hostpch.compile_final(f'g++ -O2 -c -x c++ -fPIC "{src}" -o "{obj}"', str(src),
                                            anon[len("_GLOBAL__N_"):], root, pnvcc._run, dict(os.environ), [])
            assert ok and how == (hostpch.USED if mode == "header" else hostpch.NONE)
            objs.append(str(obj))
        exe = tmp_path / f"{mode}.exe"
        subprocess.run([gxx, str(tmp_path / "main.cpp"), *objs, "-o", str(exe)], check=True)
        runs[mode] = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    # a's third call (bump 3, counter 10); b's first with its own copies (bump 1, counter 8); shared: "40 51"
    assert runs["header"] == runs["plain"] == "40 18\n"


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_pragmas_the_header_code_leaves_in_force_still_hold_after_it(tmp_path, monkeypatch):
    """GCC does not carry pragma state out of a precompiled header: the prefix's diagnostic pragmas
    are replayed after it (here one makes an unused variable an error, as in nvcc's compile), and
    a prefix with pragmas that cannot be replayed so (pack) gets no header."""
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    tail = '#pragma GCC diagnostic error "-Wunused-variable"\n'
    for tag in ("w1", "w2"):
        assert _compile(tmp_path, tag, ANON, "int w() { return 0; }", root, tail=tail)[0]
    ok, how, obj, out, _ = _compile(tmp_path, "unused", "_GLOBAL__N__3333_1_c_cu_3",
                                    "int g() { int unused_v = 3; return 1; }", root, tail=tail)
    assert how == hostpch.REFUSED and not ok  # the header's compile failed too; the plain one is nvcc's
    assert "unused_v" in "".join(e for _, e in out)
    ok, how, *_ = _compile(tmp_path, "used", "_GLOBAL__N__3333_1_c_cu_3", "int g() { return 1; }", root, tail=tail)
    assert (ok, how) == (True, hostpch.USED)
    for tag in ("p1", "p2", "p3"):
        assert _compile(tmp_path, tag, ANON, "int g() { return 1; }", root, tail="#pragma pack(push, 1)\n")[:2] == \
            (True, hostpch.NONE)


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_a_header_whose_included_files_changed_is_not_used(tmp_path, monkeypatch):
    """cudafe++'s output still includes a file (``crt/host_runtime.h``); the header records the
    files it read (manifest.json) and is not used once one of them changes (a toolkit updated in
    place), but made again from the files as they are now by the next build with its key.
    Bytes that are not UTF-8 in the header code are carried as they are."""
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    extra = tmp_path / "inc" / "crt" / "host_runtime.h"  # found through -I, as CUDA's is
    extra.parent.mkdir(parents=True)
    extra.write_text("inline int extra() { return 5; }\n")
    tail = f"{hostpch.HOST_RUNTIME}\n// \udcff\n"  # a byte 0xff, as the surrogateescape reading gives it
    flags = ("-O2", f"-I{tmp_path / 'inc'}")
    for tag, how in (("w1", hostpch.SEEN), ("w2", hostpch.MADE), ("use", hostpch.USED)):
        assert _compile(tmp_path, tag, ANON, "int g() { return extra(); }", root, flags, tail)[:2] == (True, how)
    (folder,) = (tmp_path / "pch" / "cudafe").iterdir()
    assert str(extra) in (folder / "manifest.json").read_text()
    extra.write_text("inline int extra() { return 6; }\n")
    assert _compile(tmp_path, "stale", ANON, "int g() { return extra(); }", root, flags, tail)[:2] == \
        (True, hostpch.NONE)
    assert not (folder / "prefix.h.gch").exists()
    for tag, how in (("again", hostpch.MADE), ("use2", hostpch.USED)):
        assert _compile(tmp_path, tag, ANON, "int g() { return extra(); }", root, flags, tail)[:2] == (True, how)
    assert str(extra) in (folder / "manifest.json").read_text()
    assert not (folder / "stale").exists()  # the new header was used: a later change is a new one
    extra.write_text("inline int extra() { return 7; }\n")  # updated again after that use: made again
    for tag, how in (("stale2", hostpch.NONE), ("again2", hostpch.MADE)):
        assert _compile(tmp_path, tag, ANON, "int g() { return extra(); }", root, flags, tail)[:2] == (True, how)
    assert not (folder / "failed").exists()
    extra.write_text("inline int extra() { return 8; }\n")  # stale again before any use: no more precompiles
    for tag in ("stale3", "after"):
        assert _compile(tmp_path, tag, ANON, "int g() { return extra(); }", root, flags, tail)[:2] == \
            (True, hostpch.NONE)
    assert (folder / "failed").exists() and not (folder / "prefix.h.gch").exists()


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_a_use_that_raced_a_removal_keeps_the_stale_mark(tmp_path, monkeypatch):
    """A build that found the header fresh, then had it removed as stale by another build before
    GCC opened it (GCC reads prefix.h's text then, and succeeds), must not clear the mark that the
    removal set: only a use of a header still there and fresh clears it."""
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    for tag in ("w1", "w2"):
        _compile(tmp_path, tag, ANON, "int g() { return f1(); }", root)
    (folder,) = (tmp_path / "pch" / "cudafe").iterdir()

    def racing(cmds, env, out):  # another build's _forget_stale, between this one's fresh and GCC
        if "-Winvalid-pch" in cmds[0]:
            (folder / "prefix.h.gch").unlink()
            (folder / "manifest.json").unlink()
            (folder / "stale").touch()
        return pnvcc._run(cmds, env, out)
    d = tmp_path / "race"
    d.mkdir()
    src, text = d / "a.cudafe1.cpp", unit(ANON, "int g() { return f1(); }")
    src.write_text(text)
    last = f'g++ -O2 -c -x c++ -fPIC "{src}" -o "{d / "a.o"}"'
    ok, how = hostpch.compile_final(last, str(src), ANON[len("_GLOBAL__N_"):], root, racing, dict(os.environ), [])
    assert (ok, how) == (True, hostpch.USED) and (folder / "stale").exists()


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_a_remade_header_replaces_the_text_by_a_rename(tmp_path, monkeypatch):
    """A remake writes prefix.h beside it and renames it into place: a build that opened the old
    prefix.h (its .gch removed as stale under it) reads the old text whole, never a half-written
    new one; and a build that finds the header fresh under the lock removes nothing."""
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    extra = tmp_path / "inc" / "crt" / "host_runtime.h"
    extra.parent.mkdir(parents=True)
    extra.write_text("inline int extra() { return 5; }\n")
    flags, tail = ("-O2", f"-I{tmp_path / 'inc'}"), hostpch.HOST_RUNTIME + "\n"
    for tag in ("w1", "w2"):
        _compile(tmp_path, tag, ANON, "int g() { return extra(); }", root, flags, tail)
    (folder,) = (tmp_path / "pch" / "cudafe").iterdir()
    header = folder / "prefix.h"
    hostpch._forget_stale(str(folder), str(header))  # fresh when it looks under the lock: kept
    assert (folder / "prefix.h.gch").exists() and (folder / "manifest.json").exists()
    assert not (folder / "stale").exists()
    extra.write_text("inline int extra() { return 6; }\n")
    assert _compile(tmp_path, "stale", ANON, "int g() { return extra(); }", root, flags, tail)[:2] == \
        (True, hostpch.NONE)
    header.write_text("// the text a build opened before the remake\n")
    with open(header) as reader:
        assert _compile(tmp_path, "again", ANON, "int g() { return extra(); }", root, flags, tail)[:2] == \
            (True, hostpch.MADE)
        assert reader.read() == "// the text a build opened before the remake\n"
    assert hostpch.FIXED in header.read_text() and not (folder / "prefix.h.tmp").exists()
    (folder / "prefix.h.gch").unlink()  # as a build that removed it first leaves it
    extra.write_text("inline int extra() { return 9; }\n")
    hostpch._forget_stale(str(folder), str(header))  # stale, but no header: nothing to remove or mark
    assert not (folder / "failed").exists() and (folder / "manifest.json").exists()


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_a_stale_header_is_left_alone_while_its_folder_is_locked(tmp_path, monkeypatch):
    """A build that finds the header stale removes it only under the folder's lock, which a
    precompile in progress holds, and only if it is still stale then."""
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    root = str(tmp_path / "pch")
    extra = tmp_path / "inc" / "crt" / "host_runtime.h"
    extra.parent.mkdir(parents=True)
    extra.write_text("inline int extra() { return 5; }\n")
    flags = ("-O2", f"-I{tmp_path / 'inc'}")
    for tag in ("w1", "w2"):
        _compile(tmp_path, tag, ANON, "int g() { return extra(); }", root, flags, hostpch.HOST_RUNTIME + "\n")
    (folder,) = (tmp_path / "pch" / "cudafe").iterdir()
    extra.write_text("inline int extra() { return 6; }\n")
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a precompile in progress holds it
        assert _compile(tmp_path, "locked", ANON, "int g() { return extra(); }", root, flags,
                        hostpch.HOST_RUNTIME + "\n")[:2] == (True, hostpch.NONE)
        assert (folder / "prefix.h.gch").exists() and not (folder / "stale").exists()
    assert _compile(tmp_path, "free", ANON, "int g() { return extra(); }", root, flags,
                    hostpch.HOST_RUNTIME + "\n")[:2] == (True, hostpch.NONE)
    assert not (folder / "prefix.h.gch").exists() and (folder / "stale").exists()


@pytest.mark.skipif(gxx is None, reason="needs g++")
def test_comparable_sees_data_laid_out_differently(tmp_path):
    """Data of the same size laid out otherwise (a second review's find: packed against not, the
    same bytes but for where the zeros are) is unequal."""
    objs = []
    for tag, pragma in (("packed", "#pragma pack(push, 1)\n"), ("plain", "")):
        (tmp_path / tag).mkdir()
        src = tmp_path / tag / "s.cpp"  # one file name for both: the FILE symbol is the same
        src.write_text(pragma + "struct __attribute__((aligned(8))) S { char c; int i; };\nS s = {1, 2};\n")
        subprocess.run([gxx, "-O2", "-c", "s.cpp", "-o", "s.o"], check=True, cwd=tmp_path / tag)
        objs.append(hostpch.comparable(str(tmp_path / tag / "s.o")))
    assert objs[0] != objs[1]
    assert objs[0].replace("0100000002000000", "0102000000000000") == objs[1].replace(
        "0100000002000000", "0102000000000000"), "only the object's bytes differ"


HEADER = """#pragma once
#include <cuda_runtime.h>
namespace lib { namespace { __device__ int counter; constexpr int k = 3; } }
"""
KERNEL = """#include "lib.h"
__global__ void add(const float* a, float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] += a[i] * lib::k + lib::counter; }
void launch(const float* a, float* b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
"""


@pytest.mark.skipif(nvcc is None, reason="needs nvcc")
def test_through_kverifys_nvcc_the_object_is_nvccs_but_for_the_namespace_name(tmp_path, monkeypatch):
    """A header with an anonymous namespace holding a __device__ variable (cudafe++'s stub
    registers it by its host name in that namespace): built with the header three times (seen,
    made, used), the last object equals nvcc's but for that namespace's symbol name and the
    temporary file names nvcc puts in every object."""
    (tmp_path / "lib.h").write_text(HEADER)
    root = tmp_path / "pch"
    trace = tmp_path / "trace.txt"
    monkeypatch.delenv("KVERIFY_HOST_PCH", raising=False)
    env = {**os.environ, "KVERIFY_PNVCC_TRACE": str(trace), "KVERIFY_PCH_DIR": str(root), "TMPDIR": str(tmp_path)}

    def build(cmd, tag, body=KERNEL, obj=None):
        src = tmp_path / f"{tag}.cu"  # the module id (so device names) follows the source's path and text
        src.write_text(body)
        obj = tmp_path / f"{obj or tag}.o"
        r = subprocess.run([*cmd, "-O3", "-gencode=arch=compute_90,code=sm_90", "--compiler-options", "-fPIC",
                            f"-I{tmp_path}", "-c", str(src), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        return obj
    ours = [sys.executable, str(pnvcc.__file__)]
    build(ours, "first")
    build(ours, "second", KERNEL + "int other() { return 2; }\n")
    used = build(ours, "third", KERNEL.replace("b[i] +=", "b[i] -="))
    assert [ln for ln in trace.read_text().splitlines() if ln.startswith("host pch")] == \
        [hostpch.SEEN, hostpch.MADE, hostpch.USED]
    # each step's lane, tool and seconds too (bench/host_pch_local.py prints them): one cudafe++ in the
    # host lane and one cicc in the device lane a build, and the host compile after both lanes
    steps = [ln.split() for ln in trace.read_text().splitlines() if ln.startswith("step ")]
    lane_tool = [(w[1], w[2]) for w in steps]
    assert lane_tool.count(("host", "cudafe++")) == 3 and lane_tool.count(("device", "cicc")) == 3, steps
    assert {w[1] for w in steps} == {"host", "device", "final"} and all(float(w[-1]) >= 0 for w in steps), steps
    theirs = build([nvcc], "third", KERNEL.replace("b[i] +=", "b[i] -="), obj="nvcc")

    assert hostpch.comparable(str(used)) == hostpch.comparable(str(theirs))
    assert hostpch.FIXED in subprocess.run(["nm", str(used)], capture_output=True, text=True).stdout
