"""The audit's scheduler (kverify.audit._pipeline) driven by fake processes on a fake clock: every
row is recorded exactly once; a row re-run alone after running out of GPU memory has its GPU to
itself; a row too big to share a GPU (EXCLUSIVE_SHARE) never shares one, is not run serially,
and several such rows use several GPUs at once. (Review of stop 17: a simulator like this found
the big rows all queued on one GPU.)"""
import itertools
import json
import random

import pytest

import kverify.audit as audit

GIB = 2**30
TOTAL_MIB = 143771  # an H200's memory as nvidia-smi reports it


class World:
    """Fake processes, clock and nvidia-smi for one _pipeline run."""

    def __init__(self, spec):
        self.spec = spec  # row id -> {"inputs": bytes, "outputs": bytes, "params": bytes, "check_s": s, "oom_first": bool,
        #                               "over_cap": bool (its first out-of-memory is over its own cap)}
        self.now = 0.0
        self.procs = {}
        self.ids = itertools.count(1000)
        self.oomed = set()
        self.trace = []  # (time, "start"/"end", stage kind, row id, gpu, serial)
        self.caps = []  # (stage kind, row id, serial, GPU memory cap in MiB or None) of every start
        self.peak_host = 0
        self.external = 0
        self.host_memory = lambda: None

    def tries_of(self, what: str) -> list:
        """Ids of the rows noted ``what`` (note_try), once per note."""
        return [r for r, w in self.tries if w == what]

    def measure(self):
        mem = self.host_memory()
        if mem is not None:
            self.peak_host = max(self.peak_host, mem[1] - mem[0] - self.external)

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.now += s

    def wait(self, sentinels, timeout):
        if self.now > 1e5:  # ~1000 times the work: the scheduler is stuck, not slow
            raise RuntimeError(f"scheduler stalled: {len(self.procs)} running, fake clock at {self.now:.0f} s")
        live = [self.procs[s] for s in sentinels]
        if not live:
            self.now += timeout
            return []
        self.now = max(self.now, min(min(p.end for p in live), self.now + timeout))
        self.measure()  # memory grows between events: its most is at the next one, before any end
        done = [p for p in live if p.end <= self.now]
        for p in done:
            s = self.spec[p.row["id"]]
            if p.kind == "build":
                res = ["ok", "", 1.0, s["inputs"], s["params"], s["outputs"], 0.0]
            elif s["oom_first"] and p.row["id"] not in self.oomed and not p.serial:
                self.oomed.add(p.row["id"])
                # the check process's own account (memory_wait.gpu_oom_status), as _task adds it on a GPU audit
                status = {"ooms": 1, "over_cap": bool(s.get("over_cap"))}
                if s.get("caught"):  # a gate caught the error and made a verdict of it: no mark in the record
                    res = [None, "BROKEN", "", 1.0, 0.0, status]
                else:
                    res = [None, "UNJUDGED", "CUDA out of memory", 1.0, 0.0, status]
            else:
                res = [None, "CLEAN", "", 1.0, 0.0]
            with open(p.out, "w") as f:
                json.dump(res, f)
            p.exitcode = 0
            self.trace.append((self.now, "end", p.kind, p.row["id"], p.gpu, p.serial))
            del self.procs[p.sentinel]
        return [p.sentinel for p in done]


class FakeProcess:
    def __init__(self, world, args):
        self.world = world
        self.kind, _, self.row, _, self.out, self.gpu, self.serial, self.cap = args
        self.sentinel = next(world.ids)
        self.exitcode = None
        self.pid = -1

    def start(self):
        w = self.world
        self.end = w.now + (1.0 if self.kind == "build" else w.spec[self.row["id"]]["check_s"])
        w.procs[self.sentinel] = self
        self.t0 = w.now
        w.trace.append((w.now, "start", self.kind, self.row["id"], self.gpu, self.serial))
        w.caps.append((self.kind, self.row["id"], self.serial, self.cap))

    def join(self):
        pass

    def kill(self):
        pass


