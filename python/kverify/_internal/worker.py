"""The candidate's process. It never receives an expected output: only the problem's source, the
candidate's source and job specifications (shapes, seeds, distributions). It regenerates inputs
with the core generator, runs the candidate and writes what it measured.

Usage (by kverify.sandbox only): python -m kverify._internal.worker JOBDIR STATUS_FD

Protocol: JOBDIR/spec.json holds {reference, candidate, device, seed, jobs, start, mode}. The
worker writes "loaded\n" to STATUS_FD once the candidate is built, then for each job k from
`start` writes JOBDIR/result_k.pt (atomically) and "done k\n" -- or, when it cannot write that
file (kverify's failure, e.g. a full disk: not the candidate's), "fault k <JSON string: why>\n". A candidate that cannot be loaded
gives JOBDIR/load_error.json and exit code 3. A worker started ahead of its jobs (Sandbox.prestart:
spec.json without "jobs") loads, writes "loaded\n", then waits for JOBDIR/jobs.json ({jobs,
start}, written atomically by the parent).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

from kverify._internal.lifeline import exit_with_parent

if __name__ == "__main__":  # before the slow imports: a kverify killed meanwhile leaves no orphan
    exit_with_parent(origin=os.environ.get("KVERIFY_PARENT_PID"))

import torch  # noqa: E402

from kverify import engine
from kverify._internal import CUDNN_ENV, cpu_seconds, cuda_schedule, fastbuild
from kverify.errors import LoadError
from kverify.problem import (MODE_RUN, InputSpec, Problem, as_outputs, borrowed_names, container, derive_seed,
                             exec_module, remember_modes, set_built_modes, synthesize)

if os.environ.get(CUDNN_ENV) == "0":  # before the candidate loads (G11's racecheck runs)
    torch.backends.cudnn.enabled = False


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
    """Wait for the candidate's GPU work and raise its errors here, inside the caller's try block
    that attributes them to the candidate: asynchronous faults surface in synchronize(); a launch
    that failed at once (e.g. a grid of 0 blocks) leaves a pending cudaGetLastError, which the next
    kernel launch's check raises — so launch one (a fill) now instead of in kverify's own code."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.ones(1, device="cuda")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a tensor's bits for bitwise comparison (NaN == NaN when bits equal)."""
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.detach().contiguous().view(view) if t.dtype != torch.bool else t.detach().contiguous().view(torch.uint8)


#: Functions a kernel could replace to fool a harness (G12): "module.attr" paths.
WATCHED = ["torch.cuda.synchronize", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.record",
           "torch.cuda.Event.synchronize", "torch.cuda.current_stream", "torch.cuda.Stream.synchronize",
           "torch.allclose", "torch.equal", "torch.isclose", "torch.Tensor.__eq__", "torch.Tensor.allclose",
           "torch.testing.assert_close", "time.time", "time.perf_counter", "time.monotonic", "time.sleep",
           # what G12's own stream measurement relies on (it calls them as they were before the load)
           "torch.cuda.Event.query", "torch.cuda._sleep", "torch.cuda.Stream", "torch.cuda.stream"]


def _resolve(path: str):
    import importlib

    mod, *attrs = path.split(".")
    obj = importlib.import_module(mod)
    for a in attrs:
        obj = getattr(obj, a, None)
        if obj is None:
            return None
    return obj


def snapshot() -> dict:
    """Identity of every WATCHED function now (modules are imported by name in _resolve)."""
    return {p: _resolve(p) for p in WATCHED}


