"""The native GDN op run through kverify's gates on the CPU (the same kernel bodies as the GPU):
examples/gdn, whose oracle is the C++ fp64 GDN oracle. Every gate must PASS and the class be
CLEAN. G03 passes with a few positions counted as "indeterminate": with +Inf injected into v the
chunked form returns the exact limit ±Inf where the recurrence's own evaluation order meets
∞ − ∞ and gives NaN; G03 certifies the limit with the oracle (python/kverify/gates/g03_nonfinite.py).
A NaN where the oracle is finite (as the difference-of-cumulative-sums decay once gave after
g = −∞) still fails here."""
from pathlib import Path

from kverify.check import check

ROOT = Path(__file__).resolve().parent.parent / "examples" / "gdn"


def test_gdn_op_passes_the_gates_on_cpu():
    ref, cand = ROOT / "reference.py", ROOT / "kverify_chunk.py"
    r = check(ref.read_text(), str(ref), cand.read_text(), str(cand), device="cpu", seed=0)
    verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
    assert all(v == "PASS" for v in verdicts.values()), verdicts
    assert r["class"] == "CLEAN", r["class"]
    g03 = next(g for g in r["gates"] if g["gate"] == "G03")
    assert g03["evidence"]["judged"] == 4 and g03["evidence"]["oracle_nonfinite"] > 0, g03