def run(monkeypatch, n, gpus, jobs, compile_jobs, gib, big=(), oom=(), seed=0, check_s=(5, 50), time_limit=None,
        opts=None, host_total=None, ramp_s=0.0, external=0, big_out=(), out_gib=8, params=0, over_cap=(),
        capped_before=(), caught=(), serial_before=(), mem=None):
    """Rows r0..r{n-1}: 1 MiB of inputs, 8 GiB for those in ``big``; no outputs, ``out_gib`` GiB
    for those in ``big_out``; ``params`` bytes of parameters each. ``host_total`` (MiB): a host of that memory, each process taking what the audit expects of
    it (kverify.audit.host_need_mib), growing to it over its first ``ramp_s`` seconds, until its
    end, and ``external`` MiB held by something else all along; the world's ``peak_host`` is the
    most the audit took at once. Without it, no host memory reading (nothing held back). Rows in
    ``over_cap`` (and ``oom``) run out of memory over their own cap at first, those in ``caught`` (and
    ``oom``) with a record that does not say so (a gate caught it); ``capped_before``: the
    rows an earlier run set aside so (_pipeline's capped_before); ``serial_before``: the rows an
    earlier run saw run out with a GPU to themselves (_pipeline's serial_before). ``mem``: the
    nvidia-smi reading (gpu_memory_mib) instead of every GPU an H200's with 4000 MiB in use."""
    rnd = random.Random(seed)
    spec = {f"r{i}": {"inputs": 8 * GIB if i in big else 2**20, "outputs": out_gib * GIB if i in big_out else 0, "params": params,
                      "check_s": rnd.uniform(*check_s), "oom_first": i in oom, "over_cap": i in over_cap,
                      "caught": i in caught}
            for i in range(n)}
    w = World(spec)

    def taken():
        return sum((audit.host_need_mib("build") if p.kind == "build" else
                    audit.host_need_mib("check", spec[p.row["id"]]["inputs"], 0, spec[p.row["id"]]["outputs"]))
                   * (min(1.0, (w.now - p.t0) / ramp_s) if ramp_s else 1.0) for p in w.procs.values())
    w.external = external
    if host_total:
        w.host_memory = lambda: (int(host_total - external - taken()), host_total)
    monkeypatch.setattr(audit, "host_memory_mib", w.host_memory)

    class Ctx:
        def Process(self, target, args, daemon):
            return FakeProcess(w, args)

    class FakeTime:
        monotonic = staticmethod(w.monotonic)
        sleep = staticmethod(w.sleep)

    monkeypatch.setattr(audit.multiprocessing, "get_context", lambda method: Ctx())
    monkeypatch.setattr(audit, "mp_wait", w.wait)
    monkeypatch.setattr(audit, "time", FakeTime)
    monkeypatch.setattr(audit, "gpu_memory_mib", mem or (lambda gs: {g: (TOTAL_MIB - 4000, TOTAL_MIB) for g in gs}))
    recorded = []
    w.tries = []  # (row id, what) of every note_try
    audit._pipeline("corpus", [{"id": r} for r in spec], opts or {}, jobs, compile_jobs,
                    lambda row, *a, **k: recorded.append(row["id"]), gpus=gpus, gpu_gib=gib, time_limit=time_limit,
                    note_try=lambda row, what: w.tries.append((row["id"], what)),
                    capped_before={f"r{i}" for i in capped_before}, serial_before={f"r{i}" for i in serial_before})
    assert sorted(recorded) == sorted(spec), "every row recorded exactly once"
    return w


def overlaps(trace, alone_only_gpu) -> list:
    """Pairs of checks that ran at once where one of them should have had the GPU to itself."""
    running, bad = {}, []
    for t, ev, kind, rid, gpu, serial in trace:
        key = (kind, rid, serial)
        if ev == "end":
            running.pop(key, None)
            continue
        for (k2, r2, s2), g2 in running.items():
            mine = serial or rid in alone_only_gpu
            theirs = s2 or r2 in alone_only_gpu
            if (mine or theirs) and (gpu is None or g2 is None or g2 == gpu) and (kind != "build" or s2):
                bad.append((t, rid, r2))
        running[key] = gpu
    return bad


@pytest.mark.parametrize("gpus,jobs,compile_jobs,gib", [
    (None, 4, 2, 0), (None, 4, 0, 0), (["0"], 4, 2, 8), (["0", "1"], 8, 4, 8), (["0", "1"], 1, 1, 8),
    (["0", "1", "2", "3"], 8, 4, 0)])
