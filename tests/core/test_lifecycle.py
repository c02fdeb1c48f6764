"""How a traced process ends, and what is on disk afterwards (issue 20).

Every sentence of docs/configuration.md's "Guarantees" and every row of its
"What survives what" table has a test here: pools of each start method,
DataLoader workers, SIGTERM (default and chained handlers), SIGINT, sys.exit,
os._exit, SIGKILL after an idle moment, and the header at start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tracefile import USE_TESTCORE, find_traces, get_testcore, read_trace, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)  # tracefile.py
PROG = os.path.join(HERE, "lifecycle_prog.py")
ENABLED = {"DFTRACER_ENABLE": "1"}
N = 2000


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(ENABLED)
    env.update(extra)
    return env


def sigint_default() -> None:
    """In the child before exec: SIGINT back to its default, so Python installs
    KeyboardInterrupt's handler even when the suite runs from a background job
    (whose shell starts it with SIGINT ignored, inherited by every child)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def only_trace(directory) -> str:
    files = find_traces(str(directory))
    assert len(files) == 1, files
    return files[0]


def start(code: str, **env: str) -> subprocess.Popen:
    """Runs code in a traced interpreter; it prints 'ready' when the test may act."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=clean_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline().strip()
    assert line == "ready", (line, proc.stderr.read() if proc.poll() is not None else "")


def worker_events(directory) -> tuple:
    """(number of 'work' events over every file, number of files); every file
    decodes, every line is a valid event, ids are unique per file, and a file
    that ends with an end event counts its events right."""
    total, files = 0, find_traces(str(directory))
    for f in files:
        tr = read_trace(f, require_end=False)
        if tr.of("X", cat="dftracer", name="end"):
            read_trace(f, require_end=True)
        total += len(tr.of("X", cat="work"))
    return total, len(files)


# ---- pools: every cell of the table reads 2000 ----------------------------------------------------


@pytest.mark.no_asan  # forks (see test_core.py)
@pytest.mark.parametrize("how", ["with", "close", "executor"])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_every_pool_worker_event_reaches_disk(tmp_path, method, how):
    out = tmp_path / "traces"
    out.mkdir()
    proc = subprocess.run([sys.executable, PROG, str(out), "pool", method, how], env=clean_env(),
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "dftracer" not in proc.stderr, proc.stderr
    total, nfiles = worker_events(out)
    assert total == N
    assert nfiles >= 2  # the parent and the workers that ran a task (a spawned one may not)


@pytest.mark.no_asan
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_bind_signals_does_not_change_what_terminated_workers_keep(tmp_path, method):
    # The DFTRACER_BIND_SIGNALS=1 case: `with Pool()` gave 0 events.
    out = tmp_path / "traces"
    out.mkdir()
    proc = subprocess.run([sys.executable, PROG, str(out), "pool", method, "with"],
                          env=clean_env(DFTRACER_BIND_SIGNALS="1"), capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert worker_events(out)[0] == N


@pytest.mark.no_asan
@pytest.mark.parametrize("persistent", ["0", "1"])
def test_every_dataloader_worker_event_reaches_disk(tmp_path, persistent):
    pytest.importorskip("torch")
    out = tmp_path / "traces"
    out.mkdir()
    proc = subprocess.run([sys.executable, PROG, str(out), "loader", persistent], env=clean_env(),
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    total, nfiles = worker_events(out)
    assert total == N  # persistent: two epochs of N / 2 by the same workers
    assert nfiles == 3


# ---- the header, and the time-based flush ----------------------------------------------------------


def test_header_is_on_disk_as_soon_as_tracing_starts(tmp_path):
    proc = run_python(
        f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from tracefile import read_trace, find_traces
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        (path,) = find_traces({str(tmp_path)!r})
        tr = read_trace(path, require_end=False)  # checks HH, one start, every hash defined
        print(sorted({{e["name"] for e in tr.events}}))
        """,
        dict(ENABLED, DFTRACER_FLUSH_INTERVAL="0"),  # no help from the flusher
    )
    names = eval(proc.stdout.strip())
    assert {"HH", "process_name", "start", "SH", "FH", "thread_name"} <= set(names)


