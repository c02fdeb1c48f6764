"""The pure part of the torch.profiler handler (src/torch/profiler_records.c),
on synthetic profiler events and without torch: memory attributed to the ops
around it, the op tree (same-named only children folded, as torch does), the
CPU and device time shares, and the PP event each record is written as
(docs/torch-profiler.md).  Through the test extension's
_torch_records_for_test; the handler on real profiles is
test_torch_profiler.py."""

from __future__ import annotations

import json

import pytest

from tracefile import USE_TESTCORE, find_traces, get_testcore, read_trace, run_python

OP, MEMORY, OOM = 0, 1, 2
CUDA = 1
T = 1_700_000_000_000_000_000  # Kineto's clock: epoch ns
PP_KEYS = ["device", "device_index", "cpu_memory", "device_memory_usage", "is_remote",
           "input_size", "total_cpu_percent", "total_device_percent"]


def op(name, start_us, end_us, **kw):
    return dict(name=name, kind=OP, start_ns=T + start_us * 1000, end_ns=T + end_us * 1000,
                tid=kw.pop("tid", 11), **kw)


def memory(at_us, cpu=0, dev=0, kind=MEMORY):
    return dict(name="[memory]" if kind == MEMORY else "[OutOfMemory]", kind=kind,
                start_ns=T + at_us * 1000, end_ns=T + at_us * 1000, cpu_mem=cpu, dev_mem=dev,
                tid=11)


# One thread: linear (0-400 us) calling addmm (100-300 us), relu (500-600 us),
# a sum calling a sum (700-800 us, 710-790 us), memory inside addmm and
# outside every op; two kernels launched by addmm and relu.
EVENTS = [
    op("aten::linear", 0, 400),
    op("aten::addmm", 100, 300, corr=11, input_size=6, flops=4096),
    op("aten::relu", 500, 600, corr=12),
    memory(150, cpu=1024, dev=256),
    memory(450, cpu=-512),
    op("aten::sum", 700, 800),
    op("aten::sum", 710, 790),
    op("gemm_kernel", 120, 170, device_type=CUDA, device_index=1, tid=7, linked=11),
    op("relu_kernel", 200, 350, device_type=CUDA, device_index=1, tid=7, linked=12),
    memory(900, cpu=1 << 40, kind=OOM),
]


@pytest.fixture(scope="module")
def written():
    return get_testcore()._torch_records_for_test(EVENTS, use_device=True)


def args_of(ev):
    assert list(ev["args"])[:8] == PP_KEYS
    return ev["args"]


