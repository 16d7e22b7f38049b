"""A journal knows the corpus rows it judged (kverify.corpus.row_digest in its ``digests`` table):
a resumed audit, ``merge`` and ``report --corpus`` refuse a row of the same id with other content;
``report`` joins only journals of alike runs (device, seed, gates), as ``merge`` does."""
import json

import pytest

import kverify.audit as audit_mod
from kverify.audit_report import write_report
from kverify.corpus import identified_rows, row_digest
from kverify.errors import UsageError
from kverify.examples import ROOT
from kverify.journal import Journal, merge


@pytest.fixture
def rows(tmp_path):
    ref = (ROOT / "relu" / "reference.py").read_text()
    return [{"id": f"ex/{c}", "reference": ref, "candidate": (ROOT / "relu" / f"{c}.py").read_text(), "level": 1,
             "harness": {"allclose_tol": 1e-2}} for c in ("correct", "g03_fmax", "g07_inplace")]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_resumed_audit_and_the_report_refuse_a_row_whose_content_changed(rows, tmp_path, monkeypatch):
    monkeypatch.setattr(audit_mod, "check_row", lambda corpus, row, opts: (None, "UNJUDGED", "not checked (test)"))
    corpus, j = write(tmp_path / "c.jsonl", rows), tmp_path / "j.sqlite"
    audit_mod.run_audit(corpus, str(j), device="cpu", jobs=1, compile_jobs=0)
    got = Journal(j, readonly=True)
    assert got.digests() == {r["id"]: row_digest(r) for _, _, r in identified_rows(corpus)}
    got.close()
    audit_mod.run_audit(corpus, str(j), device="cpu", jobs=1, compile_jobs=0)  # the same corpus: resumes
    write_report([str(j)], str(tmp_path / "rep"), corpus)
    rows[2]["candidate"] += "\n# edited since\n"
    edited = write(tmp_path / "edited.jsonl", rows)
    with pytest.raises(UsageError, match=r"edited\.jsonl:3: row 'ex/g07_inplace' is not the row \S*j\.sqlite judged"
                                         r".* or --redo ex/g07_inplace to judge it again$"):
        audit_mod.run_audit(edited, str(j), device="cpu", jobs=1, compile_jobs=0)
    described = [{**r, "level": 2, "notes": "what only describes a row"} for r in rows[:2]] + rows[2:]
    audit_mod.run_audit(write(tmp_path / "described.jsonl", described), str(j), device="cpu", jobs=1, compile_jobs=0,
                        ids=["ex/correct", "ex/g03_fmax"])  # not judged differently: resumes
    with pytest.raises(UsageError, match=r"edited\.jsonl:3: row 'ex/g07_inplace' is not .*judged .*another corpus"):
        write_report([str(j)], str(tmp_path / "rep"), edited)
    audit_mod.run_audit(edited, str(j), device="cpu", jobs=1, compile_jobs=0, ids=["ex/correct"])  # not that row: goes
    audit_mod.run_audit(edited, str(j), device="cpu", jobs=1, compile_jobs=0, redo=["ex/g07_inplace"])  # judged again
    got = Journal(j, readonly=True)
    assert got.digests()["ex/g07_inplace"] == row_digest(rows[2]) and len(got.done()) == 3
    got.close()
    write_report([str(j)], str(tmp_path / "rep"), edited)  # now the edited corpus's journal


def test_merge_refuses_one_id_judged_from_two_rows_and_keeps_the_digests(rows, tmp_path):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    for path, row in ((a, rows[0]), (b, {**rows[0], "candidate": "class ModelNew: pass\n"})):
        x = Journal(path)
        x.record(row, None, "UNJUDGED", "planted")  # the same record, from other rows
        x.close()
    with pytest.raises(UsageError, match=r"ex/correct was judged from different corpus rows in \S*a\.sqlite and \S*b\.sqlite"):
        merge(tmp_path / "m.sqlite", [a, b])
    assert not (tmp_path / "m.sqlite").exists()
    assert merge(tmp_path / "m.sqlite", [a]) == 1
    got = Journal(tmp_path / "m.sqlite", readonly=True)
    assert got.digests() == {"ex/correct": row_digest(rows[0])}
    got.close()
    with pytest.raises(UsageError, match=r"ex/correct was judged from different corpus rows in \S*m\.sqlite and \S*b\.sqlite"):
        merge(tmp_path / "m.sqlite", [b])  # the output's own digest counts too
    old = tmp_path / "old.sqlite"  # the same record, journalled before digests
    x = Journal(old)
    x.record(rows[0], None, "UNJUDGED", "planted")
    x.db.execute("DROP TABLE digests")
    x.close()
    assert merge(tmp_path / "m2.sqlite", [old, a]) == 1  # the record from old, the digest from a
    got = Journal(tmp_path / "m2.sqlite", readonly=True)
    assert got.digests() == {"ex/correct": row_digest(rows[0])}
    got.close()


def test_the_report_joins_only_journals_of_alike_runs_and_names_both_for_a_repeated_id(rows, tmp_path):
    paths = [tmp_path / f"g{k}.sqlite" for k in range(3)]
    for path, gates, row in zip(paths, (["G01"], ["G01", "G02"], ["G01"]), (rows[0], rows[1], rows[0])):
        x = Journal(path)
        x.begin_run({"device": "cpu", "seed": 0, "gates": gates})
        x.record(row, None, "UNJUDGED", "planted")
        x.close()
    with pytest.raises(UsageError, match=r"g1\.sqlite: field 'gates': its runs had gates = \['G01', 'G02'\], "
                                         r"\S*g0\.sqlite's had \['G01'\]"):
        write_report([str(paths[0]), str(paths[1])], str(tmp_path / "rep"))
    with pytest.raises(UsageError, match=r"kernel ex/correct is in \S*g0\.sqlite and in \S*g2\.sqlite"):
        write_report([str(paths[0]), str(paths[2])], str(tmp_path / "rep"))
