"""The per-file ranks pass (`_core._rank_file`, src/reader/ranks.c) and the
ranks' identification (dftracer.tools.ranks) on small traces written with
known times: steps, self time per class, top events, sync points."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from array import array

import pytest

from dftracer import _core
from dftracer.tools import ranks, ranks_text
from dftracer.tools.lead_stats import typical_lead
from tracefile import find_traces, run_python

WRITE = """
import os
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
T = log.get_time() + 1000
for name, cat, ts, dur, ints, strs in {events!r}:
    log.log_event(name, cat, T + ts, dur, int_args=ints, string_args=strs)
{tail}
log.finalize()
"""

CLASSES = list(_core._RANK_CLASSES)


def write(directory, events, env=None, tail="", stem="trace", at_zero=False):
    """at_zero: the events' ts are absolute (less 1000), not from the process's start."""
    directory.mkdir(parents=True, exist_ok=True)
    text = WRITE.format(stem=str(directory / stem), events=events, tail=tail)
    if at_zero:
        text = text.replace("T = log.get_time() + 1000", "T = 1000")
    run_python(text,
               dict({"DFTRACER_ENABLE": "1"}, **(env or {})))
    return find_traces(str(directory), stem)


def steps_of(r):
    """The steps of a pass result, by the names of its _core.RankSteps."""
    s = r["steps"]
    assert isinstance(s, _core.RankSteps)

    def col(b):
        return list(memoryview(b).cast("q"))
    num, ts, dur = col(s.number), col(s.ts), col(s.dur)
    by = [col(c) for c in s.by_class]
    key = [col(c) for c in s.top_key]
    us = [col(c) for c in s.top_us]
    out = []
    for i in range(len(num)):
        out.append({"step": num[i], "ts": ts[i], "dur": dur[i],
                    "by": {c: by[k][i] for k, c in enumerate(CLASSES)},
                    "top": {c: (r["keys"][key[k][i]][:2] if key[k][i] >= 0 else None, us[k][i])
                            for k, c in enumerate(CLASSES)}})
    return out


def ev(name, cat, ts, dur, **ints):
    strs = {k: v for k, v in ints.items() if isinstance(v, str)}
    return (name, cat, ts, dur, {k: v for k, v in ints.items() if not isinstance(v, str)}, strs)


STEP0 = [
    ev("iteration", "pipeline", 0, 1000, step=0, epoch=0),
    ev("fetch", "dataloader", 0, 200, batch=0),
    ev("read", "POSIX", 50, 100, ret=4096),            # inside fetch
    ev("forward", "compute", 200, 400),
    ev("read", "POSIX", 300, 50, ret=4096),            # inside forward
    ev("all_reduce", "comm", 600, 100, seq=1, group="world", bytes=8),
    ev("all_reduce", "comm", 610, 20, seq=2, group="world", ddp_bucket=0, **{"async": 1}),
    ev("broadcast", "comm", 640, 10, bytes=8),         # no group/seq: no sync point
    ev("torch.save", "checkpoint", 700, 100),
    ev("log", "app", 800, 50),
    # 850..1000: no event
]
STEP1 = [ev("iteration", "pipeline", 1000, 500, step=1, epoch=0),
         ev("fetch", "dataloader", 1000, 500, batch=1)]


def test_self_time_of_each_class_in_each_step(tmp_path):
    (path,) = write(tmp_path, STEP0 + STEP1)
    r = _core._rank_file(path)
    assert r["status"] == "ok" and r["step_kind"] == "iteration"
    s0, s1 = steps_of(r)
    assert (s0["step"], s0["dur"], s1["step"], s1["dur"]) == (0, 1000, 1, 500)
    assert s0["by"] == {"compute": 350, "data": 100, "io": 150, "comm": 100, "checkpoint": 100,
                        "other": 50 + 150}  # `log`, and the time no event covers
    assert sum(s0["by"].values()) == 1000 and s1["by"] == dict.fromkeys(CLASSES, 0) | {
        "data": 500}
    assert s0["top"]["compute"] == (("compute", "forward"), 350)
    assert s0["top"]["io"] == (("POSIX", "read"), 150)
    # the async all_reduce and the broadcast nest in the first: 70 + 20 (all_reduce), 10
    assert s0["top"]["comm"] == (("comm", "all_reduce"), 90)
    assert s0["top"]["other"] == (("app", "log"), 50)
    assert s1["top"]["compute"] == (None, 0)
    keys = {(k[0], k[1]): k for k in r["keys"]}
    cat, name, cls, count, total, self_all, self_steps, io = keys[("POSIX", "read")]
    assert (CLASSES[cls], count, total, self_all, self_steps, io) == ("io", 2, 150, 150, 150, 8192)
    assert keys[("pipeline", "iteration")][5] == 150 + 0  # its own self time: untraced
    sync = array("q")
    sync.frombytes(r["sync"])
    # the sync all_reduce and DDP's bucket (it ends when its all-reduce is done): their ends
    assert sorted(sync[1::2]) == [s0["ts"] + 630, s0["ts"] + 700]
    light = _core._rank_file(path, sync_only=True)
    assert light["sync"] == r["sync"] and ranks.nsteps(light) == 0 and light["keys"] == []


def test_step_kinds_by_priority_and_by_name(tmp_path):
    events = [
        ev("ProfilerStep#7", "PP", 0, 100), ev("aten::mm", "PP", 10, 50),
        ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "PP", 70, 20),
        ev("ProfilerStep#8", "PP", 100, 100),
        ev("train.block", "pipeline", 0, 90, count=1),
        ev("train.block", "pipeline", 100, 90, count=2),
        ev("forward", "compute", 300, 10, step=3), ev("backward", "compute", 320, 30, step=3),
        ev("forward", "compute", 400, 10, step=4),
    ]
    (path,) = write(tmp_path, events)
    r = _core._rank_file(path)
    assert r["step_kind"] == "profiler"
    s = steps_of(r)
    assert [x["step"] for x in s] == [7, 8]
    assert s[0]["by"]["compute"] == 50 - 0 and s[0]["by"]["data"] == 20
    r = _core._rank_file(path, "train.block")
    assert r["step_kind"] == "named" and [x["dur"] for x in steps_of(r)] == [90, 90]
    r = _core._rank_file(path, "compute/forward")
    assert [(x["step"], x["dur"]) for x in steps_of(r)] == [(3, 10), (4, 10)]
    assert _core._rank_file(path, "no-such-event")["step_kind"] is None
    (only_args,) = write(tmp_path / "args", events[6:])
    r = _core._rank_file(only_args)
    assert r["step_kind"] == "args"
    assert [(x["step"], x["dur"]) for x in steps_of(r)] == [(3, 50), (4, 10)]


def test_repeated_step_numbers_are_numbered_in_order(tmp_path):
    events = [ev("iteration", "pipeline", 0, 10, step=0), ev("iteration", "pipeline", 20, 10, step=0),
              ev("iteration", "pipeline", 40, 10, step=5)]
    (path,) = write(tmp_path, events)
    assert [x["step"] for x in steps_of(_core._rank_file(path))] == [0, 1, 2]


def test_rank_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        _core._rank_file(str(tmp_path / "missing.pfw.gz"))
    with pytest.raises(TypeError):
        _core._rank_file(str(tmp_path), 3)
    (tmp_path / "junk-app.pfw").write_text("[\nnot json\n")
    r = _core._rank_file(str(tmp_path / "junk-app.pfw"))
    assert r["bad_lines"] == 1 and r["events"] == 0


FORK = """
pid = os.fork()
if pid == 0:
    log.log_event("item", "data", log.get_time(), 5)
    log.finalize()
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_ranks_their_workers_and_the_others(tmp_path):
    d = tmp_path / "job"
    for rank in (0, 1, 2):
        fetch = 900 if rank == 2 else 100
        write(d, [ev("iteration", "pipeline", 0, 1000, step=0),
                  ev("fetch", "dataloader", 0, fetch),
                  ev("forward", "compute", fetch, 1000 - fetch),
                  ev("all_reduce", "comm", 1000 if rank == 2 else fetch + 50,
                     0 if rank == 2 else 900 - fetch, seq=0, group="world")],
              env={"RANK": str(rank)}, tail=FORK)
    write(d, [ev("other", "app", 0, 10)], env={"RANK": ""})  # e.g. the launcher
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", str(d), "--ranks",
                           "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2] and out["warnings"] == []
    assert all(len(r["workers"]) == 1 for r in out["ranks"])
    assert len(out["other_processes"]) == 1
    # data 100, 100, 900 us, the others waiting in forward for rank 2's all_reduce:
    # rank 2 is 800 us over the others outside communication
    # the step's split by class: the mean of the ranks' own (one step each)
    mean = {c: int(sum(r["by_class_us"][c] for r in out["ranks"]) / 3)
            for c in out["ranks"][0]["by_class_us"]}
    assert mean["data"] == (100 + 100 + 900) // 3
    assert out["steps"] == [{"step": 0, "dur_us": [1000] * 3, "excess_us": [0, 0, 800],
                             "straggler": 2, "by_class_us": mean}]
    assert out["stragglers"] == []  # one step: too few to name a straggler
    # a second process claiming rank 0, unrelated to the first
    write(d, [ev("iteration", "pipeline", 0, 100, step=0)], env={"RANK": "0"}, stem="again")
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", str(d), "--ranks"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "rank 0: 2 processes claim it" in proc.stderr, proc.stderr


