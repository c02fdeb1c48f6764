"""Asking for stacks never harms the program (issue 48, docs/hang.md, "How a
request reaches the process"): no signal is sent to anyone, a request is a
file beside the trace the flusher looks at, and the walker reads frames
through copies that cannot fault.

Without torch: a program whose threads start and end all the time asked
100 times in each of 10 runs; 1,000 threads; a program handling every
real-time signal and SIGUSR1/2 itself; an untraced process holding a file
named with its pid; a crafted folder for `top --once`; a pid of 2**40 in a
name; a forked child that blocks; SIGTERM's stacks."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from dftracer.tools import cli, stacks, trace_name
from tracefile import find_traces, read_trace

ANSWER_S = 60  # a loaded 2-core machine: the flusher wakes every 10 ms here


def env(interval="0.02"):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    e.update(DFTRACER_ENABLE="1", DFTRACER_FLUSH_INTERVAL=interval)
    return e


def trace_of(folder, n=1):
    """The trace files in folder once there are n (the header is written at
    once or by the flusher within its interval)."""
    deadline = time.monotonic() + ANSWER_S
    while len(find_traces(str(folder))) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return find_traces(str(folder))


def dft(*args):
    """The CLI in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, out.getvalue(), err.getvalue()


def start(prog, *args, interval="0.02"):
    """The program started and past its "ready" line."""
    p = subprocess.Popen([sys.executable, "-c", prog, *map(str, args)], env=env(interval),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    if line.strip() != "ready":
        p.kill()
        _, err = p.communicate(timeout=30)
        raise AssertionError(f"not ready: {line!r} {err}")
    return p


def in_read(pid, tid=None):
    """Waits until thread tid (the main thread) of pid is blocked in read(2):
    its readline, the last line it reaches (x86-64 and arm64 syscall numbers)."""
    deadline = time.monotonic() + ANSWER_S
    nr = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{tid or pid}/syscall") as fh:
                if fh.read().split()[0] == nr:
                    return
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    raise AssertionError(f"{pid} never blocked in read")


def finish(p):
    """(exit status, stdout, stderr) once the program has been told to end."""
    try:
        out, err = p.communicate("\n", timeout=ANSWER_S)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    return p.returncode, out, err


def answer_after(path, offset, last_req, deadline):
    """The newest request number answered in path's bytes after offset, once
    one newer than last_req is there (None at the deadline)."""
    while time.monotonic() < deadline:
        reqs = [e["args"].get("req", 0) for e in stacks._events_from(path, offset)]
        if reqs and max(reqs) > last_req:
            return max(reqs)
        time.sleep(0.005)
    return None


CHURN = textwrap.dedent(r"""
    import os, sys, threading
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    def work(d):
        return work(d - 1) + 1 if d else sum(range(100))
    rounds, total = 0, 0
    print("ready", flush=True)
    # threads start and end until told to stop (stdin closed): how long that
    # is depends on the asker, what is printed on the work done
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)
    while not sel.select(0):
        ts = [threading.Thread(target=work, args=(40,)) for _ in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        rounds += 1
    print("done", rounds, flush=True)
    log.finalize()
""")


@pytest.mark.parametrize("run", range(10))
def test_thread_churn_survives_100_requests(tmp_path, run):
    p = start(CHURN, tmp_path / "trace")
    path = trace_of(tmp_path)[0]
    last = 0
    try:
        for i in range(100):
            offset = os.path.getsize(path)
            assert stacks._write_request(path) is None
            got = answer_after(path, offset, last, time.monotonic() + ANSWER_S)
            assert got is not None, f"request {i} not answered; process alive: {p.poll() is None}"
            last = got
    finally:
        rc, out, err = finish(p)
    assert rc == 0, err
    assert out.startswith("done ") and int(out.split()[1]) > 0, out
    trace = read_trace(path)
    answers = {e["args"]["req"] for e in trace.events if e["ph"] == "M" and e["name"] == "stack"}
    assert len(answers) >= 100
    mains = [e for e in trace.events if e["name"] == "stack" and e["args"]["value"] == "MainThread"]
    bad = [(e["tid"], e["args"]["k"], e["args"]["n"], e["args"]["frames"][-80:]) for e in mains if e["args"]["k"]]
    assert mains and not bad, bad[:5]  # the main thread first


MANY = textwrap.dedent(r"""
    import sys, threading
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    go = threading.Event()
    def waiter():
        go.wait()  # mark:waiter
    threads = [threading.Thread(target=waiter) for _ in range(1000)]
    for t in threads: t.start()
    print("ready", flush=True)
    sys.stdin.readline()  # mark:main
    go.set()
    for t in threads: t.join()
    print("done", flush=True)
    log.finalize()
""")


def mark_line(prog, mark):
    return next(i for i, l in enumerate(prog.splitlines(), 1) if l.rstrip().endswith(f"# mark:{mark}"))


def test_1000_threads(tmp_path):
    p = start(MANY, tmp_path / "trace")
    trace_of(tmp_path)
    in_read(p.pid)
    try:
        rc, out, err = dft("stacks", str(tmp_path), "--json", "--timeout", str(ANSWER_S))
    finally:
        prc, pout, perr = finish(p)
    assert rc == 0, err
    assert prc == 0 and pout == "done\n", perr
    proc = json.loads(out)["others"][0]
    assert proc["pid"] == p.pid and "why" not in proc
    assert len(proc["threads"]) == 1001
    main = proc["threads"][0]
    assert main["name"] == "MainThread" and main["tid"] == p.pid
    assert (main["frames"][-1]["file"], main["frames"][-1]["line"]) == ("<string>", mark_line(MANY, "main"))
    waiters = [[f for f in t["frames"] if f["file"] == "<string>"][-1] for t in proc["threads"][1:]]
    bad = [f for f in waiters if (f["line"], f["function"]) != (mark_line(MANY, "waiter"), "waiter")]
    assert not bad, bad[:3]


# Handles every real-time signal and SIGUSR1/2 itself: a handler that runs
# exits 7, as the audit's program did.
OWN_HANDLERS = textwrap.dedent(r"""
    import os, signal, sys
    def caught(sig, frame):
        print("caught", sig, flush=True)
        os._exit(7)
    for s in [signal.SIGUSR1, signal.SIGUSR2, *range(signal.SIGRTMIN, signal.SIGRTMAX + 1)]:
        signal.signal(s, caught)
    if sys.argv[2] == "traced":
        from dftracer.python import dftracer
        log = dftracer.initialize_log(sys.argv[1], None, -1)
    else:  # untraced, holding a file named as a trace of its pid
        import socket
        held = open(f"{sys.argv[1]}-{socket.gethostname()}-{os.getpid()}-app.pfw", "w")
    print("ready", flush=True)
    sys.stdin.readline()  # mark:wait
    print("done", flush=True)
""")


def test_a_program_with_its_own_handlers_is_asked_without_a_signal(tmp_path):
    p = start(OWN_HANDLERS, tmp_path / "trace", "traced")
    trace_of(tmp_path)
    in_read(p.pid)
    try:
        rc, out, err = dft("stacks", str(tmp_path), "--json", "--timeout", str(ANSWER_S))
        trc, tout, terr = dft("top", "--once", "--json", str(tmp_path))
    finally:
        prc, pout, perr = finish(p)
    assert (prc, pout) == (0, "done\n"), perr  # no handler ran
    assert rc == 0 and trc == 0, err + terr
    proc = json.loads(out)["others"][0]
    assert proc["pid"] == p.pid and "why" not in proc
    frames = proc["threads"][0]["frames"]
    assert (frames[-1]["file"], frames[-1]["line"]) == ("<string>", mark_line(OWN_HANDLERS, "wait"))


def test_an_untraced_process_holding_a_trace_name_is_untouched(tmp_path):
    p = start(OWN_HANDLERS, tmp_path / "trace", "untraced")
    try:
        rc, out, err = dft("stacks", str(tmp_path), "--json", "--timeout", "1")
    finally:
        prc, pout, perr = finish(p)
    assert (prc, pout) == (0, "done\n"), perr
    assert rc == 0, err
    proc = json.loads(out)["others"][0]
    assert proc["pid"] == p.pid and proc["threads"] == [] and "no answer" in proc["why"]


def crafted(folder, pid, rank, spans, now_us):
    """A trace file of pid as rank, whose newest snapshot holds spans."""
    host = trace_name.host_name()
    path = folder / f"trace-{host}-{pid}-app.pfw"
    meta = [("HH", {"name": socket.gethostname(), "value": "00"}),
            ("rank", {"name": "rank", "value": rank, "world_size": 2})]
    for d, (name, cat, extra) in enumerate(spans):
        meta.append(("open", dict({"name": "open", "value": name, "at": now_us - 1_000_000,
                                   "n": len(spans), "depth": d, "since": now_us - 60_000_000,
                                   "span_cat": cat}, **extra)))
    lines = ["["] + [json.dumps({"id": i, "name": n, "cat": "dftracer", "pid": pid, "tid": pid,
                                 "ph": "M", "args": a}) for i, (n, a) in enumerate(meta, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_crafted_folder_makes_top_send_nothing(tmp_path):
    """Two files: rank 0 (pid 2**40) waits in an all_reduce, rank 1 (a live
    process handling every signal, holding its file) is in no collective:
    top names rank 1 stuck and asks it for stacks, by a file only."""
    p = start(OWN_HANDLERS, tmp_path / "trace", "untraced")
    now = int(time.time() * 1e6)
    crafted(tmp_path, 2**40, 0, [("iteration", "pipeline", {"step": 3}),
                                 ("all_reduce", "comm", {"group": "world", "seq": 3})], now)
    victim = tmp_path / f"trace-{trace_name.host_name()}-{p.pid}-app.pfw"
    crafted(tmp_path, p.pid, 1, [("iteration", "pipeline", {"step": 3})], now)
    try:
        rc, out, err = dft("top", "--once", "--json", "--hang-after", "1", str(tmp_path))
        src, sout, serr = dft("stacks", str(tmp_path), "--json", "--timeout", "1")
    finally:
        prc, pout, perr = finish(p)
    assert (prc, pout) == (0, "done\n"), perr
    assert rc == 0 and "Traceback" not in err, err
    hang = json.loads(out)["hang"]
    assert hang and [s["rank"] for s in hang["stuck"]] == [1], out
    assert os.path.exists(trace_name.request_path(str(victim)))  # asked, by a file
    assert src == 0 and "Traceback" not in serr, serr
    listed = json.loads(sout)
    # the live process is listed (as rank 1, its crafted file says so); 2**40 is no process
    assert [q["pid"] for q in listed["processes"] + listed["others"]] == [p.pid], listed


FORK_BLOCK = textwrap.dedent(r"""
    import os, sys
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        print("ready", flush=True)
        os.read(r, 1)  # mark:child
        os._exit(0)
    os.close(r)
    sys.stdin.readline()  # mark:parent
    os.write(w, b"x")
    os.waitpid(pid, 0)
    print("done", flush=True)
    log.finalize()
""")


@pytest.mark.no_asan  # forks
def test_a_forked_child_that_blocks_and_its_parent_answer(tmp_path):
    """The child traces under its own pid and its flusher answers; so does
    the parent, blocked right after the fork with no event (its flusher is
    back from its after-fork hook; on 3.13 only at its next event:
    docs/hang.md)."""
    p = start(FORK_BLOCK, tmp_path / "trace")
    try:
        traces = trace_of(tmp_path, 2)  # the child's file is written by its flusher
        child = [t for t in traces if f"-{p.pid}-app" not in t]
        assert len(child) == 1, traces
        child_pid = trace_name.parse(child[0]).pid
        in_read(child_pid)
        in_read(p.pid)
        asked = traces if sys.version_info[:2] != (3, 13) else child
        rc, out, err = dft("stacks", *asked, "--json", "--timeout", str(ANSWER_S))
    finally:
        prc, pout, perr = finish(p)
    assert prc == 0 and pout == "done\n", perr
    assert rc == 0, err
    procs = {q["pid"]: q for q in json.loads(out)["others"]}
    assert len(procs) == len(asked) and all("why" not in q for q in procs.values()), out
    assert procs[child_pid]["ppid"] == p.pid
    frames = procs[child_pid]["threads"][0]["frames"]
    assert (frames[-1]["file"], frames[-1]["line"]) == ("<string>", mark_line(FORK_BLOCK, "child"))
    if p.pid in procs:
        frames = procs[p.pid]["threads"][0]["frames"]
        assert (frames[-1]["file"], frames[-1]["line"]) == ("<string>", mark_line(FORK_BLOCK, "parent"))


CHDIR = textwrap.dedent(r"""
    import os, sys
    from dftracer.python import dftracer
    log = dftracer.initialize_log("trace", None, -1)  # relative to the folder it starts in
    os.chdir("/")
    print("ready", flush=True)
    sys.stdin.readline()  # mark:chdir
""")


def test_a_relative_trace_path_and_a_chdir(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CHDIR], env=env(), cwd=tmp_path, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == "ready\n"
        trace_of(tmp_path)
        in_read(p.pid)
        rc, out, err = dft("stacks", str(tmp_path), "--json", "--timeout", str(ANSWER_S))
    finally:
        finish(p)
    assert rc == 0, err
    (proc,) = json.loads(out)["others"]
    assert "why" not in proc, proc
    frames = proc["threads"][0]["frames"]
    assert (frames[-1]["file"], frames[-1]["line"]) == ("<string>", mark_line(CHDIR, "chdir"))


TERM = textwrap.dedent(r"""
    import sys, time
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    print("ready", flush=True)
    sys.stdin.readline()  # mark:term
""")


def test_sigterm_still_writes_the_stacks(tmp_path):
    p = start(TERM, tmp_path / "trace", interval="1")
    trace_of(tmp_path)
    in_read(p.pid)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=ANSWER_S)
    assert p.returncode == -signal.SIGTERM
    trace = read_trace(find_traces(str(tmp_path))[0], require_end=False)
    st = [e["args"] for e in trace.events if e["ph"] == "M" and e["name"] == "stack"]
    assert [a["why"] for a in st] == ["SIGTERM"]
    assert st[0]["frames"].endswith(f"<string>:{mark_line(TERM, 'term')} <module>")


def test_request_path_matches_the_tracer():
    assert trace_name.request_path("/r/trace-n17-42-app.pfw.gz") == "/r/trace-n17-42-stacks.req"
    assert trace_name.request_path("/r/trace-n17-42.3-app.pfw") == "/r/trace-n17-42.3-stacks.req"
    assert trace_name.request_path("/r/notes.txt") is None


@pytest.mark.parametrize("pipe_only", [False, True], ids=["process_vm_readv", "pipe"])
def test_the_walker_with_either_copy(pipe_only):
    """The walker of src/hang/walk.c called directly (the test extension), by
    process_vm_readv and by the pipe it falls back to where seccomp refuses
    that syscall: a copy from memory unmapped a moment ago is refused, not a
    crash, and the frames are this test's own."""
    import threading

    from tracefile import get_testcore

    core = get_testcore()
    assert core._walk_copy_for_test(pipe_only) == (True, True)
    go = threading.Event()
    helper = threading.Thread(target=go.wait, name="helper")
    helper.start()
    try:
        here = sys._getframe().f_lineno + 1
        threads = core._walk_for_test(pipe_only)
    finally:
        go.set()
        helper.join()
    main = threads[0]
    assert main[0] == threading.main_thread().ident
    assert main[2][0] == (__file__, here, "test_the_walker_with_either_copy")
    (mine,) = [t for t in threads if t[0] == helper.ident]
    assert [f[2] for f in mine[2]][-2:] == ["_bootstrap_inner", "_bootstrap"]
    assert mine[2][0][2] == "wait" and mine[2][0][0] == threading.__file__


@pytest.mark.parametrize("pipe_only", [False, True], ids=["process_vm_readv", "pipe"])
def test_the_walker_ends_at_each_threads_bottom_frame(pipe_only):
    """The stack sampler counts a walk only when it ended at the frame its
    thread's own reading (GIL held) names as the bottom (a walk that followed
    a popped frame's stale links ends elsewhere): the two agree, for the main
    thread and for another, on every version's frame layout."""
    import threading

    from tracefile import get_testcore

    core = get_testcore()
    go, ready, seen = threading.Event(), threading.Event(), []

    def helper_main():
        seen.append(core._walk_bottom_here_for_test())
        ready.set()
        go.wait()

    helper = threading.Thread(target=helper_main, name="helper")
    helper.start()
    try:
        assert ready.wait(60)
        bottoms = {t[0]: t[3] for t in core._walk_for_test(pipe_only)}
        here = core._walk_bottom_here_for_test()
    finally:
        go.set()
        helper.join()
    assert here and seen[0] and here != seen[0]
    assert bottoms[threading.main_thread().ident] == here
    assert bottoms[helper.ident] == seen[0]


@pytest.mark.parametrize("pipe_only", [False, True], ids=["process_vm_readv", "pipe"])
def test_a_walk_deeper_than_its_cap_keeps_the_innermost_frames_and_reaches_the_bottom(pipe_only):
    """A stack deeper than the frames a walk keeps (the stack sampler keeps
    64): the innermost are kept, innermost first, and the walk follows the
    links on to the bottom frame, so the sampler's check that a walk ended at
    its thread's bottom holds for it too (a program 100 frames deep was
    never counted), and `depth` says how many it went through."""
    import threading

    from tracefile import get_testcore

    core = get_testcore()
    got = []

    def dive(n):
        if n:
            return dive(n - 1)
        here = sys._getframe().f_lineno + 1
        walks = [core._walk_for_test(pipe_only, 64), core._walk_for_test(pipe_only)]
        got.append((here, walks, core._walk_bottom_here_for_test()))

    dive(150)
    here, (cut, full), bottom = got[0]
    outside, f = 151, sys._getframe()  # dive's 151 frames, then this one and its callers
    while f:
        outside, f = outside + 1, f.f_back
    for walk, kept in ((cut, 64), (full, 100)):
        main = walk[0]
        assert main[0] == threading.main_thread().ident
        frames, reached, depth = main[2], main[3], main[4]
        assert len(frames) == kept
        assert frames[0] == (__file__, here, "dive")
        assert [f[2] for f in frames] == ["dive"] * kept
        assert reached == bottom and depth == outside, (depth, outside)
    with pytest.raises(ValueError, match="cap must be 1 to 100, not 0"):
        core._walk_for_test(pipe_only, 0)
