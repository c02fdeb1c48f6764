"""`dftracer run` says where each process's trace is and how to look at it
(docs/cli.md), passes on exit status and signals."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from tracefile import find_traces, read_trace, validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import multiprocessing as mp, sys
def work(i):
    return i * i
if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print(sum(pool.map(work, range(4))))
        pool.close(); pool.join()
    sys.exit(3)
"""


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    return e


def run(tmp_path, *args, script=SCRIPT, **kw):
    (tmp_path / "train.py").write_text(script)
    return subprocess.run([sys.executable, "-m", "dftracer", "run", *args, "--",
                           sys.executable, "train.py"], cwd=str(tmp_path), env=env(),
                          capture_output=True, text=True, timeout=300, **kw)


def test_run_lists_every_process_trace_and_the_commands_to_view(tmp_path):
    (tmp_path / "logs").mkdir()
    proc = run(tmp_path, "--log-file", "logs/run")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == "14"  # the command's stdout is untouched
    paths = find_traces(str(tmp_path / "logs"), "run")
    assert len(paths) >= 3  # the script and its two workers
    err = proc.stderr
    assert f"dftracer run: {len(paths)} trace files (one per process) in logs/" in err
    pids = {}
    for p in paths:
        t = read_trace(p)
        pid = t.events[0]["pid"]
        line = [ln for ln in err.splitlines() if os.path.basename(p) in ln]
        assert len(line) == 1 and f"pid {pid}" in line[0], err
        pids[pid] = line[0]
    root = [ln for ln in pids.values() if "(the command)" in ln]
    assert len(root) == 1, err
    # the suggested commands, run as printed, read exactly these files
    cmds = re.findall(r"^  (dftracer (?:view|report|summary) .*?)\s+# ", err, re.M)
    assert [c.split()[1] for c in cmds] == ["view", "report", "summary"], err
    assert cmds[0].split()[2] == "logs"  # only this run's traces are there
    summary = shlex.split(cmds[2]) + ["--json"]
    out = subprocess.run([sys.executable, "-m", "dftracer", *summary[1:]], cwd=str(tmp_path),
                         env=env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["overview"]["files"] == len(paths)


def test_run_names_only_its_own_files_among_older_ones(tmp_path):
    first = run(tmp_path, script="print('one')\n")
    assert first.returncode == 0
    older = find_traces(str(tmp_path))
    assert len(older) == 1
    proc = run(tmp_path, script="print('two')\n")
    assert proc.returncode == 0
    new = [p for p in find_traces(str(tmp_path)) if p not in older]
    assert len(new) == 1
    assert "1 trace file (one per process) in ./" in proc.stderr
    assert os.path.basename(older[0]) not in proc.stderr
    assert f"dftracer summary {os.path.basename(new[0])}" in proc.stderr


def test_run_json_and_quiet(tmp_path):
    proc = run(tmp_path, "--json", script="print('hi')\n")
    assert proc.returncode == 0 and proc.stdout == "hi\n"
    info = json.loads(proc.stderr.strip().splitlines()[-1])
    assert info["status"] == 0 and info["command"][-1] == "train.py"
    assert [t["path"] for t in info["traces"]] == find_traces(str(tmp_path))
    assert info["traces"][0]["pid"] == info["pid"]
    proc = run(tmp_path, "-q", script="print('hi')\n")
    assert proc.returncode == 0 and proc.stderr == ""


def test_run_without_python_says_no_trace(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "--", "true"],
                          cwd=str(tmp_path), env=env(), capture_output=True, text=True)
    assert proc.returncode == 0
    assert "no trace was written" in proc.stderr


