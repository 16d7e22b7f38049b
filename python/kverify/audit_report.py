"""`kverify report JOURNAL...`: the audit report (DESIGN.md "Outputs"). JSON is the source of
truth; Markdown and HTML are views; PNG plots beside them.

Contents: class rates with Wilson 95% intervals (Wilson, JASA 1927); per-gate verdict counts; the
confusion matrix of the standard test against the gates; the tolerance-calibration sweep (for
each tolerance-based gate, its failures when its bound is scaled by 0.01 ... 1000 — computed
from each result's stored measured-error/bound ratio; tolerance-free gates drawn flat);
agreement of our standard test with the harness that accepted each row (all rows were accepted),
per source; breakdowns by source, level, backend and GPU; which gates fail together (the sets
of failing gates, and the rows each gate rejects alone) and the classes with any one gate left
out (so a headline that rests on a single gate, e.g. G12's stream rule, shows as such); a
stratified sample of failures (per gate and source, up to 3 each) with their evidence, for a hand
audit.
"""
from __future__ import annotations

import html
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

from kverify.build import CAUGHT_MARK
from kverify.errors import UsageError
from kverify.journal import CLASSES, Journal, cut_by_budget, not_the_row

NOT_JUDGED = ("COMPILE_ERROR", "UNJUDGED")  #: rates of these are over all rows, of the rest over judged rows
FAILING = ("FAIL", "CRASH", "TIMEOUT", "ERROR")
SWEEP = (0.01, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0, 1000.0)
SAMPLE_PER_CELL = 3


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n at 95% (z = 1.96). (0, 0) for n = 0."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    # the interval always holds p; rounding can put a bound a hair on the wrong side of 0 or 1 (k = n)
    return max(0.0, min(p, c - h)), min(1.0, max(p, c + h))


def load(journals: list[str]) -> list[dict]:
    """Kernel records with their gates, from one or more journals, each read in one transaction
    (a journal an audit is writing is read as of one moment). Raises UsageError for a journal given
    twice, missing or not a journal, an id in two journals, journals whose runs differ in a fixed
    option (kverify.journal.FIXED_OPTIONS: device, seed, gates; as ``merge`` refuses them: their
    rows are not judged alike), or a damaged journal: a kernel's report or a gate's evidence that is
    not a JSON object, a gate record of a kernel it does not hold (_json_field)."""
    from kverify.journal import _fixed, unlike_runs

    out: dict[str, dict] = {}
    where: dict[str, str] = {}  # kernel id -> its journal
    given = [Path(p).resolve() for p in journals]
    twice = sorted({str(p) for p in given if given.count(p) > 1})
    if twice:
        raise UsageError(f"{twice[0]}: given more than once")
    fixed = None  # (journal, its runs' fixed options)
    for path in journals:
        if not Path(path).is_file():
            raise UsageError(f"{path}: " + ("is a directory, not a journal file" if Path(path).is_dir()
                                            else "no such journal"))
        j = Journal(path, readonly=True)
        try:
            j.db.execute("BEGIN")  # one read transaction: kernels and gates as of one moment (an audit may be writing)
            fixed = unlike_runs(path, _fixed(j), fixed, "a report joins only journals of alike runs")
            cols = [c[1] for c in j.db.execute("PRAGMA table_info(kernels)")]
            for row in j.db.execute("SELECT * FROM kernels"):
                k = dict(zip(cols, row))
                _json_field(path, k["id"], "report", k["report"])
                if k["id"] in out:
                    raise UsageError(f"kernel {k['id']} is in {where[k['id']]} and in {path} "
                                     "(merge them first: kverify merge)")
                k["gates"] = {}
                where[k["id"]] = str(path)
                out[k["id"]] = k
            for kid, gate, verdict, summary, ratio, tf, ev in j.db.execute("SELECT * FROM gates"):
                if kid not in out or where[kid] != str(path):
                    raise UsageError(f"{path}: table 'gates': a record of {gate} for kernel {kid!r}, which has "
                                     "no record in this journal's 'kernels' (a damaged journal)")
                out[kid]["gates"][gate] = {"verdict": verdict, "summary": summary, "bound_ratio": ratio or 0.0,
                                           "tolerance_free": bool(tf),
                                           "evidence": _json_field(path, kid, f"{gate}'s evidence", ev) or {}}
        finally:
            j.close()
    return sorted(out.values(), key=lambda k: k["id"])


