"""nvcc with its host and device passes at once: the same commands nvcc runs, in two lanes.

``nvcc -c file.cu`` runs one chain of tools (print them with ``nvcc -dryrun``): the host lane
(preprocess, then cudafe++, EDG's host front end, which also writes the translation unit's
module id), the device lane (preprocess, cicc, ptxas, fatbinary; cicc reads that module id), then
the host compiler on cudafe++'s output, which includes what the device lane wrote. cudafe++ and
cicc each parse the whole translation unit (with torch's headers, ~9-10 s each on this project's
CPU-only machine) and wait for each other only because of the module id. Both tools can also
write it (``--gen_module_id_file``), from the same front end, so here cicc writes its own copy
and the two lanes run at once; the host compile starts once both are done and the two module
ids are equal. If they differ, the device lane is run again, serially, with cudafe++'s id
exactly as nvcc would. The files each lane writes are disjoint (checked: cudafe++ writes the
module id and .cudafe1.cpp; cicc .cudafe1.c, .cudafe1.stub.c, .cudafe1.gpu and the PTX).

So the object is what nvcc builds: same tools, same arguments, same inputs. nvcc's own objects
differ from run to run only in the temporary file names it embeds (``tmpxft_<pid>...``), and so
do these (tests/test_pnvcc.py and bench/pnvcc_local.py compare whole objects, bytes, with those
names normalised). Anything this does not recognise -- not one ``-c`` of one source, no cudafe++ or
cicc, a tool that fails -- runs the real nvcc with the original arguments, so diagnostics and exit
status are nvcc's own.

Used as ``PYTORCH_NVCC`` by kverify's fast build (kverify._internal.fastbuild) with the real
nvcc in ``KVERIFY_REAL_NVCC``; a standalone script (no kverify or torch import): run as
``python pnvcc.py ARGS...``. Local measurement (2 cores, nvcc 13.0, a corpus kernel with the fast
build's headers, as torch's ninja file calls nvcc): 30.3 s with nvcc, 20.3 s here. The
dependency file nvcc would write (``--generate-dependencies-with-compile --dependency-output F``
or ``-MD -MF F``, which add a step of nvcc's own that is no command) is written from the host
preprocessor's line markers instead (write_depfile): the source and every header it read.
The last command (the host compiler on cudafe++'s output) runs through
kverify._internal.hostpch, which compiles the header code in that output from a precompiled
header when KVERIFY_PCH_DIR holds one for it (the object then differs from nvcc's only in the
names and linkage of the members of the header code's anonymous namespaces: internal, one copy
per unit, where nvcc's are hidden-external under a name unique to the unit), and exactly as
nvcc would otherwise. The tools run with glibc's malloc on transparent huge pages (tool_env;
``KVERIFY_THP=0`` runs them in nvcc's environment). Each lane's first step, the preprocessing, may
start its tool early from a kept preprocessed prefix (kverify._internal.ppcache; _run_lane): the tool's input is then checked
to be the real preprocessor's output byte for byte, and the tool run again on that output if not.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

if __package__:
    from kverify._internal import declset, hostpch, ppcache
else:  # run as a script (torch's ninja file): the sibling modules, without importing kverify
    import declset
    import hostpch
    import ppcache

_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$")
#: set by kverify's narrow build (kverify._internal.fastbuild): the folder of the reduced headers
#: passed with -I, the folder of the reference headers to check them against, and where header
#: indexes are kept. With the first set, every preprocessing step is also run with the reference
#: folder in its place and the two compared (kverify._internal.declset) before the object is
#: made; a difference, or anything that keeps the check from running, fails the build.
CHECK_REDUCED, CHECK_FULL, CHECK_CACHE = "KVERIFY_DECLSET_REDUCED", "KVERIFY_DECLSET_FULL", "KVERIFY_DECLSET_CACHE"
#: the first line of a refusal (fastbuild reports it as the narrow build's error)
REFUSED = "kverify: error: narrow headers refused:"
_MODULE_ID = re.compile(r'--module_id_file_name\s+("[^"]*"|\S+)')
#: glibc's malloc tunable that backs the heap with transparent huge pages (glibc >= 2.35; older
#: ones ignore it; the kernel must allow THP on request, ``madvise`` or ``always``)
HUGE_PAGES = "glibc.malloc.hugetlb=1"
#: nvcc's temporary file names as its objects embed them (``tmpxft_<pid>_<n>``, 8 hex digits each)
TMPXFT = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")


def normalised(data: bytes) -> bytes:
    """``data`` (an object file's or another nvcc output's bytes) with every TMPXFT name made one
    name, so two builds of one source compare equal when they differ only there."""
    return TMPXFT.sub(b"tmpxft_X", data)


def tool_env(env: dict) -> dict:
    """The environment the tools of nvcc's chain run in here: ``env`` with HUGE_PAGES added to
    GLIBC_TUNABLES. cudafe++ parses torch's header code with a peak resident set of ~1.25 GB (one
    corpus source, the developers' machine), and on an H100 host (16 cores, THP ``madvise``, glibc
    2.39) it ran 1.17x faster so, cicc no faster (bench/tool_env.py, README "Compile time"); where
    the heap's pages come from does not change what a tool computes (that script hashes the outputs
    of the steps it times, in both modes). ``env`` itself when its KVERIFY_THP is "0" or its
    GLIBC_TUNABLES already sets glibc.malloc.hugetlb (the user's choice)."""
    have = env.get("GLIBC_TUNABLES", "")
    if env.get("KVERIFY_THP") == "0" or any(t.split("=")[0] == "glibc.malloc.hugetlb" for t in have.split(":")):
        return env
    return {**env, "GLIBC_TUNABLES": f"{have.rstrip(':')}:{HUGE_PAGES}" if have.strip(":") else HUGE_PAGES}


def _expand(value: str, env: dict) -> str:
    """An nvcc -dryrun assignment's right-hand side: $VAR / ${VAR} from ``env``, quotes dropped."""
    value = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value.strip())
    return value.replace('"', "")


