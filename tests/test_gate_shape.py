"""The gates' shape (kverify.check._gate_shape): the costly gates (G09, G10, G11) run at a smaller
binding of the free dimensions when the inputs are large and the candidate is accurate there, else
at the problem's own shape, and G05 varies one dimension at a time around it; every other gate
always sees the own shape."""
import json

import pytest

from kverify.check import check
from kverify.gates.base import SMALL_INPUTS
from kverify.report import gate_shape_line

# a ReLU problem whose inputs (64 x 4099) exceed SMALL_INPUTS elements
REF = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 64
dim = 4099


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

HEAD = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
CANDIDATES = {
    "correct": "        return torch.relu(x)\n",
    # made for the own shape alone: raises elsewhere (as a kernel with hard-coded sizes may)
    "own_only": "        assert x.shape[1] == 4099, 'built for dim 4099'\n        return torch.relu(x)\n",
    # silently wrong at any other shape: the probe must see it and keep the own shape
    "wrong_elsewhere": "        return torch.relu(x) if x.shape[1] == 4099 else torch.relu(x) * 0.5\n",
    # the same, but a few times its bound only, and a crash at dim 1 (a review's case: G05's search must
    # still find the crash, which makes the row BROKEN)
    "slightly_wrong_elsewhere": "        import os, signal\n        if x.shape[1] == 1:\n            os.kill(os.getpid(), signal.SIGSEGV)\n"
                                "        return torch.relu(x) if x.shape[1] == 4099 else torch.relu(x) * (1 + 5e-6)\n",
    # NaN -> 0: G03 catches it
    "nan_to_zero": "        return torch.nan_to_num(torch.relu(x), nan=0.0)\n",
    # NaN -> 0 only on a path for large inputs: G03 must see the own shape to catch it
    "nan_to_zero_when_large": "        y = torch.relu(x)\n        return torch.nan_to_num(y, nan=0.0) if x.numel() > 65536 else y\n",
    # wrong only at dim = 4100 (the default + 1): G05 must still try it, with batch at the small shape
    "wrong_at_4100": "        return torch.relu(x) * (0.5 if x.shape[1] == 4100 else 1.0)\n",
}


def _check(tmp_path, name, gates=("G01", "G02", "G03", "G10")):
    c = tmp_path / f"{name}.py"
    c.write_text(HEAD + CANDIDATES[name])
    rep = check(REF, "reference.py", c.read_text(), str(c), device="cpu", gates=list(gates))
    return rep, {g["gate"]: g for g in rep["gates"]}


def test_large_inputs_take_a_small_shape_when_the_candidate_is_accurate_there(tmp_path):
    assert 64 * 4099 > SMALL_INPUTS
    rep, by = _check(tmp_path, "correct", gates=[f"G{k:02d}" for k in range(1, 13)])  # every gate, each shape path
    from kverify.check import RULES
    assert rep["meta"]["rules"] == RULES
    assert rep["meta"]["judged_on"] == "cpu"  # the GPU's name on CUDA runs (kverify.check.judged_on)
    shape = rep["meta"]["gate_shape"]
    assert shape["binding"] == {"batch_size": 64, "dim": 67}, shape
    assert "accurate" in shape["why"]
    assert gate_shape_line(rep).startswith("G09, G10, G11 ran at batch_size=64, dim=67 (G05 varied")  # check's table
    assert all(g["verdict"] == "PASS" for g in by.values()), by
    rep, by = _check(tmp_path, "nan_to_zero")
    assert rep["meta"]["gate_shape"]["binding"] == {"batch_size": 64, "dim": 67}
    assert by["G03"]["verdict"] == "FAIL" and by["G03"]["evidence"]["n"] == 64 * 4099, by["G03"]  # at the own shape
    rep, by = _check(tmp_path, "nan_to_zero_when_large")
    assert rep["meta"]["gate_shape"]["binding"] == {"batch_size": 64, "dim": 67}  # the probe sees nothing wrong
    assert by["G03"]["verdict"] == "FAIL", by["G03"]