def _json_field(path, kernel_id: str, field: str, text: str | None) -> dict | None:
    """A journal's JSON object field (a kernel's ``report``, a gate's evidence) parsed; None when
    empty (rows without a report). Raises UsageError naming the journal, kernel and field when it is
    not a JSON object (a damaged journal: the report would otherwise count the row silently as one
    judged before kverify recorded its rules and machine)."""
    if not text:
        return None
    try:
        got = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{path}: kernel {kernel_id!r}: field '{field}' is not valid JSON ({e})") from None
    if not isinstance(got, dict):
        raise UsageError(f"{path}: kernel {kernel_id!r}: field '{field}' is JSON but not an object "
                         f"(a {type(got).__name__})")
    return got


#: why a corpus row has no record yet (not_journalled), the first that applies, from the journals'
#: ``tries`` since the row was last taken out by ``--redo`` (``forgotten``) unless said otherwise:
#: ran out of GPU memory with a GPU to itself (journal.OOM_WHOLE_TRY: run serially from then on) or
#: set aside after running out of GPU memory over its own cap (journal.OOM_CAP_TRY: booked whole from
#: then on), these two whenever written (journal.MEMORY_NOTES_KEPT: the audit acts on them after a
#: --redo too); set aside after running out of GPU memory beside other checks (journal.OOM_TRY);
#: booked for a whole GPU (on one GPU it waits until no other row is left); its check started in
#: some run and never ended there (the run's time limit, a kill); taken out by ``--redo`` and not
#: tried since; no try recorded
WHY_NOT_JOURNALLED = {
    "forgotten": "taken out by --redo, not tried since",
    "serial": "out of GPU memory with a GPU to itself: runs serially on a GPU emptied for it",
    "capped": "out of GPU memory over its own cap beside other checks: booked for a whole GPU",
    "oom": "out of GPU memory beside other checks: to run alone",
    "whole": "booked for a whole GPU: runs once nothing else is left",
    "started": "check started, never finished (a run's time limit or kill)",
    "never": "no try recorded (never tried, or tried only by a kverify that kept no tries)",
}


def not_journalled(corpus: str, journals: list[str], kernels: list[dict]) -> dict:
    """The rows of ``corpus`` (a corpus JSONL, kverify.corpus.iter_rows) without a record in
    ``kernels`` (load(journals)), each with why (WHY_NOT_JOURNALLED, from the journals' ``tries`` and
    ``forgotten`` tables: the tries since the row was last taken out by ``--redo``, else that; the
    rows the audit runs serially or books whole, Journal.serial and Journal.capped: their notes whenever written) and
    how many such tries (since the last ``--redo``). Only the rows of the journals' shards count where every journal's runs
    say theirs (``runs.options["shard"]``, all of one n): a report of some shards does not list the
    others' rows. Returns {"file", "rows" (the corpus's rows of those shards), "shards" (None: all),
    "journalled", "not_journalled", "reasons": {reason: n}, "missing": [{"id", "reason", "tries"}]
    in corpus order}. Raises LoadError for a bad corpus line, UsageError for an id two corpus rows
    share, a journalled row that is not in the corpus, or one journalled from a row of the same id
    that the corpus now gives other content (Journal.changed): journals of another corpus."""
    from kverify.audit import parse_shards
    from kverify.corpus import identified_rows, row_digest
    from kverify.journal import OOM_NOTES, OOM_TRY, WHOLE_TRY

    rows = {r["id"]: (line, row_digest(r)) for _, line, r in identified_rows(corpus)}
    ids = list(rows)
    done = {k["id"] for k in kernels}
    stray = sorted(done - set(ids))
    if stray:
        raise UsageError(f"{corpus}: " + ("no rows (an empty corpus file)" if not ids else
                         f"{len(stray)} journalled row(s) are not in this corpus, e.g. "
                         f"{', '.join(stray[:3])}: the journals are of another corpus"))
    for path in journals:  # the same ids, but other rows: judged from another corpus (or edited since)
        j = Journal(path, readonly=True)
        changed = j.changed({i: d for i, (_, d) in rows.items()})
        j.close()
        if changed:
            raise UsageError(not_the_row(f"{corpus}:{rows[changed[0]][0]}", changed, path, "",
                                         ": the journals are of another corpus, or of rows edited since"))
    tries: dict[str, list[tuple[float, str]]] = defaultdict(list)
    forgotten: dict[str, float] = {}
    serial: set[str] = set()  # the rows the audit will run serially / book whole (Journal.serial, capped)
    capped: set[str] = set()
    shards: set[tuple[int, int]] | None = set()
    for path in journals:
        j = Journal(path, readonly=True)
        serial |= j.serial()
        capped |= j.capped()
        for kid, at, what in j.select("tries"):
            tries[kid].append((at, what or ""))
        for r in j.select("forgotten"):
            at = r[5] if len(r) > 5 and isinstance(r[5], (int, float)) else 0.0  # column `at` (older: none)
            forgotten[r[0]] = max(forgotten.get(r[0], 0.0), at)  # its last --redo
        specs = [json.loads(o).get("shard") for _, o in j.select("runs")]
        try:
            if shards is not None and specs and all(isinstance(x, str) for x in specs):
                shards |= {sh for x in specs for sh in parse_shards(x)}
            else:  # a journal that does not say its shards: the whole corpus
                shards = None
        except UsageError:  # nor one whose runs name them unreadably
            shards = None
        j.close()
    if shards and len({n for _, n in shards}) == 1 and len(shards) < next(iter(shards))[1]:
        n = next(iter(shards))[1]
        ids = [i for p, i in enumerate(ids) if (p % n, n) in shards]
    else:
        shards = None
    missing = []
    for i in ids:
        if i in done:
            continue
        w = [what for at, what in tries.get(i, []) if at > forgotten.get(i, 0.0)]  # since its last --redo (as Journal._since)
        key = ("serial" if i in serial else "capped" if i in capped else "oom" if OOM_TRY in w
               else "whole" if WHOLE_TRY in w
               else "started" if w else "forgotten" if i in forgotten else "never")
        missing.append({"id": i, "reason": WHY_NOT_JOURNALLED[key],
                        "tries": sum(x not in OOM_NOTES for x in w)})
    reasons = Counter(m["reason"] for m in missing)
    return {"file": str(corpus), "rows": len(ids), "shards": sorted(f"{a}/{b}" for a, b in shards) if shards else None,
            "journalled": len(ids) - len(missing), "not_journalled": len(missing),
            "reasons": {r: reasons[r] for r in WHY_NOT_JOURNALLED.values() if reasons[r]}, "missing": missing}


