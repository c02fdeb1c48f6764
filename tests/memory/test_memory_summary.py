"""`dftracer summary --memory` (docs/memory.md, docs/cli.md) on real runs
under `dftracer run`: the DataLoader worker that keeps 4 MB a sample is the
one and only memory creep; a clean run and 20 flat but noisy processes have
none; a 2-rank gloo job in a memory cgroup whose rank 1 grows until the
kernel's OOM killer ends it lists that rank, and only it, under `oom`, after
the step its own output says it finished last (within one); a process that
grows while it runs is `running`, not killed, until it is SIGKILLed.
The counter events themselves are checked against docs/trace-format.md."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest

import autotrace_ddp as ddp
from tracefile import find_traces, read_trace, validate

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def clean_env(**extra: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(extra)
    return env


def traced(out, *command: str, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                           str(out / "t"), "--", *command], cwd=str(out), env=clean_env(),
                          capture_output=True, text=True, timeout=300)


def summary(out):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--memory", "--json",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("leak")
    proc = traced(out, sys.executable, os.path.join(HERE, "creep_prog.py"), "60", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    proc = traced(out, sys.executable, os.path.join(HERE, "creep_prog.py"), "60", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_counter_events_as_documented(leak_run):
    paths = find_traces(str(leak_run), "t")
    assert len(paths) == 3  # the main process and its two workers
    assert {v["verdict"] for v in validate(*paths)} == {"ok"}
    for path in paths:
        evs = read_trace(path).events
        pid = evs[-1]["pid"]
        counters = [e for e in evs if e["name"] == "memory" and e["ph"] == "C"]
        assert counters, path
        for e in counters:
            assert e["cat"] == "sys" and e["tid"] == pid and e["pid"] == pid
            assert set(e["args"]) <= {"rss_bytes", "step"} and e["args"]["rss_bytes"] > 0
        stepped = [e["args"]["step"] for e in counters if "step" in e["args"]]
        assert stepped == sorted(stepped) and stepped
        (limit,) = [e for e in evs if e["name"] == "memory" and e["ph"] == "M"]
        assert limit["args"]["value"] == "limit" and limit["args"]["limit_bytes"] >= -1
    worker0 = [p for p in paths if any(e["name"] == "worker" and e["args"]["value"] == 0
                                       for e in read_trace(p).events)]
    (w0,) = worker0
    steps = [e["args"]["step"] for e in read_trace(w0).events
             if e["name"] == "memory" and "step" in e.get("args", {})]
    assert steps == list(range(0, 60, 2))  # worker 0 of 2 reads batches 0, 2, 4, ...


def test_the_leaking_worker_is_the_only_creep(leak_run):
    a = summary(leak_run)
    roles = sorted((p["role"], p["worker"]) for p in a["processes"])
    assert roles == [("main", None), ("worker", 0), ("worker", 1)]
    (c,) = a["creep"]
    assert (c["role"], c["worker"], c["rank"]) == ("worker", 0, None)
    # 4 MB a sample, batch 1, every other batch of the loader: 2 MiB a loader step
    assert 1.5 * MIB <= c["growth_bytes_per_step"] <= 2.5 * MIB
    assert c["span"] == "data/item" and c["first_step"] is not None and c["steps"] >= 20
    for p in a["processes"]:
        if p["worker"] != 0:
            assert abs(p["growth_bytes_per_step"]) < MIB / 4, p
        assert p["end"] == "finalized"
    assert a["oom"] == []
    text = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--memory", str(leak_run)],
                          capture_output=True, text=True, timeout=120).stdout
    assert "worker 0 (pid" in text and "in data/item" in text


def test_a_clean_run_has_no_creep(clean_run):
    a = summary(clean_run)
    assert len(a["processes"]) == 3 and a["creep"] == [] and a["oom"] == []


def _flat_trace(path, seed: int) -> None:
    """A process whose memory is flat but noisy over 200 steps: +-3 MiB of
    noise, a one-off 80 MiB allocation at step 30, garbage freed at times."""
    rnd = random.Random(seed)
    pid = 1000 + seed
    lines = ["[", json.dumps({"id": 1, "name": "process_name", "cat": "dftracer", "pid": pid,
                              "tid": pid, "ph": "M", "args": {"name": "flat", "value": "process_name"}})]
    base, ts = 300 * MIB, 1_700_000_000_000_000
    for step in range(200):
        base += 80 * MIB if step == 30 else 0
        base -= 40 * MIB if step == 120 else 0
        rss = base + rnd.randint(-3 * MIB, 3 * MIB)
        ts += 10_000
        lines.append(json.dumps({"id": step + 2, "name": "memory", "cat": "sys", "pid": pid,
                                 "tid": pid, "ts": ts, "ph": "C",
                                 "args": {"rss_bytes": rss, "step": step}}))
    lines.append(json.dumps({"id": 999, "name": "end", "cat": "dftracer", "pid": pid, "tid": pid,
                             "ts": ts + 1, "dur": 0, "ph": "X", "args": {"num_events": 202}}))
    path.write_text("\n".join(lines) + "\n")


def test_twenty_flat_noisy_processes_have_no_creep(tmp_path):
    for seed in range(20):
        _flat_trace(tmp_path / f"flat-{seed}-app.pfw", seed)
    a = summary(tmp_path)
    assert len(a["processes"]) == 20
    assert a["creep"] == [] and a["oom"] == []
    assert all(p["steps"] == 200 and p["end"] == "finalized" for p in a["processes"])


# ---------------------------------------------------------------- OOM kill


def _memory_cgroup(name: str, limit: int):
    """A child memory cgroup of this process's own with the limit set, or
    None when this machine does not allow one (not root, no controller)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if "memory" in ctrls.split(","):  # cgroup v1
            base, limit_file = "/sys/fs/cgroup/memory" + path.rstrip("/"), "memory.limit_in_bytes"
            break
    else:
        v2 = [ln for ln in lines if ln.startswith("0::")]
        if not v2:
            return None
        base, limit_file = "/sys/fs/cgroup" + v2[0][3:].rstrip("/"), "memory.max"
    cg = os.path.join(base, name)
    try:
        os.mkdir(cg)
        with open(os.path.join(cg, limit_file), "w") as f:
            f.write(str(limit))
        swap = os.path.join(cg, "memory.memsw.limit_in_bytes" if limit_file.startswith("memory.l")
                            else "memory.swap.max")
        if os.path.exists(swap):
            with open(swap, "w") as f:
                f.write(str(limit) if swap.endswith("memsw.limit_in_bytes") else "0")
    except OSError:
        if os.path.isdir(cg):
            os.rmdir(cg)
        return None
    return cg