def test_g05_varies_one_dimension_at_a_time_around_the_small_shape(tmp_path):
    rep, by = _check(tmp_path, "correct", gates=["G01", "G05", "G09"])
    small = rep["meta"]["gate_shape"]["binding"]
    assert small == {"batch_size": 64, "dim": 67}
    bindings = [v["binding"] for v in by["G05"]["evidence"]["variants"]]
    combos = [{"batch_size": 13, "dim": 13}, {"batch_size": 63, "dim": 4098}]
    for b in bindings:
        if b not in combos:
            assert sum(b[d] != small[d] for d in b) == 1, b  # one dimension varied, the other at the small shape
    dims_tried = {b["dim"] for b in bindings if b["batch_size"] == 64}
    assert {1, 66, 68, 4098, 4100, 6149} <= dims_tried, sorted(dims_tried)  # small +-1, default +-1, 1.5x
    assert {"batch_size": 64, "dim": 4099} not in bindings  # the own shape is G02's
    assert all(c in bindings for c in combos), bindings
    assert by["G05"]["verdict"] == "PASS", by["G05"]
    # a defect at the default + 1 alone is still found, at the small batch
    rep, by = _check(tmp_path, "wrong_at_4100", gates=["G01", "G05", "G09"])
    assert rep["meta"]["gate_shape"]["binding"] == small
    g05 = by["G05"]
    assert g05["verdict"] == "FAIL", g05
    assert any(v["verdict"] == "FAIL" and v["binding"] == {"batch_size": 64, "dim": 4100} for v in g05["evidence"]["variants"])


@pytest.mark.parametrize("name,why", [("own_only", "raised"), ("wrong_elsewhere", "not accurate")])
def test_a_candidate_made_for_its_own_shape_keeps_the_gates_there(tmp_path, name, why):
    rep, by = _check(tmp_path, name)
    shape = rep["meta"]["gate_shape"]
    assert shape["binding"] is None and why in shape["why"], shape
    assert gate_shape_line(rep) == "every gate ran at the own shape: " + shape["why"]
    assert all(g["verdict"] == "PASS" for g in by.values()), by  # at its own shape it is right


def test_g05_takes_the_probes_failure_as_its_failing_variant_and_shrinks_it(tmp_path):
    """A candidate silently wrong at the gates' small shape (the probe) past SETTLED_RATIO times its
    bound fails G05 there without G05's own search, shrunk from that shape; one wrong there by a few
    times its bound gets the search as well, which finds its crash; one that raises there (a clear
    error) and a correct one get G05's search alone (rules 2026-12-04.10)."""
    rep, by = _check(tmp_path, "wrong_elsewhere", gates=["G01", "G05"])
    g05 = by["G05"]
    assert g05["verdict"] == "FAIL", g05
    variants = g05["evidence"]["variants"]
    assert len(variants) == 1 and variants[0]["binding"] == {"batch_size": 64, "dim": 67}, variants
    assert "probe" in variants[0]["reason"] and variants[0]["bound_ratio"] > 1
    shrunk = g05["evidence"]["shrunk"]
    assert shrunk["from"] == {"batch_size": 64, "dim": 67} and shrunk["steps"] >= 1
    assert shrunk["binding"]["batch_size"] * shrunk["binding"]["dim"] < 64 * 67, shrunk
    from kverify.audit_report import SWEEP
    from kverify.gates.g05_shapes import SETTLED_RATIO
    assert variants[0]["bound_ratio"] > SETTLED_RATIO >= max(SWEEP) and SETTLED_RATIO >= 100
    rep, by = _check(tmp_path, "slightly_wrong_elsewhere", gates=["G01", "G05"])
    g05 = by["G05"]
    variants = g05["evidence"]["variants"]
    assert "probe" in variants[0]["reason"] and 1 < variants[0]["bound_ratio"] <= SETTLED_RATIO, variants[0]
    assert len(variants) > 10 and any(v["binding"]["dim"] == 1 and v["bound_ratio"] > 1e100 for v in variants[1:])
    assert g05["verdict"] == "FAIL" and g05["bound_ratio"] > 1e100 and rep["class"] == "BROKEN", g05
    for name in ("own_only", "correct"):
        _, by = _check(tmp_path, name, gates=["G01", "G05"])
        assert len(by["G05"]["evidence"]["variants"]) > 10 and by["G05"]["verdict"] == "PASS", (name, by["G05"])
        assert all("probe" not in v.get("reason", "") for v in by["G05"]["evidence"]["variants"])


def test_small_inputs_and_no_free_dimensions_keep_the_own_shape(tmp_path):
    from kverify.examples import ROOT

    ref = (ROOT / "relu" / "reference.py").read_text()
    c = ROOT / "relu" / "correct.py"
    rep = check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G01", "G10"])
    assert rep["meta"]["gate_shape"]["binding"] is None and "small already" in rep["meta"]["gate_shape"]["why"]
    assert gate_shape_line(rep) is None  # nothing worth a line under the table
    fixed = REF.replace("batch_size = 64\ndim = 4099\n", "").replace("torch.randn(batch_size, dim)", "torch.randn(64, 4099)")
    cc = tmp_path / "c.py"
    cc.write_text(HEAD + CANDIDATES["correct"])
    rep = check(fixed, "reference.py", cc.read_text(), str(cc), device="cpu", gates=["G01", "G10"])
    assert rep["meta"]["gate_shape"] == {"binding": None, "why": "the problem has no free dimension"}


