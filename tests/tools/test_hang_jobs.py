"""Dead, stopped and batch-waiting ranks of real jobs (docs/hang.md): a rank
stopped by SIGSTOP and then killed by SIGKILL (tests/tools/hang_prog.py,
4 ranks), and a rank of a DDP job waiting for its DataLoader worker, which
blocks in __getitem__ opening a FIFO (tests/tools/hang_loader_prog.py,
2 ranks).  One job per fixture, shared by its tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="the distributed jobs need torch")

from test_hang import PROG, dft, env, kill, top_json, wait_for_hang  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LOADER = os.path.join(HERE, "hang_loader_prog.py")
END_S = 90  # a job whose rank was killed ends by itself (gloo's peers fail) well within this


def start(base, nproc, prog, *prog_args, data_dir=None):
    (base / "runs").mkdir(parents=True)
    extra = ["--data-dir", str(data_dir)] if data_dir else []
    return subprocess.Popen(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", *extra, "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         str(nproc), prog, *prog_args], cwd=str(base), env=env(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True)


@pytest.fixture(scope="module")
def stop_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("stop")
    runs = base / "runs"
    proc = start(base, 4, PROG, "--fault", "stop", "--at", "4", "--steps", "8", "--rank", "2")
    try:
        snap, _ = wait_for_hang(proc, runs)
        stopped = snap["hang"]
        if stopped["stopped_ranks"] == [2]:
            os.kill(stopped["stuck"][0]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + END_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            kill(proc)
    _, out = dft("summary", "--ranks", "--json", str(runs))
    return {"stopped": stopped, "after": json.loads(out)["hang"]}


def test_a_stopped_rank_is_stuck(stop_job):
    h = stop_job["stopped"]
    assert h["stuck_ranks"] == [2] and h["waiting_ranks"] == [0, 1, 3]
    assert h["stopped_ranks"] == [2] and h["dead_ranks"] == []
    s = h["stuck"][0]
    assert s["state"] == "stopped" and [o["name"] for o in s["open"]] == ["iteration"]
    assert h["message"].startswith("hang: rank 2 stopped by a signal (SIGSTOP: state T) during "
                                   "iteration 4; ranks 0, 1, 3 waited ")


def test_a_killed_rank_is_dead_after_the_job(stop_job):
    h = stop_job["after"]
    assert h is not None and h["dead_ranks"] == [2] and 2 in h["stuck_ranks"]
    s = [s for s in h["stuck"] if s["rank"] == 2][0]
    assert s["state"] == "dead" and s["last_step"] == 3
    assert [(o["name"], o.get("step")) for o in s["open"]] == [("iteration", 4)]
    assert "rank 2 dead (gone without finalizing) during iteration 4" in h["message"]


@pytest.fixture(scope="module")
def loader_job(tmp_path_factory):
    base = tmp_path_factory.mktemp("loader")
    data = base / "data"
    data.mkdir()
    fifo = data / "x.fifo"
    os.mkfifo(fifo)
    runs = base / "runs"
    proc = start(base, 2, LOADER, "--at", "6", "--fifo", str(fifo), data_dir=data)
    try:
        first, _ = wait_for_hang(proc, runs)
        # top asked the stuck rank's worker for its stacks: a later look has its frame
        later = first
        deadline = time.monotonic() + 30
        while "__getitem__" not in later["hang"]["message"] and time.monotonic() < deadline:
            time.sleep(1)
            later = top_json(runs)
    finally:
        kill(proc)
    _, out = dft("summary", "--ranks", "--json", str(runs))
    return {"first": first["hang"], "later": later["hang"], "after": json.loads(out)["hang"],
            "fifo": str(fifo)}


def _check_batch_wait(h, fifo, frame=True):
    assert h["stuck_ranks"] == [1] and h["waiting_ranks"] == [0]
    w = h["stuck"][0]["batch_wait"]["worker"]
    assert w["worker"] == 0 and w["pid"] > 0
    # the sample it reads is open: its index (batch 6 of one sample) and how long
    assert w["item"]["index"] == 6 and w["item"]["since_s"] > 0
    # the open call (glibc's open64) names the FIFO it blocks on
    opened = [o for o in w["open"] if o["name"].startswith("open") and o.get("file") == fifo]
    assert opened and opened[-1]["cat"] == "POSIX"
    assert h["message"].startswith("hang: rank 1 waiting ")
    assert " s for a batch: worker 0 (pid " in h["message"]
    assert " s into item 6, stopped" in h["message"]
    assert f"({opened[-1]['name']} {fifo}); rank 0 waited " in h["message"]
    if frame:
        assert (os.path.basename(w["file"]), w["line"], w["function"]) == \
            ("hang_loader_prog.py", mark_line_of(LOADER, "open"), "__getitem__")
        assert f"stopped in hang_loader_prog.py:{w['line']} __getitem__ ({opened[-1]['name']} " \
            f"{fifo})" in h["message"]


def mark_line_of(prog, mark):
    with open(prog) as fh:
        for i, line in enumerate(fh, 1):
            if line.rstrip().endswith(f"# mark:{mark}"):
                return i
    raise AssertionError(mark)


def test_top_names_the_worker_a_rank_waits_for(loader_job):
    _check_batch_wait(loader_job["first"], loader_job["fifo"], frame=False)
    _check_batch_wait(loader_job["later"], loader_job["fifo"])


def test_summary_ranks_names_the_worker_after_the_job(loader_job):
    _check_batch_wait(loader_job["after"], loader_job["fifo"])


@pytest.fixture(scope="module")
def idle_worker_job(tmp_path_factory):
    """Two workers, no --data-dir (no I/O events): rank 1's worker 1 blocks on
    the FIFO in sample 7 while its worker 0, done with its batches, waits on
    its index queue."""
    base = tmp_path_factory.mktemp("workers")
    fifo = base / "x.fifo"
    os.mkfifo(fifo)
    runs = base / "runs"
    proc = start(base, 2, LOADER, "--at", "7", "--workers", "2", "--fifo", str(fifo))
    try:
        first, _ = wait_for_hang(proc, runs)
        later = first
        deadline = time.monotonic() + 30
        while "__getitem__" not in later["hang"]["message"] and time.monotonic() < deadline:
            time.sleep(1)
            later = top_json(runs)
    finally:
        kill(proc)  # SIGTERM: every process writes its stacks, the idle worker's too
    _, out = dft("summary", "--ranks", "--json", str(runs))
    _, summ = dft("summary", "--json", str(runs))
    return {"first": first["hang"], "later": later["hang"], "after": json.loads(out)["hang"],
            "top": first, "summary": json.loads(summ)}


def _check_busy_worker(h, frame=True):
    assert h["stuck_ranks"] == [1] and h["waiting_ranks"] == [0]
    b = h["stuck"][0]["batch_wait"]
    w = b["worker"]
    assert w is not None and w["worker"] == 1 and w["pid"] > 0, b
    assert sorted(x["worker"] for x in b["workers"]) == [0, 1]
    assert w["item"]["index"] == 7 and w["item"]["since_s"] > 0
    assert [(o["name"], o["cat"], o.get("step")) for o in w["open"]] == [("item", "data", 7)]
    assert " s for a batch: worker 1 (pid " in h["message"]
    assert " s into item 7, stopped" in h["message"]
    if frame:
        line = mark_line_of(LOADER, "open")
        assert (os.path.basename(w["file"]), w["line"], w["function"]) == \
            ("hang_loader_prog.py", line, "__getitem__")
        assert f"stopped in hang_loader_prog.py:{line} __getitem__; rank 0 waited " in h["message"]
        assert "selectors.py" not in h["message"]


def test_top_names_the_busy_worker_not_the_idle_one(idle_worker_job):
    _check_busy_worker(idle_worker_job["first"], frame=False)
    _check_busy_worker(idle_worker_job["later"])


def test_the_post_mortem_names_the_busy_worker(idle_worker_job):
    h = idle_worker_job["after"]
    _check_busy_worker(h)
    # the idle worker wrote its stacks too (SIGTERM): seen parked in its queue's wait
    parked = {x["worker"]: x["parked"] for x in h["stuck"][0]["batch_wait"]["workers"]}
    assert parked == {0: True, 1: False}


def test_only_ranks_are_counted_as_ranks(idle_worker_job):
    """2 ranks, 2 workers each (they carry their rank), and torchrun: 2 ranks."""
    top = idle_worker_job["top"]
    roles = sorted((p["role"] or "-", p["rank"]) for p in top["processes"])
    assert roles == [("-", None), ("rank", 0), ("rank", 1)] + [("worker", 0)] * 2 + \
        [("worker", 1)] * 2, roles
    assert (top["ranks"], top["workers"]) == (2, 4)
    ov = idle_worker_job["summary"]["overview"]
    assert (ov["processes"], ov["ranks"], ov["workers"]) == (7, 2, 4)
    roles = sorted((p["role"] or "-", p["rank"]) for p in idle_worker_job["summary"]["processes"])
    assert roles == [("-", None), ("rank", 0), ("rank", 1)] + [("worker", 0)] * 2 + \
        [("worker", 1)] * 2, roles
