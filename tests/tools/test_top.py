"""`dftracer top` (docs/cli.md): incremental reading of growing traces, the
--once --json snapshot against `dftracer summary`, the live view in tmux,
`dftracer run --top`, and files that are torn, deleted, replaced, not
regular, unreadable or many."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
import zlib

import pytest

from tracefile import find_traces, read_trace

from dftracer.tools import follow, top_figures, top_rows

HAS_RICH = importlib.util.find_spec("rich") is not None
TMUX = shutil.which("tmux")

# A traced job under `dftracer run`: the command waits for three spawned
# workers; "early" stops after EARLY seconds, the two others after LONG.
# Each step: a forward (compute), a 4 KiB read of a traced file (POSIX) and
# a pipeline/iteration event with args.step.
WORKLOAD = r'''
import multiprocessing as mp, os, sys, time
from dftracer.python import ai, dftracer

def work(tag, seconds, data):
    with open(f"pid-{tag}", "w") as f:
        f.write(str(os.getpid()))
    log = dftracer.get_instance()
    end = time.time() + seconds
    step = 0
    while time.time() < end:
        t = log.get_time()
        with ai.compute.forward:
            time.sleep(0.004)
        with open(data, "rb") as f:
            f.read(4096)
        log.log_event("iteration", "pipeline", t, log.get_time() - t, int_args={"step": step})
        step += 1

if __name__ == "__main__":
    with open("pid-main", "w") as f:
        f.write(str(os.getpid()))
    early, long_ = float(sys.argv[1]), float(sys.argv[2])
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=work, args=(tag, s, "data/blob"))
             for tag, s in (("early", early), ("a", long_), ("b", long_))]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("workload done")
'''


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(extra)
    return env


def setup_job(tmp_path):
    (tmp_path / "work.py").write_text(WORKLOAD)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "blob").write_bytes(os.urandom(8192))
    (tmp_path / "runs").mkdir()


def start_job(tmp_path, early, long_, *run_args, **popen):
    setup_job(tmp_path)
    return subprocess.Popen(
        [sys.executable, "-m", "dftracer", "run", *run_args, "--data-dir", "data",
         "--log-file", "runs/w", "--", sys.executable, "work.py", str(early), str(long_)],
        cwd=str(tmp_path), env=clean_env(DFTRACER_FLUSH_INTERVAL="0.2"), start_new_session=True,
        **popen)


def stop_job(job):
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGTERM)
    job.communicate(timeout=60)


def top_cli(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "dftracer", "top", *args], cwd=cwd,
                          env=clean_env(), capture_output=True, text=True, timeout=timeout)


def members(path):
    """(start, end) byte offsets of each gzip member of a file."""
    data = open(path, "rb").read()
    out, at = [], 0
    while at < len(data):
        d = zlib.decompressobj(31)
        d.decompress(data[at:])
        assert d.eof, f"{path}: torn member at {at}"
        end = len(data) - len(d.unused_data)
        out.append((at, end))
        at = end
    return out


def summary_json(*paths):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", *map(str, paths),
                           "--json", "--by", "cat", "--by", "name", "--top", "0", "-j", "1"],
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def top_json(*paths, extra=()):
    proc = top_cli("--once", "--json", *map(str, paths), *extra)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def io_names(summary, direction):
    """The by-name rows of POSIX/STDIO calls moving data in one direction."""
    rows = [r for r in summary["by_name"] if r["cat"] in ("POSIX", "STDIO")]
    if direction == "read":
        return [r for r in rows if "read" in r["name"] and not r["name"].startswith("readdir")
                and "write" not in r["name"]]
    return [r for r in rows if "write" in r["name"]]


# ---- --once --json against summary ------------------------------------------------------

def check_against_summary(snap, summ):
    """Every count of the snapshot against `dftracer summary --json` of the same bytes."""
    by_pid = {p["pid"]: p for p in snap["processes"]}
    assert len(by_pid) == len(summ["processes"]) == snap["files"]
    for sp in summ["processes"]:
        p = by_pid[sp["pid"]]
        assert p["host"] == sp["host"] and p["name"] == sp["process_name"]
        assert p["rank"] == sp["rank"]
        assert p["events"] == sp["events"], (p, sp)
        assert p["complete_events"] == sp["complete"]
        assert (p["state"] == "finished") == sp["finalized"]
    cats = {}
    for p in snap["processes"]:
        for c, v in p["cats"].items():
            t = cats.setdefault(c, [0, 0])
            t[0] += v["count"]
            t[1] += v["total_us"]
    assert cats == {r["cat"]: [r["count"], r["total_us"]] for r in summ["by_cat"]}
    # no stdio data calls here: summary's ret rule and the size * ret rule agree
    assert not [r for r in summ["by_name"] if r["name"] in ("fread", "fwrite")]
    for direction in ("read", "write"):
        want = sum(r["io_bytes"] for r in io_names(summ, direction))
        assert sum(p[f"io_{direction}_bytes"] for p in snap["processes"]) == want


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory):
    """The runs/ directory of the workload run to its end (0.5 s and 1.5 s)."""
    tmp_path = tmp_path_factory.mktemp("job")
    job = start_job(tmp_path, 0.5, 1.5, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    return tmp_path / "runs"


def test_once_json_agrees_with_summary(finished_job):
    runs = finished_job
    paths = find_traces(str(runs), "w")
    assert len(paths) >= 4  # the command, its three workers (and spawn's resource tracker)
    snap = top_json(runs)
    summ = summary_json(runs)
    check_against_summary(snap, summ)
    assert snap["finished"] == len(paths) and snap["running"] == snap["silent"] == 0
    reads = 0
    for path in paths:
        t = read_trace(path)
        p = next(q for q in snap["processes"] if q["path"].endswith(os.path.basename(path)))
        its = t.of(cat="pipeline", name="iteration")
        reads += sum(e["args"]["ret"] for e in t.of(cat="POSIX", name="read"))
        if not its:
            assert p["step"] is None and p["step_last_us"] is None
            continue
        last = max(its, key=lambda e: e["args"]["step"])
        assert p["step"] == last["args"]["step"] and p["step_source"] == "pipeline/iteration"
        assert p["step_last_us"] == its[-1]["dur"]
        durs = [e["dur"] for e in its][-top_figures.STEP_HISTORY:]
        assert p["step_median_us"] == statistics.median(durs)
        assert p["by_cat"]["compute"] > 0.2  # sleeping in forward most of its life
        assert p["io_read_bytes"] > 0
    assert sum(p["io_read_bytes"] for p in snap["processes"]) == reads


def test_once_json_counts_only_complete_members(tmp_path, finished_job):
    """A file cut after any member reads as summary reads it; a torn member after
    it changes nothing until it is whole."""
    path = max(find_traces(str(finished_job), "w"), key=os.path.getsize)
    data = open(path, "rb").read()
    spans = members(path)
    assert len(spans) >= 3
    cut = tmp_path / "cut"
    cut.mkdir()
    name = os.path.basename(path)
    for k in (1, len(spans) // 2, len(spans) - 1):
        end = spans[k - 1][1]
        (cut / name).write_bytes(data[:end])
        snap = top_json(cut)
        check_against_summary(snap, summary_json(cut))
        (p,) = snap["processes"]
        assert p["state"] != "finished" and p["members"] == k
        # and half of the next member: nothing more is counted, the row says why
        nxt = spans[k]
        (cut / name).write_bytes(data[:nxt[0] + (nxt[1] - nxt[0]) // 2])
        torn = top_json(cut, extra=("--flush-interval", "0.01"))
        (q,) = torn["processes"]
        assert q["events"] == p["events"] and q["cats"] == p["cats"]
        assert q["mark"] == f"incomplete last member ({(nxt[1] - nxt[0]) // 2} bytes)"


# ---- incremental reading -----------------------------------------------------------

def line(i, name, cat, ts, dur, args=""):
    return (f'{{"id":{i},"name":"{name}","cat":"{cat}","pid":42,"tid":42,"ts":{ts},'
            f'"dur":{dur},"ph":"X","args":{{"hhash":"00000000000000aa","level":1,"p_idx":-1'
            f'{args}}}}}\n')


HEAD = ('[\n{"id":1,"name":"HH","cat":"dftracer","pid":42,"tid":42,"ph":"M","args":'
        '{"hhash":"00000000000000aa","name":"nodeA","value":"00000000000000aa"}}\n'
        '{"id":2,"name":"process_name","cat":"dftracer","pid":42,"tid":42,"ph":"M","args":'
        '{"hhash":"00000000000000aa","name":"python3 rank 3","value":"process_name"}}\n')


def gz(text):
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(text.encode()) + c.flush()


def test_reads_each_byte_once_and_only_whole_members(tmp_path, monkeypatch):
    path = str(tmp_path / "job-nodeA-42-app.pfw.gz")
    t0 = 1_800_000_000_000_000
    chunks = [HEAD + line(3, "start", "dftracer", t0, 0)]
    for m in range(15):
        chunks.append("".join(line(10 + 100 * m + k, "forward", "compute",
                                   t0 + m * 1_000_000 + k * 1000, 500) for k in range(50)))
    blobs = [gz(c) for c in chunks]
    read = []
    real_pread = os.pread
    monkeypatch.setattr(follow.os, "pread",
                        lambda fd, n, off: read.append((off, n)) or real_pread(fd, n, off))
    fol = follow.Follower([str(tmp_path)], window=3, flush_interval=0.5)
    with open(path, "wb") as f:
        f.write(blobs[0])
    fol.refresh()
    (st,) = fol.files.values()
    assert st.proc.events == 3 and st.proc.rank == 3 and st.proc.host == "nodeA"
    expected = 3
    for b in blobs[1:]:
        half = len(b) // 2
        with open(path, "ab") as f:
            f.write(b[:half])
        fol.refresh()
        assert st.proc.events == expected  # a member still being written waits
        with open(path, "ab") as f:
            f.write(b[half:])
        fol.refresh()
        expected += 50
        assert st.proc.events == expected
    # every byte read once, in order
    size = os.path.getsize(path)
    assert sum(n for _, n in read) == size
    assert [off for off, _ in read] == sorted(off for off, _ in read)
    # memory: only the window (3 s) and the late margin are kept, not 15 s
    assert len(st.proc.buckets) <= 3 + top_figures.LATE_MARGIN
    snap = fol.snapshot(now=time.time())
    (p,) = snap["processes"]
    assert p["cats"] == {"compute": {"count": 750, "total_us": 750 * 500}}
    # the window: the last 3 s end at the newest event (t0 + 14 s + 49 ms + 0.5 ms)
    assert p["events_per_s"] == pytest.approx(150 / p["window_s"])
    assert p["window_s"] == pytest.approx(2 + 0.0495)
    assert p["by_cat"]["compute"] == pytest.approx(150 * 500 / (p["window_s"] * 1e6))


def test_deleted_replaced_and_truncated_files(tmp_path):
    path = str(tmp_path / "job-nodeA-42-app.pfw.gz")
    t0 = 1_800_000_000_000_000
    body = "".join(line(10 + k, "read", "POSIX", t0 + k, 2, ',"count":10,"ret":8')
                   for k in range(20))
    with open(path, "wb") as f:
        f.write(gz(HEAD) + gz(body))
    fol = follow.Follower([path], window=10, flush_interval=0.1)
    fol.refresh()
    (st,) = fol.files.values()
    assert st.proc.events == 22 and st.proc.io_read == 160
    old = open(path, "rb")  # keeps the inode: the new file gets another one
    os.unlink(path)
    fol.refresh()
    (p,) = fol.snapshot(now=time.time())["processes"]
    assert p["mark"] == "deleted" and p["events"] == 22 and p["state"] == "silent"
    with open(path, "wb") as f:  # a new file at the same path
        f.write(gz(HEAD))
    fol.refresh()
    (p,) = fol.snapshot(now=time.time())["processes"]
    assert p["mark"] == "replaced: read again from the start" and p["events"] == 2
    with open(path, "ab") as f:
        f.write(gz(body))
    fol.refresh()
    with open(path, "r+b") as f:  # cut in place below what was read
        f.truncate(len(gz(HEAD)))
    fol.refresh()
    (p,) = fol.snapshot(now=time.time())["processes"]
    assert p["mark"] == "truncated: read again from the start" and p["events"] == 2
    old.close()


def test_a_silent_process_of_this_host_that_died_is_marked(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = os.getpid()
    host = socket.gethostname()
    for pid in (dead.pid, alive):
        head = HEAD.replace("nodeA", host).replace('"pid":42,"tid":42', f'"pid":{pid},"tid":{pid}')
        (tmp_path / f"x-{host}-{pid}-app.pfw.gz").write_bytes(gz(head))
    snap = top_json(tmp_path, extra=("--flush-interval", "0.01"))
    rows = {p["pid"]: p for p in snap["processes"]}
    assert rows[dead.pid]["state"] == rows[alive]["state"] == "silent"
    assert rows[dead.pid]["mark"] == "exited without an end event"
    assert rows[alive]["mark"] == ""


def head_of(host, pid, name, ppid=None, worker=None):
    """A trace's first lines: host, process name, `start` (with ppid) and a
    `worker` event."""
    text = HEAD.replace("nodeA", host).replace('"pid":42,"tid":42', f'"pid":{pid},"tid":{pid}')
    text = text.replace("python3 rank 3", name)
    if ppid is not None:
        text += (f'{{"id":3,"name":"start","cat":"dftracer","pid":{pid},"tid":{pid},'
                 f'"ts":1800000000000000,"dur":0,"ph":"X","args":{{"hhash":"00000000000000aa","ppid":{ppid}}}}}\n')
    if worker is not None:
        text += (f'{{"id":4,"name":"worker","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M",'
                 f'"args":{{"name":"worker","value":{worker},"num_workers":2}}}}\n')
    return text


def test_a_launcher_waiting_for_its_ranks_and_workers_after_their_rank(tmp_path):
    """A launcher (torchrun: no rank) of this host that writes nothing while
    the processes it started run is `waiting`, not silent; a rank's
    DataLoader workers are listed after it, in worker order."""
    host = socket.gethostname()
    me = os.getpid()
    sleeper = subprocess.Popen(["sleep", "60"])  # an alive pid for the rank
    try:
        files = {
            "launcher": (me, head_of(host, me, "torchrun", ppid=1)),
            "rank": (sleeper.pid, head_of(host, sleeper.pid, "python rank 0", ppid=me)),
            # workers with pids below their rank's (pids wrap), ids out of order
            "w1": (5, head_of(host, 5, "python rank 0", ppid=sleeper.pid, worker=1)),
            "w0": (7, head_of(host, 7, "python rank 0", ppid=sleeper.pid, worker=0)),
        }
        old = time.time() - 600
        for tag, (pid, text) in files.items():
            path = tmp_path / f"x-{host}-{pid}-app.pfw.gz"
            path.write_bytes(gz(text))
            if tag == "launcher":
                os.utime(path, (old, old))
        snap = top_json(tmp_path, extra=("--flush-interval", "1"))
    finally:
        sleeper.kill()
        sleeper.wait()
    rows = {p["pid"]: p for p in snap["processes"]}
    assert rows[me]["state"] == "waiting", rows[me]
    assert rows[me]["mark"] == "waiting for 1 running child process"
    assert snap["waiting"] == 1 and snap["silent"] == 0
    assert [p["pid"] for p in top_rows.sort_rows(snap["processes"], "rank")] == \
        [sleeper.pid, 7, 5, me]
    text = top_cli("--once", str(tmp_path), "--flush-interval", "1").stdout
    assert "1 waiting)" in text, text


def test_step_sources_and_io_bytes(tmp_path):
    """ProfilerStep#N, args.step (ai.update), --step NAME; the bytes of each
    call (docs/io-tracing.md): fread/fwrite size * ret, a failed read none, a
    character, a string's length, a copy both ways, a directory entry none."""
    t0 = 1_800_000_000_000_000
    lines = [line(3, "fread", "STDIO", t0, 5, ',"size":4,"count":1024,"ret":1000'),
             line(4, "fwrite", "STDIO", t0 + 10, 5, ',"size":8,"count":3,"ret":3'),
             line(5, "read", "POSIX", t0 + 20, 5, ',"count":100,"ret":-1'),
             line(6, "pread64", "POSIX", t0 + 30, 5, ',"count":100,"ret":64'),
             line(7, "readdir64", "POSIX", t0 + 40, 5, ',"ret":1'),
             line(8, "fgetc", "STDIO", t0 + 50, 1, ',"ret":65'),
             line(9, "fputs", "STDIO", t0 + 60, 1, ',"count":12,"ret":1'),
             line(10, "sendfile64", "POSIX", t0 + 70, 1, ',"count":500,"ret":300'),
             line(11, "read_batch", "user", t0 + 80, 1, ',"size":999')]  # not a file call
    for s in range(4):  # args.step: a step spans its events
        lines.append(line(20 + s, "forward", "compute", t0 + 1000 + s * 100, 10 + s,
                          f',"step":{s}'))
    a = tmp_path / "a"
    a.mkdir()
    (a / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD + "".join(lines)))
    (p,) = top_json(a)["processes"]
    assert p["io_read_bytes"] == 4 * 1000 + 64 + 1 + 300
    assert p["io_write_bytes"] == 8 * 3 + 12 + 300
    assert p["step"] == 3 and p["step_source"] == "args.step"
    assert p["step_last_us"] == 12  # step 2: one event of 12 us; step 3 is not over
    prof = [line(30 + s, f"ProfilerStep#{s + 7}", "PP", t0 + 2000 + s * 100, 50 + s)
            for s in range(3)]
    (a / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD + "".join(lines + prof)))
    (p,) = top_json(a)["processes"]
    assert (p["step"], p["step_source"], p["step_last_us"], p["step_median_us"]) == \
        (9, "ProfilerStep#N", 52, 51)
    # the shares are of the steps (as summary --ranks splits them): these hold no
    # event (the forwards ran before them), so all is other; ProfilerStep#N itself
    # counts in no share
    assert p["by_cat"]["compute"] == 0 and p["by_cat"]["other"] == pytest.approx(1.0)
    named = [line(40 + s, "train_step", "user", t0 + 3000 + s * 100, 70 + s) for s in range(2)]
    (a / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD + "".join(lines + prof + named)))
    (p,) = top_json(a, extra=("--step", "train_step"))["processes"]
    assert (p["step"], p["step_source"], p["step_last_us"]) == (1, "--step", 71)