class Runner:
    """Holds the loaded candidate and builds models per binding."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.watched = snapshot()
        import threading

        self.threads_before = threading.active_count()
        self.device = spec["device"]
        self.seed = spec["seed"]
        ref = spec["reference"]
        self.problem = Problem(open(ref["file"]).read(), ref["path"], spec.get("tolerance", 1e-2))
        cand = spec["candidate"]
        self.cand_path = cand["path"]
        # loaded with the reference's names, as KernelBench's one namespace gives them (borrowed_names)
        source, given = open(cand["file"]).read(), self.problem.namespace()
        self.cmod = exec_module(source, cand["path"], "kverify_candidate", "candidate", inherit=given)
        self.problem.share(self.cmod, given, borrowed_names(source, cand["path"], self.problem.module))
        if not hasattr(self.cmod, "ModelNew"):
            raise LoadError(cand["path"], "candidate defines no ModelNew")
        self.models: dict[str, tuple] = {}
        #: (key, (candidate, reference)) of the last transient binding (model()), or None
        self.transient: tuple[str, tuple] | None = None
        self.model(None)  # build at the problem's own shape now: construction errors are load errors

    def model(self, binding, transient: bool = False):
        """The candidate at ``binding`` (built once per binding and kept), in eval mode.
        ``transient`` (a job's "transient": G05's shape variants, each run once): kept only until
        a job at another transient binding asks for its own, which is built after the last one is
        dropped. Keeping a pair (candidate and reference, on the device) per variant holds 16 GiB a
        variant for a problem with 8 GiB of fp32 parameters (the likely cause, not confirmed on a
        GPU, of audit row technoabsurdist/opus4_level3_20250903_035524/L3/P2 running out of memory
        with an H200 to itself, stop 41). A binding already kept (the own shape, the gates' small shape) is used
        as it is. Raises LoadError when ModelNew(...) raises (_build)."""
        key = repr(sorted((binding or {}).items()))
        if key not in self.models and transient:
            if self.transient is None or self.transient[0] != key:
                self.transient = None  # the last variant's pair goes first: never two at once
                self.transient = (key, self._build(binding))
            self.problem.bind(binding)
            return self.transient[1][0]
        if key not in self.models:
            self.models[key] = self._build(binding)
        self.problem.bind(binding)
        return self.models[key][0]

    def _build(self, binding) -> tuple:
        """(candidate, reference) built anew at ``binding``: the candidate with the reference's
        weights wherever name and shape agree, both in eval mode, their modes as built recorded
        (remember_modes, for G09's mode run). Raises LoadError when ModelNew(...) raises."""
        self.problem.bind(binding)
        ref = self.problem.reference_model(self.seed, self.device)
        init = self.problem.init_inputs(self.seed)
        torch.manual_seed(self.seed)
        try:
            cand = self.cmod.ModelNew(*init)
            cand = remember_modes(cand.to(self.device)).eval()
        except Exception as e:  # noqa: BLE001
            raise LoadError(self.cand_path, f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}") from None
        ref_state = ref.state_dict()
        own = cand.state_dict()
        shared = {k: v for k, v in ref_state.items() if k in own and own[k].shape == v.shape}
        if shared:
            cand.load_state_dict(shared, strict=False)
        return cand, ref

    def inputs(self, job, seed_key="seed"):
        specs = [InputSpec.from_json(s) for s in job["inputs"]]
        return synthesize(specs, job[seed_key], self.device)

    # -- job kinds -------------------------------------------------------------------------
    def warm(self, job) -> dict:
        """Precompile's call (kverify.build.precompile): nothing when loading the candidate already
        built (or found) its extensions; else one ``run``, which builds extensions made lazily in
        the first forward."""
        ext_dir = os.environ.get("TORCH_EXTENSIONS_DIR")
        if ext_dir and fastbuild.read_state(ext_dir):
            return {"skipped": "extensions built while loading"}
        return self.run(job)

    def run(self, job) -> dict:
        m = self.model(job.get("binding"), job.get("transient", False))
        x = self.inputs(job)
        try:
            with torch.no_grad():
                raw = m(*x)
                y = as_outputs(raw)
            _sync(self.device)
        except Exception as e:  # noqa: BLE001 — the candidate's exception is a finding
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        meta = [_meta(o) for o in y]
        outs = [o.detach().cpu() if isinstance(o, torch.Tensor) and m_["kind"] == "tensor" and m_["has_storage"]
                else None for o, m_ in zip(y, meta)]
        return {"meta": meta, "outputs": outs, "container": container(raw)}

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

    def perturb(self, job) -> dict:
        """Outputs at the base inputs, then with each tensor input redrawn alone (another seed), then
        with each parameter/buffer shared with the reference transformed alone (x * 1.0625 + 0.0625),
        then (``job["mode"]``) at the base inputs, a candidate built anew in the modes its
        constructor left (set_built_modes: training, as the harness runs it), or {"raised": ...}."""
        m = self.model(job.get("binding"))
        specs = [InputSpec.from_json(s) for s in job["inputs"]]
        base = synthesize(specs, job["seed"], self.device)
        alt = synthesize(specs, job["alt_seed"], self.device)
        outs = {}
        try:
            with torch.no_grad():
                outs["base"] = _cpu(m(*base))
                for i, sp in enumerate(specs):
                    if sp.kind == "tensor":
                        x = list(base)
                        x[i] = alt[i]
                        outs[f"input {i}"] = _cpu(m(*x))
                own = dict(m.named_parameters())
                own.update(dict(m.named_buffers()))
                for name in job["tensors"]:
                    t = own.get(name)
                    if t is None or not t.is_floating_point():
                        continue
                    keep = t.detach().clone()
                    t.data.mul_(1.0625).add_(0.0625)
                    outs[f"tensor {name}"] = _cpu(m(*base))
                    t.data.copy_(keep)
            _sync(self.device)
        except Exception as e:  # noqa: BLE001
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        if job.get("mode"):  # a candidate built for this run alone: its training-mode state goes with it
            anew = None
            try:
                anew = set_built_modes(self._build(job.get("binding"))[0])
            except Exception as e:  # noqa: BLE001 -- not built a second time (or no memory for it): no finding
                outs[MODE_RUN] = {"left_out": f"the candidate could not be built again: {type(e).__name__}: "
                                              f"{str(e).strip()[:200]}"}
            if anew is not None:
                try:
                    with torch.no_grad():
                        outs[MODE_RUN] = _cpu(anew(*base))
                    _sync(self.device)
                except Exception as e:  # noqa: BLE001 -- the mode perturbation's finding alone
                    outs[MODE_RUN] = {"raised": f"{type(e).__name__}: {str(e).strip()[:300]}"}
                finally:
                    anew = None
        return {"outputs": outs}

    def sequence(self, job) -> dict:
        """Calls alternating between inputs A and B, `calls` times, in one process: digests."""
        m = self.model(job.get("binding"))
        specs = [InputSpec.from_json(s) for s in job["inputs"]]
        xs = {"A": synthesize(specs, job["seed"], self.device), "B": synthesize(specs, job["alt_seed"], self.device)}
        digests = []
        try:
            with torch.no_grad():
                for k in range(job["calls"]):
                    label = "AB"[k % 2]
                    y = as_outputs(m(*xs[label]))
                    _sync(self.device)
                    digests.append([label, [engine.digest(o) for o in y if isinstance(o, torch.Tensor)]])
        except Exception as e:  # noqa: BLE001
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        return {"digests": digests}

    def guard(self, job) -> dict:
        """Each tensor input inside a buffer with `band` sentinel elements before and after it;
        the call must leave the bands intact, and its output must not change when the bands are
        refilled with other values (an out-of-bounds read)."""
        m = self.model(job.get("binding"))
        x = self.inputs(job)
        band = job["band"]
        bufs, views = [], []
        for t in x:
            if not isinstance(t, torch.Tensor):
                views.append(t)
                bufs.append(None)
                continue
            buf = torch.empty(t.numel() + 2 * band, dtype=t.dtype, device=t.device)
            engine.fill_sentinel(buf)
            v = buf[band:band + t.numel()].view(t.shape)
            v.copy_(t)
            bufs.append(buf)
            views.append(v)
        def call():
            for v, t in zip(views, x):  # restore the inputs (a G07 offender may have changed them)
                if isinstance(t, torch.Tensor):
                    v.copy_(t)
            _sync(self.device)
            with torch.no_grad():
                y = [o for o in as_outputs(m(*views)) if isinstance(o, torch.Tensor)]
            _sync(self.device)
            return [engine.digest(o) for o in y]

        try:
            d1 = call()
            writes, where = 0, None
            for i, buf in enumerate(bufs):
                if buf is None:
                    continue
                for part in (buf[:band], buf[-band:]):
                    n, _ = engine.count_sentinel(part)
                    if n != band:
                        writes += band - n
                        where = where or f"input {i}"
            same = call() == d1  # same bands again: is the call reproducible at all?
            for buf in bufs:  # other band contents: large finite values
                if buf is not None:
                    engine.fill(buf[:band], 99, engine.Dist("uniform", 1e3, 1e4))
                    engine.fill(buf[-band:], 98, engine.Dist("uniform", 1e3, 1e4))
            d3 = call()
        except Exception as e:  # noqa: BLE001
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        if not same:
            return {"band_writes": writes, "tensor": where, "output_depends_on_bands": False,
                    "band_read_test": "skipped: two calls with the same bands differ (not deterministic, see G04)"}
        return {"band_writes": writes, "tensor": where, "output_depends_on_bands": d3 != d1}

    def stream(self, job) -> dict:
        """G12: threads left behind, patched functions, and (CUDA) the current-stream contract
        (stream_attempts over the job's "sleep_cycles" windows, default G12_SLEEPS). The stream
        measurement calls the watched functions it relies on as they were before the candidate
        loaded (a candidate that replaces them fails as "patched" anyway)."""
        m = self.model(job.get("binding"))
        x = self.inputs(job)
        out = {}
        try:
            with torch.no_grad():
                plain = self._synced_digests(m, x)
                if self.device == "cuda":
                    out["stream"] = self._stream_measure(m, x, plain, job.get("sleep_cycles", G12_SLEEPS))
                else:
                    out["stream"] = {"not_applicable": "CPU run: no CUDA streams"}
        except Exception as e:  # noqa: BLE001
            return {"exception": f"{type(e).__name__}: {str(e).strip()[:400]}"}
        out.update(self.tampering())
        return out

    def _synced_digests(self, m, x) -> list[str]:
        """Digests of one plain call's tensor outputs: the whole device synchronised before the
        call (its inputs are written, whichever stream it reads them on) and after it (a kernel on
        a stream of its own has finished): what the call computes, with no stream order to get
        wrong. Without the first sync a kernel on a private stream read inputs still being written
        and two plain calls differed: the G12 side-stream control was left unjudged (ERROR) on
        the H200 (rules .4 as first run)."""
        _sync(self.device)
        y = [o for o in as_outputs(m(*x)) if isinstance(o, torch.Tensor)]
        _sync(self.device)
        return [engine.digest(o) for o in y]

    def _stream_measure(self, m, x, plain: list, sleeps) -> dict:
        """G12's CUDA part: {"not_established": why} when two plain calls differ (the output alone
        cannot show which stream a call followed; G04 judges them) or when the harness, not the
        candidate, missed every window; else stream_attempts' measurement. One pool stream for
        every window, warmed by a call on it first (its first allocations, a cudaMalloc, happen
        outside the windows)."""
        if self._synced_digests(m, x) != plain:
            return {"not_established": "two calls on the same inputs differ (not deterministic, see G04)"}
        sleeps = [sleeps] if isinstance(sleeps, (int, float)) else list(sleeps)
        s = self.watched["torch.cuda.Stream"]()
        with self.watched["torch.cuda.stream"](s):
            m(*x)
        torch.cuda.synchronize()
        r = stream_attempts(lambda cycles: self._stream_once(m, x, plain, cycles, s), sleeps)
        if not (r["pending_writes_seen"] and r["complete_after_stream_sync"]):  # a wrong output: a FAIL unless
            if self._synced_digests(m, x) != plain:                            # plain calls now differ too
                return {"not_established": "a plain call after the stream runs differs from the first (not "
                                           "deterministic, see G04)"}
            return r
        if not r["call_began_in_window"]:  # a right output the harness's lateness leaves unexplained
            return {"not_established": f"the spin had run out before the call began, in each of {r['attempts']} "
                                       f"window(s) up to {r['sleep_cycles']} GPU cycles (a busy host, or "
                                       f"CUDA_LAUNCH_BLOCKING set): which stream the call follows was not seen"}
        return r

    def _stream_once(self, m, x, plain: list, cycles: int, s) -> tuple[bool, bool, bool, bool]:
        """One G12 window on pool stream ``s`` (created non-blocking by PyTorch: it neither waits
        for nor holds up the legacy default stream): a spin of ``cycles`` GPU cycles in two halves
        with an event between them, then copies of the inputs into sentinel-filled buffers, then
        the candidate's call on those buffers. Returns (the first half was still spinning when the
        call began; ... and when it returned, so every kernel the call launched on another stream
        could run for half a window or more before the copies; the output after a full
        synchronisation equals the plain call's; the output read on ``s`` right after ``s`` alone
        is synchronised, which waits for no other stream's work, equals the final output)."""
        sleep, query = self.watched["torch.cuda._sleep"], self.watched["torch.cuda.Event.query"]
        pending = [torch.empty_like(t) if isinstance(t, torch.Tensor) else t for t in x]
        for t in pending:
            if isinstance(t, torch.Tensor):
                engine.fill_sentinel(t)
        torch.cuda.synchronize()
        with self.watched["torch.cuda.stream"](s):
            sleep(int(cycles) // 2)
            half = torch.cuda.Event()
            half.record(s)
            sleep(int(cycles) - int(cycles) // 2)
            for t, src in zip(pending, x):
                if isinstance(t, torch.Tensor):
                    t.copy_(src)  # writes still pending on s when the candidate starts
            began = not query(half)
            y = [o for o in as_outputs(m(*pending)) if isinstance(o, torch.Tensor)]
            held = not query(half)
            s.synchronize()
            after_stream = [engine.digest(o) for o in y]  # digests run on s (the current stream here)
        torch.cuda.synchronize()
        after_device = [engine.digest(o) for o in y]
        return began, held, after_device == plain, after_stream == after_device

    def tampering(self) -> dict:
        """G12's process-wide findings now: {"patched": watched functions replaced since the
        candidate loaded, "threads_added": Python threads beyond those running then}."""
        import threading

        now = snapshot()
        return {"patched": [p for p, f in self.watched.items() if now.get(p) is not f],
                "threads_added": max(0, threading.active_count() - self.threads_before)}

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


#: G12's windows, GPU cycles of the spin queued before the pending input copies (about 50 ms and
#: 0.5 s at the H200's 1.98 GHz): the next is tried only when a window did not hold
#: (stream_attempts)
G12_SLEEPS = (100_000_000, 1_000_000_000)


def stream_attempts(run, sleeps) -> dict:
    """G12's stream measurement over growing windows. ``run(cycles)`` -> (the call began with
    half the spin still to run, and returned so, the pending writes seen, complete after the
    stream's own sync) of one window (Runner._stream_once). A wrong output ends the search (the
    fault is seen, whatever the window); a right one counts only if the window held (the call
    began and returned with half the spin left, so a kernel on another stream would have read the
    sentinels): otherwise the next, longer window is tried. After the last, "window_held" false
    with "call_began_in_window" true means the call itself waited for the spin (it synchronises:
    the order cannot be observed); with it false the harness was late every time (a busy host).
    The audit of stop 23 saw the old single 50 ms window miss: two rows judged twice on the H200
    failed G12 once and passed once.
    Returns {"pending_writes_seen", "complete_after_stream_sync", "window_held",
    "call_began_in_window" (of the last window), "sleep_cycles" (its spin), "attempts"}.
    Raises ValueError for no windows."""
    if not sleeps:
        raise ValueError("G12 needs at least one window (sleep_cycles)")
    n, cycles, began, held, seen, complete = 0, 0, False, False, False, False
    for n, cycles in enumerate(sleeps, 1):
        began, held, seen, complete = run(cycles)
        if not (seen and complete) or (began and held):
            break
    return {"pending_writes_seen": seen, "complete_after_stream_sync": complete, "window_held": began and held,
            "call_began_in_window": began, "sleep_cycles": int(cycles), "attempts": n}


def _cpu(y) -> list:
    return [o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in as_outputs(y)]


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
        cuda_schedule.apply()  # KVERIFY_CUDA_SCHEDULE (the audit's checks: block), before the context exists
        torch.cuda.init()
    fastbuild.install()  # load_inline builds go to the candidate's cache folder (kverify.build)
    try:
        runner = Runner(spec)
    except LoadError as e:
        with open(os.path.join(jobdir, "load_error.json"), "w") as f:
            json.dump({"path": e.path, "reason": e.reason, "detail": e.detail}, f)
        return 3
    status.write("loaded\n")
    if "jobs" not in spec:  # started ahead of its jobs: wait for them (the lifeline ends us if the parent goes)
        path = os.path.join(jobdir, "jobs.json")
        while not os.path.exists(path):
            time.sleep(0.002)
        with open(path) as f:
            spec.update(json.load(f))
    jobs = spec["jobs"]
    for k in range(spec.get("start", 0), len(jobs)):
        job = jobs[k]
        try:
            result = getattr(runner, job["kind"])(job)
        except LoadError as e:
            result = {"exception": f"LoadError: {e.reason}"}
        except Exception:  # noqa: BLE001 — kverify's own fault inside the worker
            result = {"error": traceback.format_exc()[-2000:]}
        try:
            _atomic_save(result, os.path.join(jobdir, f"result_{k}.pt"))
        except Exception as e:  # noqa: BLE001 — kverify's own failure (a full disk, say), not the candidate's
            del result
            try:
                os.remove(os.path.join(jobdir, f"result_{k}.pt.tmp"))
            except OSError:
                pass
            why = f"the worker could not write the job's result: {type(e).__name__}: {str(e).strip()[:300]}"
            status.write(f"fault {k} " + json.dumps(why) + "\n")  # the pipe needs no disk
            continue
        if spec["device"] == "cuda" and os.environ.get("KVERIFY_EMPTY_CACHE") == "1":
            torch.cuda.empty_cache()  # give cached blocks back: other checks' processes share the GPU (audit)
        status.write(f"done {k}\n")
    # the last line: this worker's CPU seconds and G12's process-wide findings after all its jobs
    # (G12 judges those of the workers that run other gates' jobs: kverify.gates.g12_stream)
    end = {"cpu": cpu_seconds(), **runner.tampering()}
    status.write("end " + json.dumps(end) + "\n")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # not sys.exit: a non-daemon thread the candidate left running must not keep us alive
