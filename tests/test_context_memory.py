"""The check's expected outputs (fp64 oracle + reference) are held only while their gate needs them:
Context.release after each gate's judging, G05's per-variant outputs kept in host memory.
(On the H200 a check that held every job's outputs on the GPU filled all 141 GB for a row with
1 GiB of inputs: scripts/device_memory.sh, stop 17.)"""
import pytest
import torch

from kverify.check import check
from kverify.examples import ROOT
from kverify.gates.base import Context

RELU = ROOT / "relu"


class CountingOracle:
    """Stands in for kverify.problem.Oracle: counts runs, returns one tensor per side."""

    def __init__(self):
        self.runs = 0

    def run(self, inputs, binding=None):
        self.runs += 1
        return [torch.full((3,), float(self.runs), dtype=torch.float64)], [torch.ones(3)]

    def forget(self, binding):
        """Oracle.forget: no models here to drop."""


def _ctx():
    return Context(problem=None, specs=[], device="cpu", seed=0, oracle=CountingOracle())


def _job(label):
    return {"kind": "run", "id": label, "seed": 1, "binding": None, "inputs": []}


def test_expected_is_cached_until_released_then_computed_again():
    ctx = _ctx()
    a = ctx.expected(_job("G02/0"))
    assert ctx.expected(_job("G02/0")) is a and ctx.oracle.runs == 1  # cached
    ctx.expected(_job("G03/x"))
    ctx.release(["G02/0"])
    assert ("G02/0", "seed") not in ctx.cache and ("G03/x", "seed") in ctx.cache  # only that gate's
    again = ctx.expected(_job("G02/0"))
    assert ctx.oracle.runs == 3 and again[0][0][0].item() == 3.0  # computed again, not lost


def test_release_drops_every_seed_key_of_a_job_and_keeps_other_cache_entries():
    ctx = _ctx()
    ctx.cache["G08/layouts"] = [[3], "float32"]  # not an expected-outputs entry
    ctx.expected(_job("G08"))
    ctx.expected({**_job("G08"), "rewrite_seed": 2}, "rewrite_seed")
    ctx.release(["G08"])
    assert list(ctx.cache) == ["G08/layouts"]


@pytest.mark.gpu
def test_host_copies_stay_in_host_memory_and_come_back_on_the_gpu():
    class CudaOracle(CountingOracle):
        def run(self, inputs, binding=None):
            return tuple([x.cuda() for x in xs] for xs in super().run(inputs, binding))

    ctx = Context(problem=None, specs=[], device="cuda", seed=0, oracle=CudaOracle())
    oracle, ref = ctx.expected(_job("G05/n=7"), host=True)
    stored = ctx.cache[("G05/n=7", "seed")]
    assert stored[0][0].device.type == "cpu" and stored[1][0].device.type == "cpu"
    assert oracle[0].device.type == "cuda" and ref[0].device.type == "cuda"
    assert torch.equal(oracle[0].cpu(), stored[0][0]) and torch.equal(ref[0].cpu(), stored[1][0])
    ctx.store_expected(_job("G05/n=9"))  # G05's planning: stored, nothing copied back
    assert ctx.cache[("G05/n=9", "seed")][0][0].device.type == "cpu" and ctx.oracle.runs == 2


def test_store_expected_caches_once_and_release_drops_it():
    ctx = _ctx()
    kept = ctx.store_expected(_job("G05/n=7"))
    assert ctx.store_expected(_job("G05/n=7")) is kept and ctx.oracle.runs == 1
    assert torch.equal(ctx.expected(_job("G05/n=7"), host=True)[0][0], kept[0][0]) and ctx.oracle.runs == 1
    ctx.release(["G05/n=7"])
    assert ("G05/n=7", "seed") not in ctx.cache


def test_a_check_releases_each_gates_jobs_after_judging_it(monkeypatch):
    released = []
    orig = Context.release

    def spy(self, ids):
        released.append(list(ids))
        orig(self, ids)

    monkeypatch.setattr(Context, "release", spy)
    r = check((RELU / "reference.py").read_text(), str(RELU / "reference.py"), (RELU / "correct.py").read_text(),
              str(RELU / "correct.py"), device="cpu", gates=["G01", "G02"], standard=False)
    assert [g["verdict"] for g in r["gates"]] == ["PASS", "PASS"]
    assert released[0] == ["G01"] and released[1] and all(i.startswith("G02/") for i in released[1])