def plan(dryrun_stderr: str, env: dict) -> tuple[dict, list[str]]:
    """(environment, commands) of an ``nvcc -dryrun`` listing (its ``#$ `` lines): assignments
    update a copy of ``env`` in order, the rest are shell commands."""
    env = dict(env)
    cmds = []
    for line in dryrun_stderr.splitlines():
        if not line.startswith("#$ "):
            continue
        line = line[3:]
        m = _ASSIGN.match(line)
        if m and not line.startswith(("gcc", "g++", "cc", "c++")):
            env[m.group(1)] = _expand(m.group(2), env)
        else:
            cmds.append(line)
    return env, cmds


def _tool(cmd: str) -> str:
    try:
        first = shlex.split(cmd)[0]
    except ValueError:
        return ""
    return os.path.basename(first)


def _output(cmd: str) -> str | None:
    """The file after ``-o`` in a command, unquoted."""
    try:
        w = shlex.split(cmd)
    except ValueError:
        return None
    return w[w.index("-o") + 1] if "-o" in w[:-1] else None


def lanes(cmds: list[str]) -> tuple[list[str], list[str], list[str], str] | None:
    """(host lane, device lane with cicc writing its own module id, the device lane as nvcc runs
    it, final command), or None when the chain is not the shape this knows: preprocessing steps
    (``-E``), one cudafe++ that generates the module id, cicc steps reading that id, then ptxas /
    fatbinary / rm, and a last command with -c. Each preprocessing step goes to the lane of the
    tool that reads its output."""
    tools = [_tool(c) for c in cmds]
    if tools.count("cudafe++") != 1 or "cicc" not in tools or " -c " not in f" {cmds[-1]} ":
        return None
    cudafe = cmds[tools.index("cudafe++")]
    mid = _MODULE_ID.search(cudafe)
    if "--gen_module_id_file" not in cudafe or not mid:
        return None
    host, device, as_nvcc = [], [], []
    n_cicc = 0
    for c, t in zip(cmds[:-1], tools[:-1]):
        if " -E " in f" {c} " and t not in ("cudafe++", "cicc"):
            out = _output(c)
            if not out:
                return None
            if out in cudafe:
                host.append(c)
            elif any(out in x for x, tt in zip(cmds, tools) if tt == "cicc"):
                device.append(c)
                as_nvcc.append(c)
            else:
                return None
        elif t == "cudafe++":
            host.append(c)
        elif t == "cicc":
            m = _MODULE_ID.search(c)
            if not m or m.group(1) != mid.group(1) or "--gen_module_id_file" in c:
                return None
            n_cicc += 1  # one file per cicc step (one per virtual architecture): each is compared
            tail = f".cicc{n_cicc}"
            own = m.group(1)[:-1] + tail + '"' if m.group(1).endswith('"') else m.group(1) + tail
            device.append(c[: m.start()] + f"--gen_module_id_file --module_id_file_name {own}" + c[m.end():])
            as_nvcc.append(c)
        elif t in ("ptxas", "fatbinary", "nvlink", "rm") and "cicc" in tools[: cmds.index(c)]:
            device.append(c)
            as_nvcc.append(c)
        else:
            return None
    return host, device, as_nvcc, cmds[-1]


