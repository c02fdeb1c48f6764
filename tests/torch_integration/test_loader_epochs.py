"""Epochs follow the DataLoader's passes when the training loop stops a pass
at len(loader) without exhausting the iterator (PyTorch Lightning does):
the `iter`, `fetch` and `iteration` events of pass e say epoch e
(docs/ai.md, "Events of an unchanged script"); a peek is no pass."""

from __future__ import annotations

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