def test_out_of_memory_rows_run_again_alone_and_every_row_is_recorded_once(monkeypatch, gpus, jobs, compile_jobs, gib):
    w = run(monkeypatch, 30, gpus, jobs, compile_jobs, gib, oom={0, 1, 5, 29})
    alone = [x for x in w.trace if x[1] == "start" and x[5]]
    if jobs > 1 or compile_jobs:
        assert {x[3] for x in alone} == {"r0", "r1", "r5", "r29"}  # each re-run once, serially
        # each noted once as set aside (why it is not journalled if the run ends before it: report --corpus)
        assert sorted(r for r, what in w.tries if what == audit.OOM_TRY) == ["r0", "r1", "r29", "r5"]
        assert not overlaps(w.trace, set())
        shared_starts = [t for t, ev, kind, rid, gpu, serial in w.trace if kind == "check" and ev == "start" and not serial]
        if gpus and len(gpus) > 1:
            # not held back to the end: some row finishes after the first alone run starts
            assert any(t > alone[0][0] and ev == "end" and not serial for t, ev, kind, rid, gpu, serial in w.trace
                       if kind == "check")
        else:  # one GPU for all: emptying it would stop every check, so they run once no other row waits
            assert max(shared_starts) <= alone[0][0]


@pytest.mark.parametrize("gpus", [["0"], None])
def test_on_one_gpu_rows_that_need_it_alone_wait_until_no_other_row_does(monkeypatch, gpus):
    """On one GPU a row booked for the whole GPU (or re-run alone) would stop every other check
    while the GPU empties for it (H200, stop 20: the CPUs idled for minutes): such rows wait
    until no other row is left to build or check, then run one at a time; every row is recorded."""
    big = {2, 9, 17}
    w = run(monkeypatch, 30, gpus, 6, 4, 8, big=big, oom={4, 20})
    big_ids = {f"r{i}" for i in big}
    checks = [x for x in w.trace if x[2] == "check"]
    if gpus:  # with no GPU list nothing is booked (no memory reading per GPU): the re-runs alone still wait
        first_big = min(t for t, ev, kind, rid, *_ in checks if ev == "start" and rid in big_ids)
        small = [t for t, ev, kind, rid, gpu, serial in checks if ev == "start" and rid not in big_ids and not serial]
        assert max(small) <= first_big
        assert not overlaps(checks, big_ids)
    first_alone = min(t for t, ev, kind, rid, gpu, serial in checks if ev == "start" and serial)
    assert all(t <= first_alone for t, ev, kind, rid, gpu, serial in checks if ev == "start" and not serial
               and rid not in big_ids)
    assert not overlaps(checks, set())


def test_rows_too_big_to_share_get_whole_gpus_in_parallel_and_run_normally(monkeypatch):
    big = set(range(0, 40, 4))  # 8 GiB of inputs: ~104 GiB expected, more than half a GPU
    w = run(monkeypatch, 40, [str(i) for i in range(4)], 8, 6, 8, big=big)
    big_ids = {f"r{i}" for i in big}
    assert not overlaps([x for x in w.trace if x[2] == "check"], big_ids)
    starts = [x for x in w.trace if x[1] == "start" and x[3] in big_ids and x[2] == "check"]
    assert starts and not any(x[5] for x in starts)  # not serial: they did not run out of memory
    # several GPUs hold a big row at the same time
    live, most = set(), 0
    for t, ev, kind, rid, gpu, serial in w.trace:
        if kind == "check" and rid in big_ids:
            (live.add if ev == "start" else live.discard)(rid)
            most = max(most, len(live))
    assert most >= 2


@pytest.mark.parametrize("n,jobs,compile_jobs,big", [
    (20, 8, 10, set(range(20))),  # device_audit.sh's defaults, every row booked whole (a --redo of big rows)
    (20, 1, 1, {2, 3}),
    (100, 4, 2, {5, 17, 30, 41, 55, 63, 70, 88})])
def test_rows_waiting_for_the_others_do_not_hold_the_builds_back(monkeypatch, n, jobs, compile_jobs, big):
    """Builds run at most 2 x jobs rows ahead of the checks; rows booked for a whole GPU that wait
    for the others (one GPU) must not count, or 2 x jobs of them stop the builds the others wait
    for and nothing runs again (review of stop 20: the fake clock ran out, 0 running)."""
    w = run(monkeypatch, n, ["0"], jobs, compile_jobs, 8, big=big)
    assert not overlaps([x for x in w.trace if x[2] == "check"], {f"r{i}" for i in big})


