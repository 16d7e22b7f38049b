"""The native GDN op run through kverify's gates on the CPU (the same kernel bodies as the GPU):
examples/gdn, whose oracle is the C++ fp64 GDN oracle. Every gate but G03 must PASS. G03 is
reported, not asserted: with +Inf injected into v, the chunked form gives ±Inf where the
recurrence's own evaluation order meets ∞ − ∞ and gives NaN (see README, GDN); the test asserts
that this is the only kind of G03 mismatch, so a NaN appearing where the oracle is finite (as
the difference-of-cumulative-sums decay once gave after g = −∞) still fails here."""
from pathlib import Path

from kverify.check import check

ROOT = Path(__file__).resolve().parent.parent / "examples" / "gdn"


def test_gdn_op_passes_the_gates_on_cpu():
    ref, cand = ROOT / "reference.py", ROOT / "kverify_chunk.py"
    r = check(ref.read_text(), str(ref), cand.read_text(), str(cand), device="cpu", seed=0)
    verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
    assert all(v == "PASS" for g, v in verdicts.items() if g != "G03"), verdicts
    g03 = next(g for g in r["gates"] if g["gate"] == "G03")
    if g03["verdict"] != "PASS":  # evidence of the first failing injection run
        e = g03["evidence"]
        assert e["candidate_nonfinite"] == e["oracle_nonfinite"], e  # finite exactly where the oracle is
        assert e["nan_mismatch"] == e["posinf_mismatch"] + e["neginf_mismatch"], e  # only NaN <-> ±Inf
        assert e["values"]["candidate"] in ("inf", "-inf") and e["values"]["oracle"] == "nan", e
