"""How often corpus sources share a precompiled host prefix (kverify._internal.hostpch): for the
first source of each distinct leading ``#include`` block (the corpus's CUDA sources sorted by
sha256 of the row id, as bench/cu_headers.py orders them), run the host lane of kverify's nvcc
(host preprocessing and cudafe++, with the fast build's headers and flags) and print a hash of
its normalised prefix (the text part of its key; the flags, the other part, are the same for all
here), or "no header" where none would be made, then how many sources share each. One source's host lane takes ~6 s on
this project's 2-core machine.

    CORPUS=../shared/corpus/accepted_kernels.jsonl python bench/host_pch_keys.py N
    (CORPUS defaults to .corpus/accepted_kernels.jsonl, the copy device runs carry)

The leading block is a lexical guess (``#include`` lines before the first line of code); two
blocks that include only headers the first ones already include give the same key.
"""
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cu_headers as ch  # noqa: E402

from kverify._internal import hostpch, pnvcc  # noqa: E402


def leading_includes(src: str) -> tuple[str, ...]:
    """The ``#include`` lines before the source's first line of code (comments and other
    directives skipped), whitespace collapsed."""
    out = []
    for line in re.sub(r"/\*.*?\*/", "", src, flags=re.S).splitlines():
        t = line.split("//")[0].strip()
        if t.startswith("#include"):
            out.append(re.sub(r"\s+", " ", t))
        elif t and not t.startswith("#"):
            break
    return tuple(out)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    rows = [json.loads(line) for line in open(os.environ.get("CORPUS", ".corpus/accepted_kernels.jsonl"))]
    rows.sort(key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())
    flags = ch.fast_build_nvcc_flags()
    picked, blocks = [], set()
    for r in rows:
        src = ch.cuda_sources(r.get("candidate", ""))
        if src is not None and (b := leading_includes(src)) not in blocks:
            blocks.add(b)
            picked.append((r["id"], src, b))
    print(f"{len(blocks)} distinct leading include blocks; the first {min(n, len(picked))} of them:", flush=True)
    keys: collections.Counter = collections.Counter()
    for rid, src, block in picked[:n]:
        d = tempfile.mkdtemp(prefix="kverify-hostpch-keys-")
        cu = os.path.join(d, "cuda.cu")
        Path(cu).write_text(ch.PREFIX + src)
        env = {**os.environ, "TMPDIR": d}
        dry = subprocess.run(["nvcc", "-dryrun", "-c", cu, "-o", os.path.join(d, "x.o"), *flags], capture_output=True,
                             text=True, env=env)
        env, cmds = pnvcc.plan(dry.stderr, env)
        split = pnvcc.lanes(cmds) if cmds else None
        if split is None or not pnvcc._run(split[0], env, []):
            print(f"{'-':12} {rid}: host lane failed", flush=True)
            shutil.rmtree(d, ignore_errors=True)
            continue
        host = split[0]
        text = Path(pnvcc._gen_c_file(host[-1])).read_text(errors="surrogateescape")
        mid = Path(pnvcc._module_id_file(host[-1])).read_text().strip()
        parts = hostpch.split(text)
        norm = hostpch.normalise(parts[1], mid) if parts else None
        ok = norm is not None and hostpch.directives(parts[1]) is not None
        key = hashlib.sha256(norm.encode(errors="surrogateescape")).hexdigest()[:10] if ok else "no header"
        keys[key] += 1
        shutil.rmtree(d, ignore_errors=True)  # the unit's preprocessed text: tens of MB
        print(f"{key:12} {' | '.join(x[len('#include '):] for x in block)[:90]}", flush=True)
    print("sources per key:", dict(keys.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