# ---- robustness -------------------------------------------------------------------

def test_bad_files_get_a_mark_not_a_traceback(tmp_path, finished_job):
    good = max(find_traces(str(finished_job), "w"), key=os.path.getsize)
    d = tmp_path / "mess"
    d.mkdir()
    data = open(good, "rb").read()
    spans = members(good)
    shutil.copy(good, d / "good-h-1-app.pfw.gz")
    (d / "torn-h-2-app.pfw.gz").write_bytes(data[:spans[-1][0] + 5])
    (d / "zeros-h-3-app.pfw.gz").write_bytes(data[:spans[1][1]] + b"\0" * 4096)
    (d / "text-h-4-app.pfw.gz").write_bytes(b"not gzip at all\n")
    os.mkfifo(d / "fifo-h-5-app.pfw")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock-h-6-app.pfw.gz"))
    os.symlink("loop-h-7-app.pfw.gz", d / "loop-h-7-app.pfw.gz")
    (d / "empty-h-8-app.pfw.gz").write_bytes(b"")
    locked = d / "locked-h-9-app.pfw.gz"
    shutil.copy(good, locked)
    locked.chmod(0)
    many = d / "many"
    many.mkdir()
    small = data[:spans[1][1]]
    for i in range(1500):
        (many / f"r-h-{1000 + i}-app.pfw.gz").write_bytes(small)
    try:
        t = time.monotonic()
        proc = top_cli("--once", "--json", str(d), "--flush-interval", "0.01")
        took = time.monotonic() - t
    finally:
        sock.close()
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    snap = json.loads(proc.stdout)
    rows = {os.path.basename(p["path"]).split("-")[0]: p for p in snap["processes"]}
    assert snap["files"] == 9 + 1500
    assert rows["good"]["state"] == "finished" and rows["good"]["mark"] == ""
    assert rows["torn"]["mark"] == "incomplete last member (5 bytes)"
    assert rows["zeros"]["mark"] == f"zero-filled tail at byte {spans[1][1]}"
    assert rows["text"]["mark"] == "corrupt: not gzip" and rows["text"]["state"] == "error"
    for name in ("fifo", "sock"):
        assert rows[name]["mark"] == "not a regular file" and rows[name]["state"] == "error"
    assert rows["loop"]["mark"] == "unreadable: Too many levels of symbolic links"
    assert rows["empty"]["events"] == 0 and rows["empty"]["mark"] == ""
    if os.geteuid() != 0:  # root reads it anyway
        assert rows["locked"]["mark"] == "unreadable: Permission denied"
    r = next(p for p in snap["processes"] if "/many/" in p["path"])
    assert r["events"] == rows["zeros"]["events"] > 0
    assert took < 60
    # the text table says the same
    proc = top_cli("--once", str(d / "*-app.pfw*"), "--flush-interval", "0.01")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "not a regular file" in proc.stdout and "corrupt: not gzip" in proc.stdout


