"""The candidate's process. It never receives an expected output: only the problem's source, the
candidate's source and job specifications (shapes, seeds, distributions). It regenerates inputs
with the core generator, runs the candidate and writes what it measured.

Usage (by kverify.sandbox only): python -m kverify._internal.worker JOBDIR STATUS_FD

Protocol: JOBDIR/spec.json holds {reference, candidate, device, seed, jobs, start, mode}. The
worker writes "loaded\n" to STATUS_FD once the candidate is built, then for each job k from
`start` writes JOBDIR/result_k.pt (atomically) and "done k\n". A candidate that cannot be loaded
gives JOBDIR/load_error.json and exit code 3.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

import torch

from kverify import engine
from kverify.errors import LoadError
from kverify.problem import Problem, as_outputs, derive_seed, exec_module, synthesize, InputSpec


def _meta(y) -> dict:
    """Contract facts of one output (G01)."""
    if not isinstance(y, torch.Tensor):
        return {"kind": type(y).__name__}
    plain = type(y) is torch.Tensor
    try:
        has_storage = y.untyped_storage().data_ptr() != 0 or y.numel() == 0
    except Exception:  # noqa: BLE001 — fake/meta/subclass tensors
        has_storage = False
    return {"kind": "tensor", "shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", ""),
            "device": y.device.type, "plain": plain, "has_storage": bool(has_storage) and y.device.type != "meta",
            "dense": bool(y.is_contiguous() or _non_overlapping_dense(y))}


def _non_overlapping_dense(y: torch.Tensor) -> bool:
    """True when the strides are a permutation of a dense layout (no gaps, no overlap)."""
    dims = sorted((s, n) for s, n in zip(y.stride(), y.shape) if n != 1)
    expect = 1
    for s, n in dims:
        if s != expect:
            return False
        expect *= n
    return True


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a tensor's bits for bitwise comparison (NaN == NaN when bits equal)."""
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.detach().contiguous().view(view) if t.dtype != torch.bool else t.detach().contiguous().view(torch.uint8)


