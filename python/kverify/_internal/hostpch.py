"""A GCC precompiled header for the host compile of cudafe++'s output (kverify's nvcc, pnvcc).

nvcc's last step compiles ``X.cudafe1.cpp``, cudafe++'s host-side rewrite of the whole
translation unit, with the host compiler. That file is already preprocessed: every header the
source included is spelled out in it (torch's ``torch/types.h`` with CUDA's runtime headers:
~390,000 lines, 13 MB), followed by the source's own code. On this project's 2-core machine
(nvcc 13.0, GCC 12, idle) that compile took 5.0-5.4 s, of which the source's own code is a small
part (1.6-1.8 s with the header; stop 42, by hand).

The header part is the same text for every source that starts with the same includes and is
compiled with the same flags -- load_inline puts ``torch/types.h``, ``cuda.h`` and
``cuda_runtime.h`` first in every CUDA file, and most candidates add only headers these already
include -- with one exception: cudafe++ names the anonymous namespaces of the unit after its
module id (``_GLOBAL__N_<module id>``, a hidden namespace with a name no other unit has; CUDA's
``cuda::std`` has one). So:

1. ``split``: the text before the first line marker back into the source file (the prefix) and
   the rest (the suffix).
2. ``normalise``: in the prefix, each anonymous namespace cudafe++ named for the unit becomes a
   namespace FIXED inside a real anonymous namespace (``namespace { namespace FIXED { ... } }``),
   so its members have internal linkage: one copy per unit, as the unit's own name gave them, and
   not shared with another unit or library that used the same header (a review of the first
   version, which only renamed the namespace, linked two units' ``static`` locals, variables and
   same-named functions of such namespaces together). Nothing else may name the module id.
   ``directives`` reads the prefix's directives: a precompiled header keeps its macros, but GCC 12
   does not carry ``#pragma`` state out of it (the same review: ``pack``, ``GCC visibility``,
   ``GCC diagnostic``, ``GCC target`` left open in a header were lost), so the prefix's
   ``GCC diagnostic`` pragmas are replayed after it, ``GCC visibility`` must be balanced, and any
   other pragma, an ``#include`` other than cudafe++'s own (HOST_RUNTIME; a second review lost
   a ``#pragma pack`` left by another included file), or a conditional this does not evaluate
   means no header.
3. The normalised prefix and the compile command (its input and output names aside) key a folder
   under ``KVERIFY_PCH_DIR/cudafe``. Its ``prefix.h`` is the normalised prefix, ``prefix.h.gch``
   GCC's precompiled form of it, compiled with the same command (``-x c++-header``). A key is
   precompiled the second time it is seen (``seen`` marks the first), so a one-off flag set costs
   no disk (a header is ~400 MB); at most MAX_HEADERS folders are made; a key that fails to
   precompile is marked ``failed`` and not tried again. ``manifest.json`` lists the files the
   header read (cudafe++'s output still includes ``crt/host_runtime.h``): a header whose files
   changed since is not used (fresh) but removed, and made again by the next build with its key
   (once between uses: a key stale again before its new header was used is marked ``failed``;
   _forget_stale).
4. With a header for the key, the file is compiled as ``#include "<folder>/prefix.h"``, an alias
   ``namespace <unit's name> = ::scope::FIXED;`` in each scope where the prefix declares an anonymous
   namespace (cudafe++'s code for the source names it: the stub's registration of a
   ``__device__`` variable declared there), the replayed pragmas, then the suffix, unchanged,
   with ``-Winvalid-pch -Werror=invalid-pch`` added: a header GCC will not use (other flags,
   another compiler) fails the compile instead of being read as text. If that compile fails for
   any reason (a refused header, the source reopening an anonymous namespace in such a scope, an
   error in the source itself), the original file is put back and compiled as nvcc would.

What the compiler then sees is the original text but for those namespaces: GCC documents a
precompiled header as equivalent to the text it was made from when the flags match (which it
checks). Their members differ from nvcc's only in name and in linkage (internal, against
external with hidden visibility and a name unique to the unit): one copy per unit either way.
The object is otherwise nvcc's: symbols with their binding and visibility, code and data
(``comparable``; tests/test_host_pch.py). Device code is not touched: the device lane never sees
this. Off with KVERIFY_HOST_PCH=0 or without KVERIFY_PCH_DIR (KVERIFY_PCH=0).

No kverify or torch import: pnvcc runs this as a sibling module inside torch's ninja build.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading

#: the name of the namespace that holds, inside a real anonymous namespace, what cudafe++ put in
#: the unit's named one (the same in every unit's precompiled header; its members are internal)
FIXED = "_GLOBAL__N__kverify_pch"
#: the most precompiled headers (folders with prefix.h.gch) one KVERIFY_PCH_DIR gets (~400 MB each)
MAX_HEADERS = 6
#: a prefix shorter than this (lines) is compiled as it is: a header would save little
MIN_LINES = 2000
#: the one ``#include`` line cudafe++ writes into the header code (its runtime's macros for the stub)
HOST_RUNTIME = '#include "crt/host_runtime.h"'
#: what ``compile_final`` reports, for the trace (tests, benchmarks)
USED, MADE, SEEN, REFUSED, NONE = "host pch: used", "host pch: made", "host pch: seen", "host pch: refused", ""

_FIRST = re.compile(r'^# 1 "([^"]+)"$')
_USING = re.compile(r"using namespace ::((?:\w+::)*)" + FIXED + ";")


def split(text: str) -> tuple[str, str, str] | None:
    """(first line, prefix, suffix) of cudafe++'s output ``text``: the first line is its line
    marker of the source file (``# 1 "path"``); the prefix runs to the next line marker into that
    file, where the source's own text starts; the suffix is the rest, that marker first. None when
    the text has no such shape or a prefix under MIN_LINES lines."""
    first, _, rest = text.partition("\n")
    m = _FIRST.match(first)
    if not m:
        return None
    back = re.search(r'^# \d+ "' + re.escape(m.group(1)) + '"', rest, re.M)
    if not back or rest.count("\n", 0, back.start()) < MIN_LINES:
        return None
    return first, rest[: back.start()], rest[back.start():]


_ATTR = r'\s*__attribute__\(\(visibility\("hidden"\)\)\)\s*'
#: what may end a namespace block's scan: braces, literals (not scanned: no header seen needs it),
#: and directive lines (line markers, pragmas), which hold quotes of their own
_TOKEN = re.compile(r"""[{}"']|^#[^\n]*""", re.M)
_HIDDEN = 'namespace {} __attribute__((visibility("hidden"))) {{'


def _close(text: str, start: int) -> int | None:
    """Index of the ``}`` that closes the block whose ``{`` ends just before ``start``; None if a
    string or character literal comes first (a block this does not scan) or none closes it."""
    depth = 1
    for m in _TOKEN.finditer(text, start):
        t = m.group()
        if t.startswith("#"):
            continue
        if t in "\"'":
            return None
        depth += 1 if t == "{" else -1
        if depth == 0:
            return m.start()
    return None


def normalise(prefix: str, module_id: str) -> str | None:
    """``prefix`` with each namespace cudafe++ made of an anonymous one (named ``_GLOBAL__N_`` +
    ``module_id``) turned into ``namespace { namespace FIXED ... }`` (its declaration with the
    using-directive cudafe++ adds, and each block of members, closed one level deeper), and any
    other mention of the name into FIXED. None when a block cannot be scanned (_close), the module
    id occurs anywhere else (a name made from it that this does not know), or it is malformed."""
    if not module_id or not re.fullmatch(r"\w+", module_id):
        return None
    name = "_GLOBAL__N_" + module_id
    inner = _HIDDEN.format(FIXED)
    out = re.sub(r"namespace " + name + _ATTR + r"\{\s*\};\s*using namespace ::((?:\w+::)*)" + name + ";",
                 lambda m: f"namespace {{ {inner} }} }} using namespace ::{m.group(1)}{FIXED};", prefix)
    edits = []
    for m in re.finditer(r"namespace " + name + _ATTR + r"\{", out):
        end = _close(out, m.end())
        if end is None:
            return None
        edits += [(m.start(), m.end(), "namespace { " + inner), (end, end + 1, "} }")]
    for start, stop, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[stop:]
    out = out.replace(name, FIXED)
    return None if module_id in out else out


def directives(prefix: str) -> list[str] | None:
    """The prefix's ``#pragma GCC diagnostic`` lines, in order, to replay after the precompiled
    header (GCC does not carry their state out of it); None when the prefix has a directive whose
    effect would outlive it otherwise: any other pragma but a balanced ``GCC visibility``
    push/pop, a conditional other than cudafe++'s ``#if 0`` blocks around a pragma, or an
    ``#include`` but cudafe++'s own HOST_RUNTIME (a second review's find: ``#pragma pack`` in an
    included file was lost). Line markers and macro definitions (kept in a precompiled header)
    pass. HOST_RUNTIME's pragmas, not read here, were read by hand (CUDA 13.0: ``pack()``, which
    restores the default, and Windows-only ones); the header's manifest holds its files (fresh)."""
    stack: list[bool] = []  # one per open conditional: True for cudafe++'s "#if 0"
    replay: list[str] = []
    visibility = 0
    for line in prefix.splitlines():
        if not line.startswith("#"):
            continue
        w = line[1:].split()
        if not w or w[0].isdigit():
            continue  # a line marker
        d = w[0]
        if d in ("if", "ifdef", "ifndef"):
            stack.append(line.strip() == "#if 0")
            continue
        if d in ("else", "elif", "elifdef", "elifndef"):
            if not stack or (stack[-1] and not any(stack[:-1])):
                return None  # the other branch of an "#if 0": text that counts
            continue
        if d == "endif":
            if not stack:
                return None
            stack.pop()
            continue
        if any(stack):
            continue  # text cudafe++ left out
        if d in ("define", "undef") or line.strip() == HOST_RUNTIME:
            continue  # macros are kept in the header; cudafe++'s own include is in its manifest (fresh)
        if d != "pragma" or stack:
            return None  # another include: pragmas it leaves in force would be lost, unread here
        if w[1:3] == ["GCC", "diagnostic"]:
            replay.append(line)
        elif w[1:3] == ["GCC", "visibility"] and "".join(w[3:]).startswith(("push", "pop")):
            visibility += 1 if "".join(w[3:]).startswith("push") else -1
            if visibility < 0:
                return None
        else:
            return None
    return replay if not stack and visibility == 0 else None


def aliases(normalised: str, module_id: str) -> str:
    """One line: ``namespace <unit's name> = ::scope::FIXED;`` in every scope where ``normalised``
    declares an anonymous namespace (after each, cudafe++ wrote ``using namespace
    ::scope::<name>;``, now naming FIXED, which qualified lookup finds through the real anonymous
    namespace around it)."""
    name = "_GLOBAL__N_" + module_id
    out = []
    for scope in dict.fromkeys(m.group(1) for m in _USING.finditer(normalised)):
        parts = [p for p in scope.split("::") if p]
        out.append("".join(f"namespace {p} {{ " for p in parts) + f"namespace {name} = ::{scope}{FIXED}; "
                   + "} " * len(parts))
    return "".join(out)


def header_command(words: list[str], source: str, header: str, output: str) -> list[str] | None:
    """The host compile ``words`` of ``source`` turned into the precompile of ``header`` into
    ``output`` (``-x c++`` -> ``-x c++-header``), or None when it has not that shape."""
    if words.count(source) != 1 or "-o" not in words[:-1] or "-x" not in words:
        return None
    if words[words.index("-x") + 1:][:1] != ["c++"]:
        return None
    w = list(words)
    w[w.index(source)] = header
    w[w.index("-o") + 1] = output
    w[w.index("-x") + 1] = "c++-header"
    return w


def key(normalised: str, words: list[str], source: str) -> str:
    """Folder name of a precompiled prefix: the normalised text, the command with its input and
    output named generically, and the compiler it runs (path, size, time)."""
    w = ["<in>" if a == source else a for a in words]
    if "-o" in w[:-1]:
        w[w.index("-o") + 1] = "<out>"
    h = hashlib.sha256(normalised.encode(errors="surrogateescape"))
    h.update(json.dumps([w, compiler_id(w[0] if w else "")]).encode())
    return h.hexdigest()[:24]


def compiler_id(word: str, path: str | None = None) -> list:
    """[real path, size, modification time] of the program ``word`` names (looked up in ``path``,
    default PATH), or [word] when it cannot be found: part of a cache key (here, and
    kverify._internal.ppcache), so that another compiler gets other entries."""
    exe = shutil.which(word, path=path) if word else None
    try:
        st = os.stat(exe) if exe else None
    except OSError:
        st = None
    return [os.path.realpath(exe), st.st_size, st.st_mtime_ns] if st else [word]


def stats(files: list[str]) -> list | None:
    """[[path, size, modification time]] of ``files`` (a manifest's form); None if one cannot be read."""
    try:
        return [[f, (st := os.stat(f)).st_size, st.st_mtime_ns] for f in files]
    except OSError:
        return None


def _made(root: str) -> int:
    try:
        return sum(os.path.exists(os.path.join(root, d, "prefix.h.gch")) for d in os.listdir(root))
    except OSError:
        return 0


def fresh(folder: str) -> bool:
    """Do the files a kept header read (``folder``'s ``manifest.json``: path, size, modification
    time, as ``stats`` gives them, when it was made) still have that size and time? A header of an
    updated toolkit is not used (here, and kverify._internal.ppcache's prefixes)."""
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            files = json.load(f)
        return stats([p for p, _, _ in files]) == files
    except (OSError, ValueError, TypeError):
        return False


def _forget_stale(folder: str, header: str) -> None:
    """Remove a key's precompiled header whose files changed (``fresh`` false), so that the next
    build with the key makes it again from the files as they are now; only under the folder's lock
    (a precompile in progress holds it: nothing is removed then) and only if still stale there. A
    key goes stale once between uses: stale again before a build has used the header made since,
    it is marked ``failed`` (a manifest that never holds, e.g. a relative include path, would
    otherwise precompile every other build); a use clears the mark, so a toolkit updated in place
    twice, with builds between, costs two remakes and no header. A build that has the header open
    keeps reading it; one that opens it after the removal reads ``prefix.h``'s text (which a remake
    replaces by a rename, never rewrites in place)."""
    try:
        with open(os.path.join(folder, "lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # another build is making it
            if not os.path.exists(header + ".gch") or fresh(folder):
                return  # removed or made again while this build looked
            mark = os.path.join(folder, "stale")
            if os.path.exists(mark):
                open(os.path.join(folder, "failed"), "a").close()
            open(mark, "a").close()
            for name in (header + ".gch", os.path.join(folder, "manifest.json")):
                try:
                    os.unlink(name)
                except FileNotFoundError:
                    pass
    except OSError:
        pass


def _unmark(mark: str) -> None:
    """Remove the marker file ``mark`` if it is there."""
    try:
        os.unlink(mark)
    except OSError:
        pass


def _manifest(depfile: str, header: str) -> list:
    """[path, size, modification time] of every file in GCC's dependency output ``depfile`` but
    ``header`` itself."""
    with open(depfile) as f:
        text = f.read().replace("\\\n", " ")
    files = [x.replace("\\ ", " ").replace("$$", "$") for x in re.split(r"(?<!\\)\s+", text.split(": ", 1)[1]) if x]
    got = stats([p for p in dict.fromkeys(files) if p != header])
    if got is None:
        raise OSError(f"{depfile}: a file it names cannot be read")
    return got


def _prepare(last: str, source: str, module_id: str, root: str):
    """(command words, original text, split parts, normalised prefix, pragmas to replay, key
    folder) for ``last``, or None when no precompiled header applies."""
    words = shlex.split(last)
    with open(source, errors="surrogateescape") as f:
        text = f.read()
    parts = split(text)
    norm = normalise(parts[1], module_id) if parts else None
    replay = directives(parts[1]) if norm is not None else None
    if replay is None or header_command(words, source, "h", "o") is None or '"' in root:
        return None
    return words, text, parts, norm, replay, os.path.join(root, "cudafe", key(norm, words, source))


def compile_final(last: str, source: str, module_id: str, root: str | None, run, env: dict,
                  out: list) -> tuple[bool, str]:
    """Run nvcc's last command ``last`` (a shell command compiling cudafe++'s output ``source``)
    with a precompiled prefix when one exists (see the module doc); ``run(cmds, env, out)`` runs
    shell commands as pnvcc._run does. Returns (success, what happened: USED, MADE, SEEN, REFUSED
    or NONE). Without ``root`` (KVERIFY_PCH_DIR) or with KVERIFY_HOST_PCH=0 it is ``run([last])``;
    so is it whenever anything here fails (an unreadable file, text it does not know)."""
    plain = lambda: run([last], env, out)  # noqa: E731
    if not root or os.environ.get("KVERIFY_HOST_PCH") == "0":
        return plain(), NONE
    try:
        prepared = _prepare(last, source, module_id, root)
    except Exception:  # noqa: BLE001 -- whatever it is, the build goes on as nvcc's
        prepared = None
    if prepared is None:
        return plain(), NONE
    words, text, parts, norm, replay, folder = prepared
    header = os.path.join(folder, "prefix.h")
    if os.path.exists(header + ".gch"):
        if not fresh(folder):
            _forget_stale(folder, header)
            return plain(), NONE
        try:
            with open(source, "w", errors="surrogateescape") as f:
                f.write(f'#include "{header}"\n{aliases(norm, module_id)}\n' + "".join(x + "\n" for x in replay)
                        + parts[2])
            mine: list = []
            if run([last + " -Winvalid-pch -Werror=invalid-pch"], env, mine):
                out.extend(mine)
                mark = os.path.join(folder, "stale")  # made again and used: a later change counts as new
                if os.path.exists(mark) and os.path.exists(header + ".gch") and fresh(folder):
                    _unmark(mark)  # (only while not removed as stale meanwhile)
                return True, USED
        except OSError:
            pass
        finally:
            with open(source, "w", errors="surrogateescape") as f:
                f.write(text)  # the original again: for the fallback, and for anything that reads it after
        return plain(), REFUSED
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return plain(), NONE
    seen, failed = os.path.join(folder, "seen"), os.path.join(folder, "failed")
    if os.path.exists(failed):
        return plain(), NONE  # this text did not precompile once: not again
    if not os.path.exists(seen) or _made(os.path.join(root, "cudafe")) >= MAX_HEADERS:
        try:
            open(seen, "a").close()
        except OSError:
            pass
        return plain(), SEEN
    made: list = [False]

    def precompile() -> None:
        with open(os.path.join(folder, "lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # another build makes it
            if os.path.exists(header + ".gch"):
                return
            tmp = f"{header}.gch.{os.getpid()}"
            try:
                for left in os.listdir(folder):  # a precompile killed mid-way (~400 MB); the lock is this one's now
                    if left.startswith("prefix.h.gch."):
                        os.unlink(os.path.join(folder, left))
                with open(header + ".tmp", "w", errors="surrogateescape") as f:
                    f.write(norm)  # renamed into place: a unit whose .gch vanished reads the whole text
                os.replace(header + ".tmp", header)
                deps = os.path.join(folder, "deps.d")
                if run([shlex.join([*header_command(words, source, header, tmp), "-MD", "-MF", deps])], env, []):
                    with open(deps + ".json", "w") as f:
                        json.dump(_manifest(deps, header), f)
                    os.replace(deps + ".json", os.path.join(folder, "manifest.json"))
                    os.unlink(deps)
                    os.replace(tmp, header + ".gch")  # last: a header is used only with its manifest
                    made[0] = True
                else:
                    open(failed, "a").close()
                    os.unlink(header)  # ~13 MB of text no build will read
            except OSError:
                pass
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    t = threading.Thread(target=precompile)
    t.start()  # the precompile runs beside this unit's own compile
    ok = plain()
    t.join()
    return ok, MADE if made[0] else SEEN


#: a relocation's target when it is a section (GCC points relocations at an internal member so)
#: or an anonymous namespace's member: one placeholder, since the header's members are internal here
_SECTION_TARGET = re.compile(r"(R_\w+\s+)(\.[\w.]+|\S*N::\S*?)([+-]0x[0-9a-f]+)?(?=\s|$)")


def _anon(name: str) -> str:
    """``name`` with any run of anonymous namespaces (``(anonymous namespace)::``, as the demangler
    writes nvcc's ``_GLOBAL__N_<id>`` and this module's anonymous namespace around FIXED alike)
    and any undemangled ``_GLOBAL__N_...`` as one placeholder, and nvcc's temporary names as another."""
    name = re.sub(r"_GLOBAL__N_\w+", "(anonymous namespace)", _TMP.sub("T", name))
    name = re.sub(r"(\(anonymous namespace\)(::)?)+", "N::", name)
    return _SECTION_TARGET.sub(r"\1<section or N::>", name)


_TMP = re.compile(r"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}\S*?(?=\.cudafe1)")
#: sections compared by their bytes: all but code (disassembled), symbols, names, relocations
#: (listed), notes, comments and debug info
_NOT_DATA = re.compile(r"^\.(symtab|strtab|shstrtab|comment|note|debug|rela|group|text)")


def comparable(obj: str) -> str:
    """What must be equal between an object compiled with a precompiled prefix and nvcc's own of
    the same source (tests, bench/host_pch_local.py), as text: the symbols (``readelf -sW``: type,
    size, binding, visibility, demangled name), the code function by function (``objdump -d -r``,
    addresses left out, so a function placed in another section compares equal), the relocations
    of the data sections, each data object's bytes by name, the bytes of each data section no
    symbol covers (literals, padding) without their zero bytes, since nvcc places the header's
    anonymous members in sections of their own and this build among the other data, so the
    padding differs, and ``.nv_fatbin`` (the device code) whole. Where GCC folds away an
    internal member that nvcc's object keeps as a symbol, this calls a valid build unequal
    (a second review's note): a check for tests and benchmarks, not a proof. A symbol in an anonymous namespace is compared without binding and visibility
    (internal here by design for the header's, hidden-external in nvcc's), and anonymous
    namespaces are one placeholder (_anon), as are nvcc's temporary file names; sections named
    after such a namespace's members are left out. Raises CalledProcessError if binutils cannot read ``obj``."""
    def run(*cmd: str) -> str:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    syms = []
    objects = []  # (offset, size, section index, name) of every object symbol
    for line in run("readelf", "-sW", "-C", obj).splitlines():
        f = line.split(None, 7)
        if len(f) < 8 or not f[0].rstrip(":").isdigit():
            continue
        name = _anon(f[7])
        if f[3] == "SECTION":
            continue  # a local one is made for relocations against a section (internal members')
        if f[3] == "OBJECT" and f[6].isdigit():
            objects.append((int(f[1], 16), int(f[2]), f[6], name))
        syms.append(" ".join([f[3], f[2], name] if "N::" in name else [f[3], f[2], f[4], f[5], name]))
    code: dict[str, list[str]] = {}
    fn = ""
    for line in run("objdump", "-d", "-r", "-C", obj).splitlines():
        if m := re.match(r"^[0-9a-f]+ <(.*)>:$", line):
            fn = _anon(m.group(1))
            code.setdefault(fn, [])
        elif fn and (m := re.match(r"^\s*[0-9a-f]+:\s*(.*)$", line)):
            ins = re.sub(r"\b[0-9a-f]+ <", "<", m.group(1))
            code[fn].append(_anon(ins))
    index = dict(re.findall(r"^\s*\[\s*(\d+)\]\s+(\S+)", run("readelf", "-SW", obj), re.M))
    raw: dict[str, bytes] = {}
    for ndx, x in index.items():
        if _NOT_DATA.match(x) or x in ("NULL", ".bss") or x.startswith(".bss."):
            continue
        b = bytearray()
        for ln in run("objdump", "-s", "-j", x, obj).split("\n", 3)[-1].splitlines():
            if re.match(r"^ [0-9a-f]+ ", ln):
                b += bytes.fromhex("".join(ln.strip().split("  ")[0].split()[1:]))
        raw[ndx] = bytes(b)
    # data by symbol: each object's own bytes, by name (nvcc puts the header's anonymous members in
    # sections of their own, this build among the other data, so offsets differ); the bytes no
    # symbol covers (constants, padding) are compared without zero bytes, the padding
    named, covered = [], {}
    for value, size, ndx, name in objects:
        if ndx in raw and size:
            named.append(f"{name}: {raw[ndx][value:value + size].hex()}")
            covered.setdefault(ndx, []).append((value, value + size))
    dumps = []
    for ndx, b in sorted(raw.items(), key=lambda kv: index[kv[0]]):
        if index[ndx] == ".nv_fatbin":
            dumps.append(f".nv_fatbin: {b.hex()}")  # the device code: whole
            continue
        if "_GLOBAL__N_" in index[ndx]:
            continue  # nvcc's section of one anonymous member: compared by its symbol above
        rest = bytearray(b)
        for lo, hi in sorted(covered.get(ndx, []), reverse=True):
            del rest[lo:hi]
        dumps.append(f"{index[ndx]} outside symbols: {bytes(c for c in rest if c).hex()}")
    relocs = [ln for ln in run("objdump", "-r", "-C", obj).split("RELOCATION RECORDS FOR ")
              if not ln.startswith("[.text") and "_GLOBAL__N_" not in ln.split("]", 1)[0]]
    return "\n".join([*sorted(syms), *(f"{k}: " + "; ".join(v) for k, v in sorted(code.items())),
                      *(_anon(r) for r in relocs[1:]), *sorted(named), *dumps])
