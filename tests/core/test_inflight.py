"""In-flight collectives in the core (core/inflight.c; docs/trace-format.md,
"Open spans", "In-flight collectives"), without torch, on the test
extension: one launched by a thread is listed among that thread's open
spans at its launch time until any thread ends it; a thread lists its 4
oldest; a full table counts what it cannot keep and never blocks; a late
token never ends the collective that took its slot after it; a forked child
lists none of its parent's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tracefile import USE_TESTCORE, find_traces, get_testcore, parent_and_child, read_trace

PROG = USE_TESTCORE + textwrap.dedent(r"""
    import os, sys, threading, time
    from dftracer import _core
    from dftracer.python import dftracer
    log = dftracer.initialize_log(sys.argv[1], None, -1)
    ts, tc = _core.get_time, _core

    def mark(what):
        _core._span_close(_core._span_open(what, "mark", ts()))

    outer = _core._span_open("iteration", "pipeline", ts(), None, 3)
    tok = tc._inflight_begin("all_reduce", "comm", ts(), "world", 5, 2)
    inner = _core._span_open("backward", "compute", ts())
    time.sleep(0.7)                      # 1: iteration, all_reduce, backward
    _core._span_close(inner)
    ender = threading.Thread(target=tc._inflight_end, args=(tok,))
    ender.start(); ender.join()          # ended on another thread
    time.sleep(0.7)                      # 2: iteration
    toks = [tc._inflight_begin("all_gather", "comm", ts(), "g[0-1]", k, -1) for k in range(300)]
    kept = [t for t in toks if t]
    print("kept", len(kept), "missed", tc._inflight_missed(), flush=True)
    time.sleep(0.7)                      # 3: iteration and the 4 oldest all_gathers
    tc._inflight_end(kept[0])
    late = tc._inflight_begin("broadcast", "comm", ts(), "world", 9, -1)  # the one free slot
    tc._inflight_end(kept[0])            # a late token: its slot's new tenant stays
    for t in kept[1:]:
        tc._inflight_end(t)
    time.sleep(0.7)                      # 4: iteration and the broadcast
    pid = os.fork()
    if pid == 0:
        time.sleep(0.7)                  # the child: the parent's broadcast is not its own
        log.finalize()
        os._exit(0)
    os.waitpid(pid, 0)
    mark("after fork")                   # the flusher stopped for the fork starts again
    tc._inflight_end(late)
    _core._span_close(outer)
    time.sleep(0.7)                      # 5: nothing
    log.finalize()
""")


def snapshots(trace):
    """The shapes of the main thread's snapshots, in time order:
    [[(value, seq or step, bucket, async)]]."""
    by_at = {}
    for e in trace.events:
        if e["ph"] == "M" and e["name"] == "open":
            by_at.setdefault(e["args"]["at"], []).append(e["args"])
    out = []
    for _, spans in sorted(by_at.items()):
        spans = sorted((a for a in spans if a["n"]), key=lambda a: a["depth"])
        assert all(a["n"] == len(spans) for a in spans)
        shape = [(a["value"], a.get("seq", a.get("step")), a.get("bucket"), a.get("async"))
                 for a in spans]
        if not out or out[-1] != shape:
            out.append(shape)
    return out


def test_in_flight_collectives_listed_until_ended_from_any_thread(tmp_path):
    get_testcore()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(DFTRACER_ENABLE="1", DFTRACER_FLUSH_INTERVAL="0.2")
    r = subprocess.run([sys.executable, "-c", PROG, str(tmp_path / "trace")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["kept", "256", "missed", "44"]
    traces = [read_trace(p) for p in find_traces(str(tmp_path))]
    assert len(traces) == 2
    parent, child = parent_and_child(traces)
    it = ("iteration", 3, None, None)
    gathers = [("all_gather", k, None, 1) for k in range(4)]
    shapes = snapshots(parent)
    # (an empty snapshot also stands while a new innermost is younger than an interval;
    # a snapshot may fall between backward's close and the ender thread's end of the
    # all_reduce: that one shape, once, right after the first)
    between = [it, ("all_reduce", 5, 2, 1)]
    shown = [s for s in shapes if s]
    if len(shown) > 1 and shown[1] == between:
        del shown[1]
    assert shown == [
        [it, ("all_reduce", 5, 2, 1), ("backward", None, None, None)],
        [it],
        [it] + gathers,
        [it, ("broadcast", 9, None, 1)],
    ]
    assert shapes[-1] == []
    first = [e["args"] for e in parent.events if e["ph"] == "M" and e["name"] == "open"][:3]
    assert first[1]["group"] == "world" and first[1]["span_cat"] == "comm"
    assert first[0]["since"] <= first[1]["since"] <= first[2]["since"]
    assert snapshots(child) == []  # neither the parent's spans nor its broadcast
