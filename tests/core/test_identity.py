"""The `rank` and `clock` metadata events (docs/trace-format.md, "Ranks and
clocks"): the rank from each launcher's environment, the rank torch.distributed
gives a process started without one, and the (trace clock, wall clock) pairs."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from tracefile import find_traces, read_trace, run_python

LOG = """
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
log.log_event("work", "compute", log.get_time(), 5)
log.finalize()
"""


def trace_with(tmp_path, **env):
    proc = run_python(LOG.format(stem=str(tmp_path / "trace")),
                      dict({"DFTRACER_ENABLE": "1"}, **env))
    (path,) = find_traces(str(tmp_path))
    return read_trace(path), proc.stderr


def metadata(trace, name):
    return [e["args"] for e in trace.events if e["ph"] == "M" and e["name"] == name]


def launchers():
    no_rank = {v: "" for v in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                               "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID",
                               "LSB_JOBID", "FLUX_JOB_ID")}
    yield "torchrun", dict(no_rank, RANK="3", LOCAL_RANK="1", WORLD_SIZE="8",
                           TORCHELASTIC_RUN_ID="run-7"), \
        {"value": 3, "local_rank": 1, "world_size": 8, "job_id": "run-7", "source": "RANK"}
    yield "slurm", dict(no_rank, SLURM_PROCID="12", SLURM_LOCALID="0", SLURM_NTASKS="16",
                        SLURM_JOB_ID="4711"), \
        {"value": 12, "local_rank": 0, "world_size": 16, "job_id": "4711",
         "source": "SLURM_PROCID"}
    yield "openmpi", dict(no_rank, OMPI_COMM_WORLD_RANK="5", OMPI_COMM_WORLD_LOCAL_RANK="1",
                          OMPI_COMM_WORLD_SIZE="6"), \
        {"value": 5, "local_rank": 1, "world_size": 6, "source": "OMPI_COMM_WORLD_RANK"}
    yield "pmi", dict(no_rank, PMI_RANK="2", PMI_SIZE="4", MPI_LOCALRANKID="2",
                      PBS_JOBID="99.pbs"), \
        {"value": 2, "local_rank": 2, "world_size": 4, "job_id": "99.pbs", "source": "PMI_RANK"}
    # torchrun under srun: RANK wins; torchrun's run id "none" falls back to SLURM's
    yield "torchrun-in-slurm", dict(no_rank, RANK="9", SLURM_PROCID="1", SLURM_JOB_ID="77",
                                    TORCHELASTIC_RUN_ID="none"), \
        {"value": 9, "job_id": "77", "source": "RANK"}


@pytest.mark.parametrize("env,want", [(e, w) for _, e, w in launchers()],
                         ids=[n for n, _, _ in launchers()])
def test_rank_from_the_launchers_environment(tmp_path, env, want):
    trace, _ = trace_with(tmp_path, **env)
    (meta,) = metadata(trace, "rank")
    assert meta == dict(want, hhash=meta["hhash"], name="rank")
    (pname,) = metadata(trace, "process_name")
    assert pname["name"].endswith(f" rank {want['value']}")


def test_no_rank_without_a_launcher(tmp_path):
    env = {v: "" for v in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")}
    trace, err = trace_with(tmp_path, **env)
    assert metadata(trace, "rank") == [] and err == ""
    assert " rank " not in metadata(trace, "process_name")[0]["name"]


def test_an_unusable_rank_is_one_warning_and_the_next_launcher(tmp_path):
    trace, err = trace_with(tmp_path, RANK="first", SLURM_PROCID="4", SLURM_JOB_ID="1")
    assert err.count("warning") == 1, err
    assert "RANK='first' is not a non-negative integer" in err
    (meta,) = metadata(trace, "rank")
    assert (meta["value"], meta["source"]) == (4, "SLURM_PROCID")


def test_clock_pairs_at_start_flush_tick_and_end(tmp_path):
    run_python(f"""
        import time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / "trace")!r}, None, -1)
        log.flush()
        time.sleep(1.0)   # ten flush intervals of 50 ms: the flusher writes a tick pair
        log.finalize()
        """, {"DFTRACER_ENABLE": "1", "DFTRACER_FLUSH_INTERVAL": "0.05"})
    (path,) = find_traces(str(tmp_path))
    trace = read_trace(path)  # ids unique, end last, num_events right
    pairs = [e for e in trace.events if e["ph"] == "M" and e["name"] == "clock"]
    whens = [p["args"]["when"] for p in pairs]
    assert whens[0] == "start" and whens.count("flush") == 1 and whens[-1] == "end", whens
    # A tick comes DFT_CLOCK_PAIR_EVERY (10) flush intervals after the last
    # pair: at least one in the second of sleep, at most one per 0.5 s of the
    # run (a loaded machine may tick before the explicit flush, too).
    run_s = (pairs[-1]["args"]["value"] - pairs[0]["args"]["value"]) / 1e6
    assert 1 <= whens.count("tick") <= run_s / 0.5 + 1, (whens, run_s)
    pid = trace.events[0]["pid"]
    start = trace.of("X", cat="dftracer", name="start")[0]["ts"]
    last = start
    for p in pairs:
        assert p["tid"] == pid and p["args"]["name"] == "clock"
        assert abs(p["args"]["value"] - p["args"]["wall_us"]) < 50_000
        assert p["args"]["value"] >= last - 1_000  # written in time order
        last = p["args"]["value"]
    proc = subprocess.run([sys.executable, "-m", "dftracer", "validate", path],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_record_rank_checks_its_arguments(tmp_path):
    proc = run_python("""
        from dftracer import _core
        for bad, kind in (((-1,), ValueError), (("2",), TypeError), ((1, "x"), TypeError)):
            try:
                _core._record_rank(*bad)
            except kind as e:
                print(kind.__name__, e)
        _core._record_rank(1)   # tracing is off: nothing, no error
        print("ok")
        """)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ValueError _record_rank: rank must be >= 0") and \
        lines[-1] == "ok" and len(lines) == 4, proc.stdout


def test_record_worker_writes_one_event_and_checks_its_arguments(tmp_path):
    """_record_worker: the `worker` metadata event of docs/trace-format.md
    ("Workers"), one per call; bad arguments raise before anything is written."""
    proc = run_python(f"""
        from dftracer import _core
        from dftracer.python import dftracer
        for bad, kind in (((-1,), ValueError), (("2",), TypeError), ((1, "x"), TypeError)):
            try:
                _core._record_worker(*bad)
            except kind as e:
                print(kind.__name__, e)
        log = dftracer.initialize_log({str(tmp_path / "trace")!r}, None, -1)
        _core._record_worker(1, 3)
        _core._record_worker(0)
        log.finalize()
        print("ok")
        """, env={"DFTRACER_ENABLE": "1"})
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ValueError _record_worker: id must be >= 0") and \
        lines[-1] == "ok" and len(lines) == 4, proc.stdout + proc.stderr
    (path,) = find_traces(str(tmp_path))
    trace = read_trace(path)
    events = trace.of("M", name="worker")
    assert [e["args"] for e in events] == [
        {"hhash": events[0]["args"]["hhash"], "name": "worker", "value": 1, "num_workers": 3},
        {"hhash": events[0]["args"]["hhash"], "name": "worker", "value": 0}]
    from dftracer import _core

    r = _core._io_file(path)  # the reader (summary --io) takes the last one
    assert (r["worker"], r["num_workers"]) == (0, -1)


def test_torch_distributed_rank_of_a_process_started_without_one(tmp_path):
    pytest.importorskip("torch", reason="needs torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = run_python(f"""
        import os
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / "trace")!r}, None, -1)
        import torch.distributed as dist
        from torch.distributed import init_process_group
        assert init_process_group.__name__ == "init_process_group"
        try:
            dist.init_process_group("no-such-backend", init_method="tcp://127.0.0.1:{port}",
                                    rank=0, world_size=1)
        except Exception as e:
            print("raised", type(e).__name__)
        init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
        dist.destroy_process_group()
        log.finalize()
        """, {"DFTRACER_ENABLE": "1", "RANK": "", "LOCAL_RANK": "", "SLURM_PROCID": "",
              "OMPI_COMM_WORLD_RANK": "", "PMI_RANK": ""})
    assert proc.stdout.split()[0] == "raised", proc.stdout  # the call's own error
    (path,) = find_traces(str(tmp_path))
    trace = read_trace(path)
    (meta,) = metadata(trace, "rank")  # only the call that succeeded writes one
    assert (meta["value"], meta["world_size"], meta["source"]) == (0, 1, "torch.distributed")
    assert "local_rank" not in meta


FAKE_DIST = """
_ready = False
def init_process_group(backend, rank=0, world_size=1):
    global _ready
    if backend != "fake":
        raise ValueError("no such backend: " + backend)
    _ready = True
    return "done"