def test_without_rich_the_view_names_the_extra(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    (d / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD))
    code = ("import sys; sys.modules['rich'] = None; from dftracer.tools.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "top", str(d)], env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "pip install 'rich>=13' (the 'top' extra)" in proc.stderr and "--once" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", code, "top", "--once", "--json", str(d)],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["processes"][0]["name"] == "python3 rank 3"


# ---- the live view, in tmux ------------------------------------------------------------

_NO_VIEW = None if TMUX and HAS_RICH else (
    "needs tmux (scripts/install-tmux.sh) and rich (the 'top' extra)")
if _NO_VIEW and os.environ.get("DFTRACER_REQUIRE_TMUX") == "1":  # CI: a failure, not a skip
    raise RuntimeError(f"DFTRACER_REQUIRE_TMUX=1 but the live-view tests {_NO_VIEW}")
needs_view = pytest.mark.skipif(bool(_NO_VIEW), reason=_NO_VIEW or "")


class Tmux:
    def __init__(self, tmp_path):
        self.sock = f"dft-{uuid.uuid4().hex[:8]}"
        self.env = clean_env()
        self.cwd = str(tmp_path)

    def tmux(self, *args, check=True):
        return subprocess.run([TMUX, "-L", self.sock, *args], env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=30, check=check)

    def start(self, command):
        self.tmux("new-session", "-d", "-s", "t", "-x", "220", "-y", "50", command)
        self.tmux("set-option", "-t", "t", "remain-on-exit", "on")

    def screen(self):
        # with the scrollback: the "Pane is dead" line of remain-on-exit scrolls the pane
        return self.tmux("capture-pane", "-p", "-S", "-20", "-t", "t").stdout

    def wait_for(self, pred, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.2)
        raise AssertionError(f"timed out; screen:\n{self.screen()}")

    def dead(self):
        return self.tmux("display-message", "-p", "-t", "t", "#{pane_dead}").stdout.strip() == "1"

    def kill(self):
        self.tmux("kill-server", check=False)