@pytest.mark.parametrize("oom", [False, True])
def test_on_several_gpus_a_row_booked_whole_soon_takes_one_emptied_gpu_while_the_others_go_on(monkeypatch, oom):
    """Checks long enough that no GPU is ever idle: a row booked whole waits WHOLE_WAIT_S for an
    idle GPU, then one GPU is emptied for it while the other keeps taking checks (H200 x2, stop 22:
    it waited 300 s, then held both GPUs back until one emptied, and the call ended first). It
    runs with the GPU to itself, not serially -- unless it ran out of memory so: then serially."""
    w = run(monkeypatch, 60, ["0", "1"], 8, 4, 8, big={3}, oom={3} if oom else set(), check_s=(30, 90))
    built = min(t for t, ev, kind, rid, *_ in w.trace if ev == "end" and kind == "build" and rid == "r3")
    starts = [(t, gpu, serial) for t, ev, kind, rid, gpu, serial in w.trace if ev == "start" and kind == "check" and rid == "r3"]
    first, gpu, serial = starts[0]
    assert first <= built + audit.WHOLE_WAIT_S + 90 + 5  # the wait, then the longest check on its GPU
    assert not serial and starts[-1][2] == oom and len(starts) == 1 + oom
    assert not overlaps([x for x in w.trace if x[2] == "check"], {"r3"})
    other = [t for t, ev, kind, rid, g, _ in w.trace if ev == "start" and kind == "check" and rid != "r3" and g != gpu]
    assert any(built + audit.WHOLE_WAIT_S <= t <= first for t in other)  # the other GPU went on


class Limit:
    """A time limit that lets everything start but says whether a GPU may be emptied."""

    def __init__(self, drain: bool):
        self.drain = drain

    def may_check(self, idle=False):
        return True

    def may_build(self, *a):
        return True

    def may_drain(self):
        return self.drain

    def over(self):
        return False

    def note(self, *a):
        pass

    def stop_line(self, n):
        return ""


@pytest.mark.parametrize("drain", [True, False])
def test_no_gpu_is_emptied_for_a_row_alone_when_the_time_limit_leaves_no_room(monkeypatch, drain):
    """TimeLimit.may_drain False: no GPU is held back for the row re-run alone (a drain the call
    could not use); it runs once a GPU is idle on its own. True: one GPU takes no new check from
    the row's out-of-memory until it has run."""
    w = run(monkeypatch, 40, ["0", "1"], 8, 4, 8, oom={2}, check_s=(30, 90), time_limit=Limit(drain))
    oom_end = min(t for t, ev, kind, rid, *_ in w.trace if ev == "end" and kind == "check" and rid == "r2")
    alone_t, alone_gpu = next((t, g) for t, ev, kind, rid, g, serial in w.trace if ev == "start" and serial)
    held = [t for t, ev, kind, rid, g, serial in w.trace
            if ev == "start" and kind == "check" and not serial and g == alone_gpu and oom_end < t < alone_t]
    assert (not held) == drain
    if not drain:  # nothing was held back: the row ran after the other checks had all started
        assert alone_t >= max(t for t, ev, kind, rid, g, serial in w.trace if ev == "start" and kind == "check"
                              and not serial)


def test_many_rows_booked_whole_use_every_gpu_not_one_lane(monkeypatch):
    """20 of 24 rows booked whole on 2 GPUs, checks of 60-90 s: the rows moved to the rows that
    run alone still start on any GPU with no check running, so both GPUs take about half of them
    (review of stop 22: through the one lane of the emptied GPU, 17 of 20 ran on one GPU and the
    run took 1329 s instead of 866 s)."""
    w = run(monkeypatch, 24, ["0", "1"], 8, 4, 8, big=set(range(20)), check_s=(60, 90))
    starts = [g for t, ev, kind, rid, g, serial in w.trace if ev == "start" and kind == "check" and int(rid[1:]) < 20]
    assert min(starts.count("0"), starts.count("1")) >= 7, starts
    assert not overlaps([x for x in w.trace if x[2] == "check"], {f"r{i}" for i in range(20)})
    assert max(t for t, *_ in w.trace) <= 900