def is_initialized():
    return _ready
def get_rank():
    return 5
def get_world_size():
    return 6
"""


def test_the_init_hook_with_another_finder_that_asks_the_others(tmp_path):
    """torch.distributed imported after tracing started, through a meta path
    finder of another tool that delegates to the others (as ours does)."""
    pkg = tmp_path / "fake" / "torch"
    (pkg / "distributed").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "distributed" / "__init__.py").write_text(FAKE_DIST)
    proc = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "fake")!r})
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / "trace")!r}, None, -1)

        class Delegating:
            def find_spec(self, name, path, target=None):
                if name != "torch.distributed":
                    return None
                for f in sys.meta_path:
                    if f is not self and hasattr(f, "find_spec"):
                        spec = f.find_spec(name, path, target)
                        if spec is not None:
                            return spec

        sys.meta_path.insert(0, Delegating())
        import torch.distributed as dist
        try:
            dist.init_process_group("nccl")
        except ValueError as e:
            print("raised", e)
        print(dist.init_process_group("fake"), dist.init_process_group.__name__)
        log.finalize()
        """, {"DFTRACER_ENABLE": "1", "RANK": "", "SLURM_PROCID": "",
              "OMPI_COMM_WORLD_RANK": "", "PMI_RANK": "", "LOCAL_RANK": "3"})
    assert proc.stdout.splitlines() == ["raised no such backend: nccl",
                                        "done init_process_group"], proc.stdout
    (path,) = find_traces(str(tmp_path))
    (meta,) = metadata(read_trace(path), "rank")
    assert (meta["value"], meta["world_size"], meta["local_rank"], meta["source"]) == (
        5, 6, 3, "torch.distributed")