def test_the_shrink_rule():
    """shrink_bindings: above 64 -> 67, then the largest above 9 halved to an odd size (ties by
    name) until the inputs fit; dimensions of 9 or less untouched; a shape get_inputs cannot build
    ends the list before it."""
    from kverify.gates.base import shrink_bindings

    numel = lambda b: b["n"] * b["c"] * b["h"]  # noqa: E731
    tries = shrink_bindings({"n": 128, "c": 3, "h": 40}, numel, 2000)
    assert tries == [{"n": 67, "c": 3, "h": 40}, {"n": 33, "c": 3, "h": 40}, {"n": 33, "c": 3, "h": 21},
                     {"n": 17, "c": 3, "h": 21}]  # 8040, 3960, 2079, 1071 elements

    def fragile(b):
        if b["n"] < 30:
            raise ValueError("get_inputs needs n >= 30")
        return numel(b)
    assert shrink_bindings({"n": 128, "c": 3, "h": 40}, fragile, 2000) == tries[:3]
    assert shrink_bindings({"n": 8, "c": 3}, lambda b: 10**9, 10) == [{"n": 8, "c": 3}]
    # the ladder for references that need even sizes: twice an odd number, 66 -> 34 -> 18 -> 10
    assert shrink_bindings({"n": 128, "c": 3, "h": 40}, numel, 2000, multiple=2) == [
        {"n": 66, "c": 3, "h": 40}, {"n": 34, "c": 3, "h": 40}, {"n": 34, "c": 3, "h": 22}, {"n": 18, "c": 3, "h": 22}]
    assert shrink_bindings({"n": 128, "c": 3, "h": 40}, numel, 2000, multiple=4) == [
        {"n": 68, "c": 3, "h": 40}, {"n": 36, "c": 3, "h": 40}, {"n": 36, "c": 3, "h": 20}, {"n": 20, "c": 3, "h": 20}]
    # with own: shrinking goes on until a shape has at most half the own inputs, even when the
    # first one is under the limit already (it stopped there and kept no shape at all)
    assert shrink_bindings({"n": 72, "h": 40}, lambda b: b["n"] * b["h"], 4000, own=72 * 40) == [{"n": 33, "h": 40}]
    calls = []  # each shape's inputs are counted once (numel_at builds them)
    shrink_bindings({"n": 128, "c": 3, "h": 40}, lambda b: calls.append(dict(b)) or numel(b), 2000, own=10**6)
    assert len(calls) == len({tuple(sorted(c.items())) for c in calls}) >= 3, calls


@pytest.mark.parametrize("group,dim", [(2, 66), (4, 68)])
def test_a_reference_that_needs_multiples_gets_a_small_shape_of_multiples(tmp_path, group, dim):
    """A reference that pairs up (or quarters) its last dimension runs at no odd size: the small
    shape then comes from the ladder of 2 (4) x odd sizes, and G05 tries its sizes times 2 (4),
    where a defect in the last tile past 256 shows (wrong when dim % 256 != 0 beyond 256)."""
    body = f"x.view(x.shape[0], -1, {group}).sum(-1)"
    ref = REF.replace("return torch.relu(x)", "return " + body).replace("dim = 4099", "dim = 4096")
    c = tmp_path / "c.py"
    c.write_text(HEAD + f"        return {body}\n")
    rep = check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G01", "G05", "G10"])
    assert rep["meta"]["gate_shape"]["binding"] == {"batch_size": 64, "dim": dim}, rep["meta"]["gate_shape"]
    by = {g["gate"]: g for g in rep["gates"]}
    assert by["G05"]["verdict"] == "PASS", by["G05"]
    bad = tmp_path / "bad.py"
    bad.write_text(HEAD + f"        y = {body}\n"
                   "        if x.shape[1] > 256 and x.shape[1] % 256:\n            y[:, -1] = 0\n        return y\n")
    rep = check(ref, "reference.py", bad.read_text(), str(bad), device="cpu", gates=["G01", "G05"])
    g05 = {g["gate"]: g for g in rep["gates"]}["G05"]
    assert g05["verdict"] == "FAIL", g05