def rows_by_pid(screen, pids):
    """tag -> (the row's first cells: rank host pid name state events ev/s step, the
    whole line); later cells hold spaces ("4.5 ms")."""
    out = {}
    for ln in screen.splitlines():
        cells = ln.split()
        for tag, pid in pids.items():
            if len(cells) > 8 and cells[2] == str(pid):
                out[tag] = cells[:8] + [ln]
    return out


@needs_view
def test_top_live_view_in_tmux(tmp_path):
    job = start_job(tmp_path, 1.0, 30.0, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tm = Tmux(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"pid-{t}").exists() for t in ("early", "a", "b", "main")):
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.1)
        time.sleep(0.3)
        pids = {t: int((tmp_path / f"pid-{t}").read_text()) for t in ("early", "a", "b", "main")}
        # silent after 3 x 0.5 s without data: the job flushes every 0.2 s
        tm.start(f"{sys.executable} -m dftracer top --flush-interval 0.5 runs")

        def early_done(s):
            r = rows_by_pid(s, pids)
            return len(r) == 4 and r["early"][4] == "finished"

        first = tm.wait_for(early_done)
        time.sleep(2.5)
        second = tm.screen()
        assert "dftracer top" in first and "q quit" in first
        r1, r2 = rows_by_pid(first, pids), rows_by_pid(second, pids)
        assert set(r2) == {"early", "a", "b", "main"}, second
        assert r2["early"][4] == "finished" and r2["early"][5] == r1["early"][5]
        # the command itself waits for its workers: nothing to write, alive
        assert r2["main"][4] == "waiting" and "exited" not in r2["main"][8], second
        for t in ("a", "b"):
            assert r1[t][4] == r2[t][4] == "running", second
            n1, n2 = int(r1[t][5].replace(",", "")), int(r2[t][5].replace(",", ""))
            assert n2 > n1 > 0  # events keep coming
            assert int(r2[t][7]) > int(r1[t][7])  # so do steps
            # the compute share, the first share after the step's last and median
            # times: the 4 ms forward is most of each step (a 4 KiB read the rest),
            # so anything from half to all of it, 100% included (sleep runs long
            # on a busy machine)
            share = re.search(r"\d (?:us|ms|s)\s+(\d+)% ", r2[t][8])
            assert share and 50 <= int(share.group(1)) <= 100, r2[t][8]
        assert re.search(r"compute\s+forward", second)  # top functions
        tm.tmux("send-keys", "-t", "t", "s")  # sort: rank -> events
        tm.wait_for(lambda s: "sorted by events" in s, timeout=10)
        tm.tmux("send-keys", "-t", "t", "f")  # hide the finished one
        hidden = tm.wait_for(lambda s: "finished hidden" in s, timeout=10)
        assert "early" not in rows_by_pid(hidden, pids)
        tm.tmux("send-keys", "-t", "t", "Home", "Enter")  # the functions of the first row
        focused = tm.wait_for(lambda s: re.search(r"top functions, last 10 s, pid \d+", s),
                              timeout=10)
        pid = int(re.search(r"top functions, last 10 s, pid (\d+)", focused).group(1))
        assert pid in (pids["a"], pids["b"])  # the busiest, by events/s
        tm.tmux("send-keys", "-t", "t", "a")
        tm.wait_for(lambda s: "top functions, last 10 s, all processes" in s, timeout=10)
        tm.tmux("send-keys", "-t", "t", "q")
        tm.wait_for(lambda s: tm.dead(), timeout=10)
    finally:
        tm.kill()
        stop_job(job)


