"""A hung job explained (docs/hang.md): the `open` and `stack` events of the
trace (docs/trace-format.md), `dftracer top --hang-after`, `dftracer stacks`
and `summary --ranks` after the job was killed.

Three gloo jobs of 4 ranks under `dftracer run -- torchrun`, each shared by
the tests of its fixture (tests/tools/hang_prog.py): rank 2 asleep before its
step-12 all_reduce; rank 1 deadlocked on a lock with its worker thread and
rank 2 blocked reading a FIFO; a job whose ranks all compute 6 s in one step
and have no fault.  The rule itself is also checked on traces written by
hand."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tracefile import find_traces, read_trace

torch = pytest.importorskip("torch", reason="the distributed job needs torch")

from dftracer.tools import cli, hang  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hang_prog.py")
START_S = 120  # torch's import on a loaded 2-core machine takes most of it


def mark_line(mark):
    with open(PROG) as fh:
        for i, line in enumerate(fh, 1):
            if line.rstrip().endswith(f"# mark:{mark}"):
                return i
    raise AssertionError(mark)


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    e["DFTRACER_FLUSH_INTERVAL"] = "1"
    return e


def dft(*args):
    """The CLI in this process: (exit status, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(list(args))
    return rc, out.getvalue()


def top_json(runs, after=3):
    rc, out = dft("top", "--once", "--json", "--hang-after", str(after), str(runs))
    assert rc == 0, out
    return json.loads(out)


def start(base, *prog_args, data_dir=None):
    (base / "runs").mkdir(parents=True)
    extra = ["--data-dir", str(data_dir)] if data_dir else []
    return subprocess.Popen(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", *extra, "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
         PROG, *prog_args], cwd=str(base), env=env(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True)


def wait_for_hang(proc, runs):
    """The first top snapshot with a hang, and every snapshot before it."""
    seen = []
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        if os.path.isdir(runs) and find_traces(str(runs)):
            snap = top_json(runs)
            seen.append(snap)
            if snap["hang"]:
                return snap, seen
        time.sleep(0.5)
    raise AssertionError("no hang reported")


def kill(proc):
    """SIGTERM, then SIGKILL, to the whole job."""
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def sleep_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("sleep")
    runs = base / "runs"
    proc = start(base, "--fault", "sleep", "--at", "12", "--rank", "2")
    try:
        snap, seen = wait_for_hang(proc, runs)
        src, stacks = dft("stacks", str(runs), "--json")
        _, stacks_text = dft("stacks", str(runs))
        rc, text = dft("top", "--once", "--hang-after", "3", str(runs))  # with the stacks
        screen = live_view(base, runs)
    finally:
        kill(proc)
    return {"runs": runs, "snap": snap, "seen": seen, "top_text": text, "stacks": json.loads(stacks),
            "stacks_rc": src, "stacks_text": stacks_text, "screen": screen}


def live_view(base, runs):
    """The live view's screen (tmux, 160 columns) once it shows the hang; None
    without tmux and rich (CI requires them: test_top.py)."""
    from test_top import HAS_RICH, TMUX, Tmux

    if not (TMUX and HAS_RICH):
        return None
    tm = Tmux(base)
    try:
        tm.start(f"{sys.executable} -m dftracer top --hang-after 3 {runs}")
        tm.tmux("resize-window", "-t", "t", "-x", "160", "-y", "40", check=False)
        return tm.wait_for(lambda s: "hang: rank 2" in s and "all_reduce #12" in s, timeout=30)
    finally:
        tm.kill()


def test_top_reports_the_hang_within_9_s(sleep_job):
    h = sleep_job["snap"]["hang"]
    assert h["stuck_ranks"] == [2] and h["waiting_ranks"] == [0, 1, 3]
    assert (h["collective"], h["group"], h["seq"]) == ("all_reduce", "world", 12)
    # reported while the first rank to wait had waited at most 9 s
    assert 3 <= h["since_s"] <= 9
    assert all(s["hang"] is None for s in sleep_job["seen"][:-1])
    stuck = h["stuck"][0]
    assert stuck["rank"] == 2 and stuck["pid"] > 0
    assert [o["name"] for o in stuck["open"]] == ["iteration"] and stuck["open"][0]["step"] == 12


def test_top_text_puts_the_hang_first(sleep_job):
    lines = sleep_job["top_text"].splitlines()
    assert lines[0].startswith("dftracer top:")
    hang_line = lines[2]
    assert hang_line.startswith(f"hang: rank 2 stopped in hang_prog.py:{mark_line('sleep')} "
                                "(time.sleep) during iteration 12; ranks 0, 1, 3 waited ")
    assert hang_line.endswith(" s in all_reduce #12 (world)")


def test_the_live_view_shows_the_hang_above_everything(sleep_job):
    screen = sleep_job["screen"]
    if screen is None:
        pytest.skip("needs tmux (scripts/install-tmux.sh) and rich (the 'top' extra)")
    lines = [ln for ln in screen.splitlines() if ln.strip()]
    at = next(i for i, ln in enumerate(lines) if "hang: rank 2" in ln)
    assert at <= 1, screen  # the banner is the first thing on the screen
    assert "ranks 0, 1, 3 waited" in " ".join(lines[at:at + 3]), screen


def test_stacks_of_every_rank(sleep_job):
    out = sleep_job["stacks"]
    assert sleep_job["stacks_rc"] == 0
    procs = {p["rank"]: p for p in out["processes"]}
    assert sorted(procs) == [0, 1, 2, 3]
    assert [p["rank"] for p in out["others"]] == [None]  # the torchrun agent
    for rank, p in procs.items():
        main = [t for t in p["threads"] if t["tid"] == p["pid"]]
        assert len(main) == 1 and main[0]["name"] == "MainThread"
        frames = main[0]["frames"]
        mine = [f for f in frames if f["file"] == PROG]
        want = mark_line("sleep" if rank == 2 else "all_reduce")
        assert mine and mine[-1]["line"] == want and mine[-1]["function"] == "<module>"
        if rank == 2:  # innermost last: nothing runs below the sleep
            assert frames[-1]["file"] == PROG
    text = sleep_job["stacks_text"]
    assert "== rank 2: pid" in text and "time.sleep(3600)  # mark:sleep" in text


def test_the_traces_hold_open_spans_and_stacks(sleep_job):
    """Every line parses and follows docs/trace-format.md (read_trace checks
    each); the waiting ranks' `open` events name the collective, rank 2's
    the iteration; the stacks asked for, and those of SIGTERM, are there."""
    traces = {p: read_trace(p, require_end=False) for p in find_traces(str(sleep_job["runs"]))}
    ranks = {}
    for t in traces.values():
        r = [e["args"]["value"] for e in t.events if e["ph"] == "M" and e["name"] == "rank"]
        if r:
            ranks[r[-1]] = t
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank, t in ranks.items():
        opens = [e for e in t.events if e["ph"] == "M" and e["name"] == "open"]
        assert opens
        for e in opens:
            a = e["args"]
            assert a["name"] == "open" and isinstance(a["at"], int) and a["n"] >= 0
            if a["n"]:
                assert {"value", "depth", "since", "span_cat"} <= set(a) and a["since"] <= a["at"]
        last_at = max(e["args"]["at"] for e in opens)
        last = [e["args"] for e in opens if e["args"]["at"] == last_at]
        names = [(a["value"], a.get("seq"), a.get("step")) for a in sorted(last, key=lambda a: a["depth"])]
        if rank == 2:
            assert names == [("iteration", None, 12)]
        else:
            assert names[-1] == ("all_reduce", 12, None) and last[-1]["group"] == "world"
            assert names[0] == ("iteration", None, 12)
        stacks = [e["args"] for e in t.events if e["ph"] == "M" and e["name"] == "stack"]
        assert {"request", "SIGTERM"} <= {a["why"] for a in stacks}
        for a in stacks:
            assert a["k"] < a["n"] and isinstance(a["frames"], str) and a["req"] >= 1


def test_summary_ranks_after_the_kill(sleep_job):
    runs = str(sleep_job["runs"])
    rc, out = dft("summary", "--ranks", "--json", runs)
    h = json.loads(out)["hang"]
    assert h["stuck_ranks"] == [2] and h["waiting_ranks"] == [0, 1, 3]
    assert (h["collective"], h["group"], h["seq"]) == ("all_reduce", "world", 12)
    assert h["since_s"] >= sleep_job["snap"]["hang"]["since_s"]
    stuck = h["stuck"][0]
    assert (os.path.basename(stuck["file"]), stuck["line"]) == ("hang_prog.py", mark_line("sleep"))
    rc, text = dft("summary", "--ranks", runs)
    first = text.splitlines()[0]
    assert first == (f"hang: rank 2 stopped in hang_prog.py:{mark_line('sleep')} (time.sleep) "
                     f"during iteration 12; ranks 0, 1, 3 waited {h['since_s']:.1f} s in "
                     "all_reduce #12 (world)")


def test_old_readers_are_unaffected(sleep_job):
    runs = str(sleep_job["runs"])
    rc, out = dft("validate", runs)
    assert rc == 0, out
    rc, out = dft("summary", "--json", runs)
    names = {r["name"] for r in json.loads(out)["by_name"]}
    assert not names & {"open", "stack"}


def test_report_and_view_show_the_hang(sleep_job, tmp_path):
    pytest.importorskip("plotly", reason="the report needs plotly")
    import html

    from dftracer.tools import view

    runs = str(sleep_job["runs"])
    rc, out = dft("summary", "--ranks", "--json", runs)
    message = json.loads(out)["hang"]["message"]
    rc, _ = dft("report", runs, "-o", str(tmp_path / "r.html"))
    assert rc == 0
    page = (tmp_path / "r.html").read_text()
    assert page.index(html.escape(message)) < page.index("<h2>By category</h2>")
    served = view._prepare(find_traces(runs), str(tmp_path))
    merged = read_trace(served, check=False, require_end=False)
    marks = [e for e in merged.events if e["name"] == "HANG"]
    assert len(marks) == 1 and marks[0]["ph"] == "i" and marks[0]["s"] == "g"
    assert marks[0]["args"]["message"] == message and marks[0]["args"]["stuck_ranks"] == [2]
    rc, out = dft("validate", served)
    assert rc == 0, out


@pytest.fixture(scope="module")
def lockfifo_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("lockfifo")
    data = base / "data"
    data.mkdir()
    fifo = data / "never-written"
    os.mkfifo(fifo)
    proc = start(base, "--fault", "lockfifo", "--at", "3", "--steps", "5", "--fifo", str(fifo),
                 data_dir=data)
    try:
        snap, _ = wait_for_hang(proc, base / "runs")
        _, stacks = dft("stacks", str(base / "runs"), "--json")
    finally:
        kill(proc)
    return {"runs": base / "runs", "snap": snap, "stacks": json.loads(stacks), "fifo": str(fifo)}


def test_a_deadlock_and_a_blocked_read(lockfifo_job):
    h = lockfifo_job["snap"]["hang"]
    assert h["stuck_ranks"] == [1, 2] and h["waiting_ranks"] == [0, 3]
    assert (h["collective"], h["seq"]) == ("all_reduce", 3)
    by_rank = {s["rank"]: s for s in h["stuck"]}
    read = by_rank[2]["open"][-1]
    assert read["name"] == "read" and read["cat"] == "POSIX" and read["file"] == lockfifo_job["fifo"]
    assert "read" in h["message"] and "rank 1" in h["message"]
    procs = {p["rank"]: p for p in lockfifo_job["stacks"]["processes"]}
    threads = {t["name"]: t["frames"] for t in procs[1]["threads"]}
    assert [f["line"] for f in threads["MainThread"] if f["file"] == PROG][-1] == mark_line("join")
    # the worker recorded no event: the tracer does not know its Python name
    others = [t for t in procs[1]["threads"] if t["name"] != "MainThread"]
    worker = [f for t in others for f in t["frames"] if f["file"] == PROG]
    assert worker[-1]["line"] == mark_line("worker") and worker[-1]["function"] == "<lambda>"
    main2 = [t for t in procs[2]["threads"] if t["name"] == "MainThread"][0]["frames"]
    assert (main2[-1]["file"], main2[-1]["line"]) == (PROG, mark_line("fifo"))
    rc, out = dft("summary", "--ranks", "--json", str(lockfifo_job["runs"]))
    assert json.loads(out)["hang"]["stuck_ranks"] == [1, 2]


def test_no_false_alarm_for_a_long_common_step_and_no_fault(tmp_path):
    proc = start(tmp_path, "--fault", "none", "--at", "2", "--steps", "4", "--long", "6")
    runs = tmp_path / "runs"
    snaps = []
    try:
        deadline = time.monotonic() + START_S
        while proc.poll() is None and time.monotonic() < deadline:
            if os.path.isdir(runs) and find_traces(str(runs)):
                snaps.append(top_json(runs))
            time.sleep(0.5)
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            kill(proc)
    # the long step was seen: every rank inside iteration 2 for over 3 s
    long_seen = [s for s in snaps if any(p["state"] == "running" for p in s["processes"])]
    assert len(long_seen) >= 4
    assert all(s["hang"] is None for s in snaps)
    assert top_json(runs)["hang"] is None
    rc, out = dft("summary", "--ranks", "--json", "--hang-after", "0", str(runs))
    assert json.loads(out)["hang"] is None


# ---- the rule on traces written by hand ---------------------------------------------

def proc_of(rank, pid, spans, at, state="running"):
    st = hang.ProcHang()
    for k, s in enumerate(spans):
        st.observe("open", dict(s, name="open", at=at, n=len(spans), depth=k), pid)
    if not spans:
        st.observe("open", {"name": "open", "value": "", "at": at, "n": 0}, pid)
    return {"rank": rank, "pid": pid, "host": "h", "path": f"p{rank}", "state": state,
            "world_size": 4, "last_ts": at, "hang": st}


def ar(since, seq=12, group="world"):
    return {"value": "all_reduce", "span_cat": "comm", "since": since, "group": group, "seq": seq}


def it(since, step=12):
    return {"value": "iteration", "span_cat": "pipeline", "since": since, "step": step}


def test_rule_waiting_threshold_and_catching_up():
    s = 1_000_000_000
    waiting = [proc_of(r, 10 + r, [it(s), ar(s + r)], s + 5_000_000) for r in (0, 1, 3)]
    stuck = proc_of(2, 12, [it(s)], s + 5_000_000)
    h = hang.detect(waiting + [stuck], s + 5_000_000, 3)
    assert h["stuck_ranks"] == [2] and h["waiting_ranks"] == [0, 1, 3] and h["since_s"] == 5.0
    assert h["message"] == ("hang: rank 2 stopped during iteration 12; ranks 0, 1, 3 waited "
                            "5.0 s in all_reduce #12 (world)")
    assert hang.detect(waiting + [stuck], s + 2_000_000, 3) is None  # not long enough yet
    # rank 2 caught up: the next snapshots are empty
    for p in waiting:
        p["hang"].observe("open", {"name": "open", "value": "", "at": s + 6_000_000, "n": 0}, p["pid"])
    assert hang.detect(waiting + [stuck], s + 6_000_000, 3) is None
    # every rank inside it: nobody missing
    everyone = [proc_of(r, 10 + r, [ar(s)], s) for r in range(4)]
    assert hang.detect(everyone, s + 9_000_000, 3) is None
    # a rank that never wrote a trace is stuck; a finished one does not wait
    h = hang.detect([proc_of(0, 10, [ar(s)], s), proc_of(1, 11, [ar(s)], s), stuck], s + 9_000_000, 3)
    assert h["stuck_ranks"] == [2, 3] and h["stuck"][1]["state"] == "no trace"
    done = [proc_of(r, 10 + r, [ar(s)], s, state="finished") for r in range(3)]
    assert hang.detect(done, s + 9_000_000, 3) is None


def test_rule_subgroups_and_many_ranks():
    s = 1_000_000_000
    group = "1[0-3]"  # ranks 0..3 of 8
    procs = [proc_of(r, 100 + r, [ar(s, seq=7, group=group)], s) for r in (0, 1, 2)]
    procs += [proc_of(r, 100 + r, [it(s)], s) for r in range(3, 8)]
    h = hang.detect(procs, s + 70_000_000, 60)
    assert h["stuck_ranks"] == [3] and h["group"] == group and h["seq"] == 7
    many = [proc_of(r, 1000 + r, [ar(s)], s) for r in range(512) if r not in (5, 77)]
    many += [proc_of(5, 1005, [it(s)], s), proc_of(77, 1077, [], s)]
    h = hang.detect(many, s + 61_000_000, 60)
    assert h["stuck_ranks"] == [5, 77] and len(h["waiting_ranks"]) == 510
    assert "ranks 0, 1, 2, 3, 4, 6, 7, 8 and 502 more waited" in h["message"]
