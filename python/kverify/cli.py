"""Command line: `kverify check`, `demo`, `controls`, `audit`, `merge`.

Exit codes: 0 every gate passed (or N/A / UNSUPPORTED); 1 any FAIL, CRASH, TIMEOUT or ERROR;
2 usage or loader error (missing file, syntax error, no Model/ModelNew, compile failure, a
candidate that exits or crashes while loading) — always a one-line message, never a traceback.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from rich.console import Console

from kverify._internal.lifeline import interrupt
from kverify.errors import KverifyError, LoadError, UsageError


def _read(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise LoadError(path, f"{what} file not found" if not p.is_dir() else f"is a directory, not the {what} file")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LoadError(path, f"cannot read {what}: {e}") from None


def _writable(path: str, flag: str) -> None:
    """Raise UsageError naming ``flag`` and ``path`` unless a file can be written at ``path``: not
    a folder, in a folder that exists, and there an existing file opens for appending (which
    changes nothing) or a new file can be made (probed with a temporary file beside it, removed at
    once; ``path`` itself, or a dangling link's target, is not made), so that a long run does not
    end in an unwritable output."""
    import tempfile

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a folder, not a file")
    target = p.resolve()  # through a link, dangling or not
    if not target.parent.is_dir():
        raise UsageError(f"{flag} {path}: folder {target.parent} does not exist")
    try:
        if target.exists():
            with open(target, "a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".kverify-probe-"):
                pass
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None


def _add_common(p: argparse.ArgumentParser, gates: bool = True) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    if gates:
        p.add_argument("--gates", default=None, help="comma-separated gate ids, e.g. G01,G03 (default: all)")
    p.add_argument("--seed", type=int, default=0, help="base seed of weights and inputs (default 0)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds per candidate job: the calls of one gate run (default 120)")
    p.add_argument("--load-timeout", type=float, default=900.0,
                   help="seconds to import and compile the candidate (default 900)")


def cmd_check(a) -> int:
    from kverify.check import check, exit_code, resolve_gates
    from kverify.report import print_report, write_json

    if a.corpus:
        from kverify.corpus import load_row

        if not a.id or a.reference or a.candidate:
            raise UsageError("--corpus FILE needs --id ID and no REF/CAND paths")
        row = load_row(a.corpus, a.id)
        ref_path, cand_path = row.paths(a.corpus)
        ref_src, cand_src, tol = row.reference, row.candidate, a.tol if a.tol is not None else row.tolerance
    else:
        if not (a.reference and a.candidate):
            raise UsageError("give REF and CAND files, or --corpus FILE --id ID")
        ref_src, cand_src = _read(a.reference, "reference"), _read(a.candidate, "candidate")
        ref_path, cand_path, tol = a.reference, a.candidate, a.tol if a.tol is not None else 1e-2
    if a.json is not None:
        _writable(a.json, "--json")
    report = check(ref_src, ref_path, cand_src, cand_path, device=a.device, gates=resolve_gates(a.gates),
                   seed=a.seed, timeout=a.timeout, tolerance=tol, load_timeout=a.load_timeout)
    if a.corpus:
        report["meta"]["replay_source"] = f"--corpus {a.corpus} --id {a.id}"
    print_report(report, verbose=a.verbose)
    if a.json is not None:
        try:
            write_json(report, a.json)
        except OSError as e:  # writable when the check began (_writable), not now
            raise UsageError(f"--json {a.json}: cannot write the report ({e.strerror or e})") from None
    return exit_code(report)


def cmd_demo(a) -> int:
    from kverify.demo import run_demo

    from kverify.check import resolve_gates

    if a.write_corpus is not None:
        import json

        from kverify.examples import corpus_rows

        _writable(a.write_corpus, "--write-corpus")
        rows = corpus_rows()
        Path(a.write_corpus).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{a.write_corpus}: {len(rows)} rows (the embedded examples; field 'planted': the gate that must "
              "catch each, null for the correct twins)")
        return 0

    return run_demo(device=a.device, seed=a.seed, timeout=a.timeout, jobs=a.jobs, gates=resolve_gates(a.gates))


def cmd_controls(a) -> int:
    from kverify.controls import run_controls

    return run_controls(device=a.device, seed=a.seed, timeout=a.timeout, jobs=a.jobs, only=a.only)


def cmd_audit(a) -> int:
    from kverify.audit import run_audit
    from kverify.check import resolve_device, resolve_gates

    device = resolve_device(a.device)
    gpus = None
    if device != "cuda" and a.gpus:  # not dropped without a word
        raise UsageError(f"--gpus {a.gpus}: the audit runs on the {device} (--device cuda needs a CUDA GPU)")
    if device == "cuda":
        import torch

        visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        gpus = ([g for g in a.gpus.split(",") if g] if a.gpus
                else visible or [str(i) for i in range(torch.cuda.device_count())])
    return run_audit(a.corpus, a.journal, shard=a.shard, device=device, seed=a.seed,
                     timeout=a.timeout, limit=a.limit, ids=a.id or None, jobs=a.jobs, compile_jobs=a.compile_jobs,
                     gates=resolve_gates(a.gates) if a.gates is not None else None, load_timeout=a.load_timeout, gpus=gpus,
                     gpu_gib=a.gpu_gib if device == "cuda" else 0.0,
                     redo=_ids(a.redo, "--redo"), redo_faults=a.redo_faults,
                     row_budget=a.row_budget, redo_budget=a.redo_budget, redo_stale=a.redo_stale,
                     time_limit=a.time_limit, redo_elsewhere=a.redo_elsewhere,
                     redo_if_needed=_ids(a.redo_if_needed, "--redo-if-needed"))


def _ids(values: list[str] | None, flag: str) -> list[str]:
    """The row ids of a repeatable ``flag ID[,ID...]`` (commas between ids, blanks around them
    dropped). Raises UsageError for a value that names no id (say ``--redo ""``): the run would
    otherwise go on as an audit of the rows not journalled yet, judging none again."""
    out = []
    for v in values or []:
        ids = [x.strip() for x in v.split(",") if x.strip()]
        if not ids:
            raise UsageError(f"{flag} {v!r}: names no row id")
        out += ids
    return out


def cmd_merge(a) -> int:
    from kverify.journal import merge

    stats: dict = {}
    n = merge(a.out, a.journals, stats)
    print(f"{a.out}: {n} kernels ({stats['copied']} copied; {stats['already']} already there or in an earlier "
          "journal, the same record, kept once)")
    return 0


def cmd_report(a) -> int:
    from kverify.audit_report import write_report

    rep = write_report(a.journals, a.out, a.corpus)
    print(f"{a.out}/report.{{json,md,html}} + {', '.join(rep['plots'])}: {rep['kernels']} kernels, "
          + ", ".join(f"{c} {r['count']}" for c, r in rep["classes"].items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kverify", description="Contract-grade verification of GPU kernels.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="check one candidate against its reference")
    c.add_argument("reference", nargs="?", help="KernelBench reference file (class Model)")
    c.add_argument("candidate", nargs="?", help="candidate file (class ModelNew)")
    c.add_argument("--corpus", help="corpus JSONL file; use with --id")
    c.add_argument("--id", help="row id in --corpus")
    c.add_argument("--tol", type=float, default=None, help="standard test atol=rtol (default: corpus row's, else 1e-2)")
    c.add_argument("--json", help="write the report as JSON to this file")
    c.add_argument("-v", "--verbose", action="store_true", help="print full evidence")
    _add_common(c)
    c.set_defaults(func=cmd_check)
    d = sub.add_parser("demo", help="check the embedded example problems and planted defects")
    _add_common(d)
    d.add_argument("--jobs", type=int, default=2, help="candidates checked in parallel (default 2)")
    d.add_argument("--write-corpus", metavar="FILE", default=None,
                   help="write the embedded examples as a corpus JSONL to FILE (replaced if there) and exit (a "
                        "small corpus to try `kverify audit` and `kverify report` on)")
    d.set_defaults(func=cmd_demo)
    k = sub.add_parser("controls", help="run every positive control through all twelve gates")
    _add_common(k, gates=False)  # a control is judged by all twelve gates
    k.add_argument("--jobs", type=int, default=2, help="controls checked in parallel (default 2)")
    k.add_argument("--only", action="append", default=None, metavar="SUBSTRING",
                   help="only the controls whose name contains this (repeatable), e.g. --only g11")
    k.set_defaults(func=cmd_controls)
    au = sub.add_parser("audit", help="audit a corpus JSONL into a resumable journal")
    au.add_argument("corpus", help="corpus JSONL (corpus rows, or CUDA-L1 records with ref_code/custom_code)")
    au.add_argument("--journal", required=True,
                    help="SQLite journal to create or resume; with several shards a path containing {shard}, "
                         "replaced by each shard's i-of-n (one journal per shard; one holding another "
                         "shard's rows is refused)")
    au.add_argument("--shard", default=None,
                    help="i/n: this process audits rows p with p %% n == i; i/n,j/n,...: these shards, in that "
                         "order, by one scheduler (the next shard's rows fill the GPUs while one's last rows end)")
    au.add_argument("--limit", type=int, default=None, help="at most this many rows (of these shards)")
    au.add_argument("--id", action="append", default=None, help="only these row ids (repeatable)")
    au.add_argument("--jobs", type=int, default=1, help="rows checked at once (default 1)")
    au.add_argument("--compile-jobs", type=int, default=0,
                    help="rows precompiled at once, ahead of the checks (default 0: no separate compile step)")
    au.add_argument("--gpus", default=None,
                    help="comma-separated CUDA device ids to spread the checks over (default: every visible GPU)")
    au.add_argument("--gpu-gib", type=float, default=8.0,
                    help="base GiB of GPU memory to expect per check, to which 12x the bytes of the problem's "
                         "inputs and 12x the fp32 bytes of its reference's parameters and buffers are added (over "
                         "half a GPU: a whole GPU); a check starts on a busy GPU only when that much is free and "
                         "not booked by its other checks (default 8; 0: no memory check, only --jobs)")
    au.add_argument("--redo", action="append", default=None, metavar="ID[,ID...]",
                    help="check these journalled rows again (their old records are kept in the journal's "
                         "'forgotten' table)")
    au.add_argument("--redo-if-needed", action="append", default=None, metavar="ID[,ID...]",
                    help="check these journalled rows again where that could change them: rows with no report, "
                         "judged by older rules, or with a gate record that is a fault of kverify's or the GPU's "
                         "(out of memory); the others are named on stderr with why, and left as they are (rows "
                         "a row budget cut short are judged again by --redo-budget, in a longer run)")
    au.add_argument("--row-budget", type=float, default=None, metavar="S",
                    help="seconds for each row's check from its start (loads, oracle runs, candidate calls; not "
                         "the build); gates it cuts short are ERROR (not "
                         "established), a row no gate failed is then UNJUDGED, and the row is journalled, so "
                         "short runs always move on (default: no limit)")
    au.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="seconds this audit may take: no row's build or check starts that would not end "
                         "within it (by this run's medians; before its first check, a guess, but one row "
                         "starts when 10 s are left), and at the limit the rows in flight are ended, not "
                         "journalled (with --jobs 1 and no --compile-jobs the row in flight finishes); run "
                         "the same command to go on (default: no limit)")
    au.add_argument("--redo-budget", action="store_true",
                    help="check again every row with a gate that --row-budget cut short (in a longer run)")
    au.add_argument("--redo-faults", action="store_true",
                    help="check again every row journalled UNJUDGED by a fault of kverify's own")
    au.add_argument("--redo-stale", action="store_true",
                    help="check again every row whose report was judged by older rules than this kverify's "
                         "(kverify report counts rows by rules)")
    au.add_argument("--redo-elsewhere", default=None, metavar="GPU",
                    help="check again every row judged on another machine than GPU, the name of this run's GPU "
                         "as the report's 'Judged on' gives it (e.g. 'NVIDIA H200'); refused on another machine")
    _add_common(au)
    au.set_defaults(func=cmd_audit)
    mg = sub.add_parser("merge", help="join shard journals into one")
    mg.add_argument("out", help="journal to write (created or extended)")
    mg.add_argument("journals", nargs="+", help="shard journals")
    mg.set_defaults(func=cmd_merge, timeout=1.0, load_timeout=1.0)
    rp = sub.add_parser("report", help="write the audit report from journals")
    rp.add_argument("journals", nargs="+")
    rp.add_argument("--out", required=True,
                    help="output folder (created if needed; its report.* and plots are replaced), e.g. results/audit")
    rp.add_argument("--corpus", help="the audited corpus JSONL: the report also counts its rows not journalled "
                                     "yet, with why (never tried, booked for a whole GPU, out of GPU memory beside "
                                     "other checks, started and never finished, taken out by --redo)")
    rp.set_defaults(func=cmd_report, timeout=1.0, load_timeout=1.0)
    # SIGTERM (a batch runner's `timeout`) unwinds like Ctrl-C, so worker processes are killed;
    # both wait while a process is being started (lifeline.start_whole), so none is left running
    saved = signal.signal(signal.SIGTERM, _terminate), signal.getsignal(signal.SIGINT)
    if saved[1] != signal.SIG_IGN:  # started with Ctrl-C ignored (`kverify ... &` from a script): it stays so
        signal.signal(signal.SIGINT, _sigint)
    a = None
    try:
        a = ap.parse_args(_glue_dash_values(sys.argv[1:] if argv is None else argv))
        if a.timeout <= 0 or a.load_timeout <= 0:
            raise UsageError("--timeout and --load-timeout must be positive")
        if getattr(a, "jobs", 1) < 1:
            raise UsageError(f"--jobs must be >= 1, got {a.jobs}")
        if any(not o for o in getattr(a, "only", None) or []):
            raise UsageError("--only: an empty name would select every control; leave --only out for that")
        return a.func(a)
    except LoadError as e:
        Console(stderr=True).print(f"[bold red]kverify: cannot load[/] {e.path}: {e.reason}", highlight=False, soft_wrap=True)
        return 2
    except KverifyError as e:  # usage errors included: many name a file or field, not the command line
        Console(stderr=True).print(f"[bold red]kverify:[/] {e}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        what = "the audit journal keeps every finished row; run the same command to resume" \
            if a is not None and a.func is cmd_audit else "no worker is left running"
        Console(stderr=True).print(f"kverify: interrupted; {what}", highlight=False, soft_wrap=True)
        return 130
    finally:  # main() called in-process (tests) gives the caller its handlers back; a SIGTERM that
        # came stays ignored, so GNU timeout's second TERM (to the group) cannot cut the exit short
        if signal.getsignal(signal.SIGTERM) is _terminate:
            signal.signal(signal.SIGTERM, saved[0] if saved[0] is not None else signal.SIG_DFL)
        if signal.getsignal(signal.SIGINT) is _sigint and saved[1] is not None:
            signal.signal(signal.SIGINT, saved[1])


def _glue_dash_values(argv: list[str]) -> list[str]:
    """["--shard", "-1/2"] -> ["--shard=-1/2"]: argparse takes a value that starts with '-' (and is
    not a plain negative number) for an option and says only "expected one argument"; glued, the
    value reaches its own check, whose message says what is wrong with it."""
    out, k = [], 0
    while k < len(argv):
        if argv[k] in ("--shard", "--gpus") and k + 1 < len(argv) and argv[k + 1].startswith("-") \
                and not argv[k + 1].startswith("--"):
            out.append(f"{argv[k]}={argv[k + 1]}")
            k += 2
        else:
            out.append(argv[k])
            k += 1
    return out


def _terminate(signum: int = signal.SIGTERM, _frame=None) -> None:
    """SIGTERM handler: unwind like Ctrl-C, once. Later TERMs are ignored, so the unwinding (the
    audit's account of its rows in flight, killing its processes) is not cut short: GNU timeout,
    for one, sends TERM to the command and then to its whole process group. Raises
    KeyboardInterrupt (held while a process is being started: lifeline.interrupt)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    interrupt(signum)


def _sigint(signum: int = signal.SIGINT, _frame=None) -> None:
    """SIGINT handler: KeyboardInterrupt, as Python's own, but held while a process is being
    started (lifeline.interrupt)."""
    interrupt(signum)


_terminate.kverify_defers = _sigint.kverify_defers = True  # type: ignore[attr-defined]  (lifeline.defers)


if __name__ == "__main__":
    sys.exit(main())