def build(kernels: list[dict]) -> dict:
    n = len(kernels)
    classes = Counter(k["class"] for k in kernels)
    judged = n - sum(classes.get(c, 0) for c in NOT_JUDGED)
    of = {c: n if c in NOT_JUDGED else judged for c in CLASSES}
    # no rate where there is nothing to divide by (JSON null; report.md says n/a)
    rates = {c: {"count": classes.get(c, 0), "of": of[c], "rate": classes.get(c, 0) / of[c] if of[c] else None,
                 "wilson95": wilson(classes.get(c, 0), of[c]) if of[c] else None} for c in CLASSES}
    gates: dict[str, Counter] = defaultdict(Counter)
    tf: dict[str, bool] = {}
    for k in kernels:
        for g, r in k["gates"].items():
            gates[g][r["verdict"]] += 1
            tf[g] = r["tolerance_free"]
    confusion = Counter()
    for k in kernels:
        if k["class"] in NOT_JUDGED:
            continue
        confusion[(k["standard"] or "N/A", "gates pass" if k["class"] == "CLEAN" else "gates reject")] += 1
    sweep = {}
    for g in sorted(gates):
        rows = [k["gates"][g] for k in kernels if g in k["gates"] and k["gates"][g]["verdict"] in ("PASS", "FAIL")]
        if tf.get(g):
            fails = sum(r["verdict"] == "FAIL" for r in rows)
            sweep[g] = {str(f): fails for f in SWEEP}
        else:
            sweep[g] = {str(f): sum(r["bound_ratio"] > f for r in rows) for f in SWEEP}
    agreement = {}
    for src, ks in _group(kernels, "source").items():
        ran = [k for k in ks if k["standard"] in ("PASS", "FAIL")]
        ok = sum(k["standard"] == "PASS" for k in ran)
        agreement[src] = {"accepted_by_harness": len(ks), "our_standard_ran": len(ran), "our_standard_pass": ok,
                          "agreement": ok / len(ran) if ran else None, "wilson95": wilson(ok, len(ran)) if ran else None}
    breakdowns = {field: {str(v): dict(Counter(k["class"] for k in ks)) for v, ks in _group(kernels, field).items()}
                  for field in ("source", "level", "backend", "gpu")}
    sample = []
    for g in sorted(gates):
        for src, ks in _group(kernels, "source").items():
            bad = [k for k in ks if k["gates"].get(g, {}).get("verdict") in FAILING]
            for k in bad[:SAMPLE_PER_CELL]:
                r = k["gates"][g]
                sample.append({"gate": g, "source": src, "id": k["id"], "verdict": r["verdict"], "summary": r["summary"],
                               "evidence": r["evidence"]})
    sets, alone, without = failing_gates(kernels)
    # CLEAN counts gates kverify could not judge (ERROR, e.g. a sanitizer that did not finish) as no
    # failure: say how many CLEAN rows rest on such a gate
    clean_err = Counter(g for k in kernels if k["class"] == "CLEAN"
                        for g, r in k["gates"].items() if r["verdict"] == "ERROR")
    # gates a run's --row-budget cut short (ERROR "not established: ... time budget ..."), per gate
    cut = Counter(g for k in kernels for g, r in k["gates"].items() if cut_by_budget(r["verdict"], r["summary"]))
    unjudged = Counter(f'{k["class"]}: ' + reason_key(k["class"], k["reason"]) for k in kernels if k["class"] in NOT_JUDGED)
    shapes = Counter(_gate_shape(k) for k in kernels if k.get("report"))
    machines = Counter(_meta(k, "judged_on") or "not recorded" for k in kernels if k.get("report"))
    rules = Counter(_rules(k) for k in kernels if k.get("report"))
    from kverify.check import RULES  # this kverify's rules (the check module loads torch: not at import)
    return {"kernels": n, "judged": judged, "classes": rates, "gates": {g: dict(c) for g, c in sorted(gates.items())},
            "tolerance_free": tf,
            "confusion": [{"standard": s, "gates": g, "count": c} for (s, g), c in sorted(confusion.items())],
            "tolerance_sweep": {"factors": list(SWEEP), "failures": sweep}, "standard_agreement": agreement,
            "breakdowns": breakdowns, "failing_sets": sets, "rejected_by_one_gate_alone": alone,
            "classes_without_gate": without, "clean_with_error_gates": dict(sorted(clean_err.items())),
            "clean_rows_with_an_error_gate": sum(any(r["verdict"] == "ERROR" for r in k["gates"].values())
                                                 for k in kernels if k["class"] == "CLEAN"),
            "cut_by_row_budget": dict(sorted(cut.items())),
            "rows_cut_by_row_budget": sum(any(cut_by_budget(r["verdict"], r["summary"]) for r in k["gates"].values())
                                          for k in kernels),
            # rows whose candidate reads the reference's names (meta.borrowed, rules .11 on): id -> names
            "borrowed": {k["id"]: _meta(k, "borrowed") for k in kernels if _meta(k, "borrowed")},
            "compile_errors_caught": sum(CAUGHT_MARK in (k["reason"] or "") for k in kernels
                                         if k["class"] == "COMPILE_ERROR"),
            "unjudged_reasons": dict(unjudged.most_common()), "gate_shapes": dict(shapes.most_common()),
            "rules": dict(sorted(rules.items())), "current_rules": RULES,
            "judged_on": dict(machines.most_common()), "failure_sample": sample}


