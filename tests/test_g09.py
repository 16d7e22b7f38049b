"""G09's mode perturbation (rules 2026-12-01.3): each model also runs in the modes its
constructor left it (training, as the harness runs it). A candidate that pins BatchNorm to eval
mode fails it (controls/g09_batchnorm_pinned_eval is the control pair); a reference that is
random in training mode (dropout) leaves the mode perturbation out rather than judge noise."""
import pytest
import torch

from kverify.check import check
from kverify.controls import controls_root

REF_DROPOUT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


n = 13


def get_inputs():
    return [torch.randn(5, n)]


def get_init_inputs():
    return [n]
"""


def g09(ref: str, cand: str, tmp_path) -> dict:
    r = check(ref, str(tmp_path / "ref.py"), cand, str(tmp_path / "cand.py"), device="cpu", gates=["G09"],
              workdir=tmp_path / "work")
    return next(g for g in r["gates"] if g["gate"] == "G09")


def test_a_candidate_that_pins_batchnorm_to_eval_fails_the_mode_perturbation(tmp_path):
    d = controls_root() / "g09_batchnorm_pinned_eval"
    ref = (d / "reference.py").read_text()
    bad = g09(ref, (d / "defect.py").read_text(), tmp_path)
    assert bad["verdict"] == "FAIL" and bad["summary"].startswith("training mode perturbed"), bad
    good = g09(ref, (d / "twin.py").read_text(), tmp_path)
    assert good["verdict"] == "PASS", good


@pytest.mark.parametrize("drop", ["nn.Dropout(0.5)", "nn.Dropout(0.0)"])
def test_a_reference_random_in_training_mode_leaves_the_mode_perturbation_out(tmp_path, drop):
    """Dropout p=0.5: the reference's two training-mode calls differ, so no mode perturbation (a
    candidate's own dropout mask cannot match the reference's); p=0: the mode is perturbed and
    changes nothing. The same model as candidate passes either way."""
    ref = REF_DROPOUT.replace("nn.Dropout(0.5)", drop)
    res = g09(ref, ref.replace("class Model(", "class ModelNew("), tmp_path)
    assert res["verdict"] == "PASS", res
    names = [p["name"] for p in res["evidence"]["perturbations"]]
    assert names[:3] == ["input 0", "tensor fc.weight", "tensor fc.bias"]
    assert ("training mode" in names) == drop.endswith("(0.0)"), names
    assert res["summary"].startswith(f"{len(names)} perturbation(s) followed")


BN_REASSIGNED = """
import torch
import torch.nn as nn


class HandBatchNorm(nn.Module):
    '''BatchNorm by hand, right in both modes; its running statistics are reassigned, not updated
    in place, as much hand-written BatchNorm code does.'''

    def __init__(self, c):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))

    def forward(self, x):
        if self.training:
            mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), unbiased=False)
            n = x.numel() / x.shape[1]
            self.running_mean = 0.9 * self.running_mean + 0.1 * mean
            self.running_var = 0.9 * self.running_var + 0.1 * var * n / (n - 1)
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + 1e-5)
        return y * self.weight[None, :, None, None] + self.bias[None, :, None, None]


class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=1, bias=False)
        self.bn = HandBatchNorm(cout)

    def forward(self, x):
        return self.bn(self.conv(x))
"""


def test_the_mode_run_leaves_no_state_for_the_gates_after_it(tmp_path):
    """A correct hand-written BatchNorm that reassigns its running statistics in training mode:
    the mode run uses a model built for it alone, so G10 (after G09 in the same worker) still
    judges the eval-mode model as built (review of stop 22: restoring buffers in place left the
    reassigned statistics behind and G10 failed 4158 of 4158 elements)."""
    ref = (controls_root() / "g09_batchnorm_pinned_eval" / "reference.py").read_text()
    r = check(ref, str(tmp_path / "ref.py"), BN_REASSIGNED, str(tmp_path / "cand.py"), device="cpu",
              gates=["G09", "G10"], workdir=tmp_path / "work")
    assert {g["gate"]: g["verdict"] for g in r["gates"]} == {"G09": "PASS", "G10": "PASS"}, r["gates"]


REF_LINEAR = REF_DROPOUT.replace("nn.Dropout(0.5)", "nn.Identity()")


def test_a_candidate_that_raises_in_training_mode_fails_that_perturbation_alone(tmp_path):
    """Raising in the harness's mode is the mode perturbation's failure, and the others are still
    judged (review of stop 22: one exception made the whole of G09 UNSUPPORTED)."""
    refuses = REF_LINEAR.replace("class Model(", "class ModelNew(").replace(
        "        return self.drop(self.fc(x))",
        "        if self.training:\n            raise NotImplementedError('inference only')\n"
        "        return self.drop(self.fc(x))")
    res = g09(REF_LINEAR, refuses, tmp_path)
    assert res["verdict"] == "FAIL" and "training mode perturbed: the candidate raised where the reference ran" \
        in res["summary"], res
    cached = refuses.replace("return self.drop(self.fc(x))", "return x @ self.fc.weight.t() + self.b")
    cached = cached.replace("        self.drop = nn.Identity()",
                            "        self.drop = nn.Identity()\n        self.b = self.fc.bias.detach().clone()")
    res = g09(REF_LINEAR, cached, tmp_path)
    assert res["verdict"] == "FAIL" and res["summary"].startswith("tensor fc.bias perturbed"), res


REF_ENCODER = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, h, 2 * d, dropout=0.0, batch_first=True)
        # BIASES

    def forward(self, x):
        return self.layer(x)


def get_inputs():
    return [torch.randn(3, 10, 64)]


def get_init_inputs():
    return [64, 4]
"""