@pytest.fixture(scope="module")
def oom_run(tmp_path_factory):
    limit = 1500 * MIB
    cg = _memory_cgroup(f"dftracer-test-oom-{os.getpid()}", limit)
    if cg is None:
        pytest.skip("no memory cgroup can be made here (needs root and the memory controller)")
    out = tmp_path_factory.mktemp("oom")
    try:
        join = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"]
        proc = traced(out, *ddp.torchrun(), "--standalone", "--nproc_per_node", "2",
                      os.path.join(HERE, "oom_prog.py"), prefix=join)
    finally:
        try:  # a run that timed out leaves its processes in the cgroup: end them
            with open(os.path.join(cg, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        except OSError:
            pass
        for _ in range(50):  # the cgroup empties as its last processes are reaped
            try:
                os.rmdir(cg)
                break
            except OSError:
                import time
                time.sleep(0.1)
    assert proc.returncode != 0, "rank 1 was not killed"
    assert "SIGKILL" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    done = {}  # rank: the last step it says it finished
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "rank" and words[2] == "done":
            done[int(words[1])] = int(words[3])
    return out, limit, done


@pytest.mark.no_asan  # ASan's shadow memory and speed change when the limit is met
def test_the_oom_killed_rank_and_only_it(oom_run):
    out, limit, done = oom_run
    a = summary(out)
    (o,) = a["oom"]
    assert (o["rank"], o["role"], o["why"]) == (1, "main", "growing")
    assert 15 * MIB <= o["growth_bytes_per_step"] <= 25 * MIB
    assert o["limit_bytes"] == limit and o["last_step"] >= 5
    assert o["last_rss_bytes"] >= 5 * 20 * MIB
    # the steps its trace lost at the kill are counted from rank 0's collectives
    assert abs(o["last_step"] - done[1]) <= 1, (o, done)
    assert o["message"].startswith(f"rank 1 killed after step {o['last_step']}, ")
    ends = {(p["rank"], p["role"]): p["end"] for p in a["processes"]}
    assert ends[(1, "main")] == "killed"
    assert ends[(0, "main")] != "killed" and ends[(None, "launcher")] == "finalized"


def test_a_growing_process_is_running_until_it_is_killed(tmp_path):
    """The process grows 10 MiB a second and has no `end` yet: while it
    runs, `summary --memory` says `running` (tools/liveness.py: its pid is
    alive on this host) and lists no OOM kill; once SIGKILLed, `killed`
    while growing."""
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                             str(tmp_path / "t"), "--", sys.executable,
                             os.path.join(HERE, "grow_prog.py")], cwd=str(tmp_path),
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    try:
        pid = None
        for line in proc.stdout:  # 100 MiB: its last samples rose by more than OOM_RISE
            words = line.split()
            pid = int(words[1])
            if int(words[3]) >= 100:
                break
        assert pid is not None, "the program printed nothing"
        live = summary(tmp_path)
        (p,) = live["processes"]
        assert (p["pid"], p["end"], p["samples"] >= 3) == (pid, "running", True), p
        assert live["oom"] == [] and [r["pid"] for r in live["running"]] == [pid]
        text = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--memory",
                               str(tmp_path)], capture_output=True, text=True, timeout=120).stdout
        assert "Still running (no end event yet; the figures are so far): pid " in text
        assert "killed" not in text and "OOM" not in text
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    after = summary(tmp_path)
    (p,) = after["processes"]
    assert p["end"] == "killed" and after["running"] == []
    (o,) = after["oom"]
    assert (o["pid"], o["why"]) == (pid, "growing"), o
    assert o["message"].startswith(f"pid {pid} killed, ") and " up " in o["message"]


