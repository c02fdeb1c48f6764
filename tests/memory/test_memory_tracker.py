"""MemoryTracker (docs/memory.md): the resident memory over a block, its
peak seen even when the allocation is gone by the end, the `memory` event in
the trace, the decorator, and --track-memory / MEM through the profiler
conveniences."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("setting", [None, "0", "off"])
def test_flusher_samples_and_their_switch(tmp_path, setting):
    """The flusher writes samples in any traced process (no torch needed);
    DFTRACER_MEMORY=0 turns them off.  2 s at a 50 ms interval: 80 ticks
    where one suffices."""
    env = {**ENV, "DFTRACER_LOG_FILE": str(tmp_path / "t"), "DFTRACER_FLUSH_INTERVAL": "0.05"}
    if setting is not None:
        env["DFTRACER_MEMORY"] = setting
    run_python("""
        import time
        import dftracer
        from dftracer.python import dftracer as logger
        log = logger.initialize_log(None, None, -1)
        keep = bytearray(64 << 20)
        time.sleep(2)
        log.finalize()
    """, env=env)
    (path,) = find_traces(str(tmp_path), "t")
    evs = read_trace(path).events
    samples = [e for e in evs if e["name"] == "memory" and e["ph"] == "C"]
    limits = [e for e in evs if e["name"] == "memory" and e["ph"] == "M"]
    if setting is None:
        assert samples and len(limits) == 1
        assert max(e["args"]["rss_bytes"] for e in samples) >= 64 * MB
        assert all("step" not in e["args"] for e in samples)
    else:
        assert samples == [] and limits == []
