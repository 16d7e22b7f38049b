"""The preprocessed prefix of a CUDA file, kept per include block and reused; every use checked.

Each lane of kverify's nvcc (kverify._internal.pnvcc) starts with ``gcc -E`` of the whole
translation unit: nvcc's forced ``-include cuda_runtime.h``, then the source, whose first lines
are a block of ``#include <...>`` lines (load_inline's three, then the candidate's own). That
block's headers (~390,000 lines with torch's) are nearly all of the step's 1.3-2.5 s, and most
candidates share a block: the corpus's 672 CUDA sources have 49 distinct blocks, the most common
one 337 times (``python bench/pp_blocks.py``, stop 52).

So for a block and command (the key) the preprocessor's output up to the end of the block
(``prefix.ii``) and its macro state there (``state.h``) are kept, and a later source with that
block is preprocessed from its first line after the block only: ``gcc -E`` of a file holding the
rest, the state given by ``-imacros``, in ~0.02 s, with the prefix put in front (``splice``). The
lane's next tool (cudafe++ or cicc) starts on that text at once while the real ``gcc -E`` runs
beside it; when that ends the two outputs are compared byte for byte (pnvcc._run_lane). Equal:
the tool read exactly what nvcc gives it. Different (a header changed; a state ``-imacros``
cannot carry: ``__COUNTER__``'s value, ``#pragma push_macro`` stacks, once-only headers included
again after the block; the source's own ``__BASE_FILE__``; a layout this module does not
foresee): the tool is stopped and run again on the real output, and the entry is removed
(``forget``) when the kept prefix itself differs from the real output's head (stale), not when
only what follows it does (a source of its own kind; the entry serves the others). Commands
with shell expansion (``$``, backquotes) or dependency output are left alone. The object is
therefore always built from the real preprocessor output; the cache only lets the tool start
earlier.

What the rest file must hold for GCC 12 to print, after the block, the very bytes it prints in
the whole run (found by experiment on corpus sources, both lanes; tests/test_ppcache.py):

- The split in the whole run's output is just after the last line marker of the source with a
  line number below L (L: the source's first line after the block), or the return marker at L
  itself when code follows the last include at once; it must be a return marker (flag 2) from
  one of the block's headers, at line M.
- The rest file is ``#line M-1 "SOURCE"`` and ``#include "empty.h"`` (so that the same return
  marker ``# M "SOURCE" 2`` is printed, with the printer in the same state), blank lines to L-1,
  then the source from line L. Before those, ``#include "sys.h"`` (a system header printing one
  token, cut off with the rest run's preamble) when the last token before the split came from a
  system header: GCC prints a line marker whenever a token's system-header state differs from
  the last printed token's.
- ``state.h``: each macro a header defined by the end of the block (``gcc -dD`` of the block
  alone) that the rest run does not define the same way itself (``gcc -dD`` of an empty file with
  its flags), each under a line marker giving the system-header state of its definition (GCC
  marks a macro expansion's tokens by it in ``-E`` output), and ``#undef`` for the predefined
  macros the block undefined. Predefined and command-line macros the block left alone are the
  rest run's own (torch's ``-DTORCH_EXTENSION_NAME=X`` differs from extension to extension and is
  left out of the key).

A key's entry is made the second time the key is seen (as hostpch's headers), at most
MAX_ENTRIES (~15 MB each, no eviction), under ``$KVERIFY_PCH_DIR/pp/``, and not again once it
differed MAX_DIFFERS times. An entry whose headers changed size or modification time since
(``manifest.json``) is removed before use and made again (``drop_stale``): a header that changes
only a macro's value prints the same prefix, and every splice would differ after it.
``KVERIFY_PP_CACHE=0`` turns it off. Standalone (no kverify or torch import), as pnvcc.
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
from dataclasses import dataclass

if __package__:
    from kverify._internal import hostpch
else:  # run as a script beside pnvcc (torch's ninja file): the sibling module, without importing kverify
    import hostpch

MAX_ENTRIES = 32
#: the making source's path in a kept prefix, replaced by each user's
PLACEHOLDER = b"\0kverify-source\0"
_SAFE_PATH = re.compile(r"[\w./+-]+")
_INCLUDE = re.compile(rb"[ \t]*#[ \t]*include[ \t]*<([^<>\"\n]+)>[ \t]*")
_MARKER = re.compile(rb'^# (\d+) "((?:[^"\\\n]|\\.)*)"((?: \d)*)$')
_DEFINE = re.compile(rb"^#(define|undef) ([A-Za-z_]\w*)")
#: torch's ninja file defines the extension's name for each extension (-DTORCH_EXTENSION_NAME=X):
#: not part of the key (the kept state leaves macros the block did not change to the rest run's
#: own command; a header in the block that used it would make the splice differ, and be caught)
_NAME_DEF = re.compile(r"^((?:-D)?TORCH_EXTENSION_NAME=).*$")

#: environment variables that change what gcc -E finds or prints
_ENV_KEYS = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
             "SOURCE_DATE_EPOCH", "LANG", "LC_ALL", "LC_CTYPE")


@dataclass
class Plan:
    """One ``gcc -E`` step that the cache may serve: its words, source, output, the source's
    bytes and first line after the include block (``first``, 1-based), and its entry folder."""
    words: list[str]
    source: str
    output: str
    text: bytes
    first: int
    folder: str


def block(text: bytes) -> tuple[list[tuple[int, str]], int] | None:
    """([(line, header)] of the ``#include <...>`` lines that open ``text``, the first line after
    them), where the block may hold blank lines and ``//`` comments (not ending in a backslash);
    None without such an include, or when the block runs to the end of the text."""
    incs = []
    for i, line in enumerate(text.split(b"\n")):
        m = _INCLUDE.fullmatch(line if line.rstrip().endswith(b"\\") else line.split(b"//", 1)[0])
        if m:
            incs.append((i + 1, m.group(1).decode(errors="replace")))  # "< a.h >" names " a.h "
            continue
        s = line.strip()
        if not s or (s.startswith(b"//") and not s.endswith(b"\\")):
            continue
        return (incs, i + 1) if incs else None
    return None


def plan(cmd: str, env: dict, root: str | None) -> Plan | None:
    """The Plan of the preprocessing command ``cmd`` (a shell command as nvcc -dryrun lists it),
    or None when the cache does not apply: off (KVERIFY_PP_CACHE=0, no ``root``), not one ``-E``
    of one ``.cu`` with ``-o``, a path it will not quote, no include block."""
    if not root or os.environ.get("KVERIFY_PP_CACHE") == "0" or '"' in root or not os.path.isabs(root):
        return None
    # shell expansion (the words below would not be what sh runs; shlex and sh agree on quotes and
    # backslashes, as in torch's -DPYBIND11_COMPILER_TYPE=\"_gcc\", once no $ or ` is left), or
    # dependency output
    if any(c in cmd for c in "$`") or any(env.get(k) for k in ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES")):
        return None
    try:
        words = shlex.split(cmd)
    except ValueError:
        return None
    sources = [w for w in words if w.endswith(".cu")]
    if "-E" not in words or "-o" not in words[:-1] or len(sources) != 1 or words.count(sources[0]) != 1:
        return None
    if any(w.startswith(("-M", "--dependenc", "-imacros", "--imacros", "--include", "-include")) and w != "-include"
           for w in words):
        return None  # other spellings of the forced includes, dependency output: left as they are
    source, output = sources[0], words[words.index("-o") + 1]
    if not _SAFE_PATH.fullmatch(source) or not _SAFE_PATH.fullmatch(output):
        return None
    try:
        with open(source, "rb") as f:
            text = f.read()
    except OSError:
        return None
    found = block(text)
    if found is None:
        return None
    incs, first = found
    generic = ["<in>" if w == source else "<out>" if w == output else _NAME_DEF.sub(r"\1<name>", w) for w in words]
    h = hashlib.sha256(json.dumps([generic, incs, hostpch.compiler_id(words[0], env.get("PATH")), [env.get(k) for k in _ENV_KEYS]]).encode())
    return Plan(words, source, output, text, first, os.path.join(root, "pp", h.hexdigest()[:24]))


#: a GCC line marker (``# N "file" flags``) naming a file, not one of GCC's own pseudo-files
#: (``<built-in>``, ``<command-line>``): group 1 is the file (also pnvcc.write_depfile's pattern)
LINE_MARKER = r'^# \d+ "([^"<][^"]*)"'
_MARKER_BYTES = re.compile(LINE_MARKER.encode(), re.M)


def _headers(prefix: bytes, source: str) -> list[str]:
    """The files the line markers of ``prefix`` name, but the source and GCC's own pseudo-files."""
    names = dict.fromkeys(m.group(1) for m in _MARKER_BYTES.finditer(prefix))
    return [n.decode(errors="surrogateescape") for n in names if n != source.encode()]