def data_straggler_steps(rank):
    """10 steps of 900 us; rank 3 fetches 300 us longer in 8 of them, which
    its all_reduce waits 300 us less for."""
    events = []
    for k in range(10):
        t = k * 1000
        slow = 300 if rank == 3 and k % 5 else 0
        events += [ev("iteration", "pipeline", t, 900, step=k),
                   ev("fetch", "dataloader", t, 100 + slow),
                   ev("all_reduce", "comm", t + 500, 300 - slow, seq=k, group="world")]
    return events


def test_stragglers_from_results(tmp_path):
    """analyze() on per-file results: a rank slower in data than the median
    rank in most steps is named, with its top data event."""
    d = tmp_path / "job"
    for rank in range(4):
        write(d, data_straggler_steps(rank), env={"RANK": str(rank)})
    results = [_core._rank_file(p) for p in find_traces(str(d))]
    a = ranks.analyze(results)
    (s,) = a["stragglers"]
    assert (s["rank"], s["steps"], s["of_steps"]) == (3, 8, 10)
    assert (s["cause_class"], s["cause_cat"], s["cause_name"]) == ("data", "dataloader", "fetch")
    assert s["excess_us"] == s["cause_excess_us"] == 300
    line = ranks_text.straggler_line(s)
    # the mean of its leads (300 us in 8 steps, 0 in 2) with its standard error;
    # chance: 10 steps / 4 ranks
    assert (s["mean_lead_us"], s["stderr_us"], s["slowest_steps"]) == (240, 40, 8)
    assert line == ("rank 3: slowest in 8/10 steps (chance 2.5), +240 us +-40 us a step; "
                    "data wait: dataloader/fetch +300 us"), line
    assert "rank 3" in ranks_text.render(a, 20)