#: nvcc's dependency-file options (torch's ninja file passes the first pair); nvcc filters the
#: dependencies in a step of its own that -dryrun lists but that is no command
_DEPS_FLAG = "--generate-dependencies-with-compile"
_DEPS_OUT = ("--dependency-output", "-MF")


def _without_depfile(argv: list[str]) -> tuple[list[str], str | None]:
    """(argv without the dependency-file options, the dependency file or None)."""
    if _DEPS_FLAG not in argv and "-MD" not in argv:
        return argv, None
    out, dep, skip = [], None, False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in (_DEPS_FLAG, "-MD"):
            continue
        if a in _DEPS_OUT and i + 1 < len(argv):
            dep, skip = argv[i + 1], True
            continue
        out.append(a)
    return out, dep


def _module_id_file(cmd: str) -> str:
    return _MODULE_ID.search(cmd).group(1).strip('"')


def _gen_c_file(cmd: str) -> str:
    """The file cudafe++ (``cmd``) writes its host code to (``--gen_c_file_name``): the input of
    nvcc's last command; "" if it names none."""
    w = shlex.split(cmd)
    return w[w.index("--gen_c_file_name") + 1] if "--gen_c_file_name" in w[:-1] else ""


def _run(cmds: list[str], env: dict, out: list, lane: str = "final") -> bool:
    """Run shell commands in order (``rm`` may fail, as under nvcc); append (stdout, stderr) to
    ``out``; False at the first failure. With KVERIFY_PNVCC_TRACE set, each command's lane (host,
    device, or final: the host compile after both and, the first time, its precompiled header's
    build, hostpch.compile_final), tool and wall seconds go to that file too
    ("step LANE TOOL SECONDS", TOOL with " -E" for a preprocessing step; the two lanes' lines
    interleave in the order their steps end)."""
    tracing = bool(os.environ.get("KVERIFY_PNVCC_TRACE"))
    for c in cmds:
        t0 = time.perf_counter()
        # tools' messages may name files in any encoding (a review's find: a folder named in Latin-1)
        p = subprocess.run(["/bin/sh", "-c", c], env=env, capture_output=True, text=True, errors="replace")
        if tracing:
            _trace(f"step {lane} {_tool(c) + (' -E' if ' -E ' in f' {c} ' else '')} {time.perf_counter() - t0:.2f}")
        out.append((p.stdout, "" if _tool(c) == "rm" else p.stderr))  # nvcc's own clean-up is silent
        if p.returncode != 0 and _tool(c) != "rm":
            return False
    return True