@needs_view
def test_run_top_shows_the_view_then_the_output(tmp_path):
    setup_job(tmp_path)
    tm = Tmux(tmp_path)
    tm.env["DFTRACER_FLUSH_INTERVAL"] = "0.2"
    try:
        tm.start(f"{sys.executable} -m dftracer run --top --data-dir data --log-file runs/w "
                 f"-- {sys.executable} work.py 0.5 3")
        live = tm.wait_for(lambda s: "dftracer top" in s and s.count("running") >= 2)
        assert "runs/w-*" in live and "output of the command" in live
        end = tm.wait_for(lambda s: "trace files (one per process)" in s, timeout=60)
        assert "| workload done" in end  # the last lines of its output
        logs = [p for p in os.listdir(tmp_path / "runs") if p.endswith("-output.log")]
        assert len(logs) == 1
        assert (tmp_path / "runs" / logs[0]).read_text().strip() == "workload done"
        assert len(find_traces(str(tmp_path / "runs"), "w")) >= 4
        assert re.search(r"dftracer run: \d+ processes \(", end), end  # the final figures
        pids = {t: int((tmp_path / f"pid-{t}").read_text()) for t in ("early", "a", "b")}
        final = rows_by_pid(end, pids)
        assert all(final[t][4] == "finished" for t in pids), end
    finally:
        tm.kill()