def reason_key(klass: str, reason: str | None) -> str:
    """The report's "Not judged" grouping of a row's reason (at most 120 characters): a
    COMPILE_ERROR by the compiler's message (the extension's name and build folder, which differ
    per row, dropped: what follows the second colon); any other reason without the corpus location
    a load error starts with ("FILE#ID:reference: ..."), else whole, so "row budget spent: G11 not
    established" and "kverify fault: ..." keep what they are."""
    reason = (reason or "").strip()
    if klass == "COMPILE_ERROR":
        return reason.split(":", 2)[-1].strip()[:120]
    head, sep, rest = reason.partition(":")
    if sep and "#" in head and " " not in head:  # FILE#ID:role: message (kverify.errors.LoadError of a corpus row)
        role, sep2, msg = rest.partition(":")
        return (msg if sep2 and role.strip() in ("reference", "candidate") else rest).strip()[:120]
    return reason[:120]


#: the rules of rows judged before reports carried meta.rules
UNRECORDED_RULES = "before 2026-11-30"


def _rules(kernel: dict) -> str:
    """The judging rules a journalled row was judged by (report meta.rules, kverify.check.RULES);
    UNRECORDED_RULES for rows judged before kverify recorded them."""
    return _meta(kernel, "rules") or UNRECORDED_RULES