def test_top_shows_each_process_rss(leak_run):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "top", "--once", "--json",
                           str(leak_run)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    snap = json.loads(proc.stdout)
    for p in snap["processes"]:
        samples = {e["args"]["rss_bytes"] for e in read_trace(p["path"]).events
                   if e["name"] == "memory" and e["ph"] == "C"}
        assert p["rss_bytes"] in samples, p["path"]
    text = subprocess.run([sys.executable, "-m", "dftracer", "top", "--once", "--sort", "rss",
                           str(leak_run)], capture_output=True, text=True, timeout=120).stdout
    header = [ln for ln in text.splitlines() if ln.startswith("rank")][0]
    assert "RSS" in header.split() and "MiB" in text


def test_report_has_the_memory_section(leak_run, tmp_path):
    pytest.importorskip("plotly")
    page = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "dftracer", "report", str(leak_run), "-o",
                           str(page)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = page.read_text()
    assert "<h2>Memory (resident) per process</h2>" in text and "<h2>Memory creep</h2>" in text
    creep = text.split("<h2>Memory creep</h2>", 1)[1].split("</table>", 1)[0]
    assert creep.count("<tr>") == 2 and "worker 0 (pid" in creep and "data/item" in creep


def test_cuda_allocator_figures_per_step(tmp_path):
    """Once torch.cuda is initialized, each iteration's end writes the
    allocator's figures of the current device (docs/trace-format.md,
    "Memory"), read from torch's statistics (faked here: no GPU); none
    before; the memory readers keep reading the resident memory."""
    steps = 8
    proc = traced(tmp_path, sys.executable, os.path.join(HERE, "cuda_steps_prog.py"), str(steps))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = {d["step"]: d for d in map(json.loads, proc.stdout.splitlines())}
    (path,) = find_traces(str(tmp_path), "t")
    assert [v["verdict"] for v in validate(path)] == ["ok"]
    trace = read_trace(path)
    cuda = [e for e in trace.of(ph="C", cat="sys", name="memory")
            if "cuda3_allocated_bytes" in e["args"]]
    assert [e["args"]["step"] for e in cuda] == sorted(want), cuda
    for e in cuda:
        w = want[e["args"]["step"]]
        assert e["args"]["cuda3_allocated_bytes"] == w["allocated"]
        assert e["args"]["cuda3_peak_allocated_bytes"] == w["peak_allocated"]
        assert e["args"]["cuda3_reserved_bytes"] == w["reserved"]
        assert e["args"]["cuda3_peak_reserved_bytes"] == w["reserved"]
        assert set(e["args"]) == {"cuda3_allocated_bytes", "cuda3_reserved_bytes",
                                  "cuda3_peak_allocated_bytes", "cuda3_peak_reserved_bytes", "step"}
    its = trace.of(cat="pipeline", name="iteration")
    assert len(its) == steps
    out = summary(tmp_path)
    (p,) = out["processes"]
    assert p["peak_rss_bytes"] > 0 and not out["creep"]
