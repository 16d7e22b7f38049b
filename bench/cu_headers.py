"""Benchmark: nvcc time of an extension's CUDA file with the headers of kverify's fast build
(load_inline's ``torch/types.h`` prefix; ``torch/extension.h`` served by the shim, i.e.
torch/types.h) against the narrow header kverify makes for that source
(kverify/_internal/narrow.py), same source, same flags, same run, alternating. Also compares the
device code of the two objects (``cuobjdump -sass``, else the PTX and cubin nvcc keeps; the
narrow header must not change it).

Sources: an embedded typical candidate (a ReLU kernel whose host function calls x.contiguous(),
torch::empty_like, torch::zeros, TORCH_CHECK, data_ptr<float>()), or with ``--corpus FILE`` the
CUDA sources of the first N load_inline candidates (fixed order by a hash of the id) whose
``cuda_sources`` are string constants in the file. Needs nvcc and torch's headers (a CPU torch
wheel has them); no GPU.

With --stock it also builds with torch's own headers (stock load_inline) and compares both
against that. It also compares the host code the source itself defines (``objdump -d -r``: same calls, same
relocation targets). Controls that must show a difference: bench/narrow_controls/*.cu (pass them
with --source).

    python bench/cu_headers.py [--reps 2] [--arch 90] [--corpus FILE --limit 8] [--jobs 1]
                               [--source bench/narrow_controls/overload_var_std.cu ...] [--narrow-only]
"""
from __future__ import annotations

import argparse
import ast
import re
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BODY = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  auto z = torch::zeros({xc.size(0)}, xc.options());
  int64_t n = xc.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
#: what load_inline writes on top of every CUDA source
PREFIX = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


def fast_build_nvcc_flags() -> list[str]:
    """nvcc's flags for a CUDA file as torch's ninja file passes them in kverify's fast build
    (sm_90, -O3, torch's and Python's include folders, kverify's shim first on the host path):
    what bench/pnvcc_local.py, bench/host_pch_local.py and bench/host_pch_keys.py compile with."""
    import sysconfig

    import torch.utils.cpp_extension as cpp

    from kverify._internal.fastbuild import SHIM
    return ["-std=c++17", *[x for p in [*cpp.include_paths(), sysconfig.get_paths()["include"]] for x in ("-isystem", p)],
            "-D__CUDA_NO_HALF_OPERATORS__", "--expt-relaxed-constexpr", "-gencode=arch=compute_90,code=sm_90",
            "--compiler-options", "-fPIC", f"-I{SHIM}", "-O3"]


def corpus_sources(path: str | None = None) -> list[str]:
    """The CUDA sources (cuda_sources) of a corpus JSONL's rows, sorted by sha256 of the row id (a
    fixed spread over the corpus's origins; a source's INDEX in the bench scripts is its position
    here). ``path`` defaults to $CORPUS, else .corpus/accepted_kernels.jsonl (the copy device runs carry)."""
    path = path or os.environ.get("CORPUS", ".corpus/accepted_kernels.jsonl")
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows.sort(key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())
    return [s for r in rows if (s := cuda_sources(r.get("candidate", ""))) is not None]