@pytest.mark.parametrize("gpus,ramp_s", [(["0"], 0.0), (["0", "1"], 0.0), (["0"], 60.0)])
def test_host_memory_bounds_what_runs_at_once_on_a_gpu_audit_and_every_row_still_runs(monkeypatch, gpus, ramp_s):
    """H200, stop 26: 6 checks and 6 builds took 106 of 126 GiB and three check processes died by
    SIGKILL. On a GPU audit a process starts only when the host has what it is expected to take,
    less a reserve, counting processes started in the last HOST_RAMP_S seconds as not settled (the
    world with ramp_s: memory taken over a process's first minute; without that count, readings
    taken while processes grow let too many start); with nothing running one always starts (r7
    expects more than the whole host: it runs, alone)."""
    total = 40 * 1024  # MiB: a budget of 36 GiB: 4 checks of ~6 GiB and 2 builds of 3 GiB, say, not 8 + 6
    budget = (1 - audit.HOST_RESERVE) * total
    kw = dict(check_s=(100, 200), host_total=total, ramp_s=ramp_s)
    free = run(monkeypatch, 40, gpus, 8, 6, 8, opts={"device": "cpu"}, **kw)
    assert free.peak_host > total  # a CPU audit is not held back: this world would run out
    w = run(monkeypatch, 40, gpus, 8, 6, 8, opts={"device": "cuda"}, **kw)
    assert w.peak_host <= budget
    assert max(sum(1 for k, _ in live if k == "check") for live in _live_sets(w.trace)) >= 3  # not one at a time
    big = run(monkeypatch, 20, gpus, 8, 6, 8, big={7}, big_out={7}, opts={"device": "cuda"}, **kw)
    assert audit.host_need_mib("check", 8 * GIB, 0, 8 * GIB) > total
    r7 = [x for x in big.trace if x[3] == "r7" and x[2] == "check"]
    assert len(r7) == 2  # started and ended (every row is recorded: run())
    for live in _live_sets(big.trace):
        assert ("check", "r7") not in live or live == {("check", "r7")}, live


# (row, input + parameter GiB and output GiB as its build logged them, its check process's peak GiB,
# meta.host_peak_mib): H200 audits, stops 29-33 (results/audit/logs/h200_stop{29,31,32,33}/); the
# rows of the highest peak per output GiB, every row of 1 GiB or more above 9 GiB, and the rows of
# 4 GiB of inputs or parameters
MEASURED_HOST_PEAKS = [
    ("yenhao/ralph_codex_cuda_all/L2/P87", 0.25, 1.97, 45.0),
    ("yenhao/ralph_qwen36_cuda_all_gpu1_server_isolated/L2/P52", 0.25, 0.48, 15.5),
    ("cudal1/h20/L3/T17", 0.01, 0.24, 9.0),
    ("cudal1/3090/L1/T77", 0.03, 0.53, 10.1),
    ("cudal1/a100/L1/T72", 0.06, 1.00, 14.5),
    ("kbleaderboard/llama-3.1-70b/L1/P9", 0.00, 1.00, 12.1),
    ("yenhao/ralph_codex_cuda_all/L2/P38", 0.50, 1.00, 13.1),
    ("yenhao/openrouter_deepseek_v4_pro_leaderboard_l2/L2/P90", 0.25, 1.64, 10.9),
    ("technoabsurdist/opus4_level2_20250903_065424/L2/P26", 1.06, 1.00, 9.3),
    ("yenhao/ralph_gemma4_cuda_all/L1/P64", 2.00, 2.00, 19.2),
    ("technoabsurdist/gemini_level3_run/L3/P17", 0.09, 4.00, 26.5),
    ("technoabsurdist/gemini_level1_run/L1/P7", 0.02, 4.00, 33.2),
    ("technoabsurdist/gemini_level1_run/L1/P97", 3.00, 2.00, 9.4),
    ("yenhao/ralph_codex_cuda_all/L1/P68", 0.50, 1.16, 10.3),
    ("technoabsurdist/gemini_level1_run/L1/P82", 1.00, 0.99, 9.9),
    ("yenhao/openrouter_deepseek_v4_pro_leaderboard_l1/L1/P82", 1.00, 0.99, 9.6),
    ("yenhao/ralph_gemma4_cuda_all/L1/P70", 1.27, 0.67, 9.4),
    ("technoabsurdist/gemini_level1_run/L1/P43", 4.00, 0.45, 7.7),
    ("yenhao/ralph_gemma4_cuda_all/L2/P56", 4.02, 0.00, 5.2),
    # stop 28 (before stop 30's fp64_copy fix), the highest peak on record; its outputs' size from
    # the reference run on meta tensors (the log of its build predates the outputs field)
    ("technoabsurdist/gemini_level2_run/L2/P19", 2.00, 2.03, 47.6),
]


