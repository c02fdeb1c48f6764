"""Stress: 16 tracing threads killed at random moments (issue 20).

For each start method × SIGTERM/SIGKILL (tests/core/stress_prog.py): every
event a completed flush() covered is on disk (nothing flushed is ever lost),
no event is written twice (ids and (thread, sequence) unique), every file
decodes; SIGTERM keeps every event committed before it was sent, for every
thread an unbroken run from its first event, and the exit status.

LIFECYCLE_STRESS_ROUNDS (default 2: twelve children, 15-40 s) sets the
rounds; LIFECYCLE_STRESS_SEED the random delays.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict

import pytest

from tracefile import find_traces, read_trace, whole_members_text

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = int(os.environ.get("LIFECYCLE_STRESS_ROUNDS", "2"))
SEED = int(os.environ.get("LIFECYCLE_STRESS_SEED", "20"))


def last_bounds(directory: str, pid: int, kind: str, before_ns: int | None = None):
    """The last whole line of that kind (read before before_ns, if given): per
    thread, how many events it had logged."""
    path = os.path.join(directory, f"bounds-{pid}.txt")
    if not os.path.exists(path):
        return None
    lines = [ln.split() for ln in open(path).read().split("\n")[:-1]]  # a torn last line is not whole
    lines = [ln[2:] for ln in lines if len(ln) == 18 and ln[0] == kind and
             (before_ns is None or int(ln[1]) < before_ns)]
    return [int(x) for x in lines[-1]] if lines else None


@pytest.mark.no_asan  # forks
def test_random_kills_lose_nothing_flushed_and_duplicate_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env["DFTRACER_ENABLE"] = "1"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "stress_prog.py"), str(tmp_path),
                           str(ROUNDS), str(SEED)], env=env, capture_output=True, text=True,
                          timeout=120 + 60 * ROUNDS, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "did not finish" not in proc.stderr  # no signal's flush waited on a lock
    runs = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert len(runs) == 6 * ROUNDS
    checked = 0
    for run in runs:
        where = f"{run['method']} {run['sig']}"
        assert run["status"] == -getattr(signal, run["sig"]), where  # died by the signal
        files = [f for f in find_traces(run["dir"]) if f"-{run['pid']}-app" in f]
        # SIGKILL keeps what a completed flush() covered; SIGTERM what was
        # committed before it was sent (a count read while the signal's flush
        # ran in another thread may hold events logged after that flush).
        if run["sig"] == "SIGKILL":
            bounds = last_bounds(run["dir"], run["pid"], "F")
        else:
            bounds = last_bounds(run["dir"], run["pid"], "C", before_ns=run["kill_ns"])
        if not files or (run["sig"] == "SIGKILL" and not whole_members_text(files[0])):
            assert bounds is None, where  # killed before tracing started or its first write ended
            continue
        # decodes, unique ids, header complete; a SIGKILL inside a member's
        # write() tears that last member (the kernel ends a regular file's
        # write early on a fatal signal), which readers report as a torn tail
        # SIGTERM (default action) is finalized by the flusher: its `end` is last
        tr = read_trace(files[0], require_end=run["sig"] != "SIGKILL",
                        torn_tail=run["sig"] == "SIGKILL")
        seqs = defaultdict(list)
        for e in tr.of("X", cat="stress"):
            seqs[e["name"]].append(e["dur"])
        for name, s in seqs.items():
            assert len(s) == len(set(s)), f"{where}: {name} has duplicates"
        for k, bound in enumerate(bounds or []):
            have = set(seqs.get(f"t{k}", []))
            missing = [i for i in range(bound) if i not in have]
            assert not missing, f"{where}: t{k} lost {len(missing)} of its first {bound} events"
        if run["sig"] == "SIGTERM":
            for name, s in seqs.items():
                assert sorted(s) == list(range(len(s))), f"{where}: {name} has a gap"
            (end,) = tr.of("X", cat="dftracer", name="end")
            assert end["args"]["signal"] == signal.SIGTERM, where  # ended by it
        checked += 1
    assert checked >= 3 * ROUNDS  # most children were tracing when killed