def test_lazily_started_trace_writes_its_header_at_once(tmp_path):
    proc = run_python(
        f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        from tracefile import read_trace, find_traces
        from dftracer.python import dftracer
        log = dftracer.get_instance()
        log.log_event("first", "c", log.get_time(), 1)  # tracing starts here
        (path,) = find_traces({str(tmp_path)!r})
        tr = read_trace(path, require_end=False)
        print(len(tr.of("M", name="HH")), len(tr.of("X", name="start")), len(tr.user_events()))
        """,
        dict(ENABLED, DFTRACER_LOG_FILE=str(tmp_path / "trace"), DFTRACER_FLUSH_INTERVAL="0"),
    )
    assert proc.stdout.split() == ["1", "1", "0"]  # the header, not yet the event


def test_sigkill_with_idle_main_thread_leaves_a_valid_header(tmp_path):
    # The case: a worker thread logs, the main thread that started
    # tracing idles; SIGKILL before any hand-off.
    proc = start(
        f"""
        import threading, time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        def work():
            for i in range(100):
                log.log_event("t", "c", log.get_time(), i)
        t = threading.Thread(target=work); t.start(); t.join()
        print("ready", flush=True)
        time.sleep(60)
        """,
        DFTRACER_FLUSH_INTERVAL="0",
    )
    wait_ready(proc)
    proc.kill()
    proc.wait()
    tr = read_trace(only_trace(tmp_path), require_end=False)  # HH, start, hashes all there
    assert len(tr.of("M", name="HH")) == 1 and len(tr.of("X", name="start")) == 1


@pytest.mark.no_asan  # forks
def test_idle_forked_child_gets_its_header_within_the_interval(tmp_path):
    proc = start(
        f"""
        import os, time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        pid = os.fork()
        if pid == 0:
            time.sleep(60)  # logs nothing: only its header is in its buffer
        print(pid, flush=True)
        print("ready", flush=True)
        time.sleep(60)
        """,
    )
    child = int(proc.stdout.readline())
    wait_ready(proc)
    time.sleep(1.8)
    os.kill(child, signal.SIGKILL)
    proc.kill()
    proc.wait()
    (path,) = [f for f in find_traces(str(tmp_path)) if f"-{child}-app" in f]
    tr = read_trace(path, require_end=False)  # HH, start and its hashes, all defined
    assert tr.of("X", name="start")[0]["args"]["ppid"] == proc.pid


@pytest.mark.no_asan  # forks
def test_idle_forked_child_terminated_at_once_keeps_its_header(tmp_path):
    """A pool worker that got no task and is ended by SIGTERM well before the
    flush interval still leaves its file: the signal's flush writes the header
    (only a child that execs leaves none)."""
    proc = start(
        f"""
        import os, signal, time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"x")  # not traced: the pipe is outside the data dirs
            time.sleep(60)
        os.read(r, 1)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print(pid, os.WIFSIGNALED(status) and os.WTERMSIG(status), flush=True)
        log.finalize()
        """,
        DFTRACER_FLUSH_INTERVAL="30",
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    child, how = map(int, out.split())
    assert how == signal.SIGTERM  # it still dies by the signal
    (path,) = [f for f in find_traces(str(tmp_path)) if f"-{child}-app" in f]
    tr = read_trace(path, require_end=False)
    assert len(tr.of("M", name="HH")) == 1
    assert tr.of("X", name="start")[0]["args"]["ppid"] == proc.pid


@pytest.mark.parametrize("threads", [1, 4])
def test_idle_process_killed_after_the_flush_interval_keeps_every_event(tmp_path, threads):
    proc = start(
        f"""
        import threading, time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        def work(k):
            for i in range(50000 // {threads}):
                log.log_event("e", "c", log.get_time(), k)
        ts = [threading.Thread(target=work, args=(k,)) for k in range({threads} - 1)]
        for t in ts: t.start()
        work({threads} - 1)
        for t in ts: t.join()
        print("ready", flush=True)
        time.sleep(60)  # idle: waiting for I/O, a collective, ...
        """,
    )
    wait_ready(proc)
    time.sleep(1.0 + 0.8)  # the default interval (1 s), and time to write
    proc.kill()
    proc.wait()
    tr = read_trace(only_trace(tmp_path), require_end=False)
    assert len(tr.of("X", name="e")) == 50000
    assert not tr.of("X", name="end")


def test_without_the_time_based_flush_an_idle_tail_is_lost(tmp_path):
    # The control for the test above: the flusher is what saves the tail.
    proc = start(
        f"""
        import time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        for i in range(50000):
            log.log_event("e", "c", log.get_time(), i)
        print("ready", flush=True)
        time.sleep(60)
        """,
        DFTRACER_FLUSH_INTERVAL="0",
    )
    wait_ready(proc)
    time.sleep(1.8)
    proc.kill()
    proc.wait()
    tr = read_trace(only_trace(tmp_path), require_end=False)
    assert 0 < len(tr.of("X", name="e")) < 50000


def test_flush_interval_bounds_how_long_an_event_waits(tmp_path):
    proc = start(
        f"""
        import time
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        log.log_event("one", "c", log.get_time(), 1)
        print("ready", flush=True)
        time.sleep(60)
        """,
        DFTRACER_FLUSH_INTERVAL="200ms",
    )
    wait_ready(proc)
    path = only_trace(tmp_path)
    deadline = time.monotonic() + 5
    seen = 0
    t0 = time.monotonic()
    while time.monotonic() < deadline and not seen:
        seen = len(read_trace(path, require_end=False).of("X", name="one"))
        time.sleep(0.02)
    waited = time.monotonic() - t0
    proc.kill()
    proc.wait()
    assert seen == 1
    assert waited < 1.0  # 200 ms, with room for a loaded machine


@pytest.mark.parametrize(
    "value,used",
    [("soon", "1"), ("-1", "1"), ("5min", "1"), ("0.001", "0.01"), ("99999", "3600"),
     # not decimal: strtod alone took hex (16 s), exponents and blanks silently (issue 30)
     ("0x10", "1"), ("0x10ms", "1"), ("1e1", "1"), ("\t2", "1"), ("+2", "1"), ("inf", "1")],
)
def test_bad_flush_interval_warns_once_naming_the_value_used(tmp_path, value, used):
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        log.log_event("e", "c", log.get_time(), 1)
        log.finalize()
        dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        """,
        dict(ENABLED, DFTRACER_FLUSH_INTERVAL=value),
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln]
    assert lines == [f"dftracer: warning: DFTRACER_FLUSH_INTERVAL='{value}' "
                     f"{lines[0].split(chr(39) + ' ', 1)[1].rsplit('; using ', 1)[0]}; using {used}"]
    assert "DFTRACER_FLUSH_INTERVAL" in lines[0] and value in lines[0]


