"""The hang post mortem from the C ranks pass (docs/hang.md, "After the job";
src/reader/ranks_hang.c) on traces written by hand: what the pass keeps of
the `open`, `stack`, `FH` and `clock` events and its caps, the one rank rule,
dead ranks, a rank waiting for its DataLoader worker, and `top`'s dead and
stopped processes of this host."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from dftracer import _core
from dftracer.tools import cli, hang

T0 = 1_700_000_000_000_000
S = 1_000_000  # us


class Trace:
    """One process's trace, line by line (docs/trace-format.md)."""

    def __init__(self, pid: int, rank: Optional[int] = None, host: str = "h", ppid: int = 1,
                 world: int = 4, worker: Optional[int] = None) -> None:
        self.pid, self.lines, self.i = pid, ["["], 0
        self.meta("HH", {"name": host, "value": "00000000000000aa"})
        self.meta("process_name", {"name": "python" + (f" rank {rank}" if rank is not None else ""),
                                   "value": "process_name"})
        if rank is not None:
            self.meta("rank", {"name": "rank", "value": rank, "world_size": world, "source": "RANK"})
        self.x("start", "dftracer", T0, 0, {"ppid": ppid})
        if worker is not None:
            self.meta("worker", {"name": "worker", "value": worker, "num_workers": 1})

    def add(self, ev: Dict[str, Any]) -> "Trace":
        self.i += 1
        ev = dict({"id": self.i}, **ev)
        self.lines.append(json.dumps(ev, separators=(",", ":")))
        return self

    def meta(self, name: str, args: Dict[str, Any], tid: Any = None) -> "Trace":
        return self.add({"name": name, "cat": "dftracer", "pid": self.pid,
                         "tid": self.pid if tid is None else tid, "ph": "M",
                         "args": dict({"hhash": "00000000000000aa"}, **args)})

    def x(self, name: str, cat: str, ts: int, dur: Any, args: Optional[Dict[str, Any]] = None) -> "Trace":
        return self.add({"name": name, "cat": cat, "pid": self.pid, "tid": self.pid, "ts": ts,
                         "dur": dur, "ph": "X", "args": dict({"hhash": "00000000000000aa"},
                                                             **(args or {}))})

    def steps(self, n: int, at: int = T0) -> "Trace":
        for k in range(n):
            self.x("iteration", "pipeline", at + k * S, S // 2, {"step": k})
        return self

    def snapshot(self, at: int, spans: List[Dict[str, Any]], tid: Any = None) -> "Trace":
        if not spans:
            return self.meta("open", {"name": "open", "value": "", "at": at, "n": 0}, tid)
        for k, s in enumerate(spans):
            self.meta("open", dict({"name": "open", "at": at, "n": len(spans), "depth": k}, **s), tid)
        return self

    def stacks(self, at: int, frames: str, why: str = "SIGTERM", req: int = 1, tid: Any = None) -> "Trace":
        return self.meta("stack", {"name": "stack", "value": "MainThread", "at": at, "req": req,
                                   "why": why, "k": 0, "n": 1, "ident": "0x1", "frames": frames}, tid)

    def clock(self, at: int) -> "Trace":
        return self.meta("clock", {"name": "clock", "value": at, "wall_us": at, "when": "tick"})

    def end(self, at: int) -> "Trace":
        return self.x("end", "dftracer", at, 0, {"num_events": self.i})

    def write(self, folder: Path, host: str = "h", gz: bool = True) -> str:
        path = folder / f"trace-{host}-{self.pid}-python.pfw{'.gz' if gz else ''}"
        text = ("\n".join(self.lines) + "\n").encode()
        if gz:
            c = zlib.compressobj(1, zlib.DEFLATED, 31)
            text = c.compress(text) + c.flush()
        path.write_bytes(text)
        return str(path)


def it(since: int, step: int) -> Dict[str, Any]:
    return {"value": "iteration", "span_cat": "pipeline", "since": since, "step": step}


def ar(since: int, seq: int, group: str = "world") -> Dict[str, Any]:
    return {"value": "all_reduce", "span_cat": "comm", "since": since, "group": group, "seq": seq}


def dft(*args: str):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(list(args))
    return rc, out.getvalue()


def ranks_json(folder: Path) -> Dict[str, Any]:
    rc, out = dft("summary", "--ranks", "--json", "-j", "1", str(folder))
    return json.loads(out)


# ---- what the C pass keeps -------------------------------------------------------------

def test_the_pass_keeps_the_newest_snapshot_stacks_and_files(tmp_path):
    t = Trace(10, rank=0)
    t.meta("FH", {"name": "/data/a.bin", "value": "00000000000000f1"})
    t.snapshot(T0 + 1 * S, [it(T0, 3), ar(T0 + 10, 3)])
    t.snapshot(T0 + 5 * S, [it(T0, 3), {"value": "read", "span_cat": "POSIX", "since": T0 + 20,
                                        "fhash": "00000000000000f1"}])
    t.snapshot(T0 + 2 * S, [it(T0, 9)])  # older than the one that stands: ignored
    t.snapshot(T0 + 4 * S, [], tid=11)   # another thread: nothing open
    t.stacks(T0 + 3 * S, "/a.py:1 <module>\n/a.py:7 f", why="request", req=1)
    t.stacks(T0 + 6 * S, "/b.py:2 <module>\n/b.py:9 g", why="SIGTERM", req=2)
    t.clock(T0 + 7 * S)
    r = _core._rank_file(t.write(tmp_path))
    h = r["hang"]
    threads = {tid: (at, spans) for tid, at, spans in h["threads"]}
    assert threads[11] == (T0 + 4 * S, [])
    at, spans = threads[10]
    assert at == T0 + 5 * S and [s["value"] for s in spans] == ["iteration", "read"]
    assert spans[1] == {"value": "read", "depth": 1, "since": T0 + 20, "span_cat": "POSIX",
                        "fhash": "00000000000000f1", "file": "/data/a.bin"}
    assert [s["frames"] for s in h["stacks"]] == ["/b.py:2 <module>\\n/b.py:9 g"]
    assert (h["stack_at"], h["stack_req"], h["sigterm"]) == (T0 + 6 * S, 2, True)
    assert h["last_at"] == T0 + 7 * S and h["dropped"] == 0
    st = hang.ProcHang.from_pass(h)
    assert st.stacks[10]["frames"][-1] == {"file": "/b.py", "line": 9, "function": "g"}
    assert st.files == {"00000000000000f1": "/data/a.bin"}


def test_the_pass_is_bounded(tmp_path):
    t = Trace(10, rank=0)
    for tid in range(100):  # more threads than kept: the newest snapshots stand
        t.snapshot(T0 + tid, [it(T0, 1)], tid=1000 + tid)
    t.snapshot(T0 + 200, [dict(it(T0, k), depth=k) for k in range(40)], tid=5)
    for k in range(hang.MAX_FILES + 10):
        t.meta("FH", {"name": "/d/" + "x" * 2000, "value": "%016x" % (k + 1)})
    frames = "\n".join(f"/deep/{'y' * 400}.py:{k} f{k}" for k in range(200))
    t.stacks(T0 + 300, frames)
    t.snapshot(T0 + 400, [dict(ar(T0, 1), group="g" * 5000, value="v" * 5000)], tid=6)
    r = _core._rank_file(t.write(tmp_path))
    h = r["hang"]
    assert len(h["threads"]) == 64 and h["dropped"] > 0
    by_tid = {tid: spans for tid, _, spans in h["threads"]}
    assert len(by_tid[5]) == 16 and 1000 not in by_tid and 1099 in by_tid
    assert len(h["stacks"][0]["frames"]) < 8192
    assert h["stacks"][0]["frames"].endswith(" f199")
    assert len(by_tid[6][0]["group"]) == 255 and len(by_tid[6][0]["value"]) == 63


def test_a_file_opened_after_many_others_is_named(tmp_path):
    """A process that opened 10,000 files (imports, a data set) before its
    stuck read: the read's file is among the newest definitions kept, in
    the C pass and in top's follower alike (the same two generations)."""
    t = Trace(10, rank=0)
    for k in range(10_000):
        t.meta("FH", {"name": f"/lib/m{k}.py", "value": "%016x" % (k + 1)})
    t.meta("FH", {"name": "/data/stuck.fifo", "value": "00000000000ffff1"})
    for k in range(hang.MAX_FILES // 2 - 1):  # a newer generation fills after it
        t.meta("FH", {"name": f"/lib/n{k}.py", "value": "%016x" % (20_000 + k)})
    read = {"value": "read", "span_cat": "POSIX", "since": T0 + 20, "fhash": "00000000000ffff1"}
    t.snapshot(T0 + 5 * S, [it(T0, 3), read])
    h = _core._rank_file(t.write(tmp_path))["hang"]
    spans = {tid: spans for tid, _, spans in h["threads"]}[10]
    assert spans[1]["file"] == "/data/stuck.fifo"
    assert h["dropped"] > 0  # the oldest definitions were forgotten
    st = hang.ProcHang()
    for line in t.lines[1:]:
        ev = json.loads(line)
        if ev["ph"] == "M":
            st.observe(ev["name"], ev["args"], ev["tid"])
    assert st.file_of("00000000000ffff1") == "/data/stuck.fifo"
    assert st.file_of("0000000000000001") == "0000000000000001"  # forgotten: the hash
    assert len(st.files) + len(st.older_files) <= hang.MAX_FILES


# ---- the one rank rule ------------------------------------------------------------------

@pytest.mark.parametrize("ranks, want", [
    ([("RANK", 1), ("torch.distributed", 2)], 2),
    ([("torch.distributed", 1), ("RANK", 2)], 2),   # the last valid one (docs): not the first
    ([("RANK", 3), ("RANK", 2**31)], 3),            # not a rank: ignored
    ([("RANK", "5")], 5),
])
def test_the_rank_rule_is_the_c_pass_identity(tmp_path, ranks, want):
    t = Trace(10)
    for source, value in ranks:
        t.meta("rank", {"name": "rank", "value": value, "source": source})
    procs = hang.procs_of([_core._rank_file(t.write(tmp_path))])
    assert procs[0]["rank"] == want


# ---- dead ranks after the job -------------------------------------------------------------

def job(tmp_path: Path, dead_rank: int = 3, sigterm_others: bool = True) -> Path:
    """4 ranks; the others wait in all_reduce #8 and end with SIGTERM stacks;
    rank dead_rank's trace ends inside iteration 8, with neither."""
    for r in range(4):
        t = Trace(100 + r, rank=r).steps(8)
        if r == dead_rank:
            t.snapshot(T0 + 8 * S + S // 2, [it(T0 + 8 * S, 8)])
        else:
            t.snapshot(T0 + 9 * S, [it(T0 + 8 * S, 8), ar(T0 + 8 * S + 10, 8)])
            t.clock(T0 + 40 * S)
            if sigterm_others:
                t.stacks(T0 + 41 * S, "/job/train.py:30 <module>")
        t.write(tmp_path)
    return tmp_path


def test_a_killed_rank_is_named_dead(tmp_path):
    out = ranks_json(job(tmp_path))
    h = out["hang"]
    assert h["stuck_ranks"] == [3] and h["waiting_ranks"] == [0, 1, 2] and h["dead_ranks"] == [3]
    s = h["stuck"][0]
    assert s["state"] == "dead" and s["last_step"] == 7 and s["pid"] == 103
    assert [(o["name"], o["step"]) for o in s["open"]] == [("iteration", 8)]
    assert h["message"].startswith("hang: rank 3 dead (gone without finalizing) during iteration 8;"
                                   " ranks 0, 1, 2 waited ")
    rc, text = dft("summary", "--ranks", "-j", "1", str(tmp_path))
    assert text.splitlines()[0] == h["message"]


def test_a_dead_rank_says_its_memory_and_whether_it_grew(tmp_path):
    """The OOM killer's victim: rank 3's trace ends inside iteration 8 with
    its `memory` counter samples (docs/trace-format.md, "Memory") growing 20
    MiB a step to 1.1 GiB; the others' stay flat."""
    job(tmp_path)
    for r in range(4):
        path = tmp_path / f"trace-h-{100 + r}-python.pfw.gz"
        t = Trace(100 + r, rank=r).steps(8)
        if r == 3:
            for k in range(8):
                t.add({"name": "memory", "cat": "memory", "pid": 103, "tid": 103,
                       "ts": T0 + k * S + S // 2, "ph": "C",
                       "args": {"rss_bytes": 1_000_000_000 + k * 20 * 2**20, "step": k}})
            t.add({"name": "memory", "cat": "memory", "pid": 103, "tid": 103,
                   "ts": T0 + 8 * S + 10, "ph": "C", "args": {"rss_bytes": "hostile"}})
            t.snapshot(T0 + 8 * S + S // 2, [it(T0 + 8 * S, 8)])
        else:
            t.add({"name": "memory", "cat": "memory", "pid": 100 + r, "tid": 100 + r,
                   "ts": T0 + S, "ph": "C", "args": {"rss_bytes": 300 * 2**20, "step": 1}})
            t.snapshot(T0 + 9 * S, [it(T0 + 8 * S, 8), ar(T0 + 8 * S + 10, 8)])
            t.clock(T0 + 40 * S)
            t.stacks(T0 + 41 * S, "/job/train.py:30 <module>")
        path.unlink()
        t.write(tmp_path)
    h = ranks_json(tmp_path)["hang"]
    s = h["stuck"][0]
    assert (s["rank"], s["state"], s["rss_bytes"]) == (3, "dead", 1_000_000_000 + 7 * 20 * 2**20)
    assert s["growth_bytes_per_step"] == 20 * 2**20
    assert h["message"].startswith("hang: rank 3 dead (gone without finalizing) during iteration 8 "
                                   "(1.1 GiB, growing 20 MiB a step); ranks 0, 1, 2 waited "), h


def test_a_dead_rank_without_anyone_waiting(tmp_path):
    for r in range(3):
        t = Trace(100 + r, rank=r, world=3).steps(5 if r == 1 else 9)
        if r != 1:
            t.end(T0 + 60 * S)
        t.write(tmp_path)
    h = ranks_json(tmp_path)["hang"]
    assert h["stuck_ranks"] == [1] and h["collective"] is None and h["dead_ranks"] == [1]
    assert h["message"] == "hang: rank 1 dead (gone without finalizing) after step 4"


def test_a_job_killed_whole_names_nobody_dead(tmp_path):
    h = ranks_json(job(tmp_path, dead_rank=-1, sigterm_others=False))["hang"]
    assert h is None or not h["dead_ranks"]


# ---- a killed rank's steps, from its peers' collectives ----------------------------------

def lockstep_job(tmp_path: Path, lost: int = 4, frac: float = 0.9, peers_comm: bool = True,
                 peer_group: str = "world") -> Path:
    """4 ranks of 10 one-second steps, each with an all_reduce that ends at
    frac of the step; rank 3 was killed after its step 9, and its trace lost
    its last `lost` steps (the flush interval they fell in); the others
    ended with SIGTERM stacks."""
    for r in range(4):
        t = Trace(100 + r, rank=r)
        for k in range(10 - lost if r == 3 else 10):
            t.x("iteration", "pipeline", T0 + k * S, S, {"step": k})
            if r == 3 or peers_comm:
                group = "world" if r == 3 else peer_group
                t.x("all_reduce", "comm", T0 + k * S + int(frac * S) - 1000, 1000,
                    {"group": group, "seq": k})
        if r != 3:
            t.clock(T0 + 40 * S)
            t.stacks(T0 + 41 * S, "/job/train.py:30 <module>")
        t.write(tmp_path)
    return tmp_path


def dead_entry(tmp_path: Path) -> Dict[str, Any]:
    h = ranks_json(tmp_path)["hang"]
    assert h["dead_ranks"] == [3] and h["collective"] is None
    (s,) = h["stuck"]
    return dict(s, message=h["message"])


def test_a_killed_rank_is_said_to_have_done_the_steps_its_peers_show(tmp_path):
    """Its peers completed all_reduce #9 with it, late in their step 9: it
    had finished step 9 (docs/hang.md, "After the job"), though its own
    trace ends after step 5."""
    s = dead_entry(lockstep_job(tmp_path))
    assert (s["last_step"], s["last_step_written"]) == (9, 5)
    assert s["message"] == ("hang: rank 3 dead (gone without finalizing) after step 9 (by its "
                            "peers' collectives; its trace ends after step 5)")


def test_a_collective_early_in_the_step_counts_the_step_before(tmp_path):
    """The newest collective ended in the first half of the peers' step 9:
    the rank most likely died in the rest of that step (within one of it)."""
    s = dead_entry(lockstep_job(tmp_path, frac=0.2))
    assert (s["last_step"], s["last_step_written"]) == (8, 5)


def test_peers_without_lockstep_collectives_say_nothing(tmp_path):
    s = dead_entry(lockstep_job(tmp_path, peers_comm=False))
    assert s["last_step"] == 5 and "last_step_written" not in s
    assert s["message"] == "hang: rank 3 dead (gone without finalizing) after step 5"


def test_a_group_the_dead_rank_is_not_in_says_nothing(tmp_path):
    s = dead_entry(lockstep_job(tmp_path, peer_group="pg1[0-2]"))
    assert s["last_step"] == 5 and "last_step_written" not in s


def test_the_memory_report_counts_the_killed_ranks_steps_alike(tmp_path):
    lockstep_job(tmp_path)
    path = tmp_path / "trace-h-103-python.pfw.gz"
    t = Trace(103, rank=3)  # rank 3 again, growing 20 MiB a step until killed
    for k in range(6):
        t.x("iteration", "pipeline", T0 + k * S, S, {"step": k})
        t.x("all_reduce", "comm", T0 + k * S + int(0.9 * S) - 1000, 1000, {"group": "world", "seq": k})
        t.add({"name": "memory", "cat": "memory", "pid": 103, "tid": 103, "ts": T0 + k * S + S,
               "ph": "C", "args": {"rss_bytes": 1_000_000_000 + k * 20 * 2**20, "step": k}})
    path.unlink()
    t.write(tmp_path)
    rc, out = dft("summary", "--memory", "--json", "-j", "1", str(tmp_path))
    (o,) = json.loads(out)["oom"]
    assert (o["rank"], o["last_step"]) == (3, 9)
    assert o["message"].startswith("rank 3 killed after step 9, ")


def test_the_pass_keeps_each_groups_newest_collective(tmp_path):
    """`last_sync` (src/reader/ranks.c): the newest sync point of each of at
    most 8 groups; a ninth group takes the place of the one whose newest
    is oldest; an async issue is no sync point; a group named in 256 bytes
    or more is not kept."""
    t = Trace(10, rank=0)
    for g in range(10):
        for seq in range(3):
            t.x("all_reduce", "comm", T0 + g * S + seq * 1000, 10, {"group": f"pg{g}[0-1]", "seq": seq})
    t.x("all_reduce", "comm", T0 + 50 * S, 10, {"group": "pg9[0-1]", "seq": 7, "async": 1})
    t.x("all_reduce", "comm", T0 + 60 * S, 10, {"group": "g" * 256, "seq": 1})
    t.x("broadcast", "comm", T0 + 2 * S + 5, 10, {"group": "pg2[0-1]", "seq": 1})  # older than seq 2
    last = sorted(_core._rank_file(t.write(tmp_path))["last_sync"])
    assert last == [(f"pg{g}[0-1]", 2, T0 + g * S + 2000 + 10) for g in range(2, 10)]


# ---- a rank waiting for its DataLoader worker ------------------------------------------------

@pytest.mark.parametrize("ppid", [101, 999])  # 999: its parent's trace is not here (no ppid match)
def test_a_rank_waiting_for_a_batch_names_its_worker(tmp_path, ppid):
    r0 = Trace(100, rank=0, world=2).steps(3)
    r0.snapshot(T0 + 50 * S, [it(T0 + 3 * S, 3), ar(T0 + 3 * S + 10, 3)])
    r0.write(tmp_path)
    r1 = Trace(101, rank=1, world=2).steps(3)
    r1.snapshot(T0 + 50 * S, [it(T0 + 3 * S, 3), {"value": "fetch", "span_cat": "dataloader",
                                                 "since": T0 + 3 * S + 5, "step": 3}])
    r1.stacks(T0 + 51 * S, "/job/train.py:40 <module>\n/usr/lib/selectors.py:415 select")
    r1.write(tmp_path)
    w = Trace(200, rank=1, world=2, ppid=ppid, worker=0)
    w.meta("FH", {"name": "/data/x.fifo", "value": "00000000000000f2"})
    w.snapshot(T0 + 50 * S, [{"value": "fetch", "span_cat": "dataloader", "since": T0 + 3 * S},
                             {"value": "open", "span_cat": "POSIX", "since": T0 + 3 * S + 9,
                              "fhash": "00000000000000f2"}])
    w.stacks(T0 + 51 * S, "/job/train.py:10 <module>\n/job/dataset.py:31 __getitem__")
    w.write(tmp_path)
    h = ranks_json(tmp_path)["hang"]
    assert h["stuck_ranks"] == [1] and h["waiting_ranks"] == [0]
    b = h["stuck"][0]["batch_wait"]
    assert b["since_s"] == 48.0
    wk = b["worker"]
    assert (wk["worker"], wk["pid"], wk["file"], wk["line"], wk["function"]) == \
        (0, 200, "/job/dataset.py", 31, "__getitem__")
    assert [o["name"] for o in wk["open"]] == ["fetch", "open"] and wk["open"][1]["file"] == "/data/x.fifo"
    assert h["message"].startswith("hang: rank 1 waiting 48.0 s for a batch: worker 0 (pid 200) "
                                   "stopped in dataset.py:31 __getitem__ (open /data/x.fifo); "
                                   "rank 0 waited ")


# ---- live: top's dead and stopped processes of this host -------------------------------------

def test_top_names_a_dead_and_a_stopped_process(tmp_path):
    host = socket.gethostname()
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process (until reused, which a test cannot wait for)
    stopped = subprocess.Popen(["sleep", "300"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        # the stop takes effect when the child next runs, which a loaded
        # machine can delay past top's read of /proc: wait until it has
        os.waitpid(stopped.pid, os.WUNTRACED)
        now = int(time.time() * 1e6)
        for r, pid in ((0, os.getpid()), (1, gone.pid), (2, stopped.pid)):  # 0: alive
            t = Trace(pid, rank=r, host=host, world=3).steps(4, at=now - 20 * S)
            spans = [it(now - 15 * S, 4)] + ([ar(now - 14 * S, 4)] if r == 0 else [])
            t.snapshot(now - 13 * S, spans).clock(now - 1 * S)
            t.write(tmp_path, host=host, gz=False)
        rc, out = dft("top", "--once", "--json", "--hang-after", "3", str(tmp_path))
        h = json.loads(out)["hang"]
    finally:
        stopped.kill()
        stopped.wait()
    assert h["stuck_ranks"] == [1, 2] and h["waiting_ranks"] == [0]
    assert h["dead_ranks"] == [1] and h["stopped_ranks"] == [2]
    by = {s["rank"]: s for s in h["stuck"]}
    assert by[1]["state"] == "dead" and by[2]["state"] == "stopped"
    assert "rank 1 dead (gone without finalizing) during iteration 4" in h["message"]
    assert "rank 2 stopped by a signal (SIGSTOP: state T) during iteration 4" in h["message"]


def test_hang_reads_no_trace_file_itself():
    """The post mortem is the C pass's (issue 48): hang.py inflates nothing and
    opens only /proc (live states) and the source lines it quotes; stacks.py
    reads the answers with the C reader."""
    with open(hang.__file__, encoding="utf-8") as fh:
        src = fh.read()
    assert "import gzip" not in src and "decompress" not in src
    assert "def scan(" not in src
    from dftracer.tools import stacks  # its answers: the C reader's (_core._stack_events)

    with open(stacks.__file__, encoding="utf-8") as fh:
        src = fh.read()
    assert "import zlib" not in src and "import gzip" not in src and "json.loads" not in src


def test_stack_events_from_an_offset(tmp_path):
    """`dftracer stacks` reads the answers appended since it asked: the
    `stack` events from a gzip member's start on (_core._stack_events)."""
    t = Trace(10, rank=0).stacks(T0 + 1, "/a.py:1 <module>", why="request", req=1)
    path = Path(t.write(tmp_path))
    offset = path.stat().st_size
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    second = Trace(10, rank=0)
    second.lines = []
    second.stacks(T0 + 2, "/b.py:2 <module>\n/b.py:\\u00e9 f", why="request", req=2, tid=11)
    second.meta("stack", {"name": "stack", "at": "x", "frames": 5, "value": ["no"]})
    with open(path, "ab") as fh:
        fh.write(c.compress(("\n".join(second.lines) + "\n").encode()) + c.flush())
    from dftracer.tools import stacks

    got = stacks._events_from(str(path), offset)
    assert [(e["tid"], e["args"].get("req"), e["args"].get("at")) for e in got] == \
        [(11, 2, T0 + 2), (10, None, None)]
    assert got[0]["args"]["frames"] == "/b.py:2 <module>\n/b.py:\\u00e9 f"
    assert got[0]["args"]["why"] == "request" and got[1]["args"]["value"] == ""
    assert [e["args"]["req"] for e in stacks._events_from(str(path), 0) if "req" in e["args"]] == [1, 2]
    assert stacks._events_from(str(tmp_path / "none.pfw.gz"), 0) == []
