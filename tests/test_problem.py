"""KernelBench loader: free dimensions, rebinding, input specs, load errors."""
import re
import time

import pytest
import torch

from kverify.errors import LoadError
from kverify.problem import Problem, free_dimensions, infer_dist, synthesize

REF = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, 3)
    def forward(self, x, k):
        return self.lin(x) * k

batch = 4
features = 2 * 8
unused = 99
scale_name = "x"

def shape():
    return (batch, features)

def get_inputs():
    return [torch.rand(*shape()), 3]

def get_init_inputs():
    return [features]
'''


def test_free_dimensions_follow_helpers():
    assert free_dimensions(REF) == {"batch": 4, "features": 16}


def test_bind_changes_specs_and_rejects_unknown():
    p = Problem(REF, "ref.py")
    specs = p.input_specs(0)
    assert specs[0].shape == (4, 16) and specs[0].dist.kind == "uniform" and specs[1].value == 3
    assert p.input_specs(0, {"batch": 7})[0].shape == (7, 16)
    with pytest.raises(LoadError, match="not a free dimension"):
        p.bind({"unused": 3})


DERIVED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, multiplier_shape):
        super().__init__()
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))

    def forward(self, x):
        return x * self.multiplier


batch_size = 4
channels = 8
depth, height, width = 3, 5, 7
multiplier_shape = (channels, 1, 1, 1)
label = "fixed"


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [channels, multiplier_shape]
"""


def test_tuple_assigned_dimensions_are_free_and_derived_constants_follow_a_binding():
    """``d, h, w = ...`` gives free dimensions too (the spatial sizes of most conv problems), and a
    constant computed from a free dimension is evaluated again when it is rebound (else the
    reference fails at every other shape: multiplier (8,1,1,1) against 3 channels)."""
    assert free_dimensions(DERIVED) == {"batch_size": 4, "channels": 8, "depth": 3, "height": 5, "width": 7}
    p = Problem(DERIVED, "derived.py")
    p.bind({"channels": 3, "width": 9})
    assert (p.module.channels, p.module.multiplier_shape, p.module.width, p.module.label) == (3, (3, 1, 1, 1), 9, "fixed")
    p.bind(None)
    assert (p.module.channels, p.module.multiplier_shape, p.module.width) == (8, (8, 1, 1, 1), 7)
    assert p.input_specs(0, {"channels": 3})[0].shape == (4, 3, 3, 5, 7)
    p.bind({"channels": 3})
    with torch.no_grad():
        assert p.reference_model(0, "cpu")(torch.ones(4, 3, 3, 5, 7)).shape == (4, 3, 3, 5, 7)
    p.bind(None)
    # a derived constant whose expression fails at a binding keeps its import-time value, and the
    # defaults restore what the module was loaded with even when a name is assigned twice
    q = Problem(DERIVED.replace('label = "fixed"', 'label = 12 // (channels - 3)\nwidth2 = width * 2\nwidth = 5'), "d2.py")
    assert (q.module.label, q.module.width2) == (2, 14)
    q.bind({"channels": 3})
    assert q.module.label == 2  # 12 // 0 raised: the value the module was loaded with
    q.bind(None)
    assert (q.module.width, q.module.width2) == (5, 14)


def test_synthesis_is_reproducible():
    p = Problem(REF, "ref.py")
    specs = p.input_specs(0)
    a, b = synthesize(specs, 5, "cpu"), synthesize(specs, 5, "cpu")
    assert torch.equal(a[0], b[0]) and a[1] == 3
    assert not torch.equal(a[0], synthesize(specs, 6, "cpu")[0])


def test_infer_dist():
    assert infer_dist(torch.randn(1000)).kind == "normal"
    d = infer_dist(torch.rand(1000) * 5)
    assert (d.kind, d.p0, d.p1) == ("uniform", 0.0, 5.0)
    d = infer_dist(torch.randint(0, 10, (1000,)))
    assert (d.kind, d.p0, d.p1) == ("uniform_int", 0.0, 9.0)


@pytest.mark.parametrize("src,msg", [
    ("class Model(:\n", "not valid Python"),
    ("import torch\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "no Model"),
    ("raise RuntimeError('boom')\n", "RuntimeError"),
    ("import sys\nsys.exit(3)\n", "exit"),
])
def test_load_errors_name_the_file(src, msg):
    with pytest.raises(LoadError, match=msg) as e:
        Problem(src, "bad_ref.py")
    assert e.value.path == "bad_ref.py"


SLOW_INIT = '''
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    """Two draws from the global RNG with a pause between them: a window for another thread."""
    def __init__(self, n):
        super().__init__()
        a = torch.randn(n)
        time.sleep(0.05)
        self.w = nn.Parameter(torch.cat([a, torch.randn(n)]))
    def forward(self, x):
        return x * self.w.sum()