@pytest.mark.parametrize("value", ["0", "off", "0.5", "250ms", "2s"])
def test_good_flush_interval_values_are_silent(tmp_path, value):
    proc = run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        log.finalize()
        """,
        dict(ENABLED, DFTRACER_FLUSH_INTERVAL=value),
    )
    assert proc.stderr == ""


# ---- SIGTERM ------------------------------------------------------------------------------------------

# A program whose Python handler must run waits in short sleeps: a signal that
# lands after the interpreter's last check and before time.sleep's system call
# only trips a flag, so one long sleep would outlast it (CPython does this
# without dftracer too: 1 in ~300 runs on a loaded 2-core VM).
WAIT_FOR_SIGNAL = "print('ready', flush=True)\nfor _ in range(1200):\n    time.sleep(0.05)\n"

BUSY_THREADS = """
import os, signal, sys, threading, time
from dftracer.python import dftracer
log = dftracer.initialize_log({path!r})
def work(k):
    for i in range(5000):
        log.log_event("t%d" % k, "c", log.get_time(), i)
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
for i in range(1000):
    log.log_event("main", "c", log.get_time(), i)
"""


def test_sigterm_default_flushes_every_thread_then_dies_by_it(tmp_path):
    proc = start(BUSY_THREADS.format(path=str(tmp_path / "trace.pfw"))
                 + "print('ready', flush=True)\ntime.sleep(60)\n",
                 DFTRACER_FLUSH_INTERVAL="0")
    wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM  # the exit status is kept
    tr = read_trace(only_trace(tmp_path), require_end=False)
    assert len(tr.of("X", name="main")) == 1000
    for k in range(4):
        assert len(tr.of("X", name=f"t{k}")) == 5000


def test_sigterm_chains_to_a_handler_installed_before_tracing(tmp_path):
    # dftracer writes first, then the program's handler runs and sees the events on disk.
    path = str(tmp_path / "trace.pfw")
    code = f"""
import gzip, glob, os, signal, sys, time
def on_term(sig, frame):
    (f,) = glob.glob({str(tmp_path)!r} + "/trace-*")
    n = gzip.open(f, "rt").read().count('"name":"main"')
    print("handled", n, flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, on_term)
""" + BUSY_THREADS.format(path=path) + WAIT_FOR_SIGNAL
    proc = start(code, DFTRACER_FLUSH_INTERVAL="0")
    wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 3
    assert proc.stdout.read().split() == ["handled", "1000"]
    tr = read_trace(only_trace(tmp_path))  # sys.exit: a normal exit, finalized with its end event
    assert len(tr.of("X", name="t3")) == 5000


def test_handler_installed_after_tracing_replaces_ours_and_exits_normally(tmp_path):
    code = BUSY_THREADS.format(path=str(tmp_path / "trace.pfw")) + """
def on_term(sig, frame):
    sys.exit(4)