CAND_ENCODER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    '''The encoder layer written out (post-norm, ReLU): one path in both modes.'''

    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.layer = nn.TransformerEncoderLayer(d, h, 2 * d, dropout=0.0, batch_first=True)

    def forward(self, x):
        lay, att = self.layer, self.layer.self_attn
        b, t, d = x.shape
        q, k, v = F.linear(x, att.in_proj_weight, att.in_proj_bias).chunk(3, dim=-1)
        heads = [z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v)]
        o = F.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(b, t, d)
        x = lay.norm1(x + F.linear(o, att.out_proj.weight, att.out_proj.bias))
        return lay.norm2(x + lay.linear2(F.relu(lay.linear1(x))))
"""


@pytest.mark.parametrize("biases", ["zero", "random"])
def test_changes_of_rounding_alone_ask_nothing_of_the_candidate(tmp_path, biases):
    """PyTorch's encoder layer takes its fast path in eval mode and the plain one in training
    mode, and its attention biases start at zero, so G09's bias perturbation is a uniform shift
    that softmax and LayerNorm cancel: in both the fp32 reference's bits change by rounding alone.
    Judged against the fp64 oracle's moves (_moved), a correct candidate written out with one path
    passes (review of stop 22: it failed 1255 elements of the mode run, and 410 of 1052 of
    out_proj.bias's, when the reference's changed bits counted)."""
    from kverify.gates.g09_sensitivity import MOVE_REL, MOVE_RMS, _changed, _moved

    init = ("nn.init.normal_(self.layer.self_attn.in_proj_bias)\n"
            "        nn.init.normal_(self.layer.self_attn.out_proj.bias)") if biases == "random" else "pass"
    res = g09(REF_ENCODER.replace("# BIASES", init), CAND_ENCODER, tmp_path)
    assert res["verdict"] == "PASS", res
    base = torch.tensor([1.0, 1.0, 0.0, float("nan"), float("inf"), 2.0, 1e-12], dtype=torch.float64)
    pert = torch.tensor([1.0 + 2**-40, 1.0 + 2**-10, 0.5, 1.0, float("inf"), float("nan"), 1e-12 + 2**-30],
                        dtype=torch.float64)
    assert _moved(base, pert).tolist() == [False, True, True, True, False, True, False]
    assert _changed(base, pert).tolist()[0] and MOVE_REL == 2.0 ** -16 and MOVE_RMS == 2.0 ** -20


CANCELLED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    # a linear map with a bias that starts at zero, then the row's mean taken out: G09's
    # perturbation of that bias is a uniform shift the mean subtraction cancels exactly

    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n) / n ** 0.5)
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        y = torch.nn.functional.linear(x, self.w, self.bias)
        return y - y.mean(-1, keepdim=True)


def get_inputs():
    return [torch.randn(7, 33)]


def get_init_inputs():
    return [33]
"""

OTHER_ORDER = CANCELLED.replace("class Model(", "class ModelNew(").replace(
    "y = torch.nn.functional.linear(x, self.w, self.bias)", "y = self.bias + x @ self.w.t()")
FROZEN = OTHER_ORDER.replace("        self.bias = nn.Parameter(torch.zeros(n))",
                             "        self.bias = nn.Parameter(torch.zeros(n))\n        self.frozen = None").replace(
    "        y = self.bias + x @ self.w.t()",
    "        if self.frozen is None:\n            self.frozen = self.w.detach().t().clone()\n"
    "        y = self.bias + x @ self.frozen")


