"""Epochs follow the DataLoader's passes when the training loop stops a pass
at len(loader) without exhausting the iterator (PyTorch Lightning does):
the `iter`, `fetch` and `iteration` events of pass e say epoch e
(docs/ai.md, "Events of an unchanged script"); a peek is no pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

import autotrace_ddp as ddp  # noqa: E402
from tracefile import find_traces, read_trace  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "epochs_prog.py")
EPOCHS, BATCHES = 3, 4  # the program's passes stopped at len(loader), and len(loader)


def run(tmp_path, *prog_args):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                           str(tmp_path / "t"), "--", sys.executable, PROG, *prog_args],
                          cwd=str(tmp_path), env=ddp.clean_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    mains = []
    for path in find_traces(str(tmp_path), "t"):
        t = read_trace(path)
        if not t.of("M", name="worker"):
            mains.append(t)
    assert len(mains) == 1
    return mains[0]


@pytest.mark.parametrize("workers", [[], ["--workers", "2"], ["--workers", "2", "--persistent"]],
                         ids=["in-process", "workers", "persistent-workers"])
def test_a_pass_stopped_at_len_loader_ends_its_epoch(tmp_path, workers):
    trace = run(tmp_path, "--epochs", str(EPOCHS), *workers)
    passes = EPOCHS + 1  # and the last, run to its end
    iters = sorted(trace.of(cat="dataloader", name="iter"), key=lambda e: e["ts"])
    # the peek's, then one per pass; the peek takes pass 0's number, as before
    assert [e["args"]["epoch"] for e in iters] == [0] + list(range(passes))
    fetches = sorted(trace.of(cat="dataloader", name="fetch"), key=lambda e: e["ts"])
    got = [(e["args"]["epoch"], e["args"]["batch"]) for e in fetches]
    want = [(0, 0)] + [(p, b) for p in range(passes) for b in range(BATCHES)]
    assert got == want
    its = sorted(trace.of(cat="pipeline", name="iteration"), key=lambda e: e["ts"])
    assert len(its) == passes * BATCHES
    # each optimizer step is in the epoch of the batch it trained on
    assert [e["args"]["epoch"] for e in its] == [p for p in range(passes) for _ in range(BATCHES)]


SPAWN = os.path.join(HERE, "spawn_workers_prog.py")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_spawned_workers_carry_the_rank_their_parent_learnt(tmp_path):
    """Issue 67: the workers of a process with no RANK (its rank from
    torch.distributed) carry that rank, and are counted as its workers."""
    env = {k: v for k, v in ddp.clean_env().items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "PMI_RANK",
                        "OMPI_COMM_WORLD_RANK")}
    proc = subprocess.run([sys.executable, "-m", "dftracer", "run", "-q", "--log-file",
                           str(tmp_path / "t"), "--", sys.executable, SPAWN, free_port()],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "total 56\n", proc.stderr
    workers, mains = [], []
    for path in find_traces(str(tmp_path), "t"):
        t = read_trace(path)
        ranks = [e["args"] for e in t.of("M", name="rank")]
        if t.of("M", name="worker"):
            workers.append(ranks)
        elif t.of(cat="dataloader", name="fetch"):
            mains.append(ranks)
        else:  # multiprocessing's resource tracker (spawn starts one): no rank, no worker
            assert ranks == [], path
    assert len(mains) == 1 and len(workers) == 2
    assert [(r["value"], r["source"]) for r in mains[0]] == [(0, "torch.distributed")]
    for ranks in workers:  # a new interpreter: its rank is its parent's, written once
        assert [(r["value"], r["world_size"], r["source"]) for r in ranks] == \
            [(0, 1, "torch.distributed")]
    out = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--json", str(tmp_path)],
                         capture_output=True, text=True, env=ddp.clean_env(), timeout=120)
    ov = json.loads(out.stdout)["overview"]
    assert (ov["ranks"], ov["workers"]) == (1, 2), ov
