"""Does compute-sanitizer fail on PyTorch's own cuDNN work, with no candidate code at all? Runs
one corpus row's *reference* model (KernelBench Model at its own get_inputs() shape) on the GPU
once and prints how far it got. Run it under the tool (scripts/device_g11_cudnn.sh) with G11's
options and a --kernel-name filter that matches no kernel, as G11's racecheck has for a candidate
whose own kernels never run inside cuDNN.

Usage: python scripts/g11_cudnn_probe.py CORPUS.jsonl ID [--no-cudnn]
       python scripts/g11_cudnn_probe.py REFERENCE.py - [--no-cudnn]   (a KernelBench problem file)"""
import json
import sys
import time
import types

t0 = time.monotonic()
import torch  # noqa: E402

path, row_id = sys.argv[1], sys.argv[2]
if "--no-cudnn" in sys.argv:
    torch.backends.cudnn.enabled = False
if path.endswith(".py"):
    source, row_id = open(path).read(), path
else:
    source = next(r for r in map(json.loads, open(path)) if r["id"] == row_id)["reference"]
mod = types.ModuleType("reference")
exec(compile(source, f"{path}#{row_id}:reference", "exec"), mod.__dict__)
torch.manual_seed(0)
model = mod.Model(*mod.get_init_inputs()).cuda()
xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
with torch.no_grad():
    y = model(*xs)
torch.cuda.synchronize()
print(f"{row_id}: reference ran, cudnn={torch.backends.cudnn.enabled}, "
      f"out {tuple(y.shape)}, {time.monotonic() - t0:.1f} s", flush=True)