def test_g06_keeps_the_own_shape_for_its_long_sums(tmp_path):
    """G06 is not a small-shape gate: an fp16 accumulation defect needs long sums (at a gate shape
    of 67 it would pass), so it is judged at the own shape even where the other gates go small."""
    ref = (REF.replace("return torch.relu(x)", "return x.sum(1)")
           .replace("batch_size = 64\ndim = 4099", "batch_size = 16\ndim = 5000")
           .replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, dim).half()"))
    body = ("        s = torch.zeros(x.shape[0], dtype=x.dtype)\n"
            "        for j in range(x.shape[1]):\n"
            "            s = s + x[:, j]  # fp16 running sum\n"
            "        return s\n")
    c = tmp_path / "fp16_sum.py"
    c.write_text(HEAD + body)
    rep = check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G01", "G06", "G10"])
    by = {g["gate"]: g for g in rep["gates"]}
    assert rep["meta"]["gate_shape"]["binding"] is not None, rep["meta"]["gate_shape"]  # G10 went small
    assert by["G06"]["verdict"] == "FAIL", by["G06"]


def test_the_audit_report_counts_where_the_small_shape_gates_ran():
    import json

    from kverify.audit_report import build, markdown

    def row(i, shape):
        rep = {"meta": {"gate_shape": shape}} if shape is not None else {"meta": {}}
        return {"id": f"r{i}", "class": "CLEAN", "standard": "PASS", "reason": "", "source": "s", "level": 1,
                "backend": "cuda", "gpu": "H200", "report": json.dumps(rep), "gates": {}}
    ks = [row(0, {"binding": {"n": 9}, "why": "accurate"}), row(1, {"binding": {"n": 17}, "why": "accurate"}),
          row(2, {"binding": None, "why": "probe at {'n': 9}: the candidate raised AssertionError: 4099"}),
          row(3, {"binding": None, "why": "the inputs are small already (4096 elements)"}), row(4, None)]
    rep = build(ks)
    assert rep["gate_shapes"] == {"small": 2, "own: probe: the candidate raised AssertionError": 1,
                                  "own: the inputs are small already": 1, "not recorded": 1}, rep["gate_shapes"]
    assert "small: 2 row(s)" in markdown(rep)
    # and by which judging rules (meta.rules; rows from before kverify recorded them counted apart)
    assert rep["rules"] == {"before 2026-11-30": 5}
    assert "before 2026-11-30: 5 row(s)" in markdown(rep)
    # rows all judged by one set of rules other than this kverify's are named too (stop 20: the
    # G11 fix made every journalled row's rules older, and the report said nothing)
    from kverify.check import RULES

    for k in ks:
        k["report"] = json.dumps({"meta": {"rules": "2026-11-30"}})
    rep = build(ks)
    assert rep["current_rules"] == RULES != "2026-11-30"
    assert f"this kverify's are {RULES}" in markdown(rep) and "2026-11-30: 5 row(s)" in markdown(rep)
    for k in ks:
        k["report"] = json.dumps({"meta": {"rules": RULES}})
    assert "Judging rules" not in markdown(build(ks))
    # and on which machine (meta.judged_on, kverify.check.judged_on; rows from before: not recorded)
    ks[0]["report"] = json.dumps({"meta": {"rules": RULES, "judged_on": "NVIDIA H200"}})
    rep = build(ks)
    assert rep["judged_on"] == {"not recorded": 4, "NVIDIA H200": 1}
    assert "Judged on: not recorded: 4 row(s); NVIDIA H200: 1 row(s)." in markdown(rep)


@pytest.mark.parametrize("op,verdict", [("argmax", "PASS"), ("argmin", "FAIL")])
def test_integer_outputs_are_judged_exactly(tmp_path, op, verdict):
    """An integer output (argmax indices) is compared exactly by the accuracy rule (was a kverify
    fault: 'not a float dtype: int64'), also in the gate-shape probe and G05's variants."""
    ref = REF.replace("return torch.relu(x)", "return torch.argmax(x, dim=1)")
    c = tmp_path / f"{op}.py"
    c.write_text(HEAD + f"        return torch.{op}(x, dim=1)\n")
    rep = check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G01", "G02", "G05", "G10"])
    by = {g["gate"]: g for g in rep["gates"]}
    assert by["G02"]["verdict"] == verdict and by["G05"]["verdict"] == verdict, by
    assert "kverify fault" not in json.dumps(rep)
    assert (rep["meta"]["gate_shape"]["binding"] is not None) == (verdict == "PASS"), rep["meta"]["gate_shape"]