n = 8

def get_inputs():
    return [torch.randn(n)]

def get_init_inputs():
    return [n]
'''


def test_seeded_weights_are_the_same_when_checks_run_in_threads():
    """Controls and demo run checks as threads of one process: each check's seeded weights must
    be what the worker (a lone process) draws, whatever the other threads seed meanwhile."""
    import threading

    serial = {s: Problem(SLOW_INIT, "slow.py").reference_model(s, "cpu").w.detach().clone() for s in (1, 2, 3, 4)}
    got, barrier = {}, threading.Barrier(4)

    def build(s):
        p = Problem(SLOW_INIT, f"slow{s}.py")
        barrier.wait()
        got[s] = p.reference_model(s, "cpu").w.detach().clone()

    threads = [threading.Thread(target=build, args=(s,)) for s in serial]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in serial:
        assert torch.equal(got[s], serial[s]), f"seed {s}: weights drawn while another thread seeded"


CONV3D = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, kernel_size)

    def forward(self, x):
        return self.conv(x)


channels = 16
kernel_size = 3


def get_inputs():
    return [torch.rand(2, channels, 8, 8, 8)]


def get_init_inputs():
    return [channels, kernel_size]
"""


def test_footprint_counts_inputs_parameters_and_outputs_on_meta_tensors():
    """Problem.footprint: nothing is allocated, so a binding with ~10^10 weights is counted in
    moments (G05 skips it as over its memory budget instead of building it: minutes on the H200)."""
    p = Problem(CONV3D, "conv3d.py")
    assert p.footprint() == 2 * 16 * 8**3 + (16 * 16 * 27 + 16) + 2 * 16 * 6**3
    t = time.monotonic()
    big = p.footprint({"kernel_size": 257})  # the forward rejects a kernel larger than the input
    assert time.monotonic() - t < 5
    assert big == 2 * 16 * 8**3 + 16 * 16 * 257**3 + 16  # inputs and parameters, no outputs
    assert (p.module.channels, p.module.kernel_size) == (16, 3)  # the default binding again


def test_g05_skips_variants_whose_parameters_exceed_its_budget(tmp_path):
    from kverify.check import check

    c = tmp_path / "c.py"
    c.write_text(CONV3D.replace("class Model(", "class ModelNew(").split("\n\nchannels")[0] + "\n")
    rep = check(CONV3D, "conv3d.py", c.read_text(), str(c), device="cpu", gates=["G01", "G05"], standard=False)
    g05 = {g["gate"]: g for g in rep["gates"]}["G05"]
    by = {v["binding"]["kernel_size"]: v for v in g05["evidence"]["variants"] if v["binding"]["channels"] == 16}
    assert by[257]["verdict"] == "SKIPPED" and by[257]["reason"] == "over the memory budget", by[257]
    assert by[5]["verdict"] == "PASS", by[5]


GRU_H0 = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, 2, bidirectional=True)
        self.h0 = torch.randn((4, batch_size, hidden_size))  # a plain attribute, not a buffer

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        return self.gru(x, self.h0)[0]


batch_size = 3
input_size = 5
hidden_size = 6


def get_inputs():
    return [torch.randn(7, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
"""


def test_the_oracle_upcasts_tensors_kept_as_plain_attributes():
    """KernelBench's GRU/LSTM problems keep h0 as a plain tensor attribute: Module.double() leaves
    it fp32 and the fp64 GRU raises "Input and hidden tensors are not the same dtype" (two CUDA-L1
    rows, a GRU and an LSTM, were UNJUDGED so on the H200). The oracle's copy holds it in fp64,
    equal in value; the reference model keeps its own fp32 one, and the fp64 outputs are the
    reference's to fp32 error. A tensor already fp64 in a list (an alias of a parameter that
    double() converted) stays the same object."""
    from kverify.problem import Oracle, synthesize

    p = Problem(GRU_H0, "gru_h0.py")
    o = Oracle(p, 0, "cpu")
    ref, ora = o.models()
    assert ref.h0.dtype == torch.float32 and ora.h0.dtype == torch.float64
    assert torch.equal(ora.h0, ref.h0.double()) and "h0" not in dict(ora.named_buffers())
    high, low = o.run(synthesize(p.input_specs(0), 0, "cpu"))
    assert high[0].dtype == torch.float64 and low[0].dtype == torch.float32
    assert torch.allclose(high[0], low[0].double(), atol=1e-5)
    from kverify.problem import fp64_copy

    m = torch.nn.Linear(2, 2)
    m.alias = [m.weight, {"scale": torch.ones(1)}]
    d = fp64_copy(m)
    assert d.alias[0] is d.weight and d.alias[1]["scale"].dtype == torch.float64


def test_the_oracle_rebinds_functions_that_close_over_the_model():
    """minGPT's block (KernelBench L3 problem 44) keeps ``self.mlpf = lambda x: m.c_proj(m.c_fc(x))``
    over its own ModuleDict ``m``: deepcopy shares the lambda, so the fp64 copy called the fp32
    original and raised "mat1 and mat2 must have the same dtype" (CUDA-L1 L3 T44, H200, stop 22).
    The copy's function runs over the copy's modules; the original's still over its own; a
    function over nothing of the model is shared as it was."""
    from kverify.problem import fp64_copy

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = torch.nn.ModuleDict({"fc": torch.nn.Linear(3, 4), "proj": torch.nn.Linear(4, 3)})
            m = self.mlp
            self.mlpf = lambda x: m["proj"](torch.relu(m["fc"](x)))
            self.me = lambda x: self.mlp["fc"](x)  # over self
            self.plain = lambda x: x * 2  # over nothing

        def forward(self, x):
            return self.mlpf(x) + self.plain(x) + self.me(x)[..., :3]

    torch.manual_seed(0)
    b = Block()
    x = torch.randn(2, 3)
    d = fp64_copy(b)
    y = d(x.double())
    assert y.dtype == torch.float64 and torch.allclose(y, b(x).double(), atol=1e-5)
    assert d.plain is b.plain and d.mlpf is not b.mlpf and b(x).dtype == torch.float32
    d.mlp["fc"].weight.data.zero_()  # the copy's lambdas read the copy's weights, the original's its own
    assert not torch.allclose(d.mlpf(x.double()), b.mlpf(x).double())
    assert torch.equal(d.me(x.double()), d.mlp["fc"].bias.expand(2, 4))


def test_the_oracle_rebinds_buffers_tensors_defaults_nested_functions_and_partials():
    """Review of stop 22: closures over a buffer or a plain tensor (replaced by double() and the
    upcast, so deepcopy's copy was an fp32 orphan), a module captured as a default or keyword
    default, a function calling another closure, functools.partial, and a private attribute: each
    runs in fp64 over the copy's objects."""
    import functools

    from kverify.problem import fp64_copy

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_buffer("shift", torch.ones(3))
            self.scale = torch.full((3,), 2.0)  # a plain tensor attribute
            shift, scale, lin = self.shift, self.scale, self.lin
            inner = lambda x: lin(x)  # noqa: E731
            self.by_buffer = lambda x: x + shift
            self.by_tensor = lambda x: x * scale
            self.by_default = lambda x, m=lin: m(x)
            self.by_kwdefault = lambda x, *, m=lin: m(x)
            self.nested = lambda x: inner(x) * 2
            self.part = functools.partial(torch.nn.functional.linear, weight=lin.weight, bias=lin.bias)
            self._private = lambda x: lin(x)

        def forward(self, x):
            return (self.by_buffer(x) + self.by_tensor(x) + self.by_default(x) + self.by_kwdefault(x)
                    + self.nested(x) + self.part(x) + self._private(x))

    torch.manual_seed(0)
    n = Net()
    x = torch.randn(4, 3)
    d = fp64_copy(n)
    y = d(x.double())
    assert y.dtype == torch.float64 and torch.allclose(y, n(x).double(), atol=1e-5)
    for name in ("by_buffer", "by_tensor", "by_default", "by_kwdefault", "nested", "part", "_private"):
        assert getattr(d, name)(x.double()).dtype == torch.float64, name
    assert n(x).dtype == torch.float32 and n.by_default(x).dtype == torch.float32  # the original untouched


def test_a_reference_whose_fp64_copy_fails_is_told_apart_from_one_that_fails(tmp_path):
    """The journalled reason says which raised: the reference itself, or the float64 oracle after
    the reference ran (a tensor made fp32 inside forward meets the fp64 input)."""
    from kverify.check import check
    from kverify.examples import ROOT

    ref = (ROOT / "relu" / "reference.py").read_text()
    cand = ref.replace("class Model(", "class ModelNew(")
    mixed = ref.replace("return torch.relu(x)", "return torch.relu(x) @ torch.eye(x.shape[-1])")
    broken = ref.replace("return torch.relu(x)", "raise RuntimeError('planted reference failure')")
    for src, words in ((mixed, "the reference ran at its own shape but its float64 copy (the oracle) raised"),
                       (broken, "the reference raised RuntimeError at its own shape: planted")):
        with pytest.raises(LoadError, match=re.escape(words)):
            check(src, str(tmp_path / "ref.py"), cand, str(tmp_path / "cand.py"), device="cpu", gates=["G01"],
                  workdir=tmp_path / "work")


def test_set_built_modes_puts_a_model_in_the_modes_it_was_constructed_in():
    """G09's mode run: each submodule in the mode its constructor left it (a BatchNorm pinned to
    eval stays so, the rest train; a model recorded before it was put in eval mode), training for
    a model whose modes were never recorded."""
    from kverify.problem import remember_modes, set_built_modes

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
            self.b.eval()

        def forward(self, x):
            return self.b(self.a(x))

    n = remember_modes(Net()).eval()
    assert not any(m.training for m in n.modules())
    set_built_modes(n)
    assert n.training and n.a.training and not n.b.training
    plain = set_built_modes(Net().eval())  # nothing recorded: training, as a fresh module
    assert all(m.training for m in plain.modules())


def test_modes_skip_a_frozen_torchscript_submodule():
    """A candidate that stores a frozen TorchScript copy of itself (audit row cudal1/h20/L3/T24:
    torch.jit.trace, then optimize_for_inference, in its constructor) has a submodule without a
    ``training`` flag, whose reading raises AttributeError: its modes are recorded and restored
    for the others, and the model still runs."""
    from kverify.problem import BUILT_MODES, remember_modes, set_built_modes

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)
            self.eval()
            self.frozen = torch.jit.optimize_for_inference(torch.jit.trace(
                torch.nn.Sequential(self.conv, self.bn), torch.randn(1, 3, 8, 8)))
            self.bn.train()

        def forward(self, x):
            return self.bn(self.conv(x))

    net = Net()
    with pytest.raises(AttributeError):  # what the row hit: the flag cannot be read
        _ = net.frozen.training
    n = remember_modes(net).eval()
    assert "frozen" not in n.__dict__[BUILT_MODES] and n.__dict__[BUILT_MODES]["bn"] is True
    set_built_modes(n)
    assert not n.training and not n.conv.training and n.bn.training
    assert n(torch.randn(2, 3, 8, 8)).shape == (2, 4, 6, 6)


def test_a_cuda_candidate_on_a_torch_without_cuda_gets_kverifys_reason(monkeypatch):
    """torch without CUDA refuses cuda_sources with "CUDA_HOME environment variable is not set",
    which setting CUDA_HOME does not cure (the trial set it and got the same): the load error says
    what the candidate needs instead."""
    from kverify.problem import exec_module

    src = "raise OSError('CUDA_HOME environment variable is not set. Please set it to your CUDA install root.')\n"
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(LoadError, match="builds a CUDA extension and this torch has no CUDA"):
        exec_module(src, "cand.py", "kv_cuda_home_test", "candidate")
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # a CUDA torch: torch's own message stands
    with pytest.raises(LoadError, match="raised OSError while loading: CUDA_HOME"):
        exec_module(src, "cand.py", "kv_cuda_home_test", "candidate")


BORROWING_REF = """import torch
import torch.nn as nn

scale = 3.0


def helper(x):
    return x * scale


class Model(nn.Module):
    def forward(self, x):
        return helper(x).reshape(batch_size, dim)


batch_size = 6
dim = 40


def get_inputs():
    return [torch.randn(batch_size * dim)]


def get_init_inputs():
    return []
"""

#: reads the reference's scale, helper, batch_size and dim as globals, as KernelBench's one
#: namespace lets it (audit rows kbleaderboard/deepseek-coder/L2/P10, L3/P29,
#: claude-3.5-sonnet/L3/P33): loaded alone it raises NameError
BORROWING_CAND = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    scaled = staticmethod(helper)  # read while the file loads

    def forward(self, x):
        batch = batch_size  # a local of its own named otherwise; batch_size read as a global
        return self.scaled(x).view(batch, dim)
"""


def test_borrowed_names_are_the_globals_a_candidate_reads_and_the_reference_defines():
    from kverify.problem import borrowed_names

    ref = Problem(BORROWING_REF, "ref.py").module
    assert borrowed_names(BORROWING_CAND, "c.py", ref) == ["batch_size", "dim", "helper"]
    own = """import torch
from math import pi as scale
dim = 3
def f(batch_size):
    global helper
    helper = 1
    g = lambda n: n + batch_size
    return [len(str(i)) for i in range(dim)], __file__, g
class ModelNew(torch.nn.Module):
    k = undefined_anywhere
"""
    # bound by the candidate (an import, a top-level assignment, a parameter, a global it assigns),
    # builtins, dunders and names the reference lacks are not borrowed
    assert borrowed_names(own, "c.py", ref) == []
    assert borrowed_names("class ModelNew(:\n", "c.py", ref) == []  # does not parse: exec_module says so
    assert borrowed_names("class ModelNew:\n    n = scale\n", "c.py", ref) == ["scale"]  # a class body's read


def test_a_candidate_reading_the_references_names_is_judged_at_every_binding(tmp_path):
    """Loaded with the reference's names (as KernelBench's harness loads it), which follow each
    binding (Problem.share): G05's variants see their own batch_size; a name the reference lacks
    still fails the load."""
    from kverify.check import check

    rep = check(BORROWING_REF, "ref.py", BORROWING_CAND, "cand.py", device="cpu", gates=["G01", "G02", "G05"],
                standard=True)
    by = {g["gate"]: g for g in rep["gates"]}
    assert [by[g]["verdict"] for g in ("G01", "G02", "G05")] == ["PASS"] * 3, [by[g]["summary"] for g in by]
    sizes = {v["binding"]["batch_size"] for v in by["G05"]["evidence"]["variants"] if v["verdict"] == "PASS"}
    assert len(sizes) > 3, by["G05"]["summary"]  # passed at other batch sizes: the binding followed
    assert rep["standard"]["verdict"] == "PASS" and rep["meta"]["borrowed"] == ["batch_size", "dim", "helper"]
    from kverify.report import borrowed_line

    assert borrowed_line(rep).startswith("the candidate reads batch_size, dim, helper from the reference's file")
    assert borrowed_line({"meta": {"borrowed": []}}) is None and borrowed_line({"meta": {}}) is None
    alone = check(BORROWING_REF, "ref.py", BORROWING_CAND.replace("view(batch,", "view(batchs,"), "cand.py",
                  device="cpu", gates=["G01"], standard=True)
    assert alone["gates"][0]["verdict"] == "FAIL" and "batchs" in alone["gates"][0]["summary"], alone["gates"][0]
    assert alone["meta"]["borrowed"] == ["batch_size", "dim", "helper"]


SUM_REF = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x).sum(dim=1) * w[: x.shape[1]].sum()


batch_size = 6
dim = 40
w = torch.randn(64)  # drawn while the file loads


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def test_a_size_the_reference_model_takes_from_its_inputs_stays_fixed_for_the_candidate():
    """A review's find (stop 41): the reference's model sizes its work from the inputs; a
    candidate sizing its own from the file's batch_size is fixed to the own shape, and G05
    catches it (were the name to follow each binding, it would pass). The module-level draw
    ``w`` it reads is the same in the worker as in the check's process (seeded load)."""
    from kverify.check import check

    cand = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(batch_size)  # sized from the file's constant, not from x
        for i in range(batch_size):
            out[i] = torch.relu(x[i]).sum()
        return out * w[: x.shape[1]].sum()
"""
    rep = check(SUM_REF, "ref.py", cand, "cand.py", device="cpu", gates=["G01", "G02", "G05"], standard=True)
    by = {g["gate"]: g for g in rep["gates"]}
    assert by["G01"]["verdict"] == "PASS" and by["G02"]["verdict"] == "PASS", [by[g]["summary"] for g in by]
    assert by["G05"]["verdict"] == "FAIL", by["G05"]["summary"]
    assert rep["standard"]["verdict"] == "PASS" and rep["meta"]["borrowed"] == ["batch_size", "w"]
    right = cand.replace("torch.empty(batch_size)", "torch.empty(x.shape[0])").replace("range(batch_size)",
                                                                                         "range(x.shape[0])")
    rep = check(SUM_REF, "ref.py", right, "cand.py", device="cpu", gates=["G05"], standard=False)
    assert rep["gates"][0]["verdict"] == "PASS", rep["gates"][0]["summary"]


def test_a_candidate_gets_every_name_of_the_reference_file_in_source_order():
    """As in KernelBench's one namespace, a name the candidate also binds (in a class body from
    the reference's value, or after a fallback) starts as the reference's: a review's find (stop 41)."""
    from kverify.check import check

    cand = """import torch
import torch.nn as nn

try:
    scale  # the reference's
except NameError:  # loaded alone
    scale = 1.0


class ModelNew(nn.Module):
    k = scale  # read while the class is made

    def forward(self, x):
        return (x * self.k).reshape(batch_size, dim)
"""
    rep = check(BORROWING_REF, "ref.py", cand, "cand.py", device="cpu", gates=["G01", "G02"], standard=True)
    assert [g["verdict"] for g in rep["gates"]] == ["PASS", "PASS"], [g["summary"] for g in rep["gates"]]
    assert rep["standard"]["verdict"] == "PASS"


def test_share_follows_bindings_only_where_the_reference_model_reads_and_the_candidate_left_the_name():
    import types

    p = Problem(BORROWING_REF, "ref.py")  # its Model reads batch_size and dim (helper reads scale)
    given = p.namespace()
    assert "Model" in given and "__file__" not in given
    mod = types.ModuleType("c")
    vars(mod).update(given)
    mod.dim = 41  # bound again by the candidate (unseen by borrowed_names, say a star import)
    p.share(mod, given, ["batch_size", "dim", "scale"])
    p.bind({"batch_size": 7})
    assert (mod.batch_size, mod.dim) == (7, 41)
    mod.batch_size = 5  # assigned by the candidate later (a ``global`` in a function): its own from then on
    p.bind(None)
    assert mod.batch_size == 5 and p.module.batch_size == 6
    q = Problem(BORROWING_REF, "ref.py")
    m2 = types.ModuleType("c2")
    vars(m2).update(q.namespace())
    q.share(m2, q.namespace(), ["dim"])  # batch_size read by the reference's model but not borrowed
    q.bind({"batch_size": 9, "dim": 3})
    assert (m2.batch_size, m2.dim) == (6, 3)