signal.signal(signal.SIGTERM, on_term)
""" + WAIT_FOR_SIGNAL
    proc = start(code, DFTRACER_FLUSH_INTERVAL="0")
    wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 4
    tr = read_trace(only_trace(tmp_path))
    assert len(tr.of("X", name="main")) == 1000


def test_ignored_sigterm_stays_ignored(tmp_path):
    code = f"""
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
from dftracer.python import dftracer
log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
log.log_event("e", "c", log.get_time(), 1)
print("ready", flush=True)
sys.stdin.readline()
# an exec'd child still inherits SIG_IGN
print(subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True, text=True).stdout.split()[1], flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], env=clean_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    wait_ready(proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert proc.poll() is None
    out, _ = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0
    assert int(out.strip(), 16) & (1 << (signal.SIGTERM - 1))
    assert len(read_trace(only_trace(tmp_path)).of("X", name="e")) == 1


# ---- other ends: sys.exit, KeyboardInterrupt, os._exit ----------------------------------------------


@pytest.mark.parametrize("ending,status", [
    ("sys.exit(3)", 3),
    ("raise RuntimeError('uncaught')", 1),
    ("raise KeyboardInterrupt", -signal.SIGINT),
    ("os.kill(os.getpid(), signal.SIGINT); time.sleep(5)", -signal.SIGINT),
    ("os._exit(5)", 5),
])
def test_exits_keep_every_event_and_end_the_trace(tmp_path, ending, status):
    code = BUSY_THREADS.format(path=str(tmp_path / "trace.pfw")) + ending + "\n"
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(DFTRACER_FLUSH_INTERVAL="0"),
                          capture_output=True, text=True, timeout=60, preexec_fn=sigint_default)
    assert proc.returncode == status, proc.stderr
    tr = read_trace(only_trace(tmp_path))  # finalized: every event, then the end event
    assert len(tr.of("X", name="main")) == 1000
    assert len(tr.of("X", name="t0")) == 5000


def test_os_exit_after_100000_events_keeps_them_all(tmp_path):
    run_python(
        f"""
        import os
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        for i in range(100000):
            log.log_event("e", "c", log.get_time(), i)
        os._exit(0)
        """,
        dict(ENABLED, DFTRACER_FLUSH_INTERVAL="0"),
    )
    tr = read_trace(only_trace(tmp_path))
    assert len(tr.of("X", name="e")) == 100000


@pytest.mark.no_asan
def test_os_exit_in_a_forked_child_keeps_its_events(tmp_path):
    proc = run_python(
        f"""
        import os
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        pid = os.fork()
        if pid == 0:
            for i in range(30000):
                log.log_event("child", "c", log.get_time(), i)
            os._exit(0)
        os.waitpid(pid, 0)
        log.finalize()
        print(pid)
        """,
        dict(ENABLED, DFTRACER_FLUSH_INTERVAL="0"),
    )
    pid = proc.stdout.split()[-1]
    (child,) = [f for f in find_traces(str(tmp_path)) if f"-{pid}-app" in f]
    assert len(read_trace(child).of("X", name="child")) == 30000


def test_os_exit_wrapper_keeps_the_signature_and_exits(tmp_path):
    proc = run_python(
        """
        import os, dftracer
        print(os._exit.__wrapped__.__name__, os._exit.__name__)
        os._exit(7)
        """,
        {},
        check=False,
    )
    assert proc.returncode == 7
    assert proc.stdout.split() == ["_exit", "_exit"]