@pytest.mark.skipif(not HAS_RICH, reason="needs rich (the 'top' extra)")
def test_keys_and_narrow_terminals(tmp_path):
    from dftracer.tools import top_view

    assert top_view.parse_keys(b"\x1b[1~\r") == ["home", "enter"]
    assert top_view.parse_keys(b"\x1b[A\x1b[Bq\x1b[2~\x1b") == ["up", "down", "q", "esc"]
    import io

    from rich.console import Console

    t0 = 1_800_000_000_000_000
    body = "".join(line(10 + k, "forward", "compute", t0 + k * 10_000, 9000) for k in range(50))
    (tmp_path / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD) + gz(body))
    fol = follow.Follower([str(tmp_path)])
    fol.refresh()
    snap = fol.snapshot(top=0)
    for width in (80, 120, 200):
        console = Console(file=io.StringIO(), width=width, height=30, color_system=None)
        console.print(top_view.render(snap, top_view.ViewState("rank"), ["t"], width, 30,
                                      None, None))
        screen = console.file.getvalue().splitlines()
        header = next(ln for ln in screen if ln.lstrip().startswith("rank"))
        assert "…" not in header and len(header.rstrip()) <= width, (width, header)
        row = next(ln for ln in screen if " 42 " in ln)
        assert "python3 rank 3" in row or width < 120  # the name goes before the rates
        assert "90%" in row and ("running" in row or "silent" in row)  # 450 ms of 499


