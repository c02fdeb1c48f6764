"""GPU activity (CUPTI) on a machine without a GPU: the unavailable path, the
conversion of synthetic activity records into trace events, the clock offset,
and the torch.profiler guard.  The GPU run is tests/gpu/test_cupti_gpu.py."""

from __future__ import annotations

import json
import types
import warnings

import pytest

from dftracer import _core
from dftracer.python import cupti
from tracefile import USE_TESTCORE, find_traces, get_testcore, read_trace, run_python

LANE_BASE = 1 << 48


def lane(device: int, stream: int) -> int:
    return LANE_BASE | ((device & 0xFFFF) << 32) | stream


def convert_hooks():
    """The test extension, which holds the conversion's test entry points when
    dftracer was built with the CUPTI headers (its sources and flags are
    dftracer._core's); skips the test otherwise."""
    core = get_testcore()
    if not hasattr(core, "_cupti_convert_test"):
        pytest.skip("dftracer was built without CUPTI headers")
    return core


def only_trace(tmp_path):
    paths = find_traces(str(tmp_path))
    assert len(paths) == 1, paths
    return read_trace(paths[0])


# ---- unavailable -----------------------------------------------------------


@pytest.mark.skipif(cupti.available(), reason="this machine can trace GPU activity")
def test_enable_raises_with_reason_and_tracing_keeps_working(tmp_path):
    proc = run_python(
        f"""
        import json
        from dftracer.python import dftracer, cupti
        log = dftracer.initialize_log({str(tmp_path / 'trace')!r})
        why = cupti.reason()
        try:
            cupti.enable()
        except RuntimeError as e:
            raised = str(e)
        else:
            raised = None
        t = log.get_time()
        log.log_event("after", "test", t, 5)
        print(json.dumps([cupti.available(), why, raised, cupti.is_running()]))
        log.finalize()
        """,
        env={"DFTRACER_ENABLE": "1"},
    )
    available, why, raised, running = json.loads(proc.stdout.strip().splitlines()[-1])
    assert available is False and running is False
    assert why and any(w in why for w in ("libcupti", "driver", "GPU", "device", "without CUPTI"))
    assert raised is not None and why in raised and "unavailable" in raised
    trace = only_trace(tmp_path)
    assert [e["name"] for e in trace.user_events()] == ["after"]
    assert not [e for e in trace.events if e["cat"] == "CUDA"]


@pytest.mark.skipif(cupti.available(), reason="this machine can trace GPU activity")
def test_env_enable_without_gpu_reports_once_and_traces(tmp_path):
    proc = run_python(
        """
        from dftracer.python import dftracer
        log = dftracer.initialize_log(None)
        log.log_event("work", "test", log.get_time(), 1)
        log.finalize()
        """,
        env={"DFTRACER_ENABLE": "1", "DFTRACER_ENABLE_CUPTI": "1",
             "DFTRACER_LOG_FILE": str(tmp_path / "trace")},
    )
    assert proc.stderr.count("GPU activity not traced:") == 1, proc.stderr
    trace = only_trace(tmp_path)
    assert [e["name"] for e in trace.user_events()] == ["work"]


def test_reason_lists_where_libcupti_was_looked_for(tmp_path):
    if "built without CUPTI" in _core._cupti_reason():
        pytest.skip("built without CUPTI headers: nothing is searched")
    missing = str(tmp_path / "no" / "libcupti.so")
    proc = run_python(
        """
        from dftracer.python import cupti
        print(cupti.available())
        try:
            cupti.enable()
        except RuntimeError as e:
            print(e)
        """,
        env={"DFTRACER_CUPTI_LIBRARY": missing},
    )
    available, message = proc.stdout.strip().splitlines()
    assert available == "False"
    assert "no libcupti found; looked in: " + missing in message


def test_disable_and_resume_without_gpu_are_harmless():
    cupti.disable()
    assert _core._cupti_pause() is False
    assert _core._cupti_resume() is False
    assert cupti.is_running() is False


# ---- conversion of synthetic records ----------------------------------------