def _meta(kernel: dict, key: str):
    """meta[key] of a journalled row's report (None when the row has no report or the key)."""
    try:
        return json.loads(kernel["report"])["meta"].get(key)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _gate_shape(kernel: dict) -> str:
    """Where a journalled row's small-shape gates ran (report meta.gate_shape, kverify.check._gate_shape):
    "small", or "own: <reason without its numbers and bindings>"; "not recorded" for rows judged
    before kverify recorded it."""
    shape = _meta(kernel, "gate_shape")
    if not isinstance(shape, dict):
        return "not recorded"
    if shape.get("binding"):
        return "small"
    why = shape.get("why", "")
    why = re.sub(r"^probe at \{[^}]*\}: ", "probe: ", why)
    return "own: " + re.split(r"[({\d]", why, maxsplit=1)[0].strip(" :")[:80]


def failing_gates(kernels: list[dict]) -> tuple[dict, dict, dict]:
    """For the judged rows: (the sets of gates whose verdict counts as a failure for the class --
    FAIL, CRASH, TIMEOUT -- as "G03+G12": rows, most common first; {gate: rows rejected by that
    gate alone}; {gate: {class: rows}} with that gate's result left out, by the core's class rule)."""
    from kverify.engine import classify

    judged = [k for k in kernels if k["class"] not in NOT_JUDGED and k["gates"]]
    sets: Counter = Counter()
    alone: Counter = Counter()
    for k in judged:
        bad = sorted(g for g, r in k["gates"].items() if r["verdict"] in ("FAIL", "CRASH", "TIMEOUT"))
        if bad:
            sets["+".join(bad)] += 1
            if len(bad) == 1:
                alone[bad[0]] += 1
    gates = sorted({g for k in judged for g in k["gates"]})
    without = {}
    for g in gates:
        c = Counter(classify([{"gate": x, "name": x, **r} for x, r in k["gates"].items() if x != g]) for k in judged)
        without[g] = {cls: c.get(cls, 0) for cls in ("BROKEN", "VIOLATION", "CLEAN")}
    return dict(sets.most_common()), dict(sorted(alone.items())), without


def _group(kernels, field):
    out = defaultdict(list)
    for k in kernels:
        out[k.get(field) if k.get(field) is not None else "unknown"].append(k)
    return dict(sorted(out.items(), key=lambda kv: str(kv[0])))