def _start(cmd: str, env: dict) -> tuple[subprocess.Popen, threading.Thread, list]:
    """Start the simple shell command ``cmd`` with ``exec`` (the process is the tool itself, so
    that killing it stops the tool; in this process's group and session, so whatever stops the
    build stops it too); a thread collects its (stdout, stderr) into the returned list once it ends."""
    p = subprocess.Popen(["/bin/sh", "-c", "exec " + cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, errors="replace")
    got: list = []
    t = threading.Thread(target=lambda: got.extend(p.communicate()))
    t.start()
    return p, t, got


def _stop(p: subprocess.Popen, t: threading.Thread) -> None:
    """Kill a tool _start started (Popen.kill: not once it has ended and been reaped); wait for it."""
    p.kill()
    t.join()


def _simple(cmd: str) -> bool:
    """Is shell command ``cmd`` one command (no ``;``, ``&&``, ``|``, redirection ...), so that
    ``exec`` runs all of it?"""
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
        return not any(t and set(t) <= set("();<>|&") for t in lex)
    except ValueError:
        return False


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, "rb") as f, open(b, "rb") as g:
            return f.read() == g.read()
    except OSError:
        return False


def _same_head(a: str, b: str, n: int) -> bool:
    """Do files ``a`` and ``b`` both have the same first ``n`` bytes?"""
    try:
        with open(a, "rb") as f, open(b, "rb") as g:
            x = f.read(n)
            return len(x) == n and x == g.read(n)
    except OSError:
        return False


def _run_lane(cmds: list[str], env: dict, out: list, lane: str) -> bool:
    """``_run`` for a lane whose first step preprocesses the source for the second (cudafe++ or
    cicc), with kverify._internal.ppcache: when the source's include block has a kept prefix, the
    second step starts on the spliced text while the real ``gcc -E`` runs beside it; the two
    outputs must be equal byte for byte, else the second step is stopped, the real output put in
    place, the entry forgotten and the step run again. Without an entry the lane runs as
    ``_run`` and the real output may make one (ppcache.make); an entry whose headers changed is
    removed first (ppcache.drop_stale). Trace lines: "pp LANE used|differs|differs after the
    prefix|stale|made|seen", the steps as _run's."""
    pre = None
    if len(cmds) > 1 and " -E " in f" {cmds[0]} " and _tool(cmds[1]) in ("cudafe++", "cicc"):
        pre = ppcache.plan(cmds[0], env, os.environ.get("KVERIFY_PCH_DIR"))
    if (pre is None or pre.output not in cmds[1] or cmds[0].count(pre.output) != 1
            or not (_simple(cmds[0]) and _simple(cmds[1]))):
        return _run(cmds, env, out, lane)
    if ppcache.drop_stale(pre):
        _trace(f"pp {lane} stale")
    if not ppcache.ready(pre):
        if not _run(cmds[:1], env, out, lane):
            return False
        try:
            with open(pre.output, "rb") as f:
                text = f.read()
        except OSError:
            return _run(cmds[1:], env, out, lane)
        made: list = []
        maker = threading.Thread(target=lambda: made.append(ppcache.make(pre, env, text)))
        maker.start()  # beside the lane's next steps
        ok = _run(cmds[1:], env, out, lane)
        maker.join()
        if made and made[0]:
            _trace(f"pp {lane} {made[0]}")
        return ok
    tracing = bool(os.environ.get("KVERIFY_PNVCC_TRACE"))
    real_out = pre.output + ".kvreal"
    t0 = time.perf_counter()
    real, real_t, real_got = _start(cmds[0].replace(pre.output, real_out), env)  # nvcc's command, but for -o
    spliced = ppcache.splice(pre, env)
    tool = _start(cmds[1], env) if spliced else None
    t1 = time.perf_counter()
    real_t.join()
    real.wait()
    if tracing:
        _trace(f"step {lane} {_tool(cmds[0])} -E {time.perf_counter() - t0:.2f}")
    out.append(tuple(real_got) if len(real_got) == 2 else ("", ""))
    if real.returncode != 0 or not os.path.exists(real_out):
        if tool:
            _stop(*tool[:2])
        return False
    if not (spliced and _same_file(real_out, pre.output)):
        if tool:
            _stop(*tool[:2])
        if spliced:  # the kept prefix itself differs (stale: forgotten), or only what follows it
            stale = not _same_head(real_out, pre.output, spliced[0])
            if stale:
                ppcache.forget(pre, spliced[1])
            _trace(f"pp {lane} differs" + ("" if stale else " after the prefix"))
        os.replace(real_out, pre.output)
        return _run(cmds[1:], env, out, lane)
    os.unlink(real_out)
    _trace(f"pp {lane} used")
    p, t, got = tool
    t.join()
    p.wait()
    if tracing:
        _trace(f"step {lane} {_tool(cmds[1])} {time.perf_counter() - t1:.2f}")
    out.append(tuple(got) if len(got) == 2 else ("", ""))
    if p.returncode != 0:
        return False
    return _run(cmds[2:], env, out, lane)


