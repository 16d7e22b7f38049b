"""Benchmark + check: nvcc against kverify._internal.pnvcc (host and device passes at once) on
corpus CUDA sources with the fast build's headers and flags as torch's ninja file passes them, one
after the other on an idle machine. Prints each time and whether the objects are equal with the
temporary file names normalised (nvcc's own objects differ from run to run only there).

    python bench/pnvcc_local.py INDEX...   (CORPUS=path/to/accepted_kernels.jsonl, default .corpus/)

INDEX: positions among the corpus's CUDA sources sorted by sha256 of the row id (as
bench/cu_headers.py orders them). Needs nvcc on PATH and torch's headers.
"""
import json, subprocess, sys, time, os, tempfile, hashlib
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cu_headers as ch
from kverify._internal import pnvcc
PN = pnvcc.__file__
rows=[json.loads(l) for l in open(os.environ.get('CORPUS', '.corpus/accepted_kernels.jsonl'))]
rows.sort(key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())
srcs=[s for r in rows if (s:=ch.cuda_sources(r.get("candidate",""))) is not None]
flags = ch.fast_build_nvcc_flags()
norm=pnvcc.normalised
for i in [int(x) for x in sys.argv[1:]]:
    d=Path(tempfile.mkdtemp()); (d/"cuda.cu").write_text(ch.PREFIX+srcs[i])
    t=time.perf_counter(); a=subprocess.run(["nvcc","--generate-dependencies-with-compile","--dependency-output",str(d/"a.d"),"-c",str(d/"cuda.cu"),"-o",str(d/"ref.o"),*flags],capture_output=True,text=True); t1=time.perf_counter()-t
    t=time.perf_counter(); b=subprocess.run([sys.executable,PN,"--generate-dependencies-with-compile","--dependency-output",str(d/"b.d"),"-c",str(d/"cuda.cu"),"-o",str(d/"par.o"),*flags],capture_output=True,text=True); t2=time.perf_counter()-t
    ra, rb_ = (d/"ref.o").read_bytes(), (d/"par.o").read_bytes() if (d/"par.o").exists() else b""
    print(f"src {i}: nvcc {t1:.1f}s rc={a.returncode}  pnvcc {t2:.1f}s rc={b.returncode}  raw-equal={ra==rb_} normalised-equal={norm(ra)==norm(rb_)} deps-equal={(d/'a.d').read_text().split(':',1)[1]==(d/'b.d').read_text().split(':',1)[1] if (d/'b.d').exists() else 'no b.d'}", b.stderr[-300:])