def markdown(rep: dict) -> str:
    L = [f"# kverify audit report\n\n{rep['kernels']} kernels, {rep['judged']} judged.\n"]
    c = rep.get("corpus")
    if c:  # kverify report --corpus: the rows not journalled yet, with why
        of = f"rows of `{c['file']}`" + (f" in shard(s) {', '.join(c['shards'])}" if c.get("shards") else "")
        L.append(f"Of the {c['rows']} {of}, {c['journalled']} are journalled and {c['not_journalled']} "
                 "are not (yet); the class rates below are of the journalled rows only.\n")
        if c["missing"]:
            L += ["| not journalled, why | rows |", "|---|---|"] + [f"| {r} | {n} |" for r, n in c["reasons"].items()]
            L += ["\n| row not journalled | why | tries (runs that started its check or set it aside) |", "|---|---|---|"]
            L += [f"| {str(m['id']).replace('|', '/')} | {m['reason']} | {m['tries']} |" for m in c["missing"]]
            L.append("")
    L += ["## Classes\n",
         "BROKEN, VIOLATION and CLEAN are rates of the judged kernels; COMPILE_ERROR and UNJUDGED are rates "
         "of all kernels (so the column does not add up to 100%).\n",
         "| class | count | of | rate | Wilson 95% |", "|---|---|---|---|---|"]
    for c, r in rep["classes"].items():
        if not r["of"]:
            L.append(f"| {c} | {r['count']} | 0 | n/a | n/a |")
            continue
        L.append(f"| {c} | {r['count']} | {r['of']} | {r['rate']:.1%} | {r['wilson95'][0]:.1%} – {r['wilson95'][1]:.1%} |")
    if rep.get("compile_errors_caught"):
        L.append(f"\n{rep['compile_errors_caught']} of the {rep['classes']['COMPILE_ERROR']['count']} COMPILE_ERROR "
                 "row(s) caught their failed build and ran without their extension (on PyTorch's own operators): "
                 "what their harness accepted was not their kernel. (Marked since kverify recorded it; rows "
                 "journalled before are not marked.)")
    if rep.get("borrowed"):
        L.append(f"\n{len(rep['borrowed'])} row(s) read names their reference's file defines and their own does not "
                 "(KernelBench's harness runs both files in one namespace; kverify loads the candidate with them, "
                 "rules 2026-12-04.11 on): " + "; ".join(f"{str(i).replace('|', '/')} ({', '.join(n)})"
                                                        for i, n in sorted(rep["borrowed"].items())) + ".")
    if rep["clean_rows_with_an_error_gate"]:
        L.append(f"\n{rep['clean_rows_with_an_error_gate']} CLEAN row(s) have a gate kverify could not judge (ERROR, "
                 "not established): " + ", ".join(f"{g} {n}" for g, n in rep["clean_with_error_gates"].items()) + ".")
    if rep.get("rows_cut_by_row_budget"):
        L.append(f"\n{rep['rows_cut_by_row_budget']} row(s) have gates the row budget (`--row-budget`) cut short "
                 "(ERROR): " + ", ".join(f"{g} {n}" for g, n in rep["cut_by_row_budget"].items())
                 + "; rows no gate failed are UNJUDGED (row budget spent); `kverify audit --redo-budget` "
                 "in a longer run judges them fully.")
    current = rep.get("current_rules")  # absent from reports written before stop 20
    if (set(rep.get("rules", {})) - {current} if current else
            len(rep.get("rules", {})) > 1 or UNRECORDED_RULES in rep.get("rules", {})):  # rows judged by other rules
        L.append("\nJudging rules (`meta.rules`; " + (f"this kverify's are {current}; " if current else "")
                 + "rows judged by older rules may differ if checked again: `kverify audit --redo ID,...`): "
                 + "; ".join(f"{k}: {n} row(s)" for k, n in rep["rules"].items()) + ".")
    if rep.get("judged_on"):  # the machines the rows were checked on (meta.judged_on; older rows: not recorded)
        L.append("\nJudged on: " + "; ".join(f"{k}: {n} row(s)" for k, n in rep["judged_on"].items()) + ".")
    if rep.get("gate_shapes"):
        L.append("\nShape of the small-shape gates (G05's base, G09, G10, G11; `meta.gate_shape`): "
                 + "; ".join(f"{k}: {n} row(s)" for k, n in rep["gate_shapes"].items()) + ".")
    verdicts = sorted({v for c in rep["gates"].values() for v in c})
    L += ["\n## Gates\n", "| gate | tolerance-free | " + " | ".join(verdicts) + " |", "|---|---|" + "---|" * len(verdicts)]
    for g, c in rep["gates"].items():
        L.append(f"| {g} | {'yes' if rep['tolerance_free'].get(g) else 'no'} | " + " | ".join(str(c.get(v, 0)) for v in verdicts) + " |")
    L += ["\n## Standard test against the gates\n", "| standard test | gates | kernels |", "|---|---|---|"]
    L += [f"| {r['standard']} | {r['gates']} | {r['count']} |" for r in rep["confusion"]]
    f = rep["tolerance_sweep"]["factors"]
    L += ["\n## Tolerance sweep (failures with the bound scaled by the factor)\n",
          "| gate | " + " | ".join(f"x{x:g}" for x in f) + " |", "|---|" + "---|" * len(f)]
    for g, row in rep["tolerance_sweep"]["failures"].items():
        L.append(f"| {g} | " + " | ".join(str(row[str(x)]) for x in f) + " |")
    L += ["\n## Our standard test against the accepting harness (all rows accepted)\n",
          "| source | rows | ran | pass | agreement |", "|---|---|---|---|---|"]
    for s, a in rep["standard_agreement"].items():
        agree = f"{a['agreement']:.1%}" if a["our_standard_ran"] else "n/a"
        L.append(f"| {s} | {a['accepted_by_harness']} | {a['our_standard_ran']} | {a['our_standard_pass']} | {agree} |")
    for field, groups in rep["breakdowns"].items():
        L += [f"\n## By {field}\n", "| " + field + " | " + " | ".join(CLASSES) + " |", "|---|" + "---|" * len(CLASSES)]
        L += [f"| {v} | " + " | ".join(str(c.get(k, 0)) for k in CLASSES) + " |" for v, c in groups.items()]
    L += ["\n## Which gates reject together\n", "Rows rejected by one gate alone: "
          + (", ".join(f"{g} {n}" for g, n in rep["rejected_by_one_gate_alone"].items()) or "none") + ".\n",
          "| failing gates | rows |", "|---|---|"]
    L += [f"| {s} | {n} |" for s, n in rep["failing_sets"].items()]
    L += ["\n## Classes with one gate left out\n", "| left out | BROKEN | VIOLATION | CLEAN |", "|---|---|---|---|"]
    L += [f"| {g} | {c['BROKEN']} | {c['VIOLATION']} | {c['CLEAN']} |" for g, c in rep["classes_without_gate"].items()]
    if rep["unjudged_reasons"]:
        L += ["\n## Not judged\n", "| reason | rows |", "|---|---|"]
        L += [f"| {r} | {n} |" for r, n in rep["unjudged_reasons"].items()]
    L += ["\n## Sample of failures (per gate and source, for a hand audit)\n", "| gate | source | id | verdict | evidence |",
          "|---|---|---|---|---|"]
    L += [f"| {s['gate']} | {s['source']} | {s['id']} | {s['verdict']} | {s['summary'].replace('|', '/')} |"
          for s in rep["failure_sample"]]
    return "\n".join(L) + "\n"


