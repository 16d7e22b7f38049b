"""Corpus JSONL loader: rows by id, errors naming file, line and field."""
import json
from pathlib import Path

import pytest

from kverify.corpus import load_row
from kverify.errors import LoadError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "accepted_kernels.jsonl"


def test_row_and_errors(tmp_path):
    f = tmp_path / "c.jsonl"
    good = {"id": "a/1", "reference": "R", "candidate": "C", "harness": {"allclose_tol": 1e-4}}
    f.write_text(json.dumps(good) + "\n" + json.dumps({"id": "b", "reference": 3, "candidate": "C"}) + "\n{oops\n")
    r = load_row(str(f), "a/1")
    assert (r.reference, r.candidate, r.tolerance) == ("R", "C", 1e-4)
    assert r.paths("c.jsonl")[1] == "c.jsonl#a/1:candidate"
    with pytest.raises(LoadError, match="field 'reference'") as e:
        load_row(str(f), "b")
    assert e.value.path.endswith(":2")
    with pytest.raises(LoadError, match="not valid JSON") as e:
        load_row(str(f), "zzz")
    assert e.value.path.endswith(":3")


@pytest.mark.skipif(not SHARED.is_file(), reason="shared corpus not present")
def test_real_corpus_rows_load():
    from kverify.problem import Problem

    row = load_row(str(SHARED), "kbleaderboard/gpt-o1/L1/P19")
    p = Problem(row.reference, "ref")
    assert set(p.dims) == {"batch_size", "dim"} and row.tolerance == 1e-2