# ---- who a process is, as the reference writes it (issue 67) -----------------

NO_LAUNCHER = {v: "" for v in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")}


def test_events_carry_the_os_pid_and_a_forked_child_names_it_as_ppid(tmp_path):
    # process_id names the file (a rank, as DLIO passes it), never the pid
    # field: pydftracer's dftracer 2.2.0 writes the OS pid there too.
    proc = run_python(f"""
        import os
        from dftracer.python import dftracer, dft_fn
        log = dftracer.initialize_log({str(tmp_path / 'trace-3-of-4.pfw')!r}, None, 3)
        with dft_fn("work", name="parent"):
            pass
        pid = os.fork()
        if pid == 0:
            with dft_fn("work", name="child"):
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        log.finalize()
        print(os.getpid(), pid)
        """, dict(NO_LAUNCHER, DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1"))
    parent_pid, child_pid = map(int, proc.stdout.split())
    files = find_traces(str(tmp_path), "trace-3-of-4")
    assert len(files) == 2
    by_pid = {}
    for f in files:
        tr = read_trace(f)
        pids = {e["pid"] for e in tr.events}
        assert len(pids) == 1
        by_pid[pids.pop()] = (f, tr)
    assert set(by_pid) == {parent_pid, child_pid}
    assert by_pid[parent_pid][0].endswith("-3-app.pfw.gz")  # the name keeps process_id
    (start,) = by_pid[child_pid][1].of("X", name="start")
    assert start["args"]["ppid"] == parent_pid


def _other_file_system(tmp_path):
    """A folder on another file system than tmp_path's (/dev/shm), or None."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK) or \
            os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        return None
    return tempfile.mkdtemp(prefix="dft-cwd-", dir=shm)


EARLY = 3000  # events before initialize_log: some already written when it renames


@pytest.mark.parametrize("where", ["same-fs", "other-fs"])
def test_events_logged_before_initialize_log_go_to_the_file_it_names(tmp_path, where):
    # DLIO decorates its classes' __init__ with @dlp.log_init and calls
    # initialize_log later: the trace that started by itself goes on in the
    # file initialize_log names, and nothing is left in the current folder,
    # also when that folder is on another file system (a tmpfs working
    # directory: the file's bytes are copied, not linked).
    logs = tmp_path / "logs"
    if where == "same-fs":
        cwd = tmp_path / "cwd"
        cwd.mkdir()
    else:
        other = _other_file_system(tmp_path)
        if other is None:
            pytest.skip("no writable /dev/shm on another file system")
        cwd = pathlib.Path(other)
    try:
        proc = run_python(f"""
            from dftracer.python import dftracer, dft_fn
            class Storage:
                @dft_fn("storage").log_init
                def __init__(self):
                    for _ in range({EARLY}):
                        with dft_fn("work", name="early"):
                            pass
            Storage()
            import time
            time.sleep(0.3)  # the flusher writes the early events: the file has members
            log = dftracer.initialize_log({str(logs / 'trace-0-of-2.pfw')!r}, None, 0)
            for _ in range({EARLY}):
                with dft_fn("work", name="late"):
                    pass
            print(log.trace_path)
            log.finalize()
            """, dict(NO_LAUNCHER, DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1",
                      DFTRACER_FLUSH_INTERVAL="0.05"), cwd=str(cwd))
        assert os.listdir(cwd) == []
    finally:
        if where == "other-fs":
            shutil.rmtree(cwd, ignore_errors=True)
    assert proc.stderr == "", proc.stderr
    (path,) = find_traces(str(logs), "trace-0-of-2")
    tr = read_trace(path)  # one header, one `end`, every line checked
    names = [e["name"] for e in tr.user_events()]
    assert names.count("early") == EARLY and names.count("late") == EARLY
    assert len(tr.of("X", cat="storage")) == 1


def test_a_rank_learnt_later_is_in_the_files_of_forked_workers(tmp_path):
    # Lightning's own launcher and mp.spawn set no RANK: torch.distributed
    # gives the rank (_record_rank); the workers the rank forks are its own.
    run_python(f"""
        import os
        from dftracer import _core
        from dftracer.python import dftracer, dft_fn
        log = dftracer.initialize_log({str(tmp_path / 'trace')!r}, None, -1)
        _core._record_rank(2, world_size=4, local_rank=2)
        pid = os.fork()
        if pid == 0:
            _core._record_worker(1, num_workers=2)
            with dft_fn("data", name="item"):
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        log.finalize()
        """, dict(NO_LAUNCHER, DFTRACER_ENABLE="1"))
    files = find_traces(str(tmp_path))
    assert len(files) == 2
    for f in files:
        tr = read_trace(f)
        ranks = metadata(tr, "rank")
        assert [r["value"] for r in ranks] == [2] and ranks[0]["world_size"] == 4
    (child,) = [f for f in files if metadata(read_trace(f), "worker")]
    merged = tmp_path / "merged.pfw"
    proc = subprocess.run([sys.executable, "-m", "dftracer", "merge", "-o", str(merged), *files],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    labels = {}
    order = {}
    for e in read_trace(str(merged), check=False).events:
        if e["ph"] == "M" and e["name"] == "process_name" and "[host" in e["args"]["name"]:
            labels[e["pid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "process_sort_index":
            order[e["pid"]] = e["args"]["sort_index"]
    worker = [p for p, n in labels.items() if ", worker 1" in n]
    rank = [p for p, n in labels.items() if ", worker" not in n]
    assert len(worker) == 1 and len(rank) == 1
    assert ", rank 2, worker 1, child of pid" in labels[worker[0]]
    assert order[rank[0]] < order[worker[0]]  # a rank's workers follow it
