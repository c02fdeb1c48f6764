"""A rank SIGKILLed in a running 4-rank gloo job (tests/tools/hang_prog.py
--say under `dftracer run -- torchrun`), as the OOM killer ends one:

* while the job runs, `summary --memory`, `summary --ranks` and `report`
  call no process killed or dead (tools/liveness.py: their pids are alive
  on this host; docs/cli.md, "Still running or ended");
* once rank 2 is killed mid-step, the post mortem names it dead after the
  step its own output says it finished last, within one step, though its
  trace lost its last flush interval of events: the steps are counted from
  the collectives its peers completed with it (tools/dead_steps.py;
  docs/hang.md, "After the job"); `summary --memory` and `report` say the
  same step.

One job, shared by the tests."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("torch", reason="the distributed job needs torch")

from test_hang import PROG, dft, env  # noqa: E402

START_S = 180  # torch's import by four ranks on a loaded 2-core machine
END_S = 90     # a job whose rank was killed ends by itself (gloo's peers fail) well within this
STEP_S = 0.2   # each step's compute: several steps a flush interval (1 s)


class Job:
    """The job and the `rank R pid P done S` lines it printed, read on a thread."""

    def __init__(self, base) -> None:
        (base / "runs").mkdir()
        self.stderr = open(base / "stderr.txt", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
             sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
             "4", PROG, "--steps", "5000", "--step-s", str(STEP_S), "--say"],
            cwd=str(base), env=env(), stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            start_new_session=True)
        self.done = {}   # rank: the last step it said it finished
        self.pids = {}
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the end

    def wait_for(self, rank: int, step: int, timeout: float) -> bool:
        """Reads lines until rank said it finished step (True) or the output ended."""
        deadline = time.monotonic() + timeout
        while self.done.get(rank, -1) < step:
            left = deadline - time.monotonic()
            assert left > 0, f"rank {rank} did not reach step {step}: {self.done}"
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if not line:
                return False
            words = line.split()
            if len(words) == 6 and words[0] == "rank" and words[4] == "done":
                r = int(words[1])
                self.pids[r], self.done[r] = int(words[3]), int(words[5])
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.stderr.close()


def looks(runs, html):
    """summary --ranks, summary --memory and report, as JSON."""
    _, ranks = dft("summary", "--ranks", "--json", str(runs))
    _, mem = dft("summary", "--memory", "--json", str(runs))
    page = None
    try:
        import plotly  # noqa: F401
    except ImportError:
        pass
    else:
        from dftracer.tools.report import read_data

        rc, _ = dft("report", str(runs), "-o", str(html))
        assert rc == 0
        page = read_data(str(html))
    return {"ranks": json.loads(ranks), "memory": json.loads(mem), "report": page}


@pytest.fixture(scope="module")
def killed_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("killed")
    runs = base / "runs"
    job = Job(base)
    try:
        for r in range(4):  # every rank has written more than a flush interval
            assert job.wait_for(r, 5, START_S)
        live = looks(runs, base / "live.html")
        target = job.done[2] + 3
        assert job.wait_for(2, target, 60)
        time.sleep(STEP_S / 2)  # mid-step
        os.kill(job.pids[2], signal.SIGKILL)
        while job.wait_for(2, 1 << 30, END_S):  # to the end of the output
            pass
        job.proc.wait(timeout=END_S)
    finally:
        job.stop()
    after = looks(runs, base / "after.html")
    return {"live": live, "after": after, "done": dict(job.done), "pids": dict(job.pids)}


def test_a_running_job_has_nobody_killed_or_dead(killed_job):
    live = killed_job["live"]
    h = live["ranks"]["hang"]
    assert h is None or h["dead_ranks"] == [], h
    mem = live["memory"]
    ends = {(p["rank"], p["role"]): p["end"] for p in mem["processes"]}
    assert ends == {(0, "main"): "running", (1, "main"): "running", (2, "main"): "running",
                    (3, "main"): "running", (None, "launcher"): "running"}, ends
    assert mem["oom"] == [] and len(mem["running"]) == 5
    page = live["report"]
    if page is not None:
        assert page["hang"] is None or page["hang"]["dead_ranks"] == []
        assert {p["end"] for p in page["memory"]["processes"]} == {"running"}
        assert page["memory"]["oom"] == []


def test_the_killed_rank_is_dead_after_the_steps_it_did(killed_job):
    truth = killed_job["done"][2]
    h = killed_job["after"]["ranks"]["hang"]
    assert h is not None and h["dead_ranks"] == [2], h
    (s,) = [s for s in h["stuck"] if s["rank"] == 2]
    assert s["state"] == "dead" and s["pid"] == killed_job["pids"][2]
    assert abs(s["last_step"] - truth) <= 1, (s, truth)
    assert f"rank 2 dead (gone without finalizing) after step {s['last_step']}" in h["message"]
    if "last_step_written" in s:  # what its own trace had: short by the lost interval
        assert s["last_step_written"] < s["last_step"]
        assert f"its trace ends after step {s['last_step_written']})" in h["message"]
    page = killed_job["after"]["report"]
    if page is not None:
        (rs,) = [x for x in page["hang"]["stuck"] if x["rank"] == 2]
        assert rs["last_step"] == s["last_step"]


def test_memory_says_killed_only_for_the_killed_rank(killed_job):
    truth = killed_job["done"][2]
    mem = killed_job["after"]["memory"]
    ends = {p["rank"]: p["end"] for p in mem["processes"] if p["role"] == "main"}
    assert ends[2] == "killed", ends
    assert all(ends[r] in ("finalized", "exited") for r in (0, 1, 3)), ends
    assert mem["running"] == []
    for o in mem["oom"]:  # listed when its last samples rose (the import of torch may)
        assert o["rank"] == 2 and abs(o["last_step"] - truth) <= 1, (o, truth)
