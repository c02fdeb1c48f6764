"""FSDP2 (torch 2.13's fully_shard) and the functional collectives are
traced: an unchanged 2-rank loop on CPU + gloo under `dftracer run --
torchrun` (tests/torch_integration/fsdp2_prog.py) records every all-gather
and reduce-scatter on both ranks, with bytes, in the same per-group sequence."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace

torch = pytest.importorskip("torch", reason="FSDP2 needs torch")
pytest.importorskip("torch.distributed.fsdp", reason="no FSDP in this torch")

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp2_prog.py")
STEPS = 3


def test_fsdp2_collectives_on_both_ranks(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         PROG, str(STEPS)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    per_rank = []
    for path in find_traces(str(tmp_path / "runs")):
        comm = sorted(read_trace(path).of(cat="comm"), key=lambda e: e["args"].get("seq", -1))
        if comm:
            per_rank.append(comm)
    assert len(per_rank) == 2
    seqs = [[(e["name"], e["args"]["group"], e["args"]["seq"], e["args"]["bytes"]) for e in c]
            for c in per_rank]
    assert seqs[0] == seqs[1]  # the same collectives, in the same order, on both ranks
    names = [s[0] for s in seqs[0]]
    # per step: one gather per module forward (3) and backward (2 layers), one
    # reduce-scatter per layer
    assert names.count("all_gather_single") >= 4 * STEPS, names
    assert names.count("reduce_scatter_single") == 2 * STEPS, names
    assert all(s[3] > 0 for s in seqs[0]), seqs[0]
    assert [s[2] for s in seqs[0]] == list(range(len(seqs[0])))
    # the functional collectives, on the DeviceMesh's group, issued (async)
    funcol = [e for e in per_rank[0] if e["args"].get("async") == 1]
    assert [e["name"] for e in funcol] == ["all_reduce", "all_gather_into_tensor"], funcol
    assert [e["args"]["bytes"] for e in funcol] == [16, 8]