@pytest.mark.parametrize("row,gib_in,gib_out,peak", MEASURED_HOST_PEAKS)
def test_a_checks_expected_host_memory_covers_what_such_rows_took_on_the_h200(row, gib_in, gib_out, peak):
    """The guard's estimate (host_need_mib) is at least what the check process of each of these
    rows held at its peak (workers not counted: the base HOST_CHECK_GIB is for them). Stop 33:
    P87 took 45.0 GiB where stop 32's rule (20x inputs + outputs + parameters up to 1 GiB, 8x
    beyond) expected 36."""
    assert audit.host_need_mib("check", int(gib_in * GIB), 0, int(gib_out * GIB)) >= peak * 1024, row


def test_host_memory_is_expected_of_a_checks_outputs_more_than_of_its_inputs():
    """Stops 29-33: 4 GiB of inputs or parameters took 5.2-7.7 GiB (gemini_level1_run/L1/P43,
    ralph_gemma4_cuda_all/L2/P56), 4 GiB of outputs 26.5-33.2 GiB, 2 GiB of outputs up to 45 GiB.
    Two rows of 4 GiB of inputs just started leave room for a third on a 126 GiB host with 120
    GiB available; two of 4 GiB of outputs do not leave room for each other."""
    ins = audit.host_need_mib("check", 4 * GIB)
    outs = audit.host_need_mib("check", 0, 0, 4 * GIB)
    assert audit.host_need_mib("check", 0, 4 * GIB) == ins  # parameters count as inputs
    assert ins < 20 * 1024 < 45 * 1024 < audit.host_need_mib("check", 0, 0, 2 * GIB) < outs
    assert audit.host_room(ins, [ins, ins], (120 * 1024, 126 * 1024))
    assert not audit.host_room(outs, [outs], (120 * 1024, 126 * 1024))


@pytest.mark.parametrize("out_gib,expected_out", [(3, 3 * GIB), (0, 2**20)])
def test_the_audit_expects_a_checks_host_memory_of_the_sizes_its_build_measured(monkeypatch, out_gib, expected_out):
    """The audit passes each row's input, parameter and output bytes, as its build measured them,
    to host_need_mib in that order; outputs the build could not count (0 bytes) are taken as large
    as the inputs (1 MiB here), not as none (review of stop 33: every other test passed with the
    outputs left out or swapped with the parameters)."""
    calls = []
    real = audit.host_need_mib
    monkeypatch.setattr(audit, "host_need_mib", lambda *a: calls.append(a) or real(*a))
    run(monkeypatch, 3, ["0"], 2, 2, 8, big_out={0, 1, 2}, out_gib=out_gib, params=5 * 2**20,
        opts={"device": "cuda"})
    assert calls.count(("check", 2**20, 5 * 2**20, expected_out)) == 3, calls


def _live_sets(trace):
    """The (kind, row id) of the processes running after each event of ``trace``."""
    live = set()
    for t, ev, kind, rid, *_ in trace:
        (live.add if ev == "start" else live.discard)((kind, rid))
        yield set(live)


@pytest.mark.parametrize("external", [0, 40 * 1024])
def test_a_row_waiting_for_host_memory_is_not_passed_by_smaller_ones_for_ever(monkeypatch, external):
    """Review of stop 26: a row booked for a whole GPU (r3 here: 8 GiB of inputs and 24 of
    outputs, expected at more host memory than this host has free while anything else runs) waited on its emptied GPU while the checks on the other
    GPU took every GiB that freed: it started at 1163 s of a 1289 s run, its GPU idle ~950 s. A
    check that waits for memory now holds every later start back until it starts."""
    w = run(monkeypatch, 60, ["0", "1"], 8, 10, 8, big={3}, big_out={3}, out_gib=24, check_s=(100, 200), opts={"device": "cuda"},
            host_total=256 * 1024, external=external)
    end = max(t for t, *_ in w.trace)
    r3 = min(t for t, ev, kind, rid, *_ in w.trace if ev == "start" and kind == "check" and rid == "r3")
    assert r3 < end / 2, (r3, end)