def test_run_passes_signals_on_and_dies_of_the_commands_signal(tmp_path):
    script = """
import signal, sys, time
def bye(signum, frame):
    print("got", signum, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
for _ in range(1200):  # short sleeps: a signal just before a long one only trips a flag
    time.sleep(0.05)
"""
    (tmp_path / "train.py").write_text(script)
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "run", "--", sys.executable,
                             "train.py"], cwd=str(tmp_path), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == f"got {int(signal.SIGTERM)}\n"
    assert "1 trace file" in err
    # SIGINT sent to dftracer run alone (not from a terminal) is passed on too
    (tmp_path / "train.py").write_text(script.replace("SIGTERM", "SIGINT"))
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "run", "--", sys.executable,
                             "train.py"], cwd=str(tmp_path), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == f"got {int(signal.SIGINT)}\n", err
    # a command killed by a signal: dftracer run ends the same way
    died = run(tmp_path, script="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert died.returncode == -signal.SIGKILL


def test_run_bad_command_and_options(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "dftracer", "run", "--", "/nonexistent/prog"],
                         env=env(), capture_output=True, text=True)
    assert bad.returncode == 127 and "/nonexistent/prog" in bad.stderr
    start = time.monotonic()
    (tmp_path / "afile").write_text("")
    proc = run(tmp_path, "--log-file", "afile/run")  # a directory that cannot be made
    assert proc.returncode == 2 and "cannot create the --log-file directory" in proc.stderr
    assert str(tmp_path / "afile") in proc.stderr and proc.stdout == ""  # not run
    assert time.monotonic() - start < 60
    # a missing directory is created, as for DFTRACER_LOG_FILE (docs/configuration.md)
    proc = run(tmp_path, "--log-file", "new/sub/run", script="print('ran')\n")
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr
    assert len(find_traces(str(tmp_path / "new" / "sub"), "run")) == 1


def test_a_long_list_of_traces_is_cut(tmp_path):
    from dftracer.tools.run import MAX_LISTED, where_message

    stem = str(tmp_path / "run")
    traces = [{"path": f"{stem}-h-{pid}-app.pfw.gz", "host": "h", "pid": pid, "bytes": 1}
              for pid in range(100, 100 + 3 * MAX_LISTED)]
    text = where_message(traces, stem, root_pid=150, all_in_dir=False)
    lines = text.splitlines()
    assert lines[0].startswith(f"dftracer run: {3 * MAX_LISTED} trace files")
    assert "pid 150  (the command)" in lines[1]  # the command's own first
    listed = [ln for ln in lines if "-app.pfw.gz  pid" in ln]
    assert len(listed) == MAX_LISTED - 1
    assert f"... and {2 * MAX_LISTED + 1} more (--json lists them all)" in text
    assert "dftracer summary " in text and "'" in text  # a quoted glob


def test_run_lists_the_trace_of_an_execd_image(tmp_path):
    """exec keeps the pid: the new image's trace is <stem>-<host>-<pid>.1, and
    it is listed with the first one, both the command's."""
    script = ("import os, sys\n"
              "os.execv(sys.executable, [sys.executable, '-c', 'print(\"after\")'])\n")
    (tmp_path / "logs").mkdir()
    proc = run(tmp_path, "--log-file", "logs/run", "--json", script=script)
    assert proc.returncode == 0 and proc.stdout == "after\n", proc.stderr
    report = json.loads(proc.stderr.splitlines()[-1])
    paths = find_traces(str(tmp_path / "logs"), "run")
    assert len(paths) == 2 and paths[1].endswith(f"-{report['pid']}.1-app.pfw.gz"), paths
    assert sorted(t["path"] for t in report["traces"]) == paths
    assert {t["pid"] for t in report["traces"]} == {report["pid"]}
    assert [r["verdict"] for r in validate(*paths)] == ["ok", "ok"]
    text = run(tmp_path, "--log-file", "logs/again", script=script).stderr
    again = find_traces(str(tmp_path / "logs"), "again")
    assert "2 trace files (1 process;" in text, text
    for p in again:
        line = [ln for ln in text.splitlines() if os.path.basename(p) in ln]
        assert len(line) == 1 and "(the command)" in line[0], text
