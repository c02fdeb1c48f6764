"""A hang in an ordinary data-parallel job, with no collective in the
program's loop (docs/hang.md): the collectives torch launches itself -- DDP's
bucket all_reduce, FSDP2's all_gather and reduce_scatter -- are open while
the other ranks wait in them (docs/trace-format.md, "Open spans": in-flight
collectives), so `dftracer top --hang-after` and `summary --ranks` name the
stuck rank and the waiting ones.

Three gloo jobs of 3 ranks under `dftracer run -- torchrun`
(tests/tools/ddp_plain_prog.py, shaped like nanoGPT's train.py), each
shared by the tests of its fixture:
- plain DDP (the native hook, built by conftest.py), rank 2 blocked reading a
  FIFO at its 8th batch;
- DDP with the C hook and one explicit all_reduce per step (async_op=True,
  issued before the backward pass), rank 1 deadlocked on a threading.Lock at
  its 8th batch: the others wait with it and the bucket in flight; their
  traces also show that the explicit and the bucket all_reduces share one
  numbering;
- FSDP2 (fully_shard), rank 2 blocked reading a FIFO at its 8th batch."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tracefile import find_traces, read_trace

torch = pytest.importorskip("torch", reason="the distributed job needs torch")
np = pytest.importorskip("numpy", reason="the program reads its batches from a np.memmap")

from test_hang import dft  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_plain_prog.py")
START_S = 180      # torch's import and gloo's rendezvous on a loaded 2-core machine
NAMED_WITHIN = 60  # s from the block to top naming it (the acceptance)
HANG_AFTER = 10


def mark_line(mark):
    with open(PROG) as fh:
        for i, line in enumerate(fh, 1):
            if line.rstrip().endswith(f"# mark:{mark}"):
                return i
    raise AssertionError(mark)


def start(base, hook, *prog_args):
    """The job, in its own session; returns (process, runs, data)."""
    runs, data = base / "runs", base / "data"
    runs.mkdir()
    data.mkdir()
    os.mkfifo(data / "stuck.fifo")
    np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint16).tofile(data / "train.bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(DFTRACER_FLUSH_INTERVAL="1", DFTRACER_DDP_HOOK=hook, DFTRACER_LOG_LEVEL="INFO")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace",
         "--data-dir", str(data), "--", sys.executable, "-m", "torch.distributed.run",
         "--standalone", "--nproc_per_node", "3", PROG, "--data", str(data / "train.bin"),
         "--fifo", str(data / "stuck.fifo"), *prog_args],
        cwd=str(base), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    return proc, runs, data


def watch(proc, runs, data, rank):
    """Polls `top --once --json` until it reports a hang; returns (that
    snapshot, seconds from the rank's block to it, the snapshots before)."""
    marker = data / f"stuck.fifo.blocked{rank}"
    seen = []
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        if find_traces(str(runs)):
            rc, out = dft("top", "--once", "--json", "--hang-after", str(HANG_AFTER), str(runs))
            assert rc == 0, out
            snap = json.loads(out)
            if snap["hang"]:
                assert marker.exists(), snap["hang"]
                return snap, time.time() - float(marker.read_text()), seen
            seen.append(snap)
        time.sleep(0.5)
    raise AssertionError(f"no hang reported; last snapshot: {seen[-1:] }")


def terminate(proc):
    """SIGTERM to torchrun, as a scheduler ends a job; SIGKILL to what is
    left after 20 s.  Returns the job's stderr."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # ranks torchrun left behind
    return err.decode(errors="replace")


def run_job(base, hook, rank, *prog_args):
    proc, runs, data = start(base, hook, *prog_args)
    try:
        snap, after_s, seen = watch(proc, runs, data, rank)
    finally:
        err = terminate(proc)
    rc, out = dft("summary", "--ranks", "--json", str(runs))
    assert rc == 0, out
    return {"snap": snap, "after_s": after_s, "seen": seen, "stderr": err, "runs": runs,
            "data": data, "summary": json.loads(out)["hang"]}


@pytest.fixture(scope="module")
def fifo_job(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("ddp-fifo"), "auto", 2, "--fault", "fifo")


@pytest.fixture(scope="module")
def lock_job(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("ddp-lock"), "c", 1, "--fault", "lock", "--rank", "1",
                   "--explicit")


@pytest.fixture(scope="module")
def fsdp_job(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("fsdp-fifo"), "auto", 2, "--fault", "fifo", "--fsdp")


def traces_by_rank(runs):
    out = {}
    for p in find_traces(str(runs)):
        t = read_trace(p, require_end=False)
        r = [e["args"]["value"] for e in t.events if e["ph"] == "M" and e["name"] == "rank"]
        if r:
            out[int(r[-1])] = t
    return out


def newest_open(t):
    """The newest snapshot of each thread: tid -> its spans, outermost first."""
    snaps = {}
    for e in t.events:
        if e["ph"] == "M" and e["name"] == "open":
            at = e["args"]["at"]
            cur = snaps.get(e["tid"])
            if cur is None or at > cur[0]:
                cur = snaps[e["tid"]] = (at, [])
            if at == cur[0] and e["args"]["n"]:
                cur[1].append(e["args"])
    return {tid: sorted(spans, key=lambda a: a["depth"]) for tid, (_, spans) in snaps.items()}


def check_ddp_hang(job, stuck, waiting):
    for h in (job["snap"]["hang"], job["summary"]):
        assert h["stuck_ranks"] == [stuck] and h["waiting_ranks"] == waiting, h
        assert (h["collective"], h["group"]) == ("all_reduce", "world"), h
        assert isinstance(h["bucket"], int) and h["bucket"] >= 0, h
        assert f"in all_reduce #{h['seq']} (DDP bucket {h['bucket']}, world)" in h["message"]
    live, post = job["snap"]["hang"], job["summary"]
    assert post["seq"] == live["seq"] and post["since_s"] >= live["since_s"]
    assert job["after_s"] <= NAMED_WITHIN
    # the first poll whose wait had lasted long enough named it
    assert all(s["hang"] is None for s in job["seen"])


def test_plain_ddp_fifo_hang_named_live_and_post_mortem(fifo_job):
    check_ddp_hang(fifo_job, 2, [0, 1])
    assert "DDP buckets timed by the native hook" in fifo_job["stderr"]
    for h in (fifo_job["snap"]["hang"], fifo_job["summary"]):
        read = h["stuck"][0]["open"][-1]
        assert read["name"] == "read" and read["file"] == str(fifo_job["data"] / "stuck.fifo")
        assert [o["name"] for o in h["stuck"][0]["open"]][0] == "iteration"
    stuck = fifo_job["summary"]["stuck"][0]  # the SIGTERM's stacks
    assert (stuck["file"], stuck["line"]) == (PROG, mark_line("fifo"))


def test_waiting_ranks_show_the_bucket_in_flight(fifo_job):
    """The waiting ranks' newest snapshots: iteration > backward > the
    bucket's all_reduce, launched by the training thread, with its bucket,
    `async` and the seq of its complete event on the ranks where it ended."""
    ranks = traces_by_rank(fifo_job["runs"])
    assert sorted(ranks) == [0, 1, 2]
    h = fifo_job["summary"]
    for r in (0, 1):
        t = ranks[r]
        opens = newest_open(t)
        main = [spans for spans in opens.values() if spans and spans[-1]["value"] == "all_reduce"]
        assert len(main) == 1, opens
        spans = main[0]
        assert [s["value"] for s in spans] == ["iteration", "backward", "all_reduce"], spans
        inner = spans[-1]
        assert inner["span_cat"] == "comm" and inner["group"] == "world" and inner["async"] == 1
        assert (inner["seq"], inner["bucket"]) == (h["seq"], h["bucket"])
        assert inner["since"] >= spans[1]["since"]
        done = [e for e in t.events if e["cat"] == "comm" and e["ph"] == "X"]
        # every earlier bucket completed and was written; the waited one was not
        assert sorted(e["args"]["seq"] for e in done) == list(range(h["seq"]))
    # rank 2 never launched it
    assert not any(s["value"] == "all_reduce" for spans in newest_open(ranks[2]).values()
                   for s in spans)


def test_lock_hang_with_the_c_hook_and_an_async_call(lock_job):
    """The oldest collective the waiting ranks are in is the explicit
    async all_reduce (in flight until its Work completes); the bucket the C
    hook launched after it is in flight inside `backward`."""
    live, post = lock_job["snap"]["hang"], lock_job["summary"]
    for h in (live, post):
        assert h["stuck_ranks"] == [1] and h["waiting_ranks"] == [0, 2], h
        assert (h["collective"], h["group"]) == ("all_reduce", "world") and "bucket" not in h
        assert h["message"].endswith(f" in all_reduce #{h['seq']} (world)")
    assert post["seq"] == live["seq"] and lock_job["after_s"] <= NAMED_WITHIN
    assert all(s["hang"] is None for s in lock_job["seen"])
    assert "DDP buckets timed by the C hook" in lock_job["stderr"]
    ranks = traces_by_rank(lock_job["runs"])
    for r in (0, 2):
        spans = [s for s in newest_open(ranks[r]).values() if s and s[0]["value"] == "iteration"]
        assert len(spans) == 1
        shape = [(s["value"], s.get("seq"), s.get("bucket"), s.get("async")) for s in spans[0]]
        assert shape == [("iteration", None, None, None), ("all_reduce", post["seq"], None, 1),
                         ("backward", None, None, None), ("all_reduce", post["seq"] + 1, 0, 1)]
    stuck = lock_job["summary"]["stuck"][0]  # in Thread.join, from the SIGTERM's stacks
    assert os.path.basename(stuck["file"]) == "threading.py" and stuck["thread"] == "MainThread"
    assert [o["name"] for o in stuck["open"]] == ["iteration"]


def test_one_numbering_for_explicit_and_bucket_collectives(lock_job):
    """Each rank's (name, group, seq) are all different, explicit all_reduce
    and DDP buckets numbered together, in the same order on every rank."""
    ranks = traces_by_rank(lock_job["runs"])
    seqs = {}
    for r, t in ranks.items():
        comm = sorted((e for e in t.events if e["cat"] == "comm" and e["ph"] == "X"),
                      key=lambda e: e["args"]["seq"])
        keys = [(e["name"], e["args"]["group"], e["args"]["seq"]) for e in comm]
        assert len(keys) == len(set(keys)), collections.Counter(keys).most_common(3)
        kinds = ["bucket" if "ddp_bucket" in e["args"] else "explicit" for e in comm]
        assert kinds.count("explicit") >= 5 and kinds.count("bucket") >= 5
        assert [e["args"]["seq"] for e in comm] == list(range(len(comm)))
        seqs[r] = kinds
    # the stuck rank made fewer; the calls they all made are the same calls
    n = min(len(k) for k in seqs.values())
    assert seqs[0][:n] == seqs[1][:n] == seqs[2][:n]
    assert seqs[0][:4] == ["explicit", "bucket", "explicit", "bucket"]


def test_fsdp2_hang(fsdp_job):
    for h in (fsdp_job["snap"]["hang"], fsdp_job["summary"]):
        assert h["stuck_ranks"] == [2] and h["waiting_ranks"] == [0, 1], h
        assert h["collective"] in ("all_gather_single", "reduce_scatter_single",
                                   "all_gather_into_tensor", "reduce_scatter_tensor"), h
        assert h["group"] == "world" and "bucket" not in h
        assert h["stuck"][0]["open"][-1]["name"] == "read"
    assert fsdp_job["after_s"] <= NAMED_WITHIN
    assert fsdp_job["summary"]["seq"] == fsdp_job["snap"]["hang"]["seq"]