WORKER_ITEMS = """
pid = os.fork()
if pid == 0:
    for k in range(10):
        log.log_event("item", "data", T + k * 1000, {item})
    log.finalize()
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("item_extra", [0, 400])
def test_a_data_wait_its_workers_do_not_explain_is_the_machine(tmp_path, item_extra):
    """Rank 3 waits 300 us longer for its data in 8 of 10 steps.  When its
    worker's items take as long as the other ranks' workers' (item_extra 0:
    on a contended machine the workers waited for a CPU, and items carry no
    run-queue wait), the others waited for its machine: named `waiting for a
    CPU` through its workers, never a data straggler.  When its worker's
    items take 400 us longer each, their work explains the wait: a data
    straggler, the workers' data/item named."""
    d = tmp_path / "job"
    for rank in range(4):
        events = data_straggler_steps(rank)
        item = 50 + (item_extra if rank == 3 else 0)
        write(d, events, env={"RANK": str(rank)}, tail=WORKER_ITEMS.format(item=item))
    a = ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))
    assert [len(r["workers"]) for r in a["ranks"]] == [1, 1, 1, 1], a["ranks"]
    (s,) = a["stragglers"]
    assert s["rank"] == 3 and s["mean_lead_us"] == 240, s
    line = ranks_text.straggler_line(s)
    if item_extra:
        assert (s["cause_class"], s["cause_cat"], s["cause_name"]) == ("data", "dataloader",
                                                                       "fetch"), s
        assert (s["workers"]["cat"], s["workers"]["name"]) == ("data", "item"), s
        assert s["workers"]["excess_us"] == 400, s  # 10 items x 400 us over 10 steps
        assert "in its workers: data/item +400 us a step" in line, line
    else:
        assert (s["cause_class"], s["cause_name"]) == ("cpu_wait", "(its workers' run queue)"), s
        assert s["workers"] is None, s  # no event of its workers is longer
        assert line == ("rank 3: the others waited 240 us a step for it (+-40 us); waiting for "
                        "a CPU: data wait +300 us that its workers' own work does not explain "
                        "(none of their events longer a step): its workers waited for a CPU, "
                        "its machine, not its work"), line