CONVERT_SCRIPT = USE_TESTCORE + """
import json
from dftracer import _core
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r})
offset = log.get_time() * 1000 - 5_000_000_000 + 123   # GPU clock 5 s behind, not µs-aligned
S = 1_000_000_000
rec = _core._cupti_convert_test
out = {{"offset": offset, "pid": __import__("os").getpid(), "emitted": [
    rec("kernel", dict(name="_Z6matmulPfS_i", start=S, end=S + 250_000, deviceId=1, contextId=3,
                       streamId=7, correlationId=42, gridX=128, gridY=2, gridZ=1, blockX=256,
                       blockY=1, blockZ=1, registersPerThread=32, staticSharedMemory=1024,
                       dynamicSharedMemory=2048), offset),
    rec("kernel", dict(name="vector_add", start=S + 300_000, end=S + 300_300, deviceId=1,
                       contextId=3, streamId=7, correlationId=43), offset),
    rec("runtime", dict(name="cudaLaunchKernel_v7000", start=S - 20_000, end=S - 15_000,
                        threadId=4242, correlationId=42), offset),
    rec("driver", dict(name="cuLaunchKernel", start=S + 290_000, end=S + 295_000,
                       threadId=4242, correlationId=43), offset),
    rec("memcpy", dict(start=S + 400_000, end=S + 480_000, bytes=1 << 20, copyKind=1, srcKind=1,
                       dstKind=3, deviceId=0, contextId=2, streamId=7, correlationId=44), offset),
    rec("memcpy", dict(start=S + 500_000, end=S + 510_000, bytes=4096, copyKind=2, srcKind=3,
                       dstKind=2, deviceId=1, contextId=3, streamId=9, correlationId=45), offset),
    rec("memset", dict(start=S + 520_000, end=S + 521_000, bytes=4096, value=255, memoryKind=3,
                       deviceId=1, contextId=3, streamId=7, correlationId=46), offset),
    rec("sync", dict(start=S + 530_000, end=S + 600_000, type=3, contextId=3, streamId=7,
                     correlationId=47), offset),
    rec("sync", dict(start=S + 610_000, end=S + 620_000, type=4, contextId=3,
                     correlationId=48), offset),
    # not shown: API calls that neither launch, copy, set nor wait; unknown times
    rec("runtime", dict(name="cudaGetDevice_v3020", start=S, end=S + 10, threadId=4242), offset),
    rec("kernel", dict(name="k", start=0, end=S, deviceId=1, streamId=7), offset),
    rec("kernel", dict(name="k", start=S, end=S - 1, deviceId=1, streamId=7), offset),
]}}
print(json.dumps(out))
log.finalize()
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    convert_hooks()
    tmp = tmp_path_factory.mktemp("cupti")
    proc = run_python(CONVERT_SCRIPT.format(stem=str(tmp / "trace")), env={"DFTRACER_ENABLE": "1"})
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    trace = only_trace(tmp)
    return out, trace


def expected_times(start: int, end: int, offset: int):
    ts = (start + offset) // 1000
    return ts, -(-(end + offset) // 1000) - ts  # exact integer ceil


def by_name(trace, name):
    found = [e for e in trace.events if e["cat"] == "CUDA" and e["name"] == name]
    assert len(found) == 1, (name, found)
    return found[0]


def test_records_emitted_or_skipped(converted):
    out, trace = converted
    assert out["emitted"] == [True] * 9 + [False] * 3
    cuda = [e for e in trace.events if e["cat"] == "CUDA"]
    assert len(cuda) == 9
    for e in cuda:
        assert e["ph"] == "X" and e["pid"] == out["pid"]
        assert "level" not in e["args"] and "p_idx" not in e["args"]  # not nested


def test_kernel_event(converted):
    out, trace = converted
    S = 1_000_000_000
    k = by_name(trace, "matmul(float*, float*, int)")  # demangled
    assert (k["ts"], k["dur"]) == expected_times(S, S + 250_000, out["offset"])
    assert k["tid"] == lane(1, 7)
    args = k["args"]
    expect = dict(device=1, context=3, stream=7, correlation=42, grid_x=128, grid_y=2, grid_z=1,
                  block_x=256, block_y=1, block_z=1, registers=32, static_shared_mem=1024,
                  dynamic_shared_mem=2048)
    assert {key: args[key] for key in expect} == expect
    short = by_name(trace, "vector_add")  # 300 ns: still a positive duration
    assert short["dur"] >= 1
    assert (short["ts"], short["dur"]) == expected_times(S + 300_000, S + 300_300, out["offset"])


def test_api_launch_linked_by_correlation(converted):
    out, trace = converted
    launch = by_name(trace, "cudaLaunchKernel")
    kernel = by_name(trace, "matmul(float*, float*, int)")
    assert launch["args"]["correlation"] == kernel["args"]["correlation"] == 42
    assert launch["args"]["api"] == "runtime" and launch["tid"] == 4242
    assert launch["ts"] + launch["dur"] <= kernel["ts"]  # launched before it ran
    drv = by_name(trace, "cuLaunchKernel")
    assert drv["args"]["api"] == "driver"
    assert drv["args"]["correlation"] == by_name(trace, "vector_add")["args"]["correlation"]
    assert not [e for e in trace.events if e["name"].startswith("cudaGetDevice")]


def test_memcpy_memset_sync_events(converted):
    out, trace = converted
    S = 1_000_000_000
    h2d = by_name(trace, "Memcpy HtoD")
    assert (h2d["ts"], h2d["dur"]) == expected_times(S + 400_000, S + 480_000, out["offset"])
    assert h2d["tid"] == lane(0, 7)
    assert {k: h2d["args"][k] for k in ("bytes", "copy_kind", "src_kind", "dst_kind", "device",
                                         "stream", "correlation")} == dict(
        bytes=1 << 20, copy_kind="HtoD", src_kind="Pageable", dst_kind="Device", device=0,
        stream=7, correlation=44)
    d2h = by_name(trace, "Memcpy DtoH")
    assert (d2h["args"]["copy_kind"], d2h["args"]["dst_kind"], d2h["tid"]) == ("DtoH", "Pinned",
                                                                             lane(1, 9))
    ms = by_name(trace, "Memset")
    assert (ms["args"]["bytes"], ms["args"]["value"], ms["tid"]) == (4096, 255, lane(1, 7))
    ss = by_name(trace, "Stream Synchronize")
    # device taken from the context seen on kernel records
    assert (ss["args"]["sync_type"], ss["args"]["device"], ss["tid"]) == (
        "Stream Synchronize", 1, lane(1, 7))
    assert (ss["ts"], ss["dur"]) == expected_times(S + 530_000, S + 600_000, out["offset"])
    cs = by_name(trace, "Context Synchronize")
    assert "stream" not in cs["args"] and cs["tid"] == lane(1, 0xFFFFFFFF)


def test_lanes_named_once(converted):
    out, trace = converted
    names = {}
    for e in trace.of("M", name="thread_name"):
        if e["tid"] >= LANE_BASE:
            assert e["tid"] not in names, f"lane {e['tid']} named twice"
            names[e["tid"]] = e["args"]["name"]
    assert names == {lane(1, 7): "GPU 1 stream 7", lane(0, 7): "GPU 0 stream 7",
                     lane(1, 9): "GPU 1 stream 9", lane(1, 0xFFFFFFFF): "GPU 1 (context)"}
    used = {e["tid"] for e in trace.events if e["cat"] == "CUDA" and e["tid"] >= LANE_BASE}
    assert used == set(names)


@pytest.mark.parametrize("skew", [5_000_000_000, -7_000_000_123, 0])
def test_clock_offset_calibration(skew):
    # A fake GPU clock running `skew` ns behind the tracer clock: the measured
    # offset is the skew, to within the microsecond the fake clock resolves.
    assert abs(convert_hooks()._cupti_calibrate_test(skew) - skew) < 1_000_000


def test_convert_rejects_bad_input():
    convert = convert_hooks()._cupti_convert_test
    with pytest.raises(ValueError, match="kind"):
        convert("texture", {})
    with pytest.raises(TypeError, match="start"):
        convert("kernel", {"start": "soon"})
    with pytest.raises(TypeError, match="name"):
        convert("kernel", {"name": 3})


# ---- torch.profiler guard ---------------------------------------------------


class _Activity:
    def __init__(self, name):
        self.name = name


def test_guard_steps_aside_for_cuda_profiling_once(monkeypatch):
    calls = []
    monkeypatch.setattr(_core, "_cupti_pause", lambda: calls.append("pause") or True)
    monkeypatch.setattr(_core, "_cupti_resume", lambda: calls.append("resume") or True)
    monkeypatch.setattr(cupti, "_warned", False)
    fake = types.ModuleType("fake_profiler")
    fake._prepare_profiler = lambda config, activities, *a: calls.append("prepare")
    fake._enable_profiler = lambda config, activities: calls.append("enable")
    fake._disable_profiler = lambda: calls.append("disable") or "result"
    cupti._patch_profiler(fake)
    cupti._patch_profiler(fake)  # idempotent

    fake._prepare_profiler(None, {_Activity("CPU")})
    fake._enable_profiler(None, {_Activity("CPU")})
    assert fake._disable_profiler() == "result"
    assert calls == ["prepare", "enable", "disable"]

    calls.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            fake._prepare_profiler(None, {_Activity("CPU"), _Activity("CUDA")})
            fake._enable_profiler(None, {_Activity("CUDA")})
            fake._disable_profiler()
    assert calls == ["pause", "prepare", "enable", "disable", "resume"] * 2
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "torch.profiler" in msgs[0]


def test_guard_installed_on_torch_import_and_cpu_profiling_unaffected(tmp_path):
    pytest.importorskip("torch")
    proc = run_python(
        f"""
        import json
        import dftracer
        from dftracer.python import dftracer as dft
        import torch
        import torch.autograd.profiler as ap
        log = dft.initialize_log({str(tmp_path / 'trace')!r})
        wrapped = all(hasattr(getattr(ap, n), "__wrapped__")
                      for n in ("_prepare_profiler", "_enable_profiler", "_disable_profiler"))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.ones(8) @ torch.ones(8)
        log.log_event("after_profile", "test", log.get_time(), 1)
        print(json.dumps([wrapped, len(prof.events()) > 0]))
        log.finalize()
        """,
        env={"DFTRACER_ENABLE": "1", "DFTRACER_ENABLE_CUPTI": "1"},
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True, True]
    assert "steps aside" not in proc.stderr  # CPU-only profiling leaves CUPTI alone
    trace = only_trace(tmp_path)
    assert "after_profile" in [e["name"] for e in trace.user_events()]