def test_a_perturbation_the_mathematics_cancels_asks_nothing_of_the_candidate(tmp_path):
    """KernelBench L2 P15's pattern (a per-channel bias, then the mean subtracted): three audit
    rows failed G09 on the bias with a part of the elements (40528-99303 of 239566), the rounding
    of the reference against the candidate's. The same computation in another order passes; one
    that caches its weight on the first call still fails on that weight."""
    assert "self.frozen" in FROZEN and "self.w.t()" not in FROZEN
    assert g09(CANCELLED, OTHER_ORDER, tmp_path)["verdict"] == "PASS"
    res = g09(CANCELLED, FROZEN, tmp_path)
    assert res["verdict"] == "FAIL" and res["summary"].startswith("tensor w perturbed"), res


HALF = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.sigmoid(x + self.bias)


def get_inputs():
    return [torch.randn(16, 29).to(torch.DTYPE)]


def get_init_inputs():
    return [29]
"""


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_a_half_precision_reference_passes_as_its_own_candidate(tmp_path, dtype):
    """Review of stop 22: with fp32's threshold an fp64 move of a few 2^-16 asked an fp16/bf16
    output to change where its coarser steps cannot; the threshold follows the candidate's dtype."""
    from kverify.gates.g09_sensitivity import _moved

    ref = HALF.replace("DTYPE", dtype).replace("torch.randn(n))", f"torch.randn(n, dtype=torch.{dtype}))")
    res = g09(ref, ref.replace("class Model(", "class ModelNew("), tmp_path)
    assert res["verdict"] == "PASS", res
    a = torch.tensor([1.0, 1.0], dtype=torch.float64)
    b = torch.tensor([1.0 + 2**-12, 1.0 + 2**-5], dtype=torch.float64)
    assert _moved(a, b, torch.float32).tolist() == [True, True]
    assert _moved(a, b, torch.float16).tolist() == [False, True]
    big = torch.tensor([1e300, 1.0], dtype=torch.float64)  # past fp32's range in both runs: no ask
    assert _moved(big, torch.tensor([-1e300, 1.0], dtype=torch.float64)).tolist() == [False, False]


OVERFLOW = REF_LINEAR.replace("return self.drop(self.fc(x))", "return torch.exp(60 * self.fc(x))")


def test_an_output_that_overflows_either_way_asks_nothing(tmp_path):
    """exp(60 x) past fp32's range: +Inf in the reference and the candidate with or without the
    perturbation, finite and moving in fp64 (review of stop 22: the reference as its own candidate
    failed 1 of 13)."""
    res = g09(OVERFLOW, OVERFLOW.replace("class Model(", "class ModelNew("), tmp_path)
    assert res["verdict"] == "PASS", res


def test_a_candidate_built_once_only_leaves_the_mode_run_out_and_another_output_in_training_fails(tmp_path):
    """A constructor that works once per process (say, one that registers a library) cannot be
    built again for the mode run: left out, and said so, not the candidate's failure. An output of
    another dtype in training mode fails that perturbation (it used to be a kverify fault)."""
    once = REF_LINEAR.replace("class Model(", "class ModelNew(").replace(
        "        super().__init__()",
        "        super().__init__()\n        import builtins\n"
        "        if getattr(builtins, 'kv_built', False):\n            raise RuntimeError('built twice')\n"
        "        builtins.kv_built = True")
    res = g09(REF_LINEAR.replace("nn.Identity()", "nn.BatchNorm1d(n)"),
              once.replace("nn.Identity()", "nn.BatchNorm1d(n)"), tmp_path)
    assert res["verdict"] == "PASS" and "left out: training mode (the candidate could not be built again" in \
        res["summary"], res
    other = REF_LINEAR.replace("nn.Identity()", "nn.BatchNorm1d(n)").replace("class Model(", "class ModelNew(").replace(
        "        return self.drop(self.fc(x))",
        "        y = self.drop(self.fc(x))\n        return y.double() if self.training else y")
    res = g09(REF_LINEAR.replace("nn.Identity()", "nn.BatchNorm1d(n)"), other, tmp_path)
    assert res["verdict"] == "FAIL" and res["summary"].startswith("training mode perturbed: output 0 is not"), res


GELU_TAIL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    # erf-based GELU deep in its negative tail: 1 + erf(x / sqrt 2) cancels to 0 in fp32 there
    # while the fp64 oracle's output (~1e-20 and less) moves by far more than its own size

    def forward(self, x):
        return torch.nn.functional.gelu(x - 9.0)


def get_inputs():
    return [torch.randn(64, 33)]


def get_init_inputs():
    return []