def test_a_rank_without_counters_in_some_steps_leaves_the_others_waits_out(tmp_path):
    """Ranks 0 and 1 share their CPUs with busy programs: each step their
    forward is 3 ms longer, all of it waiting for a CPU (wait_us), and the
    others wait for them in the all_reduce.  Rank 3's iterations lack the
    counters in every third step (a trace of an older build, or a file that
    could not be read): its usual wait stands in for them, so ranks 0 and 1
    lead in no step and nobody is named for its work (they are, as waiting
    for a CPU: the others waited for them, their CPU time like theirs).
    Without that, those steps would count ranks 0 and 1's waits as their
    work: 3 ms leads in a third of the steps."""
    d = tmp_path / "job"
    for rank in range(4):
        busy = rank in (0, 1)
        events = []
        for k in range(30):
            t = k * 10_000
            fwd = 4000 + (3000 if busy else 0) + (k * 37 + rank * 11) % 50
            sched = {} if rank == 3 and k % 3 == 0 else \
                {"cpu_us": 5000, "wait_us": (3000 if busy else 0) + 100}
            events += [ev("iteration", "pipeline", t, 9000, step=k, **sched),
                       ev("forward", "compute", t, fwd),
                       ev("all_reduce", "comm", t + fwd, 9000 - fwd, seq=k, group="world")]
        write(d, events, env={"RANK": str(rank)})
    a = ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))
    assert sorted((s["rank"], s["cause_class"]) for s in a["stragglers"]) == [
        (0, "cpu_wait"), (1, "cpu_wait")], a["stragglers"]
    assert all(2900 <= s["wait_lead_us"] <= 3100 for s in a["stragglers"]), a["stragglers"]
    assert max(max(s["excess_us"]) for s in a["steps"]) < 100, a["steps"]
    # the same job with rank 0 given 2 ms more work (CPU, not waiting) names it
    d2 = tmp_path / "slow"
    for rank in range(4):
        events = []
        for k in range(30):
            t = k * 10_000
            fwd = 4000 + (2000 if rank == 0 else 0) + (k * 37 + rank * 11) % 50
            sched = {} if rank == 3 and k % 3 == 0 else {"cpu_us": fwd, "wait_us": 100}
            events += [ev("iteration", "pipeline", t, 9000, step=k, **sched),
                       ev("forward", "compute", t, fwd),
                       ev("all_reduce", "comm", t + fwd, 9000 - fwd, seq=k, group="world")]
        write(d2, events, env={"RANK": str(rank)})
    a = ranks.analyze(_core._rank_file(p) for p in find_traces(str(d2)))
    assert [(s["rank"], s["cause_name"]) for s in a["stragglers"]] == [(0, "forward")]


def _spin_job(d, extra_us, late_us=1000):
    """Two ranks whose forward spins to a 20 ms deadline (a host waiting for
    its GPU).  Rank 0 shares its CPU with busy programs: 12 ms of its spin is
    in the run queue, and its forward ends late_us late (its work after the
    deadline waited too).  Rank 1 keeps its CPU, and its forward does
    extra_us of work more."""
    for rank in range(2):
        events = []
        for k in range(30):
            t = k * 30_000
            jitter = (k * 37 + rank * 11) % 50
            fwd = (20_000 + late_us if rank == 0 else 20_000 + extra_us) + jitter
            step = max(21_000, 20_000 + extra_us) + 1000 + 50
            sched = {"cpu_us": fwd - 12_000, "wait_us": 12_000} if rank == 0 else \
                {"cpu_us": fwd - 300, "wait_us": 300}
            events += [ev("iteration", "pipeline", t, step, step=k, **sched),
                       ev("forward", "compute", t, fwd),
                       ev("all_reduce", "comm", t + fwd, step - fwd, seq=k, group="world")]
        write(d, events, env={"RANK": str(rank)})
    return ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))