class Runner:
    """Holds the loaded candidate and builds models per binding."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.device = spec["device"]
        self.seed = spec["seed"]
        ref = spec["reference"]
        self.problem = Problem(open(ref["file"]).read(), ref["path"], spec.get("tolerance", 1e-2))
        cand = spec["candidate"]
        self.cand_path = cand["path"]
        self.cmod = exec_module(open(cand["file"]).read(), cand["path"], "kverify_candidate", "candidate")
        if not hasattr(self.cmod, "ModelNew"):
            raise LoadError(cand["path"], "candidate defines no ModelNew")
        self.models: dict[str, tuple] = {}
        self.model(None)  # build at the problem's own shape now: construction errors are load errors

    def model(self, binding):
        key = repr(sorted((binding or {}).items()))
        if key not in self.models:
            self.problem.bind(binding)
            ref = self.problem.reference_model(self.seed, self.device)
            init = self.problem.init_inputs(self.seed)
            torch.manual_seed(self.seed)
            try:
                cand = self.cmod.ModelNew(*init)
                cand = cand.to(self.device).eval()
            except Exception as e:  # noqa: BLE001
                raise LoadError(self.cand_path, f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}") from None
            # identical weights: copy the reference's tensors wherever name and shape agree
            ref_state = ref.state_dict()
            own = cand.state_dict()
            shared = {k: v for k, v in ref_state.items() if k in own and own[k].shape == v.shape}
            if shared:
                cand.load_state_dict(shared, strict=False)
            self.models[key] = (cand, ref)
        self.problem.bind(binding)
        return self.models[key][0]

    def inputs(self, job, seed_key="seed"):
        specs = [InputSpec.from_json(s) for s in job["inputs"]]
        return synthesize(specs, job[seed_key], self.device)

    # -- job kinds -------------------------------------------------------------------------
    def run(self, job) -> dict:
        m = self.model(job.get("binding"))
        x = self.inputs(job)
        try:
            with torch.no_grad():
                y = as_outputs(m(*x))
            _sync(self.device)
        except Exception as e:  # noqa: BLE001 — the candidate's exception is a finding
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        meta = [_meta(o) for o in y]
        outs = [o.detach().cpu() if isinstance(o, torch.Tensor) and m_["kind"] == "tensor" and m_["has_storage"]
                else None for o, m_ in zip(y, meta)]
        return {"meta": meta, "outputs": outs}

    def determinism(self, job) -> dict:
        m = self.model(job.get("binding"))
        base = self.inputs(job)
        keep = []  # keep every copy alive so each run's inputs live at new addresses
        runs = []
        for r in range(job["runs"]):
            keep.append(torch.empty(4096 * (r + 1) + 17, dtype=torch.uint8, device=self.device))
            x = [t.clone() if isinstance(t, torch.Tensor) else t for t in base]
            keep.append(x)
            try:
                with torch.no_grad():
                    y = as_outputs(m(*x))
                _sync(self.device)
            except Exception as e:  # noqa: BLE001
                return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
            runs.append([engine.digest(o) if isinstance(o, torch.Tensor) else repr(o) for o in y])
        return {"runs": runs}

    def immutability(self, job) -> dict:
        m = self.model(job.get("binding"))
        x = self.inputs(job)
        named = [(f"input {i}", t) for i, t in enumerate(x) if isinstance(t, torch.Tensor)]
        named += [(f"parameter {n}", p) for n, p in m.named_parameters()]
        named += [(f"buffer {n}", b) for n, b in m.named_buffers()]
        before = [(n, engine.digest(t), _bits(t).clone()) for n, t in named]
        try:
            with torch.no_grad():
                m(*x)
            _sync(self.device)
        except Exception as e:  # noqa: BLE001
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        tensors = []
        for (n, d0, b0), (_, t) in zip(before, named):
            d1 = engine.digest(t)
            rec = {"name": n, "before": d0, "after": d1, "numel": t.numel()}
            if d0 != d1:
                b1 = _bits(t)
                diff = (b1 != b0).reshape(-1) if b1.shape == b0.shape else torch.ones(1, dtype=torch.bool)
                idx = torch.nonzero(diff)
                rec["changed"] = int(diff.sum())
                rec["first_changed"] = int(idx[0]) if idx.numel() else -1
            tensors.append(rec)
        return {"tensors": tensors}

    def fresh(self, job) -> dict:
        """Poison free memory, call, count sentinels; rewrite inputs in place and call again."""
        m = self.model(job.get("binding"))
        x = self.inputs(job)
        blobs = []
        for shape, dtype in job["output_layouts"]:  # exact sizes the outputs will ask for
            for _ in range(2):
                b = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
                engine.fill_sentinel(b)
                blobs.append(b)
        big = torch.empty(job.get("poison_bytes", 1 << 24) // 4, dtype=torch.float32, device=self.device)
        engine.fill_sentinel(big)
        blobs.append(big)
        _sync(self.device)
        del blobs, big  # back to the allocator's free lists, still holding the sentinel
        try:
            with torch.no_grad():
                y1 = as_outputs(m(*x))
            _sync(self.device)
            sentinels = []
            for i, o in enumerate(y1):
                if isinstance(o, torch.Tensor):
                    n, first = engine.count_unwritten(o)
                    sentinels.append({"index": i, "sentinels": n, "first": first, "numel": o.numel()})
            d1 = [engine.digest(o) for o in y1 if isinstance(o, torch.Tensor)]
            # rewrite every tensor input in place: same address, same version counter
            specs = [InputSpec.from_json(s) for s in job["inputs"]]
            s2 = derive_seed(job["rewrite_seed"], "input")
            for i, (sp, t) in enumerate(zip(specs, x)):
                if sp.kind == "tensor":
                    engine.fill(t, s2, sp.dist, stream_id=i + 1)
            _sync(self.device)
            with torch.no_grad():
                y2 = as_outputs(m(*x))
            _sync(self.device)
        except Exception as e:  # noqa: BLE001
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        d2 = [engine.digest(o) for o in y2 if isinstance(o, torch.Tensor)]
        return {"outputs": sentinels, "unchanged": d1 == d2,
                "rewritten": [o.detach().cpu() if isinstance(o, torch.Tensor) else None for o in y2]}

    def standard(self, job) -> dict:
        """The field's check, in the field's way: reference first, then the candidate, on the same
        tensors from get_inputs(), `trials` times, torch.allclose(atol=rtol=tol)."""
        dev, tol = self.device, job["tolerance"]
        self.problem.bind(None)
        init = self.problem.init_inputs(self.seed)
        torch.manual_seed(self.seed)
        ref = self.problem.module.Model(*init).to(dev)
        torch.manual_seed(self.seed)
        new = self.cmod.ModelNew(*init).to(dev)
        torch.manual_seed(self.seed)
        passed = 0
        for trial in range(job["trials"]):
            x = [t.to(dev) if isinstance(t, torch.Tensor) else t for t in self.problem.module.get_inputs()]
            with torch.no_grad():
                a = ref(*x)
                _sync(dev)
                try:
                    b = new(*x)
                    _sync(dev)
                except Exception as e:  # noqa: BLE001
                    return {"verdict": "FAIL", "summary": f"trial {trial}: raised {type(e).__name__}: {str(e)[:200]}"}
            a_, b_ = as_outputs(a), as_outputs(b)
            if len(a_) != len(b_) or any(getattr(p, "shape", None) != getattr(q, "shape", None) for p, q in zip(a_, b_)):
                return {"verdict": "FAIL", "summary": f"trial {trial}: output shape mismatch"}
            for p, q in zip(a_, b_):
                if not torch.allclose(p, q.to(p.dtype) if isinstance(q, torch.Tensor) else q, atol=tol, rtol=tol):
                    diff = (p.double() - q.double()).abs().max().item()
                    return {"verdict": "FAIL", "summary": f"trial {trial}: allclose failed (max abs diff {diff:.3g}, tol {tol:g})"}
            passed += 1
        return {"verdict": "PASS", "summary": f"{passed}/{job['trials']} trials allclose (atol=rtol={tol:g})"}


def _atomic_save(obj, path: str) -> None:
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def main() -> int:
    jobdir, status_fd = sys.argv[1], int(sys.argv[2])
    status = os.fdopen(status_fd, "w", buffering=1)
    with open(os.path.join(jobdir, "spec.json")) as f:
        spec = json.load(f)
    if spec["device"] == "cuda":
        torch.cuda.init()
    try:
        runner = Runner(spec)
    except LoadError as e:
        with open(os.path.join(jobdir, "load_error.json"), "w") as f:
            json.dump({"path": e.path, "reason": e.reason, "detail": e.detail}, f)
        return 3
    status.write("loaded\n")
    jobs = spec["jobs"]
    for k in range(spec.get("start", 0), len(jobs)):
        job = jobs[k]
        try:
            result = getattr(runner, job["kind"])(job)
        except LoadError as e:
            result = {"exception": f"LoadError: {e.reason}"}
        except Exception:  # noqa: BLE001 — kverify's own fault inside the worker
            result = {"error": traceback.format_exc()[-2000:]}
        _atomic_save(result, os.path.join(jobdir, f"result_{k}.pt"))
        status.write(f"done {k}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
