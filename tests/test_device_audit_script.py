"""scripts/device_audit.sh's REDO handling and its `kverify audit` command line, run on the CPU
with no install: a stand-in `python3` writes the audit's arguments to a file in place of the audit
(every other python3 is this Python). REDO's and REDO_FILE's ids go to `kverify audit
--redo-if-needed` (which rows it judges again, and the ids it refuses, are tested in test_audit.py;
the script's own filter of stop 49 re-implemented them), REDO_FILE's ids outside IDS are left for
another call, REDO_ELSEWHERE goes to `--redo-elsewhere`, a call with no id or a shard without a
journal under a REDO option stops before the audit, and an audit that refuses its arguments
(exit 2) makes the script's exit 2."""
import os
import subprocess
import sys
import time
from pathlib import Path

from kverify.check import RULES
from kverify.journal import Journal

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device_audit.sh"


def run_script(tmp_path, in_time=False, audit_rc=0, **env):
    """Run the script in ``tmp_path`` (its results/audit/shards/ holds the journals). ``in_time``:
    END leaves the audit 130 s, so the stand-in audit runs (exiting ``audit_rc``); else END has
    passed and the script stops after writing its plan. Returns (exit code, audit.log, stdout +
    stderr, the audit's arguments or None when it did not run)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    args = tmp_path / "audit_args.txt"
    args.unlink(missing_ok=True)
    shim = bin_dir / "python3"  # a script, not a link: a link to a venv's python loses the venv
    shim.write_text(f'#!/bin/sh\nif [ "$1 $2 $3" = "-m kverify audit" ]; then printf "%s\\n" "$@" > "{args}"; '
                    f'exit {audit_rc}; fi\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    out = tmp_path / "out"
    full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
            "LOG_DIR": str(tmp_path / "logs"), "SKIP_INSTALL": "1", "SAMPLE_S": "1",
            "END": str(int(time.time()) + (200 if in_time else 0)), **env}
    r = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=full, capture_output=True, text=True, timeout=300)
    log = (out / "audit.log").read_text() if (out / "audit.log").exists() else ""
    return r.returncode, log, r.stdout + r.stderr, args.read_text().splitlines() if args.exists() else None


def test_redo_ids_go_to_redo_if_needed_and_a_call_that_cannot_do_what_it_is_asked_stops(tmp_path):
    shards = tmp_path / "results" / "audit" / "shards"
    shards.mkdir(parents=True)
    j = Journal(shards / "audit_shard_1-of-2.sqlite")
    j.record({"id": "a/now"}, {"standard": {"verdict": "PASS"}, "gates": [], "meta": {"rules": RULES}}, "CLEAN")
    j.close()
    Journal(shards / "audit_shard_0-of-2.sqlite").close()

    rc, log, said, args = run_script(tmp_path, SHARD="1/2", REDO=" a/now,a/old ,a/gone")  # spaces: dropped
    assert rc == 2 and "no audit" in said and args is None  # the time had run out: the plan is written
    assert "=== shards 1/2" in log and "judging again where needed: a/now,a/old,a/gone\n" in log

    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2", REDO="a/now,a/old",
                                     REDO_ELSEWHERE="NVIDIA H200", IDS="a/now,a/old")
    assert rc == 0 and args is not None, said + log
    joined = "\n".join(args)
    assert "--redo-elsewhere\nNVIDIA H200" in joined and "--redo-if-needed\na/now,a/old" in joined
    assert "\n--redo\n" not in joined + "\n"
    assert ["--id", "a/now", "--id", "a/old"] == [a for a in args if a in ("--id", "a/now", "a/old")][-4:]
    assert "every row of IDS judged elsewhere than NVIDIA H200" in log
    assert "1 kernels:" in said  # the shard's summary

    rc, log, said, args = run_script(tmp_path, in_time=True, audit_rc=2, SHARD="1/2", REDO_ELSEWHERE="H200")
    assert rc == 2 and args is not None  # the audit refused its arguments: so does the call
    assert "exit 2: the audit refused its arguments" in said

    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2", IDS=" a/now,*")
    assert rc == 0 and args[-4:] == ["--id", "a/now", "--id", "*"]  # no globbing, blanks trimmed

    for bad in (" ", ", ", "\t", "\n,"):
        rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2", REDO=bad)
        assert rc == 2 and args is None and "names no id" in said

    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2,3/4", REDO_ELSEWHERE="NVIDIA H200")
    assert rc == 2 and args is None and "shard 3/4: no journal" in log and "names shards with no journal (3/4)" in log

    redo_file = tmp_path / "redo.txt"  # blanks between ids, a comment, a line that is not one, no line for 0/2
    redo_file.write_text("# rows\n1/2 a/old a/now\nnonsense here\n")
    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2,0/2", REDO_FILE=str(redo_file), REDO="a/x")
    assert rc == 0 and "--redo-if-needed\na/x,a/old,a/now" in "\n".join(args), said + log
    assert "line 3: not" in log and "no ids for shard 0/2" in log and "line 1" not in log and "line 2" not in log

    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2", REDO_FILE=str(redo_file), IDS="a/now")
    assert "REDO_FILE: 'a/old': not in IDS: left for another call" in log and "REDO_FILE: 'a/now'" not in log
    assert "--redo-if-needed\na/now" in "\n".join(args)

    redo_file.write_text("# nothing for this call\n0/2 b/1\n")  # REDO_FILE for every call: the audit goes on
    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2", REDO_FILE=str(redo_file))
    assert rc == 0 and "--redo-if-needed" not in args and "no ids for shard 1/2" in log

    rc, log, said, args = run_script(tmp_path, in_time=True, SHARD="1/2", REDO=" a/now  a/old,\na/x\t")  # blanks part ids
    assert rc == 0 and "--redo-if-needed\na/now,a/old,a/x" in "\n".join(args)
