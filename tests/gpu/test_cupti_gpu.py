"""GPU activity on a CUDA machine (skipped elsewhere).

Run:  PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_cupti_gpu.py -v

Checks, each in a fresh interpreter: a matmul and a host-to-device copy inside
an enclosing span show up as kernel and memcpy events with positive durations
inside that span, on device/stream lanes, with their launch linked by
correlation id; enable()/disable() from Python; and torch.profiler (Kineto)
coexistence: dftracer steps aside with one warning while the profiler collects
CUDA activity, Kineto still gets its kernels, and dftracer resumes afterwards.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tracefile import find_traces, read_trace, run_python  # noqa: E402

torch = pytest.importorskip("torch")
from dftracer.python import cupti  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not cupti.available(),
    reason="needs a CUDA GPU and libcupti: " + (cupti.reason() or "torch sees no CUDA device"),
)

LANE_BASE = 1 << 48
# The GPU clock is mapped onto the tracer clock by one offset measured when
# recording starts; allow this much error at the span's edges.
SLACK_US = 100

WORKLOAD = """
import json, torch
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r})
{enable}
torch.cuda.init()
warm = torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda")
torch.cuda.synchronize()
t0 = log.get_time()
a = torch.randn(2048, 2048, device="cuda")
b = torch.randn(2048, 2048, device="cuda")
c = a @ b
host = torch.randn(4 << 20)            # 16 MiB, pageable
dev = host.to("cuda")
torch.cuda.synchronize()
t1 = log.get_time()
log.log_event("span", "app", t0, t1 - t0)
{after}
log.finalize()
print(json.dumps({{"copy_bytes": host.numel() * host.element_size()}}))
"""


def only_trace(tmp_path):
    paths = find_traces(str(tmp_path))
    assert len(paths) == 1, paths
    return read_trace(paths[0])


def inside(e, span):
    return (e["ts"] >= span["ts"] - SLACK_US
            and e["ts"] + e["dur"] <= span["ts"] + span["dur"] + SLACK_US)


def check_workload(trace, copy_bytes):
    span = [e for e in trace.user_events() if e["name"] == "span"][0]
    cuda = [e for e in trace.events if e["cat"] == "CUDA"]
    kernels = [e for e in cuda if "grid_x" in e["args"] and inside(e, span)]
    assert kernels, "no kernel event inside the span"
    gemm = max(kernels, key=lambda e: e["dur"])
    assert gemm["dur"] > 0 and gemm["tid"] >= LANE_BASE
    assert gemm["args"]["grid_x"] >= 1 and gemm["args"]["block_x"] >= 1
    copies = [e for e in cuda if e["name"] == "Memcpy HtoD" and inside(e, span)
              and e["args"]["bytes"] == copy_bytes]
    assert len(copies) == 1, [e for e in cuda if e["name"].startswith("Memcpy")]
    assert copies[0]["dur"] > 0 and copies[0]["args"]["copy_kind"] == "HtoD"
    launches = {e["args"]["correlation"] for e in cuda if e["name"].startswith(("cudaLaunch",
                                                                              "cuLaunch"))}
    assert gemm["args"]["correlation"] in launches, "kernel not linked to its launch"
    lanes = {e["tid"]: e["args"]["name"] for e in trace.of("M", name="thread_name")
             if e["tid"] >= LANE_BASE}
    assert gemm["tid"] in lanes and lanes[gemm["tid"]].startswith("GPU ")
    return span, cuda


def test_matmul_and_copy_inside_span_env(tmp_path):
    proc = run_python(WORKLOAD.format(stem=str(tmp_path / "trace"), enable="", after=""),
                      env={"DFTRACER_ENABLE": "1", "DFTRACER_ENABLE_CUPTI": "1"})
    copy_bytes = json.loads(proc.stdout.strip().splitlines()[-1])["copy_bytes"]
    check_workload(only_trace(tmp_path), copy_bytes)


def test_enable_and_disable_from_python(tmp_path):
    after = """
cupti.disable()
for _ in range(5):
    a @ b
torch.cuda.synchronize()
log.log_event("after_disable", "app", log.get_time(), 0)
"""
    proc = run_python(WORKLOAD.format(stem=str(tmp_path / "trace"),
                                      enable="from dftracer.python import cupti\ncupti.enable()",
                                      after=after),
                      env={"DFTRACER_ENABLE": "1"})
    copy_bytes = json.loads(proc.stdout.strip().splitlines()[-1])["copy_bytes"]
    trace = only_trace(tmp_path)
    span, cuda = check_workload(trace, copy_bytes)
    end = span["ts"] + span["dur"] + SLACK_US
    late = [e for e in cuda if "grid_x" in e["args"] and e["ts"] > end]
    assert not late, "kernels recorded after disable()"


def test_torch_profiler_coexistence(tmp_path):
    code = """
import json, warnings, torch
warnings.simplefilter("always")
from dftracer.python import dftracer, cupti
from torch.profiler import profile, ProfilerActivity
log = dftracer.initialize_log({stem!r})
a = torch.randn(1024, 1024, device="cuda")
def work(tag):
    t0 = log.get_time()
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    log.log_event(tag, "app", t0, log.get_time() - t0)
work("before")
with warnings.catch_warnings(record=True) as caught:
    for _ in range(2):   # two sessions: still one warning
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            work("profiled")
kineto_kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
work("after")
print(json.dumps({{
    "warnings": [str(w.message) for w in caught if "steps aside" in str(w.message)],
    "kineto_kernels": kineto_kernels,
    "running_after": cupti.is_running(),
}}))
log.finalize()
"""
    proc = run_python(code.format(stem=str(tmp_path / "trace")),
                      env={"DFTRACER_ENABLE": "1", "DFTRACER_ENABLE_CUPTI": "1"})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["warnings"]) == 1, out
    assert out["kineto_kernels"] > 0, "torch.profiler lost its CUDA kernels"
    assert out["running_after"] is True
    trace = only_trace(tmp_path)  # parses and checks every line
    spans = {e["name"]: e for e in trace.user_events() if e["cat"] == "app"}
    kernels = [e for e in trace.events if e["cat"] == "CUDA" and "grid_x" in e["args"]]
    assert any(inside(k, spans["before"]) for k in kernels), "no kernels before profiling"
    assert any(inside(k, spans["after"]) for k in kernels), "dftracer did not resume"
    profiled = [e for e in trace.user_events() if e["name"] == "profiled"]
    strictly_inside = [k for k in kernels for p in profiled
                       if k["ts"] > p["ts"] + SLACK_US and k["ts"] + k["dur"] < p["ts"] + p["dur"] - SLACK_US]
    assert not strictly_inside, "dftracer recorded while torch.profiler owned CUPTI"
