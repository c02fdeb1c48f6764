"""Building the native DDP hook (dftracer/_autotrace/ddp_native.py): by
DFTRACER_DDP_HOOK, a traced DDP model with no build for this torch gets the
C hook and starts one background build (auto), waits for one (native), or
builds nothing (c); a bad value warns once.  The compiler is a stand-in
that records its call and fails, so nothing is compiled here (the real build
is conftest.py's, used by test_ddp_hook.py)."""

from __future__ import annotations

import glob
import os
import stat
import time

import pytest

torch = pytest.importorskip("torch")

from tracefile import find_traces, read_trace, run_python  # noqa: E402

PROG = """
import os, torch, torch.distributed as dist
import dftracer
from dftracer._autotrace import ddp as ours
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", init_method="file://" + {store!r}, rank=0, world_size=1)
models = [DDP(torch.nn.Linear(4, 2)) for _ in range(2)]
for m in models:
    m(torch.ones(3, 4)).sum().backward()
print("native", [ours._native[m] for m in models], flush=True)
dist.destroy_process_group()
"""


def fake_compiler(tmp_path):
    calls = tmp_path / "calls"
    cxx = tmp_path / "fake-c++"
    cxx.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho 'fake: no' >&2\nexit 1\n")
    cxx.chmod(cxx.stat().st_mode | stat.S_IXUSR)
    return str(cxx), calls


def run(tmp_path, hook, cache):
    cxx, calls = fake_compiler(tmp_path)
    env = {"DFTRACER_ENABLE": "1", "DFTRACER_TORCH": "1", "DFTRACER_LOG_FILE": str(tmp_path / "t"),
           "DFTRACER_CACHE_DIR": str(cache), "CXX": cxx}
    if hook is not None:
        env["DFTRACER_DDP_HOOK"] = hook
    proc = run_python(PROG.format(store=str(tmp_path / "store")), env)
    return proc, calls


def buckets(tmp_path):
    (path,) = find_traces(str(tmp_path), "t")
    return [e for e in read_trace(path).of(cat="comm", name="all_reduce")
            if "ddp_bucket" in e["args"]]


def test_auto_uses_the_c_hook_and_starts_one_background_build(tmp_path):
    cache = tmp_path / "cache"
    proc, calls = run(tmp_path, None, cache)
    assert "native [False, False]" in proc.stdout
    assert len(buckets(tmp_path)) == 2  # the C hook recorded each model's bucket
    # one build for the two models: it runs detached, untraced, and fails here
    deadline = time.monotonic() + 120
    logs = []
    while time.monotonic() < deadline:
        logs = glob.glob(str(cache / "ddp_native-*" / "*.log"))
        if logs and "could not be built" in open(logs[0]).read():
            break
        time.sleep(0.5)
    assert len(logs) == 1, logs
    text = open(logs[0]).read()
    assert "could not be built" in text and "fake: no" in text, text
    assert calls.read_text().count("ddp_native.cpp") == 1
    while glob.glob(str(cache / "ddp_native-*" / "*.lock")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the build removes its lock as it exits
    assert not glob.glob(str(cache / "ddp_native-*" / "*.lock"))
    assert not glob.glob(str(cache / "ddp_native-*" / "*.so"))
    assert not glob.glob(str(cache / "**" / "*.pfw*"), recursive=True)  # the build was not traced
    # it failed: the next run does not try again (the build command would)
    assert len(glob.glob(str(cache / "ddp_native-*" / "*.failed"))) == 1
    (log,) = logs
    logged = os.stat(log).st_mtime_ns
    proc, calls = run(tmp_path, None, cache)
    assert "native [False, False]" in proc.stdout
    # a build would have taken its lock and opened its log before the run ended
    assert not glob.glob(str(cache / "ddp_native-*" / "*.lock"))
    assert os.stat(log).st_mtime_ns == logged


def test_native_builds_in_the_process_and_falls_back_with_one_warning(tmp_path):
    proc, calls = run(tmp_path, "native", tmp_path / "cache")
    assert "native [False, False]" in proc.stdout
    warnings = [ln for ln in proc.stderr.splitlines() if "native DDP hook could not be built" in ln]
    assert len(warnings) == 1 and "fake: no" in warnings[0], proc.stderr
    assert "using the C hook" in warnings[0]
    assert calls.read_text().count("ddp_native.cpp") == 1  # tried once, not for each model
    assert len(buckets(tmp_path)) == 2


def test_c_builds_nothing_and_a_bad_value_warns_once(tmp_path):
    proc, calls = run(tmp_path, "c", tmp_path / "cache")
    assert "native [False, False]" in proc.stdout and not calls.exists()
    assert not os.path.exists(tmp_path / "cache")
    proc, calls = run(tmp_path, "fast", tmp_path / "cache2")
    lines = [ln for ln in proc.stderr.splitlines() if "DFTRACER_DDP_HOOK" in ln]
    assert lines == ["dftracer: warning: DFTRACER_DDP_HOOK='fast' is not one of "
                     "auto/native/c; using auto"], proc.stderr
    assert "native [False, False]" in proc.stdout