_LINE_MARKER = re.compile(ppcache.LINE_MARKER, re.M)


def write_depfile(path: str, obj: str, src: str, preprocessed: list[str | None]) -> None:
    """A make-style dependency file for ninja (``deps = gcc``): ``obj`` depends on ``src`` and
    every file named by the line markers (``# N "file"``) of the ``preprocessed`` outputs, i.e. every
    header the translation unit read -- what nvcc's own dependency step (which -dryrun lists but
    which is no command) reports, so a changed header rebuilds the object."""
    files: dict[str, None] = {src: None}
    for pre in preprocessed:
        if pre and os.path.exists(pre):
            with open(pre, errors="replace") as f:
                for m in _LINE_MARKER.finditer(f.read()):
                    files.setdefault(os.path.normpath(m.group(1)), None)
    esc = lambda x: x.replace("\\", "\\\\").replace(" ", "\\ ").replace("$", "$$")  # noqa: E731
    with open(path, "w") as f:
        f.write(f"{esc(obj)}: " + " \\\n  ".join(esc(x) for x in files) + "\n")


def reference_step(cmd: str, reduced: str, full: str) -> tuple[str, str, str] | None:
    """(the preprocessing command ``cmd`` with ``-I<reduced>`` replaced by ``-I<full>`` and its
    output renamed, that output, the source it preprocesses), or None when ``cmd`` has no
    ``-I<reduced>``, no ``-o`` or no .cu source."""
    try:
        w = shlex.split(cmd)
    except ValueError:
        return None
    out = _output(cmd)
    src = next((a for a in w if a.endswith(".cu")), None)
    if f"-I{reduced}" not in w or not out or not src:
        return None
    ref_out = out + ".kvfull.ii"
    w = [f"-I{full}" if a == f"-I{reduced}" else a for a in w]
    w[w.index("-o") + 1] = ref_out
    return shlex.join(w), ref_out, src


def check_headers(steps: list[str], env: dict, reduced: str, full: str, cache: str | None) -> list[str]:
    """Reasons the reduced headers may change the source's meaning, from every preprocessing
    step in ``steps`` (already run: their outputs exist) and its reference step (run here, at
    once); [] when none. Anything that keeps a step from being checked is a reason too."""
    plans = [(c, reference_step(c, reduced, full)) for c in steps]
    if not plans or any(r is None for _, r in plans):
        return [f"a preprocessing step without -I{reduced}: not checked"]
    results: list = [None] * len(plans)

    def run(k: int) -> None:
        results[k] = subprocess.run(["/bin/sh", "-c", plans[k][1][0]], env=env, capture_output=True, text=True)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reasons: list[str] = []
    for (cmd, (_, ref_out, src)), p in zip(plans, results):
        if p is None or p.returncode != 0:
            return [f"the reference preprocessing failed: {(p.stderr if p else '').strip()[-300:]}"]
        with open(_output(cmd), errors="replace") as f:
            reduced_text = f.read()
        with open(ref_out, errors="replace") as f:
            full_text = f.read()
        reasons += [r for r in declset.compare(full_text, reduced_text, src, cache) if r not in reasons]
    return reasons


def _trace(what: str) -> None:
    """Append how the call was built ("lanes", "lanes, device lane again", "nvcc: why") or how long
    a step took ("step LANE TOOL SECONDS", _run) to the file named by KVERIFY_PNVCC_TRACE, if any (tests,
    bench/host_pch_local.py). A file it cannot write is ignored: tracing never changes the build."""
    path = os.environ.get("KVERIFY_PNVCC_TRACE")
    if path:
        try:
            with open(path, "a") as f:
                f.write(what + "\n")
        except OSError:
            pass


