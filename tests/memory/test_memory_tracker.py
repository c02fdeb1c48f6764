"""MemoryTracker (docs/memory.md): the resident memory over a block, its
peak seen even when the allocation is gone by the end, the `memory` event in
the trace, the decorator, and --track-memory / MEM through the profiler
conveniences."""

from __future__ import annotations

import json
import textwrap

import pytest

from tracefile import find_traces, read_trace, run_python, validate

MB = 1 << 20
ENV = {"DFTRACER_ENABLE": "1"}


def last_json(out: str):
    return json.loads(out.strip().splitlines()[-1])


def test_peak_of_a_freed_allocation_and_the_report():
    proc = run_python("""
        import json
        from dftracer.python.torch import MemoryTracker
        with MemoryTracker() as m:
            x = bytearray(300 << 20)
            del x
        r = m.report()
        print(json.dumps(r))
    """)
    line, js = proc.stdout.strip().splitlines()
    r = json.loads(js)
    assert set(r) >= {"start_rss_bytes", "end_rss_bytes", "peak_rss_bytes", "cuda"}
    assert r["cuda"] is None
    assert r["peak_rss_bytes"] - r["start_rss_bytes"] >= 250 * MB
    assert r["end_rss_bytes"] - r["start_rss_bytes"] < 100 * MB  # freed before the end
    assert line.startswith("memory: resident ") and "peak" in line and "over start" in line


def test_peak_when_the_high_water_mark_was_already_higher():
    """The kernel's mark was raised before the block: only the sampler sees
    the block's peak.  The allocation is held until the sampler (every 2 ms)
    has had many chances to read it: the block touches it page by page for
    at least 0.5 s of CPU time."""
    proc = run_python("""
        import json, time
        from dftracer.python.torch import MemoryTracker
        big = bytearray(400 << 20); del big          # VmHWM now above the block's peak
        with MemoryTracker() as m:
            x = bytearray(300 << 20)
            t = time.process_time()
            while time.process_time() - t < 0.5:
                x[::4096] = b"y" * len(x[::4096])
            del x
        print(json.dumps(m.report()))
    """)
    r = last_json(proc.stdout)
    assert r["peak_rss_bytes"] - r["start_rss_bytes"] >= 250 * MB


