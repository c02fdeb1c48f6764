"""`top`'s shares on a single-process training loop (issue 68: compute 102 %)
add up to 100 % and agree with `summary --ranks`, which splits that
process's steps as a rank's (it names no rank: shown as rank 0) with a
per-step split (docs/cli.md, "dftracer top", "dftracer summary --ranks")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the training loop needs torch")

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "..", "torch_integration", "epochs_prog.py")
BATCHES, PASSES = 4, 3  # the program's len(loader); its 2 passes stopped at it and 1 run out


def env():
    return {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "dftracer", *args], capture_output=True,
                          text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    base = tmp_path_factory.mktemp("loop")
    cli("run", "-q", "--log-file", str(base / "t"), "--", sys.executable, PROG, "--epochs", "2",
        "--workers", "2")
    return base


def test_summary_ranks_splits_a_single_process_steps(loop):
    a = json.loads(cli("summary", "--ranks", "--json", str(loop)))
    (r,) = a["ranks"]
    main = a["single_process"]
    assert main is not None and (r["host"], r["pid"]) == (main["host"], main["pid"])
    # not persistent: 2 new workers a pass, and 2 for the peek
    assert r["rank"] == 0 and len(r["workers"]) == 2 * (PASSES + 1)
    assert r["steps"] == len(a["steps"]) == BATCHES * PASSES
    for st in a["steps"]:  # each step's split is a partition of its time
        assert sum(st["by_class_us"].values()) == pytest.approx(st["dur_us"][0], abs=len(
            st["by_class_us"])), st
    text = cli("summary", "--ranks", str(loop))
    assert "no process names a rank" not in text
    assert f"One process without a rank ({main['host']}:{main['pid']})" in text
    assert "\nStep split, ms" in text and "none: one rank, no other to compare it with" in text


def test_top_shares_add_up_and_agree_with_summary_ranks(loop):
    a = json.loads(cli("summary", "--ranks", "--json", str(loop)))
    (r,) = a["ranks"]
    snap = json.loads(cli("top", "--once", "--json", "--window", "3600", str(loop)))
    (p,) = [p for p in snap["processes"] if p["pid"] == r["pid"]]
    assert p["role"] is None and snap["ranks"] == 0 and snap["workers"] == 2 * (PASSES + 1)
    assert sum(p["by_cat"].values()) == pytest.approx(1.0)
    for c, v in r["share"].items():
        assert abs(p["by_cat"][c] - v) <= 0.02, (c, p["by_cat"], r["share"])