def test_names_reach_the_terminal_escaped(tmp_path):
    t0 = 1_800_000_000_000_000
    evil = ('{"id":9,"name":"x\\u001b[2Jy","cat":"c\\u202e","pid":42,"tid":42,"ts":%d,'
            '"dur":5,"ph":"X","args":{}}\n' % t0)
    (tmp_path / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD + evil))
    proc = top_cli("--once", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
    assert "x\\x1b[2Jy" in proc.stdout and "c\\u202e" in proc.stdout
    (p,) = top_json(tmp_path)["processes"]
    assert p["cats"] == {"c\u202e": {"count": 1, "total_us": 5}}  # JSON keeps them as they are
    if HAS_RICH:
        import io

        from rich.console import Console

        from dftracer.tools import top_view

        fol = follow.Follower([str(tmp_path)])
        fol.refresh()
        console = Console(file=io.StringIO(), width=200, height=30, force_terminal=True)
        console.print(top_view.render(fol.snapshot(top=0), top_view.ViewState("rank"),
                                      ["t"], 200, 30, None, None))
        out = console.file.getvalue()
        assert "\x1b[2J" not in out and "x\\x1b[2Jy" in out


def test_rank_metadata_and_workers(tmp_path):
    """docs/trace-format.md "Ranks and clocks": the last valid rank event wins
    over the others and over process_name (the one rule of every reader); a
    process whose start event's ppid is another traced process is its worker."""
    t0 = 1_800_000_000_000_000

    def trace(pid, ppid, pname, *ranks):
        meta = [f'{{"id":1,"name":"HH","cat":"dftracer","pid":{pid},"tid":{pid},"ph":"M","args":'
                f'{{"hhash":"00000000000000aa","name":"nodeA","value":"00000000000000aa"}}}}\n',
                f'{{"id":2,"name":"process_name","cat":"dftracer","pid":{pid},"tid":{pid},'
                f'"ph":"M","args":{{"hhash":"00000000000000aa","name":"{pname}",'
                f'"value":"process_name"}}}}\n']
        for i, (value, source) in enumerate(ranks):
            meta.append(f'{{"id":{3 + i},"name":"rank","cat":"dftracer","pid":{pid},'
                        f'"tid":{pid},"ph":"M","args":{{"hhash":"00000000000000aa","name":"rank",'
                        f'"value":{value},"local_rank":{value % 2},"world_size":8,'
                        f'"job_id":"j1","source":"{source}"}}}}\n')
        start = (f'{{"id":9,"name":"start","cat":"dftracer","pid":{pid},"tid":{pid},"ts":{t0},'
                 f'"dur":0,"ph":"X","args":{{"hhash":"00000000000000aa","level":1,"p_idx":-1,'
                 f'"version":"0.2.0","ppid":{ppid}}}}}\n')
        (tmp_path / f"t-nodeA-{pid}-app.pfw.gz").write_bytes(gz("[\n" + "".join(meta) + start))

    trace(100, 1, "python rank 2", (2, "RANK"), (5, "torch.distributed"), (6, "RANK"))
    trace(101, 1, "python rank 3", (1, "SLURM_PROCID"), (7, "RANK"))
    trace(102, 1, "python rank 4")
    trace(103, 100, "python rank 6", (6, "torch.distributed"))  # a DataLoader worker of 100
    trace(200, 1, "torch.distributed.run")  # torchrun, traced, and one of its ranks
    trace(104, 200, "python rank 0", (0, "torch.distributed"))
    rows = {p["pid"]: p for p in top_json(tmp_path)["processes"]}
    assert [rows[p]["rank"] for p in (100, 101, 102, 103)] == [6, 7, 4, 6]
    assert rows[100]["local_rank"] == 0 and rows[100]["world_size"] == 8
    assert rows[104]["ppid"] == 200 and rows[104]["worker_of"] is None, rows[104]
    assert "worker" not in rows[104]["mark"]
    assert rows[100]["job_id"] == "j1" and rows[102]["job_id"] is None
    assert rows[103]["ppid"] == 100 and rows[103]["worker_of"] == 100
    assert rows[103]["mark"] == "worker of 100"
    assert rows[100]["worker_of"] is None and rows[100]["mark"] == ""


def test_flush_interval_from_the_environment_or_the_option(tmp_path):
    (tmp_path / "x-nodeA-42-app.pfw.gz").write_bytes(gz(HEAD))
    for value, used, warned in (("250ms", 0.25, False), ("1e1", 1.0, True),
                                ("5000", 3600.0, True), ("off", 0.0, False)):
        proc = subprocess.run([sys.executable, "-m", "dftracer", "top", "--once", "--json",
                               str(tmp_path)], env=clean_env(DFTRACER_FLUSH_INTERVAL=value),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["flush_interval_s"] == used
        lines = proc.stderr.splitlines()
        if warned:
            assert len(lines) == 1 and f"DFTRACER_FLUSH_INTERVAL='{value}'" in lines[0]
            assert lines[0].endswith(f"using {used:g}")
        else:
            assert lines == []
    proc = top_cli("--once", str(tmp_path), "--flush-interval", "-1")
    assert proc.returncode == 2 and "--flush-interval '-1'" in proc.stderr


def test_plain_pfw_files_are_read_by_whole_lines(tmp_path):
    """DFTRACER_TRACE_COMPRESSION=0 writes .pfw: a line still being written waits."""
    path = tmp_path / "x-nodeA-42-app.pfw"
    t0 = 1_800_000_000_000_000
    lines = [line(10 + k, "forward", "compute", t0 + k, 1) for k in range(5)]
    path.write_text(HEAD + lines[0] + lines[1][:30])
    fol = follow.Follower([str(path)])
    fol.refresh()
    (st,) = fol.files.values()
    assert st.proc.events == 3
    with open(path, "a") as f:
        f.write(lines[1][30:] + "".join(lines[2:]))
    fol.refresh()
    assert st.proc.events == 7 and st.proc.cats() == {"compute": [5, 5]}


def test_the_live_job_comes_before_the_ended_processes_of_earlier_jobs(tmp_path):
    """The README's order (issue 71): runs/ holds the ranks of earlier jobs,
    some finished (their end event), some killed (silent, their pids gone),
    then a job that runs now, without a rank.  --once lists the live one
    first, then the ended ones (each group by rank), in the table as in the
    JSON rows' order."""
    host = socket.gethostname()
    dead = []
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", "pass"])
        p.wait()
        dead.append(p.pid)
    sleeper = subprocess.Popen(["sleep", "60"])  # the live job's process
    t0 = 1_800_000_000_000_000
    end = line(9, "end", "dftracer", t0 + 1000, 0).replace('"pid":42,"tid":42',
                                                            '"pid":77,"tid":77')
    old = time.time() - 600
    try:
        files = {"live": (sleeper.pid, head_of(host, sleeper.pid, "python watch.py"), False)}
        for r, pid in enumerate(dead):  # killed ranks 0..2 of an earlier job
            files[f"killed{r}"] = (pid, head_of(host, pid, f"python rank {r}"), True)
        files["finished"] = (77, head_of(host, 77, "python rank 0") + end, True)
        for tag, (pid, text, earlier) in files.items():
            path = tmp_path / f"w-{host}-{pid}-app.pfw.gz"
            path.write_bytes(gz(text))
            if earlier:
                os.utime(path, (old, old))
        snap = top_json(tmp_path, extra=("--flush-interval", "1"))
        text = top_cli("--once", str(tmp_path), "--flush-interval", "1").stdout
    finally:
        sleeper.kill()
        sleeper.wait()
    rows = {p["pid"]: p for p in snap["processes"]}
    assert rows[sleeper.pid]["state"] == "running" and not rows[sleeper.pid]["ended"]
    assert rows[77]["state"] == "finished" and rows[77]["ended"]
    for pid in dead:
        assert rows[pid]["state"] == "silent" and rows[pid]["ended"], rows[pid]
        assert rows[pid]["mark"] == "exited without an end event"
    order = [p["pid"] for p in top_rows.sort_rows(snap["processes"], "rank")]
    assert order[0] == sleeper.pid and sorted(order[1:]) == sorted(dead + [77]), order
    # the ended ones by rank (rank 0: the finished and the killed, by pid)
    assert order[1:] == sorted([77, dead[0]]) + dead[1:], order
    table = [ln.split() for ln in text.splitlines()[1:]]  # below the headline
    pids = [int(c[2]) for c in table if len(c) > 4 and c[2].isdigit()]
    assert pids == order, text