def ready(p: Plan) -> bool:
    """Is there an entry for ``p``'s key?"""
    return os.path.exists(os.path.join(p.folder, "meta.json"))


def _words(p: Plan, source: str, output: str, extra: list[str], forced: bool = False) -> list[str]:
    """``p``'s command on ``source`` into ``output`` ("": stdout), with its forced includes
    (``-include X``) only if ``forced``, plus ``extra``."""
    out, skip = [], False
    for w in p.words:
        if skip:
            skip = False
        elif w == "-o" or (w == "-include" and not forced):
            skip = True
        elif w == p.source:
            out.append(source)
        else:
            out.append(w)
    return out + extra + (["-o", output] if output else [])


def splice(p: Plan, env: dict) -> tuple[int, str] | None:
    """Write to ``p.output`` the kept prefix and the rest of ``p``'s source preprocessed after
    it; (length of the prefix written, the entry's nonce) or None (nothing promised about
    ``p.output``) when anything is missing or fails."""
    rest_src, rest_out = p.output + ".kvrest.cu", p.output + ".kvrest.ii"
    try:
        with open(os.path.join(p.folder, "meta.json")) as f:
            meta = json.load(f)
        m, system, nonce = int(meta["line"]), bool(meta["system"]), str(meta["nonce"])
        lines = p.text.split(b"\n")
        head = (f'#include "{p.folder}/sys.h"\n' if system else "") \
            + f'#line {m - 1} "{p.source}"\n#include "{p.folder}/empty.h"\n' + "\n" * (p.first - m)
        with open(rest_src, "wb") as f:
            f.write(head.encode() + b"\n".join(lines[p.first - 1:]))
        r = subprocess.run(_words(p, rest_src, rest_out, ["-imacros", os.path.join(p.folder, "state.h")]),
                           env=env, capture_output=True)
        if r.returncode != 0:
            return None
        with open(rest_out, "rb") as f:
            rest = f.read()
        mark = f'# {m} "{p.source}" 2\n'.encode()
        k = rest.find(mark)
        with open(os.path.join(p.folder, "prefix.ii"), "rb") as f:
            prefix = f.read()
        if k < 0 or PLACEHOLDER not in prefix:
            return None
        prefix = prefix.replace(PLACEHOLDER, p.source.encode())
        with open(p.output, "wb") as f:
            f.write(prefix + rest[k + len(mark):])
        return len(prefix), nonce
    except Exception:  # noqa: BLE001 -- a speculation: whatever fails, the real output serves
        return None
    finally:
        for name in (rest_src, rest_out):
            try:
                os.unlink(name)
            except OSError:
                pass


