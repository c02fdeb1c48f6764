"""Open spans and stacks on request in the core (docs/trace-format.md, "Open
spans" and "Stacks"; docs/hang.md), without torch: the snapshots the flusher
writes as spans open and close, a forked child that does not inherit its
parent's, and stacks read while the main thread is blocked in C holding the
GIL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from tracefile import find_traces, parent_and_child, read_trace

PROG = textwrap.dedent(r"""
    import os, sys, time
    from dftracer import _core
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    ts = _core.get_time
    outer = _core._span_open("iteration", "pipeline", ts(), None, 3)
    inner = _core._span_open("all_reduce", "comm", ts(), "world", 7)
    time.sleep(0.7)
    _core._span_close(inner)
    time.sleep(0.7)
    pid = os.fork()
    if pid == 0:  # the parent's iteration never ends here
        time.sleep(0.7)
        log.finalize()
        os._exit(0)
    os.waitpid(pid, 0)
    # the flusher stopped for the fork: a span marked open starts it again
    _core._span_close(_core._span_open("short", "compute", ts()))
    _core._span_close(outer)
    _core._span_close(outer)  # twice, and a token of nothing: ignored
    _core._span_close(12345)
    time.sleep(0.7)
    log.finalize()
""")


def env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    e.update(DFTRACER_ENABLE="1", DFTRACER_FLUSH_INTERVAL="0.2", **extra)
    return e


def snapshots(trace):
    """[(at, [(value, depth, args)])] in time order."""
    by_at = {}
    for e in trace.events:
        if e["ph"] == "M" and e["name"] == "open":
            by_at.setdefault(e["args"]["at"], []).append(e["args"])
    return [(at, sorted(a, key=lambda a: a.get("depth", 0))) for at, a in sorted(by_at.items())]


def test_snapshots_follow_the_spans_and_a_fork(tmp_path):
    r = subprocess.run([sys.executable, "-c", PROG, str(tmp_path / "trace")], env=env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    traces = [read_trace(p) for p in find_traces(str(tmp_path))]
    assert len(traces) == 2
    parent, child = parent_and_child(traces)
    snaps = snapshots(parent)
    for at, spans in snaps:
        assert all(a["n"] == len(spans) or a["n"] == 0 for a in spans)
    shapes = [[(a["value"], a.get("seq", a.get("step"))) for a in spans if a["n"]] for _, spans in snaps]
    # both open, then the iteration alone, then nothing (one empty snapshot)
    assert shapes[0] == [("iteration", 3), ("all_reduce", 7)]
    assert [("iteration", 3)] in shapes and shapes[-1] == []
    assert shapes.index([("iteration", 3)]) > 0 and shapes.count([]) == 1
    first = snaps[0][1]
    assert first[1]["group"] == "world" and first[1]["span_cat"] == "comm"
    assert first[0]["since"] <= first[1]["since"] <= first[0]["at"] - 200_000
    # an unchanged set is not written again at every tick (only every 10 intervals)
    assert shapes.count(shapes[0]) <= 2
    assert snapshots(child) == []


HOLD = textwrap.dedent(r"""
    import ctypes, os, sys, threading, time
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    go = threading.Event()
    def waiter():
        go.wait()  # mark:waiter
    threading.Thread(target=waiter, name="waiter").start()
    print("ready", flush=True)
    # blocked in C with the GIL held: PyDLL does not release it
    libc, end = ctypes.PyDLL(None), time.monotonic() + 4
    while time.monotonic() < end: libc.sleep(1)  # mark:held
    go.set()
    log.finalize()
""")


def test_stacks_while_the_gil_is_held_in_c(tmp_path):
    prog = tmp_path / "hold.py"
    prog.write_text(HOLD)
    lines = {m: i for i, l in enumerate(HOLD.splitlines(), 1) for m in ("waiter", "held")
             if l.rstrip().endswith(f"# mark:{m}")}
    p = subprocess.Popen([sys.executable, str(prog), str(tmp_path / "runs" / "trace")], env=env(),
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "dftracer", "stacks", str(tmp_path / "runs"),
                            "--json"], capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")})
        answered_in = time.monotonic() - t0
    finally:
        p.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["processes"] == [] and len(out["others"]) == 1  # no rank
    proc = out["others"][0]
    assert proc["pid"] == p.pid and proc["rank"] is None and "why" not in proc
    threads = {t["name"]: t for t in proc["threads"]}
    main = threads["MainThread"]["frames"]
    ours = [f for f in main if f["file"] == str(prog)]  # (ctypes' own frames may be inside)
    assert ours[-1]["line"] == lines["held"], main
    assert threads["MainThread"]["tid"] == p.pid
    waiter = [t for n, t in threads.items() if n != "MainThread"][0]["frames"]
    assert [f["line"] for f in waiter if f["file"] == str(prog)][-1] == lines["waiter"]
    assert answered_in < 3.5  # before the sleep ended: nothing waited for the GIL
    trace = read_trace(find_traces(str(tmp_path / "runs"))[0])
    stacks = [e for e in trace.events if e["ph"] == "M" and e["name"] == "stack"]
    assert len(stacks) == 2 and {e["args"]["why"] for e in stacks} == {"request"}