def test_memory_event_in_the_trace_and_the_decorator(tmp_path):
    run_python("""
        from dftracer.python.torch import MemoryTracker
        tracker = MemoryTracker("load")
        @tracker
        def load():
            return bytearray(300 << 20)
        keep = load()
        tracker.report()
    """, env={**ENV, "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    (path,) = find_traces(str(tmp_path), "t")
    trace = read_trace(path)
    (ev,) = [e for e in trace.events if e["name"] == "memory" and e["ph"] == "X"]
    a = ev["args"]
    assert ev["cat"] == "memory" and a["tracker"] == "load"
    assert a["end_rss_bytes"] - a["start_rss_bytes"] >= 250 * MB
    assert a["peak_rss_bytes"] >= a["end_rss_bytes"]
    assert [v["verdict"] for v in validate(path)] == ["ok"]


def test_track_memory_flag_as_the_seed_uses_it():
    """--track-memory without --profile: the profiler block still reports."""
    proc = run_python("""
        import argparse, json
        from dftracer.python.torch import add_profiler_args, create_profiler_from_args, MemoryTracker
        parser = add_profiler_args(argparse.ArgumentParser())
        args = parser.parse_args(["--track-memory"])
        assert args.track_memory
        memory_tracker = MemoryTracker() if args.track_memory else None
        memory_tracker.__enter__()
        profiler = create_profiler_from_args(args, profile_name="flux_inference")
        with profiler:
            x = bytearray(300 << 20)
        memory_tracker.__exit__(None, None, None)
        memory_tracker.report()
        print(json.dumps(profiler.memory))
    """)
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("flux_inference: resident ")
    assert lines[1].startswith("memory: resident ")
    r = json.loads(lines[2])
    assert r["end_rss_bytes"] - r["start_rss_bytes"] >= 250 * MB


def test_no_track_memory_by_default():
    proc = run_python("""
        import argparse
        from dftracer.python.torch import add_profiler_args, create_profiler_from_args
        args = add_profiler_args(argparse.ArgumentParser()).parse_args([])
        p = create_profiler_from_args(args)
        with p:
            pass
        print(args.track_memory, p.memory)
    """)
    assert proc.stdout.strip() == "False None"


def test_mem_activity_on_cpu_records_resident_memory(tmp_path):
    pytest.importorskip("torch")
    proc = run_python(f"""
        import json, torch
        from dftracer.python.torch import ProfilerContext
        if torch.cuda.is_available():
            print("cuda")
        else:
            with ProfilerContext(activities=["CPU", "MEM"], output_dir={str(tmp_path / "p")!r},
                                 profile_name="p", summary=False, warmup=0, active=1) as c:
                x = torch.ones(300 << 18)
            print(json.dumps(c.memory))
    """, env={**ENV, "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    if proc.stdout.strip() == "cuda":
        pytest.skip("CUDA machine: MEM writes a snapshot there")
    r = last_json(proc.stdout)
    assert r["end_rss_bytes"] - r["start_rss_bytes"] >= 250 * MB
    (path,) = find_traces(str(tmp_path), "t")
    names = [e["args"].get("tracker") for e in read_trace(path).events
             if e["name"] == "memory" and e["ph"] == "X"]
    assert names == ["p"]


@pytest.mark.parametrize("setting", [None, "0", "off", "N", "yes", "maybe"])
def test_flusher_samples_and_their_switch(tmp_path, setting):
    """The flusher writes samples in any traced process (no torch needed);
    DFTRACER_MEMORY=0 turns them off.  It reads by the core's one boolean
    rule: a value that is not a boolean is the default (on), with one
    warning line naming the variable and the value used.  2 s at a 50 ms
    interval: 80 ticks where one suffices."""
    env = {**ENV, "DFTRACER_LOG_FILE": str(tmp_path / "t"), "DFTRACER_FLUSH_INTERVAL": "0.05"}
    if setting is not None:
        env["DFTRACER_MEMORY"] = setting
    proc = run_python("""
        import time
        import dftracer
        from dftracer.python import dftracer as logger
        log = logger.initialize_log(None, None, -1)
        keep = bytearray(64 << 20)
        time.sleep(2)
        log.finalize()
    """, env=env)
    warned = [ln for ln in proc.stderr.splitlines() if "DFTRACER_MEMORY" in ln]
    if setting == "maybe":
        assert warned == ["dftracer: warning: DFTRACER_MEMORY='maybe' is not a boolean "
                          "(1/true/yes/on or 0/false/no/off); using 1"], proc.stderr
    else:
        assert warned == [], proc.stderr
    (path,) = find_traces(str(tmp_path), "t")
    evs = read_trace(path).events
    samples = [e for e in evs if e["name"] == "memory" and e["ph"] == "C"]
    limits = [e for e in evs if e["name"] == "memory" and e["ph"] == "M"]
    if setting in (None, "yes", "maybe"):
        assert samples and len(limits) == 1
        assert max(e["args"]["rss_bytes"] for e in samples) >= 64 * MB
        assert all("step" not in e["args"] for e in samples)
    else:
        assert samples == [] and limits == []


# ---- re-entrant blocks (issue 66) -------------------------------------------
#
# Every block is a node of its own in the watcher's list (no slots): nested,
# recursive and overlapping blocks, of one tracker or many, in threads, each
# with its own figures; the watcher thread (named dft-memwatch) runs while a
# block is open and exits after the last.  The spikes below are held for at
# least 0.3 s of CPU time (the watcher samples every 2 ms), and the kernel's
# high-water mark is raised above them first, so only the watcher sees them.

HELPERS = """
import json, os, threading, time
from dftracer.python.torch import MemoryTracker
MB = 1 << 20

def watchers():
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == "dft-memwatch"
        except OSError:
            pass  # gone meanwhile
    return n

def gone(timeout=10.0):
    # the watcher exits at once when woken; the kernel lets go of it soon after
    end = time.monotonic() + timeout
    while watchers():
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True

def spike(mb):
    x = bytearray(mb * MB)
    t = time.process_time()
    while time.process_time() - t < 0.3:
        x[::4096] = b"y" * len(x[::4096])
    del x

big = bytearray(600 * MB)
del big  # the kernel's mark is above every spike
"""


def run_blocks(code, **kw):
    return run_python(HELPERS + textwrap.dedent(code), **kw)


def memory_events(tmp_path):
    (path,) = find_traces(str(tmp_path), "t")
    assert [v["verdict"] for v in validate(path)] == ["ok"]
    return [e for e in read_trace(path).events if e["name"] == "memory" and e["ph"] == "X"]


@pytest.mark.no_asan  # ASan keeps freed memory in quarantine: resident figures are its, not the program's
def test_recursion_deeper_than_32_blocks_each_with_its_figures(tmp_path):
    """A decorated function recursing 40 deep: 41 blocks open at once (the
    slots were 32), each sees the spike at the bottom; then a later block
    still measures one, and the watcher is gone after the last block."""
    proc = run_blocks("""
        tracker = MemoryTracker("rec")
        @tracker
        def rec(n):
            if n == 0:
                spike(200)
                return watchers()
            return rec(n - 1)
        during = rec(40)
        after_rec = gone()
        with MemoryTracker("later") as later:
            spike(150)
        print(json.dumps({"during": during, "after_rec": after_rec, "after": gone(),
                          "later": later.result, "last": tracker.result}))
    """, env={**ENV, "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    r = last_json(proc.stdout)
    assert r["during"] == 1 and r["after_rec"] and r["after"], r
    assert r["later"]["peak_rss_bytes"] - r["later"]["start_rss_bytes"] >= 120 * MB, r
    assert r["last"]["peak_rss_bytes"] - r["last"]["start_rss_bytes"] >= 160 * MB, r  # the outermost
    evs = memory_events(tmp_path)
    rec = [e for e in evs if e["args"]["tracker"] == "rec"]
    assert len(rec) == 41
    for e in rec:
        a = e["args"]
        assert a["peak_rss_bytes"] - a["start_rss_bytes"] >= 160 * MB, a
        assert a["end_rss_bytes"] - a["start_rss_bytes"] < 60 * MB, a  # freed inside it
    # nested: each block inside the one that called it, innermost written first
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in rec]
    for inner, outer in zip(spans, spans[1:]):
        assert outer[0] <= inner[0] and inner[1] <= outer[1], (inner, outer)


@pytest.mark.no_asan  # ASan keeps freed memory in quarantine: resident figures are its, not the program's
def test_nested_and_overlapping_blocks_of_one_tracker():
    """with-blocks of one tracker nest innermost first; start()/stop() pairs
    overlap them; each reports its own start, peak and end."""
    proc = run_blocks("""
        m = MemoryTracker("m")
        with m:
            hold = bytearray(200 * MB)
            with m:
                spike(100)
            inner = m.result
            del hold
        outer = m.result
        m.start()
        other = MemoryTracker("other").start()
        spike(100)
        first = m.stop()
        second = other.stop()
        print(json.dumps({"inner": inner, "outer": outer, "first": first, "second": second,
                          "again": m.stop() == first, "gone": gone()}))
    """)
    r = last_json(proc.stdout)
    inner, outer = r["inner"], r["outer"]
    # the inner block starts with the 200 MB the outer one holds
    assert inner["start_rss_bytes"] - outer["start_rss_bytes"] >= 180 * MB, r
    assert inner["peak_rss_bytes"] - inner["start_rss_bytes"] >= 80 * MB, r
    assert outer["peak_rss_bytes"] - outer["start_rss_bytes"] >= 280 * MB, r
    assert outer["end_rss_bytes"] - outer["start_rss_bytes"] < 60 * MB, r
    for k in ("first", "second"):
        assert r[k]["peak_rss_bytes"] - r[k]["start_rss_bytes"] >= 80 * MB, r
    assert r["again"] and r["gone"], r


@pytest.mark.no_asan  # ASan keeps freed memory in quarantine: resident figures are its, not the program's
def test_overlapping_calls_in_threads_each_with_its_figures(tmp_path):
    """One decorated function called in two threads whose blocks overlap: A
    holds 200 MB while B's block starts, frees it, then B spikes 100 MB.
    Each call's memory event has its own figures (the tracker's single state
    mixed them up before); 8 more threads x 25 calls leave no block open."""
    proc = run_blocks("""
        tracker = MemoryTracker("job")
        a_holds, b_started, a_freed = threading.Event(), threading.Event(), threading.Event()
        @tracker
        def job(role):
            if role == "a":
                x = bytearray(200 * MB)
                x[::4096] = b"y" * len(x[::4096])
                a_holds.set()
                b_started.wait()
                del x
            else:
                b_started.set()
                a_freed.wait()
                spike(100)
            return threading.get_native_id()
        tids = {}
        def run(role):
            if role == "b":
                a_holds.wait()  # B's call (its block) starts while A holds its 200 MB
            tids[role] = job(role)
            if role == "a":
                a_freed.set()
        ts = [threading.Thread(target=run, args=(r,)) for r in "ab"]
        for t in ts: t.start()
        for t in ts: t.join()
        little = tracker(lambda: None)
        many = [threading.Thread(target=lambda: [little() for _ in range(25)]) for _ in range(8)]
        for t in many: t.start()
        for t in many: t.join()
        print(json.dumps({"tids": tids, "gone": gone()}))
    """, env={**ENV, "DFTRACER_LOG_FILE": str(tmp_path / "t")})
    r = last_json(proc.stdout)
    assert r["gone"], r
    evs = memory_events(tmp_path)
    assert len(evs) == 2 + 8 * 25
    by_tid = {e["tid"]: e["args"] for e in evs if e["tid"] in r["tids"].values()}
    a, b = by_tid[r["tids"]["a"]], by_tid[r["tids"]["b"]]
    assert a["peak_rss_bytes"] - a["start_rss_bytes"] >= 180 * MB, (a, b)
    assert a["end_rss_bytes"] - a["start_rss_bytes"] < 60 * MB, (a, b)
    assert b["start_rss_bytes"] - a["start_rss_bytes"] >= 180 * MB, (a, b)  # A's 200 MB held
    assert b["start_rss_bytes"] - b["end_rss_bytes"] >= 150 * MB, (a, b)  # freed meanwhile
    assert b["peak_rss_bytes"] >= b["start_rss_bytes"], (a, b)


def test_abandoned_blocks_neither_exhaust_nor_keep_the_watcher():
    """100 blocks started and never stopped (the slots were 32, and every
    later tracker got none): a new block still measures its spike; once the
    abandoned trackers are collected the watcher thread is gone."""
    proc = run_blocks("""
        import gc
        left = [MemoryTracker(f"left{i}").start() for i in range(100)]
        with MemoryTracker("new") as m:
            spike(150)
        still = watchers()
        del left
        gc.collect()
        print(json.dumps({"new": m.result, "still": still, "gone": gone()}))
    """)
    r = last_json(proc.stdout)
    assert r["new"]["peak_rss_bytes"] - r["new"]["start_rss_bytes"] >= 120 * MB, r
    assert r["still"] == 1 and r["gone"], r


def test_the_watch_calls_refuse_what_is_not_a_block():
    proc = run_python("""
        from dftracer import _core
        for bad in (3, None, "x"):
            try:
                _core._mem_watch_end(bad)
            except TypeError as e:
                print(e)
        b = _core._mem_watch_begin()
        print(_core._mem_watch_end(b) > 0, _core._mem_watch_end(b) > 0)
    """)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4, proc.stdout
    assert all("_mem_watch_end: block must be what _mem_watch_begin returned" in ln
               for ln in lines[:3]), lines
    assert lines[3] == "True True"