def test_times_move_onto_the_tracer_clock():
    # microseconds on the tracer clock (offset: tracer minus Kineto), floored
    ev = dict(name="a", start_ns=T + 10_999, end_ns=T + 13_001, tid=5)
    (a,) = get_testcore()._torch_records_for_test([ev], offset_ns=2_000_000)
    assert (a["name"], a["ts"], a["dur"], a["tid"]) == ("a", T // 1000 + 2010, 3, 5)
    (b,) = get_testcore()._torch_records_for_test([dict(ev, end_ns=T)])  # ends before it starts
    assert (b["ts"], b["dur"]) == (T // 1000 + 10, 0)


def test_memory_goes_to_every_op_around_it_and_is_not_written_twice(written):
    linear, addmm, relu = (args_of(e) for e in written[:3])
    assert (linear["cpu_memory"], linear["device_memory_usage"]) == (1024, 256)
    assert (addmm["cpu_memory"], addmm["device_memory_usage"]) == (1024, 256)
    assert (relu["cpu_memory"], relu["device_memory_usage"]) == (0, 0)
    assert written[3] is None  # attributed to linear and addmm
    free = written[4]  # inside no op: written on its own
    assert free["name"] == "[memory]" and free["dur"] == 0
    assert args_of(free)["cpu_memory"] == -512
    oom = written[9]
    assert oom["name"] == "[OutOfMemory]" and args_of(oom)["cpu_memory"] == 1 << 40


def test_a_same_named_only_child_is_folded_into_its_parent(written):
    outer, inner = written[5], written[6]
    assert outer["name"] == "aten::sum" and outer["dur"] == 100
    assert inner is None


def test_cpu_shares_are_over_the_outermost_ops(written):
    # outermost ops: linear 400 + relu 100 + sum 100 = 600 us
    shares = [args_of(written[i])["total_cpu_percent"] for i in (0, 1, 2, 5)]
    assert shares == [66.67, 33.33, 16.67, 16.67]


def test_device_shares_follow_the_kernels_each_op_launched(written):
    # kernels: 50 us launched by addmm, 150 us by relu
    assert [args_of(written[i])["total_device_percent"] for i in (0, 1, 2)] == [0.0, 25.0, 75.0]
    k1, k2 = written[7], written[8]
    assert (k1["tid"], args_of(k1)["device"], args_of(k1)["device_index"]) == (7, CUDA, 1)
    assert (args_of(k1)["total_device_percent"], args_of(k2)["total_device_percent"]) == (25.0, 75.0)
    assert args_of(k1)["total_cpu_percent"] == 0.0
    no_device = get_testcore()._torch_records_for_test(EVENTS)  # use_device=False
    assert args_of(no_device[1])["total_device_percent"] == 0.0


def test_flops_and_input_size_are_written_when_known(written):
    addmm = args_of(written[1])
    assert addmm["input_size"] == 6 and addmm["flops"] == 4096
    assert "flops" not in written[0]["args"]


def test_bad_events_are_refused():
    records = get_testcore()._torch_records_for_test
    with pytest.raises(TypeError, match="dict"):
        records([("aten::mm", 0, 1)])
    with pytest.raises(TypeError, match="name"):
        records([{"kind": OP}])
    with pytest.raises(TypeError, match="start_ns"):
        records([{"name": "x", "start_ns": "soon"}])
    with pytest.raises(ValueError, match="kind"):
        records([{"name": "x", "kind": 5}])



WRITE_SCRIPT = """
import json
from dftracer import _core
from dftracer.python import dftracer
log = dftracer.initialize_log(STEM)
T = log.get_time() * 1000
def ev(name, start_us, dur_us, **kw):
    return dict(name=name, start_ns=T + start_us * 1000, end_ns=T + (start_us + dur_us) * 1000,
                **kw)
events = [ev("aten::mm", 0, 100, tid=11, corr=1)]
for device, stream, n in ((0, 7, 3), (0, 9, 2), (1, 7, 2)):
    events += [ev("kernel", 10 + i, 1, device_type=1, device_index=device, tid=stream, linked=1)
               for i in range(n)]
first = _core._torch_write_for_test(events, use_device=True)
again = _core._torch_write_for_test(events[1:3], use_device=True)  # lanes known: not renamed
print(json.dumps([first, again, __import__("os").getpid()]))
log.finalize()
"""


def test_device_events_go_on_lanes_named_once_per_file(tmp_path):
    """The handler's writer (torch/trace_handler.c) puts device events on a
    pid per (process, device) and a tid per stream, and names each pid once
    (process_name) and each (pid, stream) once (thread_name) per file."""
    get_testcore()
    code = USE_TESTCORE + WRITE_SCRIPT.replace("STEM", repr(str(tmp_path / "lanes")))
    proc = run_python(code, env={"DFTRACER_ENABLE": "1"})
    first, again, pid = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (first, again) == (8, 2)
    (path,) = find_traces(str(tmp_path), "lanes")
    trace = read_trace(path)
    lane = {d: 0x10000000 + (pid & 0x3FFFFF) * 16 + d for d in (0, 1)}
    pp = trace.of("X", cat="PP")
    assert sorted((e["pid"], e["tid"]) for e in pp if e["name"] == "kernel") == sorted(
        [(lane[0], 7)] * 5 + [(lane[0], 9)] * 2 + [(lane[1], 7)] * 2)
    (mm,) = [e for e in pp if e["name"] == "aten::mm"]
    assert (mm["pid"], mm["tid"]) == (pid, 11)
    procs = [(e["pid"], e["args"]["name"]) for e in trace.of("M", name="process_name")
             if e["pid"] != pid]
    assert sorted(procs) == [(lane[0], f"cuda:0 (pid {pid})"), (lane[1], f"cuda:1 (pid {pid})")]
    threads = [(e["pid"], e["tid"], e["args"]["name"]) for e in trace.of("M", name="thread_name")
               if e["pid"] != pid]
    assert sorted(threads) == [(lane[0], 7, "cuda:0 stream 7"), (lane[0], 9, "cuda:0 stream 9"),
                               (lane[1], 7, "cuda:1 stream 7")]
