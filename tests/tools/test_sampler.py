"""Where a step's untraced time goes (issue 49, docs/trace-format.md
`sampled`, docs/cli.md "Stragglers"): the step thread's stack sampled in C.

A 4-rank DDP job shaped like nanoGPT's train.py (tests/tools/lm_ddp_prog.py:
no DataLoader, no explicit collective), rank 1's get_batch slowed 10 ms
(about a quarter of the step) in a helper it calls: its iterations carry
`sampled` naming get_batch, and `summary --ranks` names rank 1 with that
place as its cause; the other ranks' places are their own code.  With
DFTRACER_SAMPLE_HZ=0 no iteration has `sampled`; a bad value gets one
warning line naming it and the default used."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace

torch = pytest.importorskip("torch", reason="the distributed job needs torch")
np = pytest.importorskip("numpy", reason="the job's batches come from np.memmap")

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm_ddp_prog.py")
SLOW, ITERS, SLOW_MS, PERIOD_US = 1, 40, 10, 10_000


def env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    e.update(extra)
    return e


def run_job(base, **extra):
    (base / "data").mkdir(parents=True)
    np.random.default_rng(0).integers(0, 256, 200_000).astype(np.uint16).tofile(
        str(base / "data" / "train.bin"))
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
         PROG, "data", "--iters", str(ITERS), "--slow-rank", str(SLOW), "--slow", "get_batch",
         "--slow-ms", str(SLOW_MS)],
        cwd=str(base), env=env(**extra), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def iterations(base):
    """{rank: [iteration args]} of the ranks' traces."""
    out = {}
    for path in find_traces(str(base / "runs")):
        t = read_trace(path)
        rank = [e["args"]["value"] for e in t.events if e["ph"] == "M" and e["name"] == "rank"]
        its = [e["args"] for e in t.of("X", cat="pipeline", name="iteration")]
        if rank and its:
            out[rank[0]] = its
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    base = tmp_path_factory.mktemp("sampled")
    run_job(base)
    return base


def test_the_slowed_ranks_iterations_name_get_batch(job):
    its = iterations(job)
    assert sorted(its) == [0, 1, 2, 3]
    slow = its[SLOW]
    assert len(slow) >= ITERS - 1
    named = [a for a in slow if "sampled" in a]
    # 10 ms a step at 100 Hz: about one sample a step; the place of most is
    # get_batch's helper (a wait to a deadline: sleeping, so load cannot
    # stretch it past a few samples)
    assert len(named) >= len(slow) // 2, slow[:5]
    places = [a["sampled"] for a in named]
    assert places.count("lm_ddp_prog.py:get_batch > wait") >= len(named) * 3 // 4, places
    for a in named:  # the docs' field types: a string, whole periods
        assert isinstance(a["sampled"], str) and a["sampled_us"] % PERIOD_US == 0
        assert a["sampled_us"] > 0
    # the other ranks' places, when sampled, are their own code too (no
    # torch frame: forward, backward and the optimizer are timed by events)
    for rank, args in its.items():
        assert [a["sampled"] for a in args
                if not a.get("sampled", "lm_ddp_prog.py:").startswith("lm_ddp_prog.py:")] == [], rank


def test_summary_ranks_names_the_place(job):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--ranks", "--json",
                           str(job / "runs")], capture_output=True, text=True, env=env(),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    top = d["stragglers"][0]
    assert top["rank"] == SLOW, d["stragglers"]
    assert (top["cause_class"], top["cause_cat"]) == ("other", "sampled"), top
    assert top["cause_name"] == "lm_ddp_prog.py:get_batch > wait", top
    text = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--ranks",
                           str(job / "runs")], capture_output=True, text=True, env=env(),
                          timeout=120).stdout
    assert f"rank {SLOW}: slowest in" in text and "other: sampled/lm_ddp_prog.py:get_batch > wait" \
        in text, text


def test_a_thread_that_moves_under_the_sampler_gives_no_torn_place(tmp_path):
    """A sample read while the step thread calls and returns may follow a
    popped frame's stale links and end early, on a library frame alone
    (`encoder.py:iterencode`): such a walk did not reach the thread's bottom
    frame and is not counted.  At 1000 Hz over a loop of short library calls,
    every sampled place is the program's own function."""
    np.random.default_rng(0).integers(0, 256, 100_000).astype(np.uint16).tofile(
        str(tmp_path / "tokens.bin"))
    prog = os.path.join(os.path.dirname(PROG), "busy_calls_prog.py")
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, prog, "tokens.bin", "1500"],
        cwd=str(tmp_path), env=env(DFTRACER_SAMPLE_HZ="1000"), capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = find_traces(str(tmp_path / "runs"))
    places = [e["args"]["sampled"] for e in read_trace(path).of("X", cat="pipeline",
                                                              name="iteration")
              if "sampled" in e["args"]]
    # about 2 ms a step at 1000 Hz: most iterations have a place
    assert len(places) >= 300, len(places)
    assert [p for p in places if not p.startswith("busy_calls_prog.py:main")] == []


def test_no_samples_when_off_and_a_bad_rate_is_named(tmp_path):
    run_job(tmp_path / "off", DFTRACER_SAMPLE_HZ="0")
    its = iterations(tmp_path / "off")
    assert sorted(its) == [0, 1, 2, 3]
    assert not any("sampled" in a for args in its.values() for a in args)
    proc = run_job(tmp_path / "bad", DFTRACER_SAMPLE_HZ="fast")
    warned = [ln for ln in proc.stderr.splitlines() if "DFTRACER_SAMPLE_HZ" in ln]
    # one line per process that starts tracing (the launcher and 4 ranks),
    # each naming the variable, the value and the rate used
    assert warned and all(
        ln.endswith("DFTRACER_SAMPLE_HZ='fast' is not a usable number; using 100")
        for ln in warned), proc.stderr
    its = iterations(tmp_path / "bad")
    assert any("sampled" in a for a in its[SLOW])