@pytest.mark.parametrize("gpus", [["0"], ["0", "1"]])
def test_checks_that_share_a_gpu_are_capped_at_their_booking_and_rows_alone_are_not(monkeypatch, gpus):
    """Every check started beside others gets check_cap_mib of its booking as its own process's
    GPU memory cap (stop 39: one row's oracle took 130 GiB of 139 and 12 neighbours ran out); a
    re-run alone, a row booked whole and a build get none."""
    w = run(monkeypatch, 24, gpus, 6, 3, 8, big={3}, oom={0, 7})
    need = audit.check_need_mib(8, 2**20)  # 1 MiB of inputs, no outputs or parameters
    for kind, rid, serial, cap in w.caps:
        if kind == "build" or serial or rid == "r3":
            assert cap is None, (kind, rid, serial)
        else:
            assert cap == audit.check_cap_mib(need, TOTAL_MIB) == 4 * need, (rid, cap)
    assert any(serial for _, _, serial, _ in w.caps) and any(rid == "r3" for k, rid, _, _ in w.caps if k == "check")


def test_no_cap_without_a_booking_or_past_the_gpu():
    assert audit.check_cap_mib(20 * 1024, TOTAL_MIB) == 80 * 1024  # 4 x the booking
    assert audit.check_cap_mib(1024, TOTAL_MIB) == 32 * 1024  # at least the floor
    assert audit.check_cap_mib(40 * 1024, TOTAL_MIB) is None  # 160 GiB: past the GPU, no cap
    assert audit.check_cap_mib(1024, 16 * 1024) is None  # a GPU smaller than the floor


@pytest.mark.parametrize("gpus", [["0"], ["0", "1"]])
def test_a_row_over_its_own_cap_is_noted_so_and_an_earlier_one_is_booked_whole(monkeypatch, gpus):
    """A check that ran out of memory over its own cap is set aside to run alone like any other,
    noted journal.OOM_CAP_TRY (later runs book it whole), its neighbours' out-of-memory OOM_TRY; a
    row an earlier run noted so (capped_before) is booked for a whole GPU at once: never beside
    another check, not serially, and on one GPU after every other row."""
    w = run(monkeypatch, 20, gpus, 6, 3, 8, oom={2, 5}, over_cap={2}, capped_before={9})
    assert sorted(w.tries_of(audit.OOM_CAP_TRY)) == ["r2"] and sorted(w.tries_of(audit.OOM_TRY)) == ["r5"]
    assert not overlaps(w.trace, {"r9"})
    r9 = [x for x in w.trace if x[3] == "r9" and x[2] == "check" and x[1] == "start"]
    assert len(r9) == 1 and not r9[0][5]  # once, not serially
    assert [c for k, rid, _, c in w.caps if k == "check" and rid == "r9"] == [None]  # the GPU is its own: no cap
    if len(gpus) == 1:
        others = [t for t, ev, kind, rid, gpu, serial in w.trace
                  if kind == "check" and ev == "start" and rid not in ("r9", "r2", "r5") and not serial]
        assert max(others) <= r9[0][0]


@pytest.mark.parametrize("compile_jobs", [3, 0])
def test_an_out_of_memory_error_a_gate_caught_still_sets_the_row_aside(monkeypatch, compile_jobs):
    """A review's finds: a check whose own process ran out of memory (memory_wait.gpu_oom_status)
    is run again alone even where its record does not say so (G03's limit probe read an error over
    the cap as "nothing certified" and FAILed), and a row whose record is lost to a load error is
    still known to have gone over its cap (the status, not the report, says so); without a build
    step (--compile-jobs 0) a row an earlier run capped is booked whole all the same."""
    w = run(monkeypatch, 16, ["0"], 4, compile_jobs, 8, oom={1, 4, 6}, caught={1, 6}, over_cap={4, 6},
            capped_before={9})
    again = {x[3] for x in w.trace if x[1] == "start" and x[5]}
    assert again == {"r1", "r4", "r6"}  # each run again, serially
    assert sorted(w.tries_of(audit.OOM_CAP_TRY)) == ["r4", "r6"] and w.tries_of(audit.OOM_TRY) == ["r1"]
    assert not overlaps(w.trace, {"r9"})
    r9 = [t for t, ev, kind, rid, gpu, serial in w.trace if kind == "check" and ev == "start" and rid == "r9"]
    others = [t for t, ev, kind, rid, gpu, serial in w.trace
              if kind == "check" and ev == "start" and rid not in ("r9", "r1", "r4", "r6") and not serial]
    assert len(r9) == 1 and max(others) <= r9[0]


