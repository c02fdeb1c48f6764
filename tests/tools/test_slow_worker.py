"""A data straggler whose slowness is in one DataLoader worker is said to be
in that worker (issue 68): rank 1's worker 1 sleeps in each sample
(tests/tools/slow_worker_prog.py, 2 ranks under torchrun, 2 workers each);
`summary --ranks` names rank 1 and, in its workers' line, worker 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the distributed job needs torch")

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_worker_prog.py")
STEPS, MS = 48, 60


def env():
    return {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}


def test_the_slow_worker_is_named(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         PROG, "--steps", str(STEPS), "--ms", str(MS), "--rank", "1", "--worker", "1"],
        cwd=str(tmp_path), env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--ranks", "--json",
                          str(tmp_path / "runs")], capture_output=True, text=True, env=env(),
                         timeout=300)
    a = json.loads(out.stdout)
    assert [s["rank"] for s in a["stragglers"]] == [1], a["stragglers"]
    w = a["stragglers"][0]["workers"]
    assert (w["cat"], w["name"]) == ("data", "item"), w
    # worker 0 sleeps not at all: worker 1 holds nearly all of the workers' item time
    assert w["worker"] == 1 and w["worker_share"] >= 0.9, w
    text = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--ranks",
                           str(tmp_path / "runs")], capture_output=True, text=True, env=env(),
                          timeout=300).stdout
    assert "in its workers: data/item +" in text and " a step (mostly worker 1: " in text, text