def test_a_rank_that_waited_for_the_others_is_not_named_for_its_cpu(tmp_path):
    """A wait that ends at a deadline is not stretched by the run queue: rank
    0's 12 ms in it made it no slower, and rank 1 waited for rank 0 in every
    all_reduce.  Taking the waits out alone would make rank 1 lead by ~11 ms a
    step; it is not named (docs/cli.md: the others did not wait for it)."""
    a = _spin_job(tmp_path / "job", 0)
    assert a["stragglers"] == [], a["stragglers"]
    # the leads with the waits out do favour rank 1: the rule above, not the
    # floor or the evidence, is what keeps it unnamed
    assert sum(1 for s in a["steps"] if s["straggler"] == 1) == 30, a["steps"]
    # rank 1 with 3 ms of work more in each forward: now rank 0 waits for it
    a = _spin_job(tmp_path / "slow", 3000)
    assert [(s["rank"], s["cause_name"]) for s in a["stragglers"]] == [(1, "forward")], \
        a["stragglers"]
    assert 1500 <= a["stragglers"][0]["wall_lead_us"] <= 2100, a["stragglers"]


def test_a_wall_lead_of_a_few_us_is_not_a_wait(tmp_path):
    """Both forwards end at the deadline (rank 0's work after it did not
    wait): with the waits left in, rank 1 leads by its jitter, ~11 us a
    step, which is not the others waiting for it.  Beside four burners a
    balanced 2-rank job was named so (`slowest in 12/12 steps, +5.05 ms`,
    wall_lead_us 18, the floor 1.2 ms); the wall lead must reach the floor."""
    a = _spin_job(tmp_path / "job", 0, late_us=0)
    # rank 1's lead with the waits left in is its forward less rank 0's
    wall = typical_lead([(k * 37 + 11) % 50 - (k * 37) % 50 for k in range(30)])
    assert 0 < wall < 100 < a["straggler_bound_us"], (wall, a["straggler_bound_us"])
    # with the waits out rank 1 leads every step by ~11.7 ms: evidence, above the floor
    assert sum(1 for s in a["steps"] if s["straggler"] == 1) == 30, a["steps"]
    assert a["stragglers"] == [], a["stragglers"]


def test_extra_cpu_work_that_the_others_share_the_cpus_with_is_named(tmp_path):
    """4 ranks on CPUs they oversubscribe: rank 2's forward does 1 ms more
    CPU work each step, and because the ranks share the CPUs, the others'
    forwards wait 1 ms in the run queue while rank 2's barely does: its wall
    lead is only 200 us, under the floor (450 us: 5 % of the 9 ms step),
    while its CPU lead is 1 ms.  Named, compute/forward; with a wall lead
    under a quarter of the floor it would not be (as in
    test_a_wall_lead_of_a_few_us_is_not_a_wait)."""
    def job(d, wall_extra):
        for rank in range(4):
            events = []
            for k in range(30):
                t = k * 10_000
                jitter = (k * 37 + rank * 11) % 50
                if rank == 2:
                    fwd, sched = 4000 + wall_extra + jitter, {"cpu_us": 4000, "wait_us": 200}
                else:
                    fwd, sched = 4000 + jitter, {"cpu_us": 3000, "wait_us": 1000}
                events += [ev("iteration", "pipeline", t, 9000, step=k, **sched),
                           ev("forward", "compute", t, fwd),
                           ev("all_reduce", "comm", t + fwd, 9000 - fwd, seq=k, group="world")]
            write(d, events, env={"RANK": str(rank)})
        return ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))

    a = job(tmp_path / "job", 200)
    assert a["straggler_bound_us"] == 450, a["straggler_bound_us"]
    (s,) = a["stragglers"]
    assert (s["rank"], s["cause_class"], s["cause_name"]) == (2, "compute", "forward"), s
    assert s["cpu_lead_us"] == 1000 and 150 <= s["wall_lead_us"] <= 250, s
    # the same CPU lead, the others not waiting for it (a wall lead of 50 us)
    a = job(tmp_path / "nowait", 50)
    assert [x for x in a["stragglers"] if x["cause_class"] != "cpu_wait"] == [], a["stragglers"]