@pytest.mark.parametrize("gpus", [["0"], ["0", "1"]])
def test_a_row_booked_whole_that_runs_out_of_memory_runs_again_serially_not_as_one_that_shared(monkeypatch, gpus):
    """A row booked for a whole GPU (too big to share, or capped by an earlier run) had the GPU to
    itself when it ran out of memory: it runs again serially, once, and is not noted as set aside
    beside others (journal.OOM_TRY) -- H200 audit, stop 40: on one GPU such rows start from the
    shared queue, and two were logged and noted as out of memory "beside other checks"."""
    w = run(monkeypatch, 12, gpus, 4, 2, 8, big={3}, oom={3, 5, 7}, capped_before={5})
    for rid in ("r3", "r5"):
        starts = [x[5] for x in w.trace if x[3] == rid and x[2] == "check" and x[1] == "start"]
        assert starts == [False, True], (rid, starts)  # with the GPU to itself, then serially
    assert not overlaps(w.trace, {"r3", "r5"})
    assert w.tries_of(audit.OOM_TRY) == ["r7"] and not w.tries_of(audit.OOM_CAP_TRY)
    assert sorted(w.tries_of(audit.OOM_WHOLE_TRY)) == ["r3", "r5"]  # later runs: serially from the start


@pytest.mark.parametrize("gpus,compile_jobs", [(["0"], 2), (["0"], 0), (["0", "1"], 2)])
def test_a_row_an_earlier_run_saw_run_out_with_a_gpu_to_itself_runs_serially_at_once(monkeypatch, gpus, compile_jobs):
    """serial_before (Journal.serial): such a row runs once, serially, never beside another check
    (not whole first, then serially: ~150 s each on the H200, stop 40), also without a build step;
    on one GPU after every other row; its capped booking from the same run changes nothing."""
    w = run(monkeypatch, 14, gpus, 4, compile_jobs, 8, oom={4}, capped_before={2}, serial_before={2, 9})
    for rid in ("r2", "r9"):
        starts = [x[5] for x in w.trace if x[3] == rid and x[2] == "check" and x[1] == "start"]
        assert starts == [True], (rid, starts)
    assert not overlaps(w.trace, set())
    if len(gpus) == 1:
        others = [t for t, ev, kind, rid, gpu, serial in w.trace if kind == "check" and ev == "start" and not serial]
        assert max(others) <= min(t for t, ev, kind, rid, gpu, serial in w.trace
                                  if kind == "check" and ev == "start" and rid in ("r2", "r9"))
    assert not w.tries_of(audit.OOM_WHOLE_TRY) and not w.tries_of(audit.WHOLE_TRY)


@pytest.mark.parametrize("seed", range(6))
def test_a_row_booked_whole_that_shared_a_larger_gpu_is_not_taken_for_one_that_ran_alone(monkeypatch, seed):
    """A review's find: on GPUs of different memory a row booked whole (the smallest GPU's memory,
    booked()) leaves room on a larger one; where another check ran beside it and it ran out, it did
    not have the GPU to itself: noted as set aside beside others (OOM_TRY or OOM_CAP_TRY), not
    OOM_WHOLE_TRY. Where nothing ran beside it, it is noted OOM_WHOLE_TRY as before."""
    mem = lambda gs: {"0": (80000 - 4000, 80000), "1": (TOTAL_MIB - 4000, TOTAL_MIB)}  # noqa: E731
    w = run(monkeypatch, 12, ["0", "1"], 8, 4, 8, big={3}, oom={3}, seed=seed, mem=mem)
    first = next(x for x in w.trace if x[3] == "r3" and x[2] == "check" and not x[5])
    end = next(t for t, ev, kind, rid, *_ in w.trace if ev == "end" and kind == "check" and rid == "r3" and t >= first[0])
    beside = {rid for t, ev, kind, rid, gpu, serial in w.trace if kind == "check" and rid != "r3" and gpu == first[4]
              and ev == "start" and t < end} - {rid for t, ev, kind, rid, gpu, serial in w.trace
                                                if kind == "check" and ev == "end" and t <= first[0]}
    notes = [what for r, what in w.tries if r == "r3" and what in audit.OOM_NOTES]
    assert notes == ([audit.OOM_TRY] if beside else [audit.OOM_WHOLE_TRY]), (beside, notes)
