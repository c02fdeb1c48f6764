"""DataLoader workers keep every event however they end (issue 66): left
alive at exit (torch's exit handling sends them SIGTERM, its worker handler
calls _exit(), which no atexit sees), deleted before exit (the loader's
shutdown), or an os._exit of the main process; fork, spawn and forkserver;
traced through the pydftracer API and under `dftracer run`.  Every worker's
file is whole (its `end` last) and holds each item it read.  The number of
runs per case is DFTRACER_EDGE_RUNS (default 1; issue 66 measured 20)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace, validate

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "worker_exit_prog.py")
RUNS = int(os.environ.get("DFTRACER_EDGE_RUNS", "1"))
ITEMS = 48


def env_with(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(extra)
    return env


def run_case(out, method: str, ending: str, mode: str, leak: str = "0"):
    out.mkdir()
    args = [PROG, method, ending, mode, leak]
    if mode == "api":
        cmd = [sys.executable, *args]
        env = env_with(DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1")
    else:
        cmd = [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", str(out / "t"), "--",
               sys.executable, *args]
        env = env_with()
    proc = subprocess.run(cmd, cwd=str(out), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[0] == str(ITEMS)
    return find_traces(str(out), "t")


def check_workers(paths) -> None:
    items, workers = 0, 0
    for path in paths:
        tr = read_trace(path)  # whole: `end` last, num_events right
        got = len(tr.of("X", cat="reader"))
        if any(e["name"] == "worker" for e in tr.of("M")) or got:
            workers += 1
            items += got
    assert workers == 2, paths
    assert items == ITEMS
    assert {v["verdict"] for v in validate(*paths)} == {"ok"}


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("mode", ["api", "run"])
def test_persistent_workers_left_alive_at_exit_keep_every_event(tmp_path, method, mode):
    for k in range(RUNS):
        check_workers(run_case(tmp_path / f"r{k}", method, "alive", mode))


@pytest.mark.parametrize("ending", ["deleted", "exit"])
def test_workers_of_a_loader_deleted_or_of_a_process_that_calls_os_exit(tmp_path, ending):
    check_workers(run_case(tmp_path / "r", "fork", ending, "api"))


def test_a_leaking_worker_left_alive_at_exit_is_named_by_summary_memory(tmp_path):
    paths = run_case(tmp_path / "r", "fork", "alive", "run", leak="1")
    check_workers(paths)
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--memory", "--json",
                           str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    creeps = report["creep"]
    assert len(creeps) == 1, creeps
    assert creeps[0].get("worker") == 0, creeps
