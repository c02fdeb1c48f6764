"""POSIX/stdio tracing through GOT rewriting (src/io_*.c) and `dftracer run`.

Every test runs the traced code in a fresh interpreter, then decodes the trace
files and checks each line against docs/trace-format.md (tracefile.read_trace)
and the I/O event arguments against docs/io-tracing.md.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tracefile import find_traces, read_trace, run_python

IO_CATS = ("POSIX", "STDIO")

try:
    import numpy  # noqa: F401

    HAVE_NUMPY = True
except ImportError:
    HAVE_NUMPY = False


def _has_torch() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch.utils.data"], capture_output=True)
    return probe.returncode == 0


def base_name(name: str) -> str:
    """open64 -> open: the LFS aliases glibc exports under a second name."""
    return name[:-2] if name.endswith("64") else name


def trace_env(tmp_path, data_dir, **extra):
    env = {
        "DFTRACER_ENABLE": "1",
        "DFTRACER_LOG_FILE": str(tmp_path / "trace"),
    }
    if data_dir is not None:
        env["DFTRACER_DATA_DIR"] = str(data_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


PRELUDE = """
import os, sys
from dftracer import _core
_core.logger.initialize_log()
"""


def run_traced(tmp_path, code, data_dir, **extra):
    """Runs PRELUDE + code traced; returns {pid: Trace} and the process."""
    proc = run_python(PRELUDE + textwrap.dedent(code), env=trace_env(tmp_path, data_dir, **extra),
                      cwd=str(tmp_path))
    traces = {}
    for path in find_traces(str(tmp_path)):
        t = read_trace(path)
        traces[t.events[0]["pid"]] = t
    return traces, proc


# The calls on processes, not files (docs/io-tracing.md, "Processes"):
# tests/io/test_process_events.py checks them.
PROCESS_CALLS = {"fork", "execv", "execve", "execvp", "execvpe", "fexecve", "posix_spawn",
                 "posix_spawnp", "waitpid", "wait", "wait4"}


def io_events(trace):
    """The file I/O events of a trace."""
    return [e for e in trace.events if e["ph"] == "X" and e["cat"] in IO_CATS
            and e["name"] not in PROCESS_CALLS]


def fhash_of(trace, path):
    return {v: k for k, v in trace.hashes("FH").items()}.get(str(path))


def only(traces):
    assert len(traces) == 1, f"{len(traces)} trace files"
    return next(iter(traces.values()))


@pytest.fixture
def dirs(tmp_path):
    data = tmp_path / "data"
    other = tmp_path / "other"
    data.mkdir()
    other.mkdir()
    return data, other


# ---- exact events --------------------------------------------------------------


def test_posix_sequence_exact_events_and_args(tmp_path, dirs):
    data, other = dirs
    code = f"""
    for d in ({str(data)!r}, {str(other)!r}):
        fd = os.open(os.path.join(d, "f.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"x" * 100)
        os.pwrite(fd, b"y" * 10, 4096)
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 50)
        os.close(fd)
    """
    trace = only(run_traced(tmp_path, code, data)[0])
    events = io_events(trace)
    h = fhash_of(trace, data / "f.bin")
    assert h is not None and fhash_of(trace, other / "f.bin") is None
    assert [base_name(e["name"]) for e in events] == [
        "open", "write", "pwrite", "fsync", "lseek", "ftruncate", "close"]
    assert all(e["cat"] == "POSIX" and e["args"]["fhash"] == h for e in events)
    op, wr, pw, fs, sk, tr, cl = (e["args"] for e in events)
    fd = op["ret"]
    assert fd >= 0 and op["flags"] & os.O_CREAT and op["mode"] == 0o644
    assert wr == {**wr, "fd": fd, "count": 100, "ret": 100}
    assert pw == {**pw, "fd": fd, "count": 10, "offset": 4096, "ret": 10}
    assert fs["ret"] == 0 and sk["offset"] == 0 and sk["whence"] == os.SEEK_SET
    assert tr["size"] == 50 and tr["ret"] == 0 and cl == {**cl, "fd": fd, "ret": 0}
    assert not any("errno" in e["args"] for e in events)
    for e in events:
        assert e["args"]["level"] == 1 and e["args"]["p_idx"] == -1


def test_builtin_open_pathlib_and_dirs(tmp_path, dirs):
    data, other = dirs
    code = f"""
    import pathlib
    d = pathlib.Path({str(data)!r})
    (d / "sub").mkdir()
    (d / "sub" / "a.txt").write_text("hello")
    assert (d / "sub" / "a.txt").read_text() == "hello"
    (d / "sub" / "a.txt").rename(d / "sub" / "b.txt")
    assert sorted(os.listdir(d / "sub")) == ["b.txt"]
    (d / "sub" / "b.txt").unlink()
    (d / "sub").rmdir()
    o = pathlib.Path({str(other)!r})
    (o / "x.txt").write_text("no")
    o.joinpath("x.txt").read_text(); os.listdir(o); (o / "x.txt").unlink()
    """
    trace = only(run_traced(tmp_path, code, data)[0])
    names = [base_name(e["name"]) for e in io_events(trace)]
    for expected in ("mkdir", "open", "write", "read", "close", "rename", "opendir", "readdir",
                     "closedir", "unlink", "rmdir"):
        assert expected in names, (expected, names)
    paths = set(trace.hashes("FH").values())
    assert str(data / "sub" / "a.txt") in paths and str(data / "sub" / "b.txt") in paths
    assert not any(p.startswith(str(other)) for p in paths)
    ren = [e for e in io_events(trace) if e["name"] == "rename"][0]["args"]
    assert ren["fhash"] == fhash_of(trace, data / "sub" / "a.txt")
    assert ren["new_fhash"] == fhash_of(trace, data / "sub" / "b.txt")
    reads = [e for e in io_events(trace) if e["name"] == "readdir" or e["name"] == "readdir64"]
    assert [e["args"]["ret"] for e in reads][-1] == 0  # end of directory


def test_outside_data_dir_and_unset_data_dir_trace_nothing(tmp_path, dirs):
    data, other = dirs
    code = f"""
    p = os.path.join({str(other)!r}, "f")
    with open(p, "w") as f: f.write("z")
    with open(p) as f: f.read()
    os.stat(p)
    print(_core._io_installed()["slots"])
    """
    traces, proc = run_traced(tmp_path, code, data)
    assert io_events(only(traces)) == [] and int(proc.stdout) > 0
    for f in find_traces(str(tmp_path)):
        os.unlink(f)
    traces, proc = run_traced(tmp_path, code, None)
    assert io_events(only(traces)) == [] and int(proc.stdout) == 0


def test_data_dir_all_and_prefix_boundaries(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "database").mkdir()
    code = """
    print(_core._io_traced_path("data/x"), _core._io_traced_path("database/x"),
          _core._io_traced_path("data/../database/x"), _core._io_traced_path("data"),
          _core._io_traced_path("/etc/passwd"))
    """
    _, proc = run_traced(tmp_path, code, "data:/nonexistent/zz")
    assert proc.stdout.split() == [str(tmp_path / "data/x"), "None", "None",
                                   str(tmp_path / "data"), "None"]
    for f in find_traces(str(tmp_path)):
        os.unlink(f)
    _, proc = run_traced(tmp_path, code, "all")
    assert "None" not in proc.stdout.split()


def test_errno_preserved_and_recorded(tmp_path, dirs):
    data, _ = dirs
    code = f"""
    import ctypes, errno
    try:
        os.open({str(data / "missing")!r}, os.O_RDONLY)
    except FileNotFoundError as e:
        assert e.errno == errno.ENOENT
    fd = os.open({str(data / "w")!r}, os.O_WRONLY | os.O_CREAT, 0o600)
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8)
    ctypes.set_errno(0)
    assert libc.read(fd, buf, 8) == -1
    print(ctypes.get_errno())
    os.close(fd)
    """
    trace, proc = run_traced(tmp_path, code, data)
    trace = only(trace)
    assert int(proc.stdout) == errno.EBADF
    ev = {base_name(e["name"]): e["args"] for e in io_events(trace) if "errno" in e["args"]}
    assert ev["open"]["errno"] == errno.ENOENT and ev["open"]["ret"] == -1
    assert ev["read"]["errno"] == errno.EBADF and ev["read"]["ret"] == -1
    assert ev["open"]["fhash"] == fhash_of(trace, data / "missing")


def test_mmap_events(tmp_path, dirs):
    data, _ = dirs
    (data / "m.bin").write_bytes(b"a" * 8192)
    code = f"""
    import mmap
    with open({str(data / "m.bin")!r}, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        assert m[:1] == b"a"
        m.close()
    """
    trace = only(run_traced(tmp_path, code, data)[0])
    ev = {base_name(e["name"]): e["args"] for e in io_events(trace)}
    h = fhash_of(trace, data / "m.bin")
    assert ev["mmap"]["fhash"] == h and ev["mmap"]["size"] == 8192 and ev["mmap"]["ret"] == 0
    assert ev["munmap"]["fhash"] == h and ev["munmap"]["size"] == 8192


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy not installed")
def test_numpy_tofile_fromfile_loaded_after_start(tmp_path, dirs):
    data, _ = dirs
    code = f"""
    import numpy as np   # dlopen'd after tracing started: patched on load
    p = {str(data / "arr.bin")!r}
    np.arange(1000, dtype=np.float64).tofile(p)
    assert np.fromfile(p, dtype=np.float64).sum() == 499500
    slots = [v for o, s, v in _core._io_got_slots("fread") if "multiarray" in o]
    print(slots and all(v == _core._io_wrapper("fread") for v in slots))
    """
    trace, proc = run_traced(tmp_path, code, data)
    trace = only(trace)
    assert proc.stdout.strip() == "True"
    stdio = [e for e in io_events(trace) if e["cat"] == "STDIO"]
    h = fhash_of(trace, data / "arr.bin")
    fw = [e["args"] for e in stdio if e["name"] == "fwrite"]
    fr = [e["args"] for e in stdio if e["name"] == "fread"]
    assert fw and fw[0]["fhash"] == h and fw[0]["size"] == 8 and fw[0]["ret"] == 1000
    assert fr and fr[0]["fhash"] == h and fr[0]["count"] == 1000
    assert {"fdopen", "fclose"} <= {e["name"] for e in stdio}


@pytest.mark.no_asan  # libasan's own pread/fopen interceptors answer ctypes' lookups
def test_c_calls_through_ctypes(tmp_path, dirs):
    data, other = dirs
    (data / "c.bin").write_bytes(b"b" * 4096)
    (other / "c.bin").write_bytes(b"b" * 4096)
    code = f"""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    buf = ctypes.create_string_buffer(4096)
    for p in ({str(data / "c.bin")!r}, {str(other / "c.bin")!r}):
        fd = libc.open(p.encode(), os.O_RDONLY)
        assert libc.pread(fd, buf, 4096, ctypes.c_long(0)) == 4096
        assert libc.close(fd) == 0
        libc.fopen.restype = ctypes.c_void_p
        fp = ctypes.c_void_p(libc.fopen(p.encode(), b"rb"))
        assert libc.fread(buf, 1, 100, fp) == 100
        assert libc.fclose(fp) == 0
    """
    trace = only(run_traced(tmp_path, code, data)[0])
    h = fhash_of(trace, data / "c.bin")
    got = [(e["cat"], e["name"]) for e in io_events(trace)]
    assert got == [("POSIX", "open"), ("POSIX", "pread"), ("POSIX", "close"),
                   ("STDIO", "fopen"), ("STDIO", "fread"), ("STDIO", "fclose")]
    assert all(e["args"]["fhash"] == h for e in io_events(trace))


# ---- switches and restore ------------------------------------------------------------

SWITCH_CODE = """
import ctypes
libc = ctypes.CDLL("libc.so.6")
p = os.path.join(os.environ["DFTRACER_DATA_DIR"], "s.txt")
with open(p, "w") as f: f.write("s")
libc.fopen.restype = ctypes.c_void_p
fp = ctypes.c_void_p(libc.fopen(p.encode(), b"r"))
libc.fclose(fp)
print(json.dumps(_core._io_installed()))
"""


@pytest.mark.no_asan  # libasan intercepts stdio itself, so STDIO events do not reach our GOT slots
@pytest.mark.parametrize("flag,cats", [
    ("DFTRACER_DISABLE_IO", set()),
    ("DFTRACER_DISABLE_POSIX", {"STDIO"}),
    ("DFTRACER_DISABLE_STDIO", {"POSIX"}),
    (None, {"POSIX", "STDIO"}),
])
def test_disable_flags(tmp_path, dirs, flag, cats):
    data, _ = dirs
    extra = {flag: "1"} if flag else {}
    traces, proc = run_traced(tmp_path, "import json\n" + SWITCH_CODE, data, **extra)
    state = json.loads(proc.stdout)
    assert state["posix"] == ("POSIX" in cats) and state["stdio"] == ("STDIO" in cats)
    assert (state["slots"] > 0) == bool(cats)
    assert {e["cat"] for e in io_events(only(traces))} == cats


def test_got_restored_after_finalize(tmp_path, dirs):
    data, _ = dirs
    code = """
    import json
    from dftracer import _core
    names = ("read", "pread64", "open64", "close", "fopen64", "dlopen")
    def slots():
        return {n: sorted(_core._io_got_slots(n)) for n in names}
    before = slots()
    _core.logger.initialize_log()
    during = slots()
    patched = all(v == _core._io_wrapper(n) for n in names if n != "dlopen"
                  for o, s, v in during[n])
    _core.finalize()
    after = slots()
    print(json.dumps([before == after, patched, during != before,
                      _core._io_installed()["slots"], sum(map(len, before.values()))]))
    """
    proc = run_python(code, env=trace_env(tmp_path, data), cwd=str(tmp_path))
    same, patched, changed, left, total = json.loads(proc.stdout)
    assert same and patched and changed and left == 0 and total > 0


# ---- processes ----------------------------------------------------------------------


def test_forked_child_traces_inherited_and_new_files(tmp_path, dirs):
    data, _ = dirs
    (data / "in.txt").write_text("inherited")
    code = f"""
    fd = os.open({str(data / "in.txt")!r}, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        os.pread(fd, 4, 0)
        with open({str(data / "new.txt")!r}, "w") as f: f.write("c")
        _core.finalize()
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)
    """
    traces, _ = run_traced(tmp_path, code, data)
    assert len(traces) == 2
    (child,) = [t for t in traces.values()
                if t.of(cat="dftracer", name="start")[0]["args"]["ppid"] in traces]
    (parent,) = [t for t in traces.values() if t is not child]
    pr = [e for e in io_events(child) if base_name(e["name"]) == "pread"]
    assert len(pr) == 1 and pr[0]["args"]["fhash"] == fhash_of(child, data / "in.txt")
    assert fhash_of(child, data / "new.txt") and not fhash_of(parent, data / "new.txt")
    assert not [e for e in io_events(parent) if base_name(e["name"]) == "pread"]


RUN_SCRIPT_TORCH = """
import os, sys
import torch
from torch.utils.data import DataLoader, Dataset

class Files(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        with open(os.path.join(os.environ["IO_DATA"], f"s{i}.bin"), "rb") as f:
            return torch.tensor(len(f.read()))

if __name__ == "__main__":
    loader = DataLoader(Files(), batch_size=1, num_workers=2, multiprocessing_context="spawn")
    print(sum(int(b) for b in loader))
    with open(os.path.join(os.environ["IO_DATA"], "main.txt"), "w") as f:
        f.write("main")
    sys.exit(3)
"""

RUN_SCRIPT_MP = """
import multiprocessing as mp, os, sys

def load(i):
    with open(os.path.join(os.environ["IO_DATA"], f"s{i}.bin"), "rb") as f:
        return len(f.read())

if __name__ == "__main__":
    pool = mp.get_context("spawn").Pool(2)
    print(sum(pool.map(load, range(4), chunksize=1)))
    pool.close(); pool.join()
    with open(os.path.join(os.environ["IO_DATA"], "main.txt"), "w") as f:
        f.write("main")
    sys.exit(3)
"""


def run_cli(tmp_path, *args, script):
    (tmp_path / "script.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env["IO_DATA"] = str(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "dftracer.tools.run", *args, "--", sys.executable,
                           "script.py"], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=300)


def test_run_traces_script_and_spawned_workers(tmp_path, dirs):
    data, _ = dirs
    for i in range(4):
        (data / f"s{i}.bin").write_bytes(b"d" * (i + 1))
    script = RUN_SCRIPT_TORCH if _has_torch() else RUN_SCRIPT_MP
    proc = run_cli(tmp_path, "--data-dir", "data", "--log-file", "logs/run", script=script)  # logs/ is created
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == "10"
    traces = [read_trace(p) for p in find_traces(str(tmp_path / "logs"), "run")]
    assert len(traces) >= 3  # the script and two workers
    reads = {}
    main_writes = 0
    for t in traces:
        for e in io_events(t):
            name = t.hashes("FH")[e["args"]["fhash"]]
            assert name.startswith(str(data)), name
            if base_name(e["name"]) == "read" and e["args"]["ret"] > 0:
                reads.setdefault(os.path.basename(name), set()).add(e["pid"])
            if e["name"] == "write" and name.endswith("main.txt"):
                main_writes += 1
    assert sorted(reads) == [f"s{i}.bin" for i in range(4)]
    script_pid = [t for t in traces if any(
        e["name"] == "write" for e in io_events(t))][0].events[0]["pid"]
    assert all(script_pid not in pids for pids in reads.values())  # read in workers
    assert main_writes == 1


def test_run_no_io_and_bad_command(tmp_path, dirs):
    data, _ = dirs
    for i in range(4):
        (data / f"s{i}.bin").write_bytes(b"d")
    proc = run_cli(tmp_path, "--data-dir", "data", "--no-io", "--log-file", "t",
                   script=RUN_SCRIPT_MP)
    assert proc.returncode == 3, proc.stderr
    traces = [read_trace(p) for p in find_traces(str(tmp_path), "t")]
    assert len(traces) >= 2 and not any(io_events(t) for t in traces)
    env = dict(os.environ)
    bad = subprocess.run([sys.executable, "-m", "dftracer.tools.run", "--", "/nonexistent/prog"],
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 127 and "/nonexistent/prog" in bad.stderr