def main(argv: list[str]) -> int:
    nvcc = os.environ.get("KVERIFY_REAL_NVCC") or "nvcc"

    reduced, full = os.environ.get(CHECK_REDUCED), os.environ.get(CHECK_FULL)

    def real(why: str) -> int:
        _trace(f"nvcc: {why}")
        if reduced:  # the narrow build is only made with its check
            sys.stderr.write(f"{REFUSED} not checked ({why})\n")
            return 1
        return subprocess.call([nvcc, *argv])
    if argv.count("-c") != 1 or sum(a.endswith(".cu") for a in argv) != 1 or {"-dryrun", "--dryrun"} & set(argv):
        return real("not one -c of one .cu")
    args, depfile = _without_depfile(argv)
    # nvcc names its temporary files under TMPDIR; in an audit, under the audit's own folder
    # (KVERIFY_WORKDIR_ROOT, which the audit removes), so a build killed mid-step leaves nothing
    tmp = tempfile.mkdtemp(prefix="kverify-pnvcc-", dir=os.environ.get("KVERIFY_WORKDIR_ROOT") or None)
    try:
        d = subprocess.run([nvcc, "-dryrun", *args], capture_output=True, text=True, env={**os.environ, "TMPDIR": tmp})
        if d.returncode != 0:
            return real("-dryrun failed")
        env, cmds = plan(d.stderr, tool_env({**os.environ, "TMPDIR": tmp}))
        split = lanes(cmds) if cmds else None
        if split is None:
            return real("a chain of another shape")
        host, device, as_nvcc, last = split
        h_out: list = []
        d_out: list = []
        done: dict = {}
        def device_lane() -> None:
            try:
                done["ok"] = _run_lane(device, env, d_out, "device")
            except Exception:  # noqa: BLE001 -- the build goes to nvcc (below), never a traceback
                done["ok"] = False
        lane = threading.Thread(target=device_lane)
        lane.start()
        h_ok = _run_lane(host, env, h_out, "host")
        lane.join()
        if not (h_ok and done.get("ok")):
            return real("a step failed")  # nvcc's own diagnostics and exit status
        if reduced:
            steps = [c for c in host + device if " -E " in f" {c} " and _tool(c) not in ("cudafe++", "cicc")]
            why = check_headers(steps, env, reduced, full or "", os.environ.get(CHECK_CACHE))
            _trace("checked: " + ("; ".join(why) if why else "same"))
            if why:
                sys.stderr.write(f"{REFUSED} " + " | ".join(why) + "\n")
                return 1
        theirs = open(_module_id_file(host[-1])).read()
        if any(open(_module_id_file(c)).read() != theirs for c in device if _tool(c) == "cicc"):
            d_out = []  # the device lane again, as nvcc runs it: with cudafe++'s module id
            if not _run(as_nvcc, env, d_out, "device"):
                return real("a step failed")
            _trace("lanes, device lane again")
        final: list = []
        ok, how = hostpch.compile_final(last, _gen_c_file(host[-1]), theirs.strip(), os.environ.get("KVERIFY_PCH_DIR"),
                                        _run, env, final)
        if not ok:
            return real("a step failed")
        if how:
            _trace(how)
        if depfile:
            src = next(a for a in args if a.endswith(".cu"))
            obj = args[args.index("-o") + 1] if "-o" in args[:-1] else ""
            write_depfile(depfile, obj, src, [_output(c) for c in host if " -E " in f" {c} "])
        _trace("lanes")
        own = "".join(ln + "\n" for ln in d.stderr.splitlines() if not ln.startswith("#$ "))  # nvcc's own warnings
        for o, e in [("", own), *h_out, *d_out, *final]:
            sys.stdout.write(o)
            sys.stderr.write(e)
        return 0
    except Exception as e:  # noqa: BLE001 -- an OSError, or a fault of this script: nvcc builds it
        return real(f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