def html_view(md: str) -> str:
    """A self-contained HTML page of the Markdown tables (headings, tables, paragraphs)."""
    out, table = ["<!doctype html><meta charset=utf-8><title>kverify audit</title>",
                  "<style>body{font-family:sans-serif;max-width:70em}td,th{border:1px solid #ccc;padding:2px 6px}"
                  "table{border-collapse:collapse}</style>"], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-"):
                continue
            if not table:
                out.append("<table>")
                table = True
                out.append("<tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr>")
            else:
                out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if table:
            out.append("</table>")
            table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    if table:
        out.append("</table>")
    return "\n".join(out) + "\n"


def plots(rep: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [c for c in CLASSES if rep["classes"][c]["of"]]
    rates = [rep["classes"][c]["rate"] for c in names]
    err = [[max(0.0, r - rep["classes"][c]["wilson95"][0]) for c, r in zip(names, rates)],
           [max(0.0, rep["classes"][c]["wilson95"][1] - r) for c, r in zip(names, rates)]]
    ax.bar(names, rates, yerr=err, capsize=4, color=["#c0392b", "#e67e22", "#27ae60", "#7f8c8d"][: len(names)])
    ax.set_ylabel("share of kernels (Wilson 95%)")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(out / "classes.png", dpi=120)
    files.append("classes.png")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    f = rep["tolerance_sweep"]["factors"]
    for g, row in rep["tolerance_sweep"]["failures"].items():
        ax.plot(f, [row[str(x)] for x in f], marker="o", label=g, linestyle="--" if rep["tolerance_free"].get(g) else "-")
    ax.set_xscale("log")
    ax.set_xlabel("bound scale factor")
    ax.set_ylabel("failing kernels")
    if ax.get_legend_handles_labels()[0]:  # an empty journal has no gate to draw
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(out / "tolerance_sweep.png", dpi=120)
    files.append("tolerance_sweep.png")
    plt.close(fig)
    return files


def write_report(journals: list[str], out_dir: str = "results/audit", corpus: str | None = None) -> dict:
    """Write report.{json,md,html} and the plots into ``out_dir`` (created); returns the report.
    With ``corpus`` (the audited corpus JSONL) the report also counts its rows not journalled yet,
    with why (report["corpus"], not_journalled). Raises UsageError for a journal that is missing or
    not a journal, journals of another corpus or of unlike runs (load), or an ``out_dir`` that is a
    file or cannot be written; LoadError for a bad corpus."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: --out must be a folder, and this is a file")
    kernels = load(journals)
    rep = build(kernels)
    if corpus:
        rep["corpus"] = not_journalled(corpus, journals, kernels)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(rep, indent=2, default=list) + "\n")
        md = markdown(rep)
        (out / "report.md").write_text(md)
        (out / "report.html").write_text(html_view(md))
        rep["plots"] = plots(rep, out)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write the report there ({e.strerror or e}"
                         + (f": {e.filename}" if e.filename else "") + ")") from None
    return rep