def test_sigint_with_bind_signals_flushes_then_raises_keyboardinterrupt(tmp_path):
    code = BUSY_THREADS.format(path=str(tmp_path / "trace.pfw")) + """
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", code],
                          env=clean_env(DFTRACER_FLUSH_INTERVAL="0", DFTRACER_BIND_SIGNALS="1"),
                          capture_output=True, text=True, timeout=60, preexec_fn=sigint_default)
    assert proc.returncode == 0 and proc.stdout.split() == ["interrupted"], proc.stderr
    tr = read_trace(only_trace(tmp_path))
    assert len(tr.of("X", name="main")) == 1000


@pytest.mark.parametrize("crash,sig", [
    ("os.abort()", signal.SIGABRT),
    # ASan handles SIGSEGV itself
    pytest.param("import ctypes; ctypes.string_at(0)", signal.SIGSEGV, marks=pytest.mark.no_asan),
])
def test_crash_with_bind_signals_keeps_every_event(tmp_path, crash, sig):
    code = "import resource\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n" + BUSY_THREADS.format(
        path=str(tmp_path / "trace.pfw")) + crash + "\n"
    proc = subprocess.run([sys.executable, "-c", code],
                          env=clean_env(DFTRACER_FLUSH_INTERVAL="0", DFTRACER_BIND_SIGNALS="1"),
                          capture_output=True, text=True, timeout=60, preexec_fn=sigint_default)
    assert proc.returncode == -sig, proc.stderr
    tr = read_trace(only_trace(tmp_path), require_end=False)
    assert len(tr.of("X", name="main")) == 1000
    assert len(tr.of("X", name="t2")) == 5000


def test_exec_keeps_every_event(tmp_path):
    code = BUSY_THREADS.format(path=str(tmp_path / "trace.pfw")) + \
        "os.execv(sys.executable, [sys.executable, '-c', 'print(\"replaced\")'])\n"
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(DFTRACER_FLUSH_INTERVAL="0"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["replaced"], proc.stderr
    tr = read_trace(only_trace(tmp_path), require_end=False)  # the new program logged nothing
    assert len(tr.of("X", name="main")) == 1000
    assert len(tr.of("X", name="t1")) == 5000


@pytest.mark.parametrize("idle", [False, True])
def test_c_level_exit_keeps_what_the_interval_wrote(tmp_path, idle):
    # Native code calling _exit() is not seen: what the flusher wrote stays.
    code = BUSY_THREADS.format(path=str(tmp_path / "trace.pfw")) + f"""
import ctypes
time.sleep({1.8 if idle else 0})
ctypes.CDLL(None)._exit(6)
"""
    proc = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 6, proc.stderr
    tr = read_trace(only_trace(tmp_path), require_end=False)
    kept = len(tr.of("X", name="main"))
    if idle:
        assert kept == 1000 and len(tr.of("X", name="t0")) == 5000
    else:
        assert kept < 1000  # the last moment's events were still in the thread's buffer


def test_sigterm_during_finalize_waits_for_the_end_of_the_trace(tmp_path):
    # A pool terminating a worker that is already finalizing: the signal comes
    # (here on another thread) while finalize writes; the trace is completed,
    # then the process dies by the signal.
    code = f"""
import os, signal, threading, time
from dftracer import _core
from dftracer.python import dftracer
log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
def work(k):
    for i in range(30000):
        log.log_event("w", "c", log.get_time(), i)
ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
for t in ts: t.start()
for t in ts: t.join()
def killer():
    while _core.is_active():
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGTERM)  # finalize has begun on the main thread
    time.sleep(30)
threading.Thread(target=killer, daemon=True).start()
time.sleep(0.05)
log.finalize()
time.sleep(30)
"""
    proc = subprocess.run([sys.executable, "-c", code],
                          env=clean_env(DFTRACER_WRITE_BUFFER_SIZE="64M", DFTRACER_FLUSH_INTERVAL="0"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    tr = read_trace(only_trace(tmp_path))  # complete, with its end event last
    assert len(tr.of("X", name="w")) == 8 * 30000


def test_finalize_waits_for_a_chunk_an_exiting_thread_is_handing_off(tmp_path):
    """A thread's last buffer leaves it when the thread exits (a pthread key
    destructor, after Python's join() has returned); finalize must not close
    the file while that chunk is between the thread and the writer queue.
    The test extension's hook widens that window to 300 ms."""
    get_testcore()
    proc = run_python(
        USE_TESTCORE + textwrap.dedent(f"""
        import threading
        from dftracer import _core
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'exit.pfw')!r})
        def work():
            for i in range(5000):
                log.log_event("w", "c", log.get_time(), 1)
        _core._handoff_delay_for_test(300000)
        t = threading.Thread(target=work)
        t.start()
        t.join()          # the OS thread still runs its destructors after this
        log.finalize()
        """),
        {"DFTRACER_ENABLE": "1"},
    )
    (path,) = find_traces(str(tmp_path), "exit")
    events = read_trace(path).of("X", cat="c", name="w")
    assert len(events) == 5000, (len(events), proc.stderr)


def test_import_leaves_multiprocessing_alone_until_the_program_imports_it():
    """`import dftracer` does not import multiprocessing (7 ms of every
    start, the CLI's too); its after-fork hook is registered once the program
    imports multiprocessing.util, which every start method imports before its
    first child (the pool tests above run the fork, spawn and forkserver
    children that it finalizes)."""
    code = textwrap.dedent("""
        import sys
        import dftracer
        from dftracer import _lifecycle
        print("multiprocessing" in sys.modules)
        from multiprocessing import util
        print(any(f is _lifecycle._in_forked_worker for (_, _, f) in util._afterfork_registry))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=clean_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