"""


def test_a_move_the_reference_itself_cannot_resolve_asks_nothing(tmp_path):
    """Stop 25, technoabsurdist qwencoder L2/P3 on the H200: a candidate written with the
    reference's own PyTorch ops failed G09 on 3 of 33554170 elements that the oracle moved by more
    than 2^-16 of themselves (LayerNorm, then erf-based GELU). Here every element is such a move
    and the fp32 output is -0 in both runs: the reference as its own candidate passes since rules
    2026-12-01.5 (it failed them all before); an input the candidate ignores still fails."""
    from kverify.gates.g09_sensitivity import SLACK, _moved, _slack

    same = GELU_TAIL.replace("class Model(", "class ModelNew(")
    res = g09(GELU_TAIL, same, tmp_path)
    assert res["verdict"] == "PASS", res
    ignores = same.replace("return torch.nn.functional.gelu(x - 9.0)", "return torch.nn.functional.gelu(0 * x - 9.0)")
    res = g09(GELU_TAIL, ignores, tmp_path / "ignores")
    assert res["verdict"] == "FAIL", res
    # the rule itself: an oracle move of 1e-3 at an element of 1 asks a change unless the reference's
    # own error there, in the two runs together, is a quarter of it or more
    a, b = torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([1.001, 1.001], dtype=torch.float64)
    low_a, low_b = torch.tensor([1.0, 1.0]), torch.tensor([1.001 - 2e-4, 1.001 - 3e-4])
    slack = _slack(a, low_a, b, low_b)
    assert SLACK == 4.0 and _moved(a, b, torch.float32, slack).tolist() == [True, False]
    assert _moved(a, b, torch.float32, None).tolist() == [True, True]
    assert _slack(a, None, b, low_b) is None


def test_the_judgement_in_pieces_is_the_judgement_whole(monkeypatch):
    """Stop 28: G09 judges each output in CHUNK-element pieces on the oracle's device (_misses,
    _any_moved); the counts, the first ignored element and the rms the bound uses are those of one
    piece over the whole output, NaN, infinities and the reference's slack included."""
    from kverify.gates import g09_sensitivity as g

    gen = torch.Generator().manual_seed(5)
    n = 1000
    rb = torch.randn(n, generator=gen, dtype=torch.float64) * 3
    rp = rb.clone()
    moved_at = torch.randperm(n, generator=gen)[:300]
    rp[moved_at] += torch.randn(300, generator=gen, dtype=torch.float64)
    rb[7], rp[7] = float("nan"), 1.0                     # NaN against a number: moved
    rb[11], rp[11] = float("inf"), 2.0                   # infinity against a value: moved
    lb, lp = rb.float(), rp.float()
    lp[moved_at[:40]] += 0.5                             # a reference error that covers some moves
    cb = rb.float()
    cp = rp.float()
    cp[moved_at[100:160]] = cb[moved_at[100:160]]        # the candidate ignores 60 of the moves
    rb2, rp2, cb2, cp2, lb2, lp2 = (t.reshape(10, 100) for t in (rb, rp, cb, cp, lb, lp))
    whole = g._misses(rb2, rp2, lb2, lp2, cb2, cp2)
    assert whole[1] > 0 and whole[2] >= 0
    # the one-piece rule, as the gate wrote it before pieces (whole tensors, the rms of all)
    rc = g._moved(rb, rp, torch.float32, g._slack(rb, lb, rp, lp))
    miss = rc & ~g._changed(cb, cp)
    assert whole == (int(rc.sum()), int(miss.sum()), int(torch.nonzero(miss)[0]))
    for chunk in (1, 7, 64, 999):
        monkeypatch.setattr(g, "CHUNK", chunk)
        assert g._misses(rb2, rp2, lb2, lp2, cb2, cp2) == whole, chunk
        assert g._misses(rb2, rp2, None, None, cb2, cp2)[0] >= whole[0]  # no slack: at least as many moves
        assert g._any_moved(rb2, rp2) and not g._any_moved(rb2, rb2.clone())
        assert abs(g._rms(rb2) - g._rms(rb2.reshape(-1))) < 1e-12


def test_the_rms_of_an_fp16_oracle_output_does_not_overflow():
    """Rules 2026-12-01.6 (review of stop 28): an oracle output that the reference casts to fp16
    had its rms taken in fp16, where one element past 256 made it inf and no move counted; the
    rms is now fp64's, so the move of element 0 (0.5 -> 2) counts and a candidate that ignores it
    fails there."""
    from kverify.gates.g09_sensitivity import _misses, _rms

    h = torch.full((100,), 0.5, dtype=torch.float16)
    h[1] = 1000.0
    hp = h.clone()
    hp[0] = 2.0
    assert abs(_rms(h) - (0.25 * 99 / 100 + 1e6 / 100) ** 0.5) < 1e-9
    assert _misses(h, hp, None, None, h, h) == (1, 1, 0)
    assert _misses(h, hp, None, None, h, hp) == (1, 0, -1)