def test_g05_drops_the_models_of_its_variants_once_judged(monkeypatch):
    """G05 builds a reference model pair (and its fp64 copy) per shape variant: after it is judged
    only the own shape's and the gates' small shape's remain (Oracle.forget)."""
    from kverify.problem import Oracle

    oracles = []
    orig = Oracle.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        oracles.append(self)

    monkeypatch.setattr(Oracle, "__init__", spy)
    r = check((RELU / "reference.py").read_text(), str(RELU / "reference.py"), (RELU / "correct.py").read_text(),
              str(RELU / "correct.py"), device="cpu", gates=["G05"], standard=False)
    g05 = r["gates"][0]
    assert g05["verdict"] == "PASS" and len(g05["evidence"]["variants"]) > 2, g05["summary"]
    small = r["meta"]["gate_shape"]["binding"]
    keep = {repr(sorted((b or {}).items())) for b in (None, small)}
    assert oracles and set(oracles[0]._models) <= keep, sorted(oracles[0]._models)



@pytest.mark.parametrize("keep_nothing", [False, True])
def test_g05_holds_at_most_one_variant_model_pair_at_a_time(monkeypatch, keep_nothing):
    """While planning and judging, G05 drops each variant's pair as soon as its reference has run
    (or its outcome is judged): kept until the gate's end they are the likely reason an H200 ran
    out of memory for a reference with 8 GiB of parameters (audit row
    opus4_level3_20250903_035524/L3/P2, stop 41; not yet confirmed on the GPU).
    ``keep_nothing``: no planned outputs kept (KEEP_BYTES 0), so every variant's pair is built
    again when it is judged."""
    from kverify.gates import g05_shapes
    from kverify.problem import Oracle

    if keep_nothing:
        monkeypatch.setattr(g05_shapes, "KEEP_BYTES", 0)

    held = []
    orig = Oracle.models

    def spy(self, binding=None):
        got = orig(self, binding)
        held.append(len(self._models))
        return got

    monkeypatch.setattr(Oracle, "models", spy)
    r = check((RELU / "reference.py").read_text(), str(RELU / "reference.py"), (RELU / "correct.py").read_text(),
              str(RELU / "correct.py"), device="cpu", gates=["G05"], standard=False)
    g05 = r["gates"][0]
    assert g05["verdict"] == "PASS" and len(g05["evidence"]["variants"]) > 2, g05["summary"]
    pinned = len({repr(sorted((b or {}).items())) for b in (None, r["meta"]["gate_shape"]["binding"])})
    n = len(g05["evidence"]["variants"])
    assert len(held) > (2 * n if keep_nothing else n) and max(held) <= pinned + 1, held


def test_the_worker_keeps_one_transient_model_and_every_pinned_one():
    """kverify._internal.worker.Runner.model: G05's variant jobs ("transient") keep only the last
    variant's pair, dropped before the next one is built; other bindings are built once and kept."""
    from types import SimpleNamespace

    from kverify._internal.worker import Runner

    built, alive = [], set()
    a, b = {"n": 3}, {"n": 5}
    variants = {repr(a), repr(b)}

    class Pair(tuple):
        def __del__(self):
            alive.discard(self[0])

    def build(binding):
        name = repr(binding)
        if name in variants:  # the last variant's pair is gone before the next one is built
            assert not alive & variants, alive
        built.append(name)
        alive.add(name)
        return Pair((name, "ref"))

    r = SimpleNamespace(models={}, transient=None, problem=SimpleNamespace(bind=lambda b: None), _build=build)
    model = Runner.model.__get__(r)
    assert model(None) == "None"
    assert model(a, True) == repr(a) and model(a, True) == repr(a)  # kept while asked again
    assert model(b, True) == repr(b) and repr(a) not in alive and repr(b) in alive
    small = {"n": 7}
    assert model(small) == repr(small) and model(small, True) == repr(small)  # a kept binding as it is
    assert model(None) == "None"
    assert built == ["None", repr(a), repr(b), repr(small)]
    assert "None" in alive and repr(small) in alive


def test_g05_variant_jobs_are_transient():
    from kverify.gates import g05_shapes

    ctx = Context(problem=None, specs=[], device="cpu", seed=0, oracle=CountingOracle())
    ctx.cache[("specs", repr(sorted({"n": 3}.items())))] = []
    assert g05_shapes._job(ctx, {"n": 3})["transient"] is True