def test_a_straggler_in_untraced_code(tmp_path):
    """Rank 2 spends 500 us a step where no event is (plus a 10 us `log`);
    the others wait for it in the all_reduce."""
    d = tmp_path / "job"
    for rank in range(3):
        events = []
        for k in range(6):
            t = k * 1000
            events += [ev("iteration", "pipeline", t, 1000, step=k),
                       ev("forward", "compute", t, 300)]
            if rank == 2:
                events += [ev("log", "app", t + 300, 10),
                           ev("all_reduce", "comm", t + 800, 200, seq=k, group="world")]
            else:
                events += [ev("all_reduce", "comm", t + 300, 700, seq=k, group="world")]
        write(d, events, env={"RANK": str(rank)})
    a = ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))
    (s,) = a["stragglers"]
    assert (s["rank"], s["steps"], s["cause_class"], s["cause_name"]) == (2, 6, "other",
                                                                         "(untraced)")
    assert s["excess_us"] == 500 and s["cause_cat"] == ""
    assert "other: (untraced) +500 us" in ranks_text.straggler_line(s)


COMM_THREAD = """
import threading
def comm_thread():
    for name, cat, ts, dur, ints, strs in {events!r}:
        log.log_event(name, cat, T + ts, dur, int_args=ints, string_args=strs)
th = threading.Thread(target=comm_thread)
th.start()
th.join()
"""


def test_comm_wait_in_backward_and_a_slow_forward(tmp_path):
    """DDP's shape: the bucket all_reduce on a communication thread while the
    training thread waits in backward.  Rank 1's forward takes 15 ms more:
    the others wait for it inside backward.  That wait is comm (the comm
    thread's all_reduce not added on top), and rank 1 is named, in compute,
    forward, +15 ms, in every step; the same job balanced names nobody."""
    waits = {}  # rank -> its all_reduces' time: what backward waited

    def job(d, slow_ms):
        for rank in range(3):
            main, comm = [], []
            for k in range(10):
                t = k * 20_000
                fwd = 500 + (slow_ms * 1000 if rank == 1 else 0) + 37 * ((k * 7 + rank) % 5)
                wait_end = t + 500 + slow_ms * 1000 + 3000  # everyone leaves together
                main += [ev("iteration", "pipeline", t, 19_000, step=k),
                         ev("forward", "compute", t, fwd),
                         ev("backward", "compute", t + fwd, wait_end - (t + fwd)),
                         ev("optimizer.step", "compute", wait_end, 200)]
                comm += [ev("all_reduce", "comm", t + fwd + 300, wait_end - (t + fwd + 400),
                            seq=k, group="world", ddp_bucket=0, **{"async": 1})]
            waits[rank] = sum(e[3] for e in comm)
            write(d, main, env={"RANK": str(rank)},
                  tail=COMM_THREAD.format(events=comm))
        return ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))

    a = job(tmp_path / "slow", 15)
    by_rank = {r["rank"]: r for r in a["ranks"]}
    for r in (0, 2):  # waiting for rank 1 in backward: comm, once
        by = by_rank[r]["by_class_us"]
        assert by["comm"] == waits[r] and by["compute"] < 10 * 1500, by
        assert sum(by.values()) == 10 * 19_000
    (s,) = a["stragglers"]
    assert (s["rank"], s["cause_class"], s["cause_cat"], s["cause_name"]) == (
        1, "compute", "compute", "forward"), s
    assert s["steps"] == s["of_steps"] == 10
    assert 14_000 <= s["excess_us"] <= 16_000 and 14_000 <= s["cause_excess_us"] <= 16_000
    assert job(tmp_path / "balanced", 0)["stragglers"] == []


def test_no_clock_warning_between_the_ranks_of_one_host(tmp_path):
    """Rank 3's collectives end 2 ms after the others' (its own timing, e.g. a
    late completion): on one host there is one clock, so no alignment warning
    about shifted sequence numbers (it named rank 3 before); one shifted by a
    whole collective still is (tests/tools/test_ranks_trust.py)."""
    d = tmp_path / "job"
    base = int(time.time() * 1e6)  # one time base for the four processes
    for rank in range(4):
        late = 2000 if rank == 3 else 0
        events = []
        for k in range(8):
            t = k * 10_000
            events += [ev("iteration", "pipeline", t, 9000, step=k),
                       ev("forward", "compute", t, 4000),
                       ev("all_reduce", "comm", t + 4000, 3000 + late, seq=k, group="world")]
        events = [(n, c, base + ts - 1000, du, i, st) for n, c, ts, du, i, st in events]
        write(d, events, env={"RANK": str(rank)}, at_zero=True)
    a = ranks.analyze(_core._rank_file(p) for p in find_traces(str(d)))
    assert a["alignment"]["spread_us"]["max"] >= 1900, a["alignment"]  # rank 3 ends late
    assert a["alignment"]["warnings"] == [], a["alignment"]
