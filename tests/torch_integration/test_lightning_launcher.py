"""Issue 67: a PyTorch Lightning DDP job under Lightning's own launcher
(tests/torch_integration/lightning_prog.py: `Trainer(strategy="ddp",
devices=2)`, no torchrun, each rank with 2 persistent DataLoader workers),
under `dftracer run`: every worker's file names its rank, its loader and its
worker id; the readers count 2 ranks and 4 workers (no worker counted or
drawn as a rank); in the merged Perfetto trace each worker's track says
"rank R, worker W" and follows its rank's (docs/ai.md, docs/compat.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("lightning", reason="PyTorch Lightning (make setup-test installs it)")

import autotrace_ddp as ddp  # noqa: E402
from tracefile import find_traces, read_trace  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "lightning_prog.py")
RANKS, WORKERS, SAMPLES, EPOCHS = 2, 2, 64, 2  # the program's devices, num_workers, ...
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
               "SLURM_PROCID", "SLURM_NTASKS", "PMI_RANK", "OMPI_COMM_WORLD_RANK")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    base = tmp_path_factory.mktemp("lightning")
    env = {k: v for k, v in ddp.clean_env().items() if k not in LAUNCH_VARS}
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                           str(base / "runs" / "t"), "--", sys.executable, PROG],
                          cwd=str(base), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(proc.stdout.split("\n")) == ["", "done rank 0", "done rank 1"], proc.stdout
    return base / "runs"


def identities(runs):
    """(rank metadata, worker metadata or None, pid, ppid) of each file."""
    out = []
    for path in find_traces(str(runs), "t"):
        t = read_trace(path)  # every line parsed and checked, the `end` required
        ranks = [e["args"] for e in t.of("M", name="rank")]
        workers = [e["args"] for e in t.of("M", name="worker")]
        assert len(ranks) == 1 and len(workers) <= 1, (path, ranks, workers)
        pids = {e["pid"] for e in t.events if e.get("ph") == "X"}
        assert len(pids) == 1, (path, pids)
        out.append((ranks[0], workers[0] if workers else None, pids.pop(), t))
    return out


def test_every_worker_file_names_its_rank_and_worker_id(job):
    ids = identities(job)
    mains = {r["value"]: pid for r, w, pid, _ in ids if w is None}
    assert sorted(mains) == list(range(RANKS))
    for r, _w, _pid, _ in ids:
        assert (r["world_size"], r["source"]) == (RANKS, "torch.distributed"), r
    workers = sorted((r["value"], w["value"]) for r, w, _, _ in ids if w is not None)
    assert workers == [(rank, wid) for rank in range(RANKS) for wid in range(WORKERS)]
    items = {}
    for r, w, pid, t in ids:
        if w is None:
            continue
        assert (w["num_workers"], w["loader"], w["dataset"]) == (WORKERS, 0, "Samples"), w
        # a worker's events are its own pid's; its parent is its rank's process
        (start,) = t.of("X", name="start")
        assert start["args"]["ppid"] == mains[r["value"]] != pid, (start, mains)
        items[r["value"]] = items.get(r["value"], 0) + len(t.of(cat="data", name="item"))
    # every sample each rank's sampler gave it (its half), each epoch, in its workers' files
    assert items == {rank: SAMPLES // RANKS * EPOCHS for rank in range(RANKS)}, items


def test_readers_count_ranks_and_workers_apart(job):
    env = ddp.clean_env()
    out = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--json", str(job)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    ov = json.loads(out.stdout)["overview"]
    assert (ov["ranks"], ov["workers"]) == (RANKS, RANKS * WORKERS), ov
    out = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--ranks", "--json",
                          str(job)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["ranks"]
    assert sorted(r["rank"] for r in rows) == list(range(RANKS)), rows
    want = {}  # each rank's workers: the pids of the files naming that rank and a worker
    for r, w, pid, _ in identities(job):
        if w is not None:
            want.setdefault(r["value"], []).append(pid)
    assert {r["rank"]: sorted(r["workers"]) for r in rows} == \
        {k: sorted(v) for k, v in want.items()}


def test_workers_are_drawn_as_their_rank_s_workers(job, tmp_path):
    merged = tmp_path / "merged.pfw"
    proc = subprocess.run([sys.executable, "-m", "dftracer", "merge", "-o", str(merged),
                           *find_traces(str(job), "t")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    labels, order = {}, {}
    for e in read_trace(str(merged), check=False).events:
        if e["ph"] == "M" and e["name"] == "process_name" and "[host" in e["args"]["name"]:
            labels[e["pid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "process_sort_index":
            order[e["pid"]] = e["args"]["sort_index"]
    assert len(labels) == RANKS * (1 + WORKERS), labels
    ranks = {p: n for p, n in labels.items() if ", worker" not in n}
    assert len(ranks) == RANKS, labels
    for rank in range(RANKS):
        (rank_pid,) = [p for p, n in ranks.items() if f"rank {rank}" in n]
        mine = [p for p, n in labels.items() if f", rank {rank}, worker " in n]
        assert len(mine) == WORKERS, labels
        assert all(order[rank_pid] < order[p] for p in mine)  # a rank's workers follow it