def test_in_an_audit_gpu_cache_is_given_back_after_each_host_store_and_release(monkeypatch):
    """G05 runs the reference once per variant while planning, each at another size: in an audit
    (KVERIFY_EMPTY_CACHE=1) PyTorch's cached GPU blocks are given back after each stored variant
    and after each released gate, not left to grow with every size; outside an audit, never."""
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    ctx = _ctx()
    monkeypatch.delenv("KVERIFY_EMPTY_CACHE", raising=False)
    ctx.store_expected(_job("G05/n=7"))
    ctx.release(["G05/n=7"])
    assert emptied == []
    monkeypatch.setenv("KVERIFY_EMPTY_CACHE", "1")
    ctx.store_expected(_job("G05/n=9"))
    ctx.store_expected(_job("G05/n=9"))  # cached: no reference run, nothing to give back
    assert len(emptied) == 1
    ctx.expected(_job("G02/0"))  # kept on the device for its gate's judging
    assert len(emptied) == 1
    ctx.release(["G02/0"])
    assert len(emptied) == 2


# ---- out of GPU memory is not a property of the reference (a review, stop 39) ----

class _RaisingOracle(CountingOracle):
    """run / run_fp64 raise ``exc`` (an out-of-memory error, or another)."""

    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def run(self, inputs, binding=None):
        raise self.exc

    run_fp64 = run


OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"


@pytest.mark.parametrize("exc,raises", [(torch.OutOfMemoryError(OOM), True), (RuntimeError("no such shape"), False)])
def test_g03_s_limit_probe_raises_out_of_memory_and_certifies_nothing_for_other_errors(exc, raises):
    """G03's limit probe (_certified) read every error of the fp64 oracle as "nothing certified",
    which FAILs a candidate that gives the limit ±Inf: out of memory is the GPU's state, not the
    reference's, and goes up (the gate is ERROR "ran out of memory", an audit runs the row again)."""
    from kverify.gates.g03_nonfinite import _certified
    ctx = Context(problem=None, specs=[], device="cpu", seed=0, oracle=_RaisingOracle(exc))
    want = torch.tensor([float("inf"), 1.0], dtype=torch.float64)
    job = {"kind": "run", "id": "G03/inf", "seed": 5, "binding": None, "inputs": []}
    if raises:
        with pytest.raises(torch.OutOfMemoryError):
            _certified(ctx, job, 0, want)
    else:
        assert not _certified(ctx, job, 0, want).any()


@pytest.mark.parametrize("exc,raises", [(torch.OutOfMemoryError(OOM), True), (RuntimeError("no such shape"), False)])
def test_the_small_shape_search_raises_out_of_memory_and_passes_over_shapes_that_fail(exc, raises):
    """Context.small_binding tried a larger shape wherever the reference raised; out of GPU memory
    there (other checks' memory) would choose another gate shape than alone: it goes up instead."""
    from kverify.problem import InputSpec

    class Problem:
        dims = {"n": 100000}

        def input_numel(self, seed, b):
            return b["n"]

    ctx = Context(problem=Problem(), specs=[InputSpec("tensor", (100000,))], device="cpu", seed=0,
                  oracle=_RaisingOracle(exc))
    ctx.specs_at = lambda b: []
    if raises:
        with pytest.raises(torch.OutOfMemoryError):
            ctx.small_binding(limit=1000)
    else:
        assert ctx.small_binding(limit=1000) is None  # every shape failed: none


HUGE = "CUDA out of memory. Tried to allocate 976.00 GiB. GPU 0 has a total capacity of 139.81 GiB"


@pytest.mark.parametrize("text,shortage", [(OOM, True), (HUGE, False)])
def test_g05_tells_a_shape_no_gpu_can_hold_from_one_that_ran_short(monkeypatch, text, shortage):
    """A G05 shape whose reference run asks more than the whole GPU has (H200 audit, stop 40: a
    ConvTranspose2d at stride 257, ~1 TB for the fp64 oracle) is skipped as over the memory budget,
    in words the audit does not read as running out (memory_wait.says_oom), so the row is judged
    where it runs; a shortage (2 GiB asked) still says so, and the audit runs the row again alone."""
    from kverify._internal import memory_wait
    from kverify.gates import g05_shapes

    class Problem:
        dims = {"stride": 2}

        def footprint(self, b):
            return None  # not counted: only the reference's run decides

    monkeypatch.setattr(memory_wait, "_device_total", lambda: 140 << 30)
    ctx = Context(problem=Problem(), specs=[], device="cpu", seed=0, oracle=_RaisingOracle(torch.OutOfMemoryError(text)))
    ctx.specs_at = lambda b: []
    why = g05_shapes._valid(ctx, {"stride": 257})
    assert memory_wait.says_oom(why) == shortage, why
    assert why == ("reference raises OutOfMemoryError" if shortage else
                   "over the memory budget: the reference's run asks more at once than the whole GPU has")
