"""Corpus JSONL loader: rows by id, errors naming file, line and field."""
import json
from pathlib import Path

import pytest

from kverify.corpus import load_row, row_digest
from kverify.errors import LoadError, UsageError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "accepted_kernels.jsonl"


def test_row_and_errors(tmp_path):
    f = tmp_path / "c.jsonl"
    good = {"id": "a/1", "reference": "R", "candidate": "C", "harness": {"allclose_tol": 1e-4}}
    f.write_text(json.dumps(good) + "\n" + json.dumps({"id": "b", "reference": "R", "candidate": "C"}) + "\n")
    r = load_row(str(f), "a/1")
    assert (r.reference, r.candidate, r.tolerance) == ("R", "C", 1e-4)
    assert r.paths("c.jsonl")[1] == "c.jsonl#a/1:candidate"
    with pytest.raises(LoadError, match="no row with id 'zzz'"):
        load_row(str(f), "zzz")
    # the whole file is read as an audit reads it: a bad line anywhere is an error for every id
    for bad, line, what in (({"id": "b", "reference": 3, "candidate": "C"}, 2, "field 'reference'"),
                            ({"id": "b", "reference": "R"}, 2, "field 'candidate'"),
                            ({"id": "b", "reference": "R", "candidate": "C", "harness": []}, 2, "field 'harness'"),
                            ({"id": "b", "reference": "R", "candidate": "C", "harness": {"allclose_tol": "x"}}, 2,
                             "field 'harness.allclose_tol'")):
        f.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(LoadError, match=what) as e:
            load_row(str(f), "a/1")
        assert e.value.path.endswith(f":{line}")
    f.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(LoadError, match="not valid JSON") as e:
        load_row(str(f), "a/1")
    assert e.value.path.endswith(":2")
    f.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(UsageError, match="also the id of line 1"):
        load_row(str(f), "a/1")


def test_row_digest_follows_what_a_check_judges():
    a = {"id": "a", "reference": "R", "candidate": "C", "harness": {"allclose_tol": 1e-2, "gpu": "H100"}}
    same = {"harness": {"gpu": "H100", "allclose_tol": 0.01}, "candidate": "C", "reference": "R", "id": "a"}
    assert row_digest(a) == row_digest(same)  # key order and number spelling are not content
    for k, v in (("candidate", "C2"), ("reference", "R "), ("harness", {"allclose_tol": 1e-3, "gpu": "H100"}),
                 ("id", "b")):
        assert row_digest({**a, k: v}) != row_digest(a), k
    for k, v in (("level", 1), ("notes", "x"), ("harness", {"allclose_tol": 1e-2, "gpu": "A100"})):
        assert row_digest({**a, k: v}) == row_digest(a), k  # what only describes the row
    cuda_l1 = {"id": "a", "ref_code": "R", "custom_code": "C"}  # CUDA-L1's names, its tolerance 1e-2
    assert row_digest(cuda_l1) == row_digest(a)
    assert row_digest({"id": "a", "reference": 3}) != row_digest({"id": "a", "reference": 4})  # no sources: the row


@pytest.mark.skipif(not SHARED.is_file(), reason="shared corpus not present")
def test_real_corpus_rows_load():
    from kverify.problem import Problem

    row = load_row(str(SHARED), "kbleaderboard/gpt-o1/L1/P19")
    p = Problem(row.reference, "ref")
    assert set(p.dims) == {"batch_size", "dim"} and row.tolerance == 1e-2