def cuda_sources(candidate: str) -> str | None:
    """The ``cuda_sources`` argument of the file's load_inline call when it is made of string
    constants (directly or through module-level names), joined; else None."""
    try:
        tree = ast.parse(candidate)
    except SyntaxError:
        return None
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
              for t in n.targets if isinstance(t, ast.Name)}

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return consts.get(node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            parts = [text(e) for e in node.elts]
            return None if any(p is None for p in parts) else "\n".join(parts)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "load_inline":
            for kw in node.keywords:
                if kw.arg == "cuda_sources":
                    return text(kw.value)
    return None


def device_code(obj: Path) -> str | None:
    """The object's SASS (cuobjdump -sass) or, without cuobjdump, the PTX and cubin nvcc kept
    beside it (--keep), as text; None when neither is there."""
    tool = shutil.which("cuobjdump")
    if tool:
        out = subprocess.run([tool, "-sass", str(obj)], capture_output=True, text=True).stdout
        return "\n".join(ln for ln in out.splitlines()
                         if not ln.strip().startswith(("Fatbin", "code for", "arch", "identifier")))
    keep = obj.with_suffix(".keep")
    parts = sorted(keep.glob("*.ptx")) + sorted(keep.glob("*.cubin"))
    return "\n".join(p.read_bytes().hex() if p.suffix == ".cubin" else p.read_text() for p in parts) or None


_ADDR = re.compile(r"\b[0-9a-f]+ <([^>]*)>")


def _last_name(symbol: str) -> str:
    """The function's own name in a demangled symbol ("ns::f<T>(args)" -> "f")."""
    head, depth = [], 0
    for ch in symbol:  # the part before the first "(" outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            head.append(ch)
    words = re.findall(r"\w+", "".join(head))
    return words[-1] if words else ""


def host_code(obj: Path, source: str) -> dict[str, str] | None:
    """The host functions ``source`` itself defines (section .text, named in the source, and the
    kernels' launch stubs) as {symbol: instructions with their relocations} (``objdump -d -r -C``;
    addresses and .rodata offsets dropped); None without objdump. Two objects with equal dicts
    call the same functions the same way: an overload resolved differently shows as another
    relocation target. (Header code is left out: it differs with the header set by design.)"""
    tool = shutil.which("objdump")
    if not tool:
        return None
    names = set(re.findall(r"\b[A-Za-z_]\w*", source))
    # only section .text: the functions counted below live there (header code is in COMDAT
    # .text.<name> sections); the whole object took ~12 s per 100k lines of header code (stop 26)
    out = subprocess.run([tool, "-d", "-r", "-C", "--no-show-raw-insn", "-j", ".text", str(obj)],
                         capture_output=True, text=True).stdout
    funcs: dict[str, list[str]] = {}
    cur, section = None, ""
    for ln in out.splitlines():
        sec = re.match(r"^Disassembly of section (\S+):$", ln)
        if sec:
            section, cur = sec.group(1), None
            continue
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", ln)
        if head:
            sym = head.group(1)
            own = section == ".text" and (_last_name(sym) in names or sym.startswith("__device_stub__"))
            cur = funcs.setdefault(sym, []) if own else None
        elif cur is not None and ln.strip():
            body = ln.split(":", 1)[1] if re.match(r"^\s*[0-9a-f]+:", ln) else ln
            body = re.sub(r"(\.rodata[\w.]*)\+0x[0-9a-f]+", r"\1", _ADDR.sub(r"<\1>", body))
            cur.append(body.strip())
    return {k: "\n".join(v) for k, v in funcs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--arch", default="90")
    ap.add_argument("--corpus", default=None, help="JSONL of candidates (field 'candidate'); default: embedded source")
    ap.add_argument("--source", action="append", default=[], help="a .cu file to compare as well (repeatable)")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=1, help="compiles at once (default 1)")
    ap.add_argument("--stock", action="store_true",
                    help="also compile with torch's own torch/extension.h (what stock load_inline uses) and "
                         "compare the fast and narrow builds' device and host code with it")
    ap.add_argument("--checked", action="store_true",
                    help="build as kverify's fast build does: every mode through kverify's nvcc (pnvcc, host and "
                         "device passes at once), the narrow one with its check against the fast build's headers "
                         "(kverify._internal.declset); a refused narrow build costs its try plus the fast build")
    ap.add_argument("--narrow-only", action="store_true",
                    help="compile only with the narrow header: how many sources it serves and compiles (no ratio)")
    a = ap.parse_args()
    nvcc = shutil.which("nvcc")
    if not nvcc:
        print("bench/cu_headers.py needs nvcc on PATH", file=sys.stderr)
        return 2
    import torch
    import torch.utils.cpp_extension as cpp

    from kverify._internal.fastbuild import SHIM
    from kverify._internal.narrow import narrow_files, write_shim

    srcs: list[tuple[str, str]] = [("embedded relu", BODY)]
    if a.corpus:
        rows = [json.loads(ln) for ln in open(a.corpus) if ln.strip()]
        rows.sort(key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())
        srcs = [(r["id"], s) for r in rows if (s := cuda_sources(r.get("candidate", ""))) is not None][: a.limit]
    srcs += [(f, Path(f).read_text()) for f in a.source]
    inc = cpp.include_paths()
    import sysconfig

    # include folders as load_inline passes them: torch's and Python's (torch/extension.h needs Python.h)
    flags = ["-std=c++17", *[x for p in [*inc, sysconfig.get_paths()["include"]] for x in ("-isystem", p)], "-D__CUDA_NO_HALF_OPERATORS__",
             "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
             "--expt-relaxed-constexpr", f"-gencode=arch=compute_{a.arch},code=sm_{a.arch}",
             "--compiler-options", "-fPIC", "-DTORCH_EXTENSION_NAME=bench",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
    root = Path(tempfile.mkdtemp(prefix="kv-cuh-"))
    work = []
    for i, (name, src) in enumerate(srcs):
        d = root / str(i)
        d.mkdir()
        (d / "cuda.cu").write_text(PREFIX + src)
        files = narrow_files(src, inc[0])
        modes = {} if a.narrow_only else {"fast": str(SHIM)}
        if files is not None:
            modes["narrow"] = str(write_shim(d / "narrow", files))
        if a.stock and not a.narrow_only:
            modes["stock"] = ""  # no -I: torch's own headers
        work.append((name, d, modes))

    from kverify._internal import pnvcc

    def compile_one(item):
        name, d, mode, shim, rep = item
        obj = d / f"{mode}.{rep}.o"
        keep = d / f"{mode}.{rep}.keep"
        keep.mkdir()
        t = time.perf_counter()
        inc_flag = [f"-I{shim}"] if shim else []
        tool, env, kept = [nvcc], None, ["--keep", "--keep-dir", str(keep)]
        if a.checked:  # pnvcc takes no --keep: device code is compared with cuobjdump on the object
            tool, kept = [sys.executable, pnvcc.__file__], []
            env = {**os.environ, "KVERIFY_REAL_NVCC": nvcc}
            if mode == "narrow":
                env.update({pnvcc.CHECK_REDUCED: shim, pnvcc.CHECK_FULL: str(SHIM),
                            pnvcc.CHECK_CACHE: str(root / "declset")})
        r = subprocess.run([*tool, "-c", str(d / "cuda.cu"), "-o", str(obj), *inc_flag, *kept, *flags],
                           capture_output=True, text=True, env=env)
        sec = time.perf_counter() - t
        # each compile as it ends: a run cut short by a time limit keeps these (stop 26: 90 s, nothing)
        print(f"  {mode:6} {sec:6.1f} s rc {r.returncode}  {name[:70]}", flush=True)
        return name, mode, sec, r.returncode, r.stderr, obj

    items = [(n, d, m, s, rep) for rep in range(a.reps) for n, d, modes in work for m, s in modes.items()]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:  # ordered rep by rep, modes alternating
        results = list(pool.map(compile_one, items))
    print(f"nvcc {subprocess.run([nvcc, '--version'], capture_output=True, text=True).stdout.split()[-1]}, "
          f"torch {torch.__version__}, {os.cpu_count()} cores, sm_{a.arch}, {a.reps} rep(s) each, {a.jobs} at a time")
    print(f"{'source':52} {'fast s':>7} {'narrow s':>9} {'ratio':>6} {'same code':>9}  same host code   "
          f"(device code: {'cuobjdump -sass' if shutil.which('cuobjdump') else 'PTX + cubin kept by nvcc'})")
    per: dict[str, dict[str, list]] = {n: {} for n, _ in srcs}
    for name, mode, sec, rc, err, obj in results:
        per.setdefault(name, {}).setdefault(mode, []).append((sec, rc, err, obj))
    if a.narrow_only:
        ok = [statistics.median(s for s, *_ in m["narrow"]) for m in per.values()
              if m.get("narrow") and not any(rc for _, rc, _, _ in m["narrow"])]
        for name, m in per.items():
            if not m.get("narrow"):
                print(f"{name[:52]:52} not served (names the narrow header does not declare)")
            elif any(rc for _, rc, _, _ in m["narrow"]):
                err = next(e for _, rc, e, _ in m["narrow"] if rc)
                print(f"{name[:52]:52} narrow build fails: "
                      f"{next((ln for ln in err.splitlines() if 'error' in ln), err.strip()[-100:])[:110]}")
        print(f"{len(per)} sources: {sum(1 for m in per.values() if m.get('narrow'))} served, {len(ok)} compiled "
              f"with the narrow header (median {statistics.median(ok) if ok else float('nan'):.1f} s)")
        shutil.rmtree(root, ignore_errors=True)
        return 0
    if a.stock:
        print(f"\nagainst torch's own headers (stock): {'source':44} {'stock s':>7}  fast: same device/host   "
              f"narrow: same device/host")
        for name, modes in per.items():
            st = modes.get("stock", [])
            if not st or any(rc for _, rc, _, _ in st):
                print(f"{name[:44]:44} stock build fails")
                continue
            src_text = next(t for nm_, t in srcs if nm_ == name)
            ref = (device_code(st[0][3]), host_code(st[0][3], src_text))
            cells = []
            for m in ("fast", "narrow"):
                got = modes.get(m, [])
                if not got or any(rc for _, rc, _, _ in got):
                    cells.append(f"{m} {'fails' if got else 'not served'}")
                    continue
                dv, hs = device_code(got[0][3]), host_code(got[0][3], src_text)
                bad = sorted(k for k in set(ref[1] or {}) | set(hs or {}) if (ref[1] or {}).get(k) != (hs or {}).get(k))
                same_host = "-" if not (hs or ref[1]) else str(hs == ref[1])  # no function found: no evidence
                cells.append(f"{dv == ref[0]}/{same_host}{(' ' + ', '.join(bad)[:40]) if bad else ''}")
            print(f"{name[:44]:44} {statistics.median(x for x, *_ in st):7.1f}  {cells[0]:24} {cells[1]}")
        print()
    fast_all, narrow_all = [], []
    for name, modes in per.items():
        f = modes["fast"]
        n = modes.get("narrow", [])
        if any(rc for _, rc, _, _ in f):
            print(f"{name[:52]:52} fast build fails: {f[0][2].strip().splitlines()[-1][:80] if f[0][2] else ''}")
            continue
        fm = statistics.median(s for s, *_ in f)
        if not n:
            print(f"{name[:52]:52} {fm:7.1f} {'-':>9} {'':>6} {'':>9}  (names the narrow header does not serve)")
            fast_all.append(fm), narrow_all.append(fm)  # kverify builds it with the fast headers
            continue
        if any(rc for _, rc, _, _ in n):
            err = next(e for _, rc, e, _ in n if rc)
            line = next((ln for ln in err.splitlines() if "error" in ln), err.strip()[-80:])
            what = "refused" if pnvcc.REFUSED in err else "failed"
            line = line.replace(pnvcc.REFUSED, "").strip()
            print(f"{name[:52]:52} {fm:7.1f} {what:>9} {'':>6} {'':>9}  {line[:160]}")
            fast_all.append(fm), narrow_all.append(fm + statistics.median(s for s, *_ in n))  # a failed try costs
            continue
        nm = statistics.median(s for s, *_ in n)
        same = device_code(f[0][3]), device_code(n[0][3])
        src_text = next(t for nm_, t in srcs if nm_ == name)
        hf, hn = host_code(f[0][3], src_text), host_code(n[0][3], src_text)
        host = "-" if hf is None or not (hf or hn) else ("True" if hf == hn else
                                      "False: " + ", ".join(sorted(k for k in set(hf) | set(hn) if hf.get(k) != hn.get(k)))[:60])
        print(f"{name[:52]:52} {fm:7.1f} {nm:9.1f} {fm / nm:6.2f} {str(same[0] == same[1]) if same[0] is not None else '-':>9}"
              f"  {host}")
        fast_all.append(fm), narrow_all.append(nm)
    if fast_all:
        print(f"median per source: fast {statistics.median(fast_all):.1f} s, narrow (incl. fallbacks) "
              f"{statistics.median(narrow_all):.1f} s; ratio {statistics.median(fast_all) / statistics.median(narrow_all):.2f}x "
              f"(baseline: kverify's fast-build headers, torch/types.h)")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
