"""Where a step's untraced time goes (issue 49, docs/trace-format.md
`sampled`, docs/cli.md "Stragglers"): the step thread's stack sampled in C.

A loop whose time is spent 100 frames deep (tests/tools/deep_steps_prog.py)
has its iterations name the deep function (issue 66: the walk read 64
frames and never counted a deeper one), each iteration its own step's
(the first one took the second's samples), within its duration; a stack
deeper than the walker follows is counted as dropped, not left out.

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
DEEP_PROG = os.path.join(os.path.dirname(PROG), "deep_steps_prog.py")
SLOW, ITERS, SLOW_MS = 1, 40, 10
COUNTERS = ("sampled_n", "sampled_dropped", "sampled_cut", "sampled_missed")


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


def iteration_events(base):
    """{rank: [iteration events]} of the ranks' traces."""
    out = {}
    for path in find_traces(str(base / "runs")):
        t = read_trace(path)
        rank = [e["args"]["value"] for e in t.events if e["ph"] == "M" and e["name"] == "rank"]
        its = t.of("X", cat="pipeline", name="iteration")
        if rank and its:
            out[rank[0]] = its
    return out


def iterations(base):
    """{rank: [iteration args]} of the ranks' traces."""
    return {rank: [e["args"] for e in its] for rank, its in iteration_events(base).items()}


def check_sampled(its):
    """docs/trace-format.md's `iteration` row: `sampled` with `sampled_us`,
    never more than the iteration's duration; the sampler's counters all or
    none (there when it read a stack in the iteration), whole and consistent:
    the dropped and the cut walks are of the samples read, a named place has
    samples.  Returns the iterations' sums of the counters."""
    sums = dict.fromkeys(COUNTERS, 0)
    for e in its:
        a = e["args"]
        assert ("sampled" in a) == ("sampled_us" in a), a
        if "sampled" in a:
            assert isinstance(a["sampled"], str) and a["sampled"], a
            assert isinstance(a["sampled_us"], int) and 0 < a["sampled_us"] <= e["dur"], e
            assert a.get("sampled_n", 0) >= 1, a
        present = [k in a for k in COUNTERS]
        assert all(present) or not any(present), a
        if all(present):
            assert all(isinstance(a[k], int) and a[k] >= 0 for k in COUNTERS), a
            assert a["sampled_dropped"] + a["sampled_cut"] <= a["sampled_n"], a
            assert a["sampled_n"] + a["sampled_missed"] >= 1, a
            for k in COUNTERS:
                sums[k] += a[k]
    return sums


def run_deep(base, depth, iters, **extra):
    """The iteration events of deep_steps_prog.py DEPTH ITERS under `dftracer run`."""
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, DEEP_PROG, str(depth), str(iters)],
        cwd=str(base), env=env(**extra), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = find_traces(str(base / "runs"))
    its = read_trace(path).of("X", cat="pipeline", name="iteration")
    assert [e["args"]["step"] for e in its] == list(range(len(its)))
    assert len(its) >= iters - 1, len(its)
    return its


def work_of(step):
    """deep_steps_prog.py's deep function of a step."""
    return "odd_work" if step % 2 else "even_work"


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
    for rank, events in iteration_events(job).items():  # the docs' fields, within each step
        check_sampled(events)
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
    its = read_trace(path).of("X", cat="pipeline", name="iteration")
    sums = check_sampled(its)
    places = [e["args"]["sampled"] for e in its if "sampled" in e["args"]]
    # about 2 ms a step at 1000 Hz: most iterations have a place
    assert len(places) >= 300, len(places)
    assert [p for p in places if not p.startswith("busy_calls_prog.py:main")] == []
    # the torn walks are counted, not left out in silence: 0 in 6,018 beside
    # two burners since the walker copies a page of the data stack at a time,
    # but 630 of 1,880 and 672 of 1,963 at loads of 4 to 8 (a thread that
    # moves while the sampler is itself descheduled): at most half
    assert sums["sampled_dropped"] <= sums["sampled_n"] // 2, sums


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


def test_a_stack_100_frames_deep_names_the_deep_function_in_its_own_step(tmp_path):
    """Each step waits 3 ms in shallow() and 24 ms 100 frames deeper, in
    even_work or odd_work by its parity: the walk keeps the innermost 64
    frames and follows the rest to the bottom (sampled_cut), so the deep
    function is named; and every sample lands in the step it was taken in
    (the first step, closed only at the second's optimizer step, took the
    second's samples: odd_work, 30,000 us in a 3,600 us iteration)."""
    its = run_deep(tmp_path, 100, 40)
    sums = check_sampled(its)
    named = [e["args"] for e in its if "sampled" in e["args"]]
    # about 2.7 samples a step at 100 Hz: most steps have a place
    assert len(named) >= len(its) // 2, [e["args"] for e in its[:5]]
    # never the other step's function (a sample is put by its time)
    other = [a for a in named if work_of(a["step"] + 1) in a["sampled"]]
    assert other == [], other
    deep = [a for a in named if a["sampled"] == f"deep_steps_prog.py:{work_of(a['step'])} > wait"]
    # 24 of the 27 ms a step are deep (the place weighs most): shallow() or
    # the loop's own line wins a step now and then
    assert len(deep) >= len(named) * 2 // 3, [a["sampled"] for a in named]
    assert all(a["sampled_cut"] >= 1 for a in deep), deep
    # the stack barely moves (a sleep 100 frames down): few walks are torn
    assert sums["sampled_dropped"] <= sums["sampled_n"] // 4, sums


def test_a_stack_deeper_than_the_walker_follows_is_counted_as_dropped(tmp_path):
    """2,500 frames deep (the walker follows 2,048 to find the bottom): those
    samples cannot be checked and are not counted at a place, but each one
    is counted in its step's `sampled_dropped`; the shallow part still is."""
    its = run_deep(tmp_path, 2500, 12)
    sums = check_sampled(its)
    named = [e["args"]["sampled"] for e in its if "sampled" in e["args"]]
    assert [p for p in named if "_work" in p] == [], named
    # about 2.4 deep samples a step
    assert sums["sampled_dropped"] >= len(its) // 2, sums