#: a key whose splice differed this many times is not made again (a block whose state the kept
#: one cannot carry would otherwise be remade, and differ, on every other build)
MAX_DIFFERS = 2


def _remove(p: Plan) -> None:
    """Remove ``p``'s entry (its caller holds the key's lock): renamed aside first, so that no
    half-removed entry looks ready; what a killed removal leaves, ``make`` clears."""
    gone = f"{p.folder}.gone{os.getpid()}"
    os.rename(p.folder, gone)
    shutil.rmtree(gone, ignore_errors=True)


def fresh(p: Plan) -> bool:
    """Do the headers ``p``'s entry was made from still have their size and modification time
    (hostpch.fresh)? A header that changes only a macro's value prints the same prefix, and every
    splice would differ after it."""
    return hostpch.fresh(p.folder)


def forget(p: Plan, nonce: str) -> None:
    """Remove ``p``'s entry made with ``nonce`` (its kept prefix differed from the real output's
    head: a header changed since, say) and count it against the key; the key is made again the
    next time it is seen, until it differed MAX_DIFFERS times. An entry made again since (another
    nonce) is left alone. Under the key's lock; the folder is renamed aside, then removed."""
    try:
        with open(p.folder + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(os.path.join(p.folder, "meta.json")) as f:
                    if json.load(f).get("nonce") != nonce:
                        return
            except (OSError, ValueError, AttributeError):
                return
            _remove(p)
            with open(p.folder + ".differs", "a") as f:
                f.write("x")
    except OSError:
        pass


def drop_stale(p: Plan) -> bool:
    """Remove ``p``'s entry when a header it was made from changed since (``fresh``), under the
    key's lock, without counting it as a difference (the next build with the key makes it again
    from the headers as they are); True if removed."""
    if not ready(p) or fresh(p):
        return False
    try:
        with open(p.folder + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not ready(p) or fresh(p):
                return False
            _remove(p)
            return True
    except OSError:
        return False


def _differed(p: Plan) -> int:
    try:
        return os.path.getsize(p.folder + ".differs")
    except OSError:
        return 0


def _macros(text: bytes) -> dict[bytes, tuple[bytes, int]]:
    """name -> (its ``#define`` line, system-header state 0/1/2) at the end of ``gcc -dD`` output."""
    state: dict[bytes, tuple[bytes, int]] = {}
    system = 0
    for line in text.split(b"\n"):
        if not line.startswith(b"#"):
            continue
        m = _MARKER.match(line)
        if m:
            flags = m.group(3).split()
            system = 2 if b"4" in flags else 1 if b"3" in flags else 0
            continue
        m = _DEFINE.match(line)
        if m and m.group(1) == b"define":
            state[m.group(2)] = (line, system)
        elif m:
            state.pop(m.group(2), None)
    return state


def state_header(block_dd: bytes, native_dd: bytes) -> bytes:
    """``state.h`` from ``gcc -dD`` of the block (``block_dd``) and of an empty file with the rest
    run's flags (``native_dd``): the block's macros the rest run lacks or defines otherwise, each
    under a line marker of its system-header state, then ``#undef`` of the native ones it dropped."""
    end, native = _macros(block_dd), _macros(native_dd)
    out, current = [], None
    for name, (line, system) in end.items():
        if native.get(name) == (line, system):
            continue  # predefined or from the command line, unchanged: the rest run's own (its -D values)
        if system != current:
            out.append(b'# 1 "<kverify-state>"' + (b"", b" 3", b" 3 4")[system])
            current = system
        out.append(line)
    out += [b"#undef " + name for name in native if name not in end]
    return b"\n".join(out) + b"\n"


def split_point(output: bytes, source: str, first: int) -> tuple[int, int, bool] | None:
    """(offset just after the prefix, line M of its last marker, whether its last printed token
    came from a system header) in the whole run's ``output``; None when the prefix does not end
    on a return marker into ``source`` at or below line ``first``."""
    src = source.encode()
    last = None
    for m in re.finditer(rb'^# (\d+) "' + re.escape(src) + rb'"((?: \d)*)\n', output, re.M):
        line = int(m.group(1))
        if line < first or (line == first and m.group(2) == b" 2"):  # code right after the last include
            last = m
        else:
            break
    if last is None or last.group(2) != b" 2":
        return None
    lines = output[: last.start()].split(b"\n")
    j = len(lines) - 1
    while j >= 0 and (not lines[j].strip() or _MARKER.match(lines[j])):
        j -= 1
    while j >= 0 and not _MARKER.match(lines[j]):
        j -= 1
    if j < 0:
        return None
    return last.end(), int(last.group(1)), b"3" in _MARKER.match(lines[j]).group(3).split()


def make(p: Plan, env: dict, output: bytes) -> str:
    """Keep ``p``'s prefix from its real ``output`` (the second time its key is seen, while fewer
    than MAX_ENTRIES are kept); returns what happened ("made", "seen", "" for nothing). Never
    raises: a failure leaves no entry."""
    root = os.path.dirname(p.folder)
    try:
        os.makedirs(root, exist_ok=True)
        seen = p.folder + ".seen"
        if not os.path.exists(seen):
            open(seen, "a").close()
            return "seen"
        if ready(p) or _differed(p) >= MAX_DIFFERS:
            return ""
        with open(p.folder + ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return ""  # another build makes it
            base = os.path.basename(p.folder)
            for left in os.listdir(root):  # what a build killed while making or forgetting this key left
                if left.startswith((base + ".tmp", base + ".gone")):
                    shutil.rmtree(os.path.join(root, left), ignore_errors=True)
            if ready(p) or sum(os.path.exists(os.path.join(root, d, "meta.json")) for d in os.listdir(root)) >= MAX_ENTRIES:
                return ""
            found = split_point(output, p.source, p.first)
            if found is None:
                return ""
            end, line, system = found
            before = hostpch.stats(_headers(output[:end], p.source))  # the -dD runs must read the same headers
            if before is None:
                return ""
            tmp = f"{p.folder}.tmp{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            try:
                lines = p.text.split(b"\n")
                blk, empty = os.path.join(tmp, "block.cu"), os.path.join(tmp, "none.cu")
                with open(blk, "wb") as f:
                    f.write(b"\n".join(lines[: p.first - 1]) + b"\n")
                open(empty, "wb").close()
                dd = []
                for words in (_words(p, blk, "", ["-dD"], forced=True), _words(p, empty, "", ["-dD"])):
                    r = subprocess.run(words, env=env, capture_output=True)
                    if r.returncode != 0:
                        return ""
                    dd.append(r.stdout)
                with open(os.path.join(tmp, "state.h"), "wb") as f:
                    f.write(state_header(*dd))
                with open(os.path.join(tmp, "prefix.ii"), "wb") as f:
                    f.write(re.sub(rb'^(# \d+ ")' + re.escape(p.source.encode()) + rb'(")',
                                   lambda m: m.group(1) + PLACEHOLDER + m.group(2), output[:end], flags=re.M))
                with open(os.path.join(tmp, "sys.h"), "w") as f:
                    f.write("#pragma GCC system_header\n;\n")
                open(os.path.join(tmp, "empty.h"), "w").close()
                for name in ("block.cu", "none.cu"):
                    os.unlink(os.path.join(tmp, name))
                if hostpch.stats([f for f, _, _ in before]) != before:
                    return ""  # a header changed while this ran
                with open(os.path.join(tmp, "manifest.json"), "w") as f:
                    json.dump(before, f)
                with open(os.path.join(tmp, "meta.json"), "w") as f:
                    json.dump({"line": line, "system": system, "nonce": os.urandom(8).hex()}, f)
                os.rename(tmp, p.folder)
                return "made"
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except Exception:  # noqa: BLE001 -- runs in a thread beside the build: nothing may escape
        return ""

