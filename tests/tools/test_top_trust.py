"""`dftracer top` on files that a reader must get right or survive (issue 34):
member offsets across reads, a tail that reads as zeros and then fills in,
hostile numbers, bad durations, the one rank rule, and memory bounds."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib

import pytest

from dftracer.tools import follow, top_figures

T0 = 1_800_000_000_000_000


def line(i, name, cat, ts, dur, args="", pid=42):
    return (f'{{"id":{i},"name":"{name}","cat":"{cat}","pid":{pid},"tid":{pid},"ts":{ts},'
            f'"dur":{dur},"ph":"X","args":{{"hhash":"00000000000000aa","level":1,"p_idx":-1'
            f'{args}}}}}\n')


def meta(i, name, args, pid=42):
    return json.dumps({"id": i, "name": name, "cat": "dftracer", "pid": pid, "tid": pid,
                       "ph": "M", "args": args}, separators=(",", ":")) + "\n"


def head(pid=42):
    return ('[\n' + meta(1, "HH", {"hhash": "00000000000000aa", "name": "nodeA",
                                  "value": "00000000000000aa"}, pid)
            + meta(2, "process_name", {"hhash": "00000000000000aa", "name": "python3 rank 3",
                                       "value": "process_name"}, pid))


HEAD = head()


def gz(text, level=1):
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    return c.compress(text.encode()) + c.flush()


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    return e


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "dftracer", *args], env=env(),
                          capture_output=True, text=True, timeout=timeout)


def top_json(*paths):
    proc = cli("top", "--once", "--json", *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def summary_events(path):
    proc = cli("summary", str(path), "--json", "-j", "1")
    assert proc.returncode in (0, 2), proc.stderr
    return json.loads(proc.stdout)["overview"]["events"]


def big_members(n_members, per_member, level=6):
    """Members of random-ish event lines, each over READ_STEP compressed
    bytes when per_member is large."""
    out = [gz(HEAD + line(3, "start", "dftracer", T0, 0), level)]
    i = 10
    for m in range(n_members):
        text = "".join(line(i + k, f"fn{(k * 7919) % 1000}", "compute",
                            T0 + m * 1_000_000 + k, (k * 31) % 997,
                            f',"x":"{os.urandom(6).hex()}"') for k in range(per_member))
        i += per_member
        out.append(gz(text, level))
    out.append(gz(line(i, "end", "dftracer", T0 + n_members * 1_000_000, 0,
                       f',"num_events":{i}'), level))
    return out, i - 10 + 4  # events: HH, process_name, start, the lines, end


# ---- 1. member offsets ------------------------------------------------------------

def test_a_finished_file_of_members_longer_than_a_read_is_whole(tmp_path):
    blobs, _ = big_members(3, 15000)
    assert max(len(b) for b in blobs) > follow.READ_STEP  # members span two reads
    path = tmp_path / "job-nodeA-42-app.pfw.gz"
    path.write_bytes(b"".join(blobs))
    assert os.path.getsize(path) > 3 * follow.READ_STEP
    snap = top_json(path)
    (p,) = snap["processes"]
    assert p["state"] == "finished"
    assert p["mark"] == ""
    assert p["members"] == len(blobs)
    assert p["events"] == summary_events(path)


def test_a_finished_trace_written_by_the_tracer(tmp_path):
    """A real trace of 120k events (several members over 256 KiB)."""
    prog = ("from dftracer.python import dftracer\n"
            "log = dftracer.initialize_log(None, None, -1)\n"
            "t = log.get_time()\n"
            "for i in range(120000):\n"
            "    log.log_event(f'f{i % 97}', 'app', t + i, i % 13, int_args={'i': i})\n"
            "log.finalize()\n")
    e = env()
    e.update(DFTRACER_ENABLE="1", DFTRACER_LOG_FILE=str(tmp_path / "t"),
             DFTRACER_INC_METADATA="1")
    subprocess.run([sys.executable, "-c", prog], env=e, check=True, timeout=120)
    (path,) = [tmp_path / f for f in os.listdir(tmp_path) if f.endswith(".pfw.gz")]
    assert os.path.getsize(path) > 2 * follow.READ_STEP
    snap = top_json(path)
    (p,) = snap["processes"]
    assert (p["state"], p["mark"]) == ("finished", "")
    assert p["events"] == summary_events(path) >= 120000


def test_a_tail_that_reads_as_zeros_then_fills_in(tmp_path):
    blobs, events = big_members(3, 15000)
    path = tmp_path / "job-nodeA-42-app.pfw.gz"
    whole = b"".join(blobs)
    fol = follow.Follower([str(path)], window=3)
    # cases: zeros at a member's start, and zeros inside a member past a read
    for cut in (len(blobs[0]) + len(blobs[1]), len(blobs[0]) + follow.READ_STEP + 1000):
        path.unlink(missing_ok=True)
        fol = follow.Follower([str(path)], window=3)
        path.write_bytes(whole[:cut] + b"\0" * (len(whole) - cut))  # size first, bytes later
        fol.refresh()
        (st,) = fol.files.values()
        assert st.mark.startswith("zero-filled tail at byte"), st.mark
        before = st.proc.events
        with open(path, "r+b") as f:  # the bytes arrive, the size does not change
            f.seek(cut)
            f.write(whole[cut:])
        os.utime(path, ns=(st._change[1] + 10**9, st._change[1] + 10**9))
        fol.refresh()
        assert st.mark == "" and st.proc.finished
        assert st.proc.events == events > before
        assert st.offset == st.member_start == len(whole)


def test_a_member_torn_at_a_read_boundary_is_read_once_it_is_whole(tmp_path):
    blobs, events = big_members(2, 15000)
    whole = b"".join(blobs)
    path = tmp_path / "job-nodeA-42-app.pfw.gz"
    fol = follow.Follower([str(path)], window=3)
    reads = []
    real = os.pread

    def pread(fd, n, off):
        reads.append((off, n))
        return real(fd, n, off)
    follow.os.pread = pread
    try:
        for cut in range(0, len(whole), 100_000):
            with open(path, "ab") as f:
                f.write(whole[cut:cut + 100_000])
            fol.refresh()
    finally:
        follow.os.pread = real
    (st,) = fol.files.values()
    assert st.proc.events == events and st.proc.finished and st.mark == ""
    assert sum(n for _, n in reads) == len(whole)  # no byte read twice
    assert fol.snapshot()["processes"][0]["mark"] == ""


# ---- 2. hostile numbers -------------------------------------------------------------

HOSTILE = [
    meta(5, "rank", {"name": "rank", "value": 1e999, "world_size": 1e999, "local_rank": 1e999}),
    '{"id":6,"name":"rank","cat":"dftracer","pid":42,"tid":42,"ph":"M","args":'
    '{"name":"rank","value":1e999,"local_rank":1e999,"world_size":-1e999}}\n',
    '{"id":7,"name":"start","cat":"dftracer","pid":42,"tid":42,"ts":1,"dur":0,"ph":"X",'
    '"args":{"ppid":1e999}}\n',
    '{"id":8,"name":"start","cat":"dftracer","pid":42,"tid":42,"ts":1,"dur":0,"ph":"X",'
    '"args":{"hhash":"a","ppid":' + "9" * 5001 + '}}\n',
    '{"id":9,"name":"fwd","cat":"compute","pid":42,"tid":42,"ts":' + "1" * 5001
    + ',"dur":5,"ph":"X"}\n',
    line(10, "fwd", "compute", "1" * 5001, 5),
    line(11, "fwd", "compute", T0, "9" * 5001),
    line(12, "read", "POSIX", T0, 5, ',"ret":' + "7" * 5001),
    line(13, "read", "POSIX", T0, 5, ',"ret":' + "7" * 30 + ',"size":4'),
    line(14, "fwd", "compute", T0, 5, ',"step":' + "7" * 5001),
    line(15, "ProfilerStep#" + "1" * 5001, "PP", T0, 5),
    '{"id":16,"name":"fwd","cat":"compute","pid":' + "4" * 4000 + ',"tid":1,"ts":5,"dur":1,'
    '"ph":"X","args":{"step":' + "5" * 4000 + '}}\n',
    '{"id":17,"name":"process_name","cat":"dftracer","pid":1e999,"tid":1,"ph":"M",'
    '"args":{"name":"python3 rank 3"}}\n',
    '{"id":18,"name":"read","cat":"POSIX","pid":42,"tid":42,"ts":5,"dur":1,"ph":"X",'
    '"args":{"ret":1e999,"size":"' + "3" * 5000 + '","count":-1e999}}\n',
]


@pytest.mark.parametrize("gzipped", [True, False])
def test_hostile_numbers_are_skipped_not_a_traceback(tmp_path, gzipped):
    text = HEAD + "".join(HOSTILE) + line(30, "fwd", "compute", T0, 7)
    path = tmp_path / ("job-nodeA-42-app.pfw" + (".gz" if gzipped else ""))
    path.write_bytes(gz(text) if gzipped else text.encode())
    snap = top_json(path)
    (p,) = snap["processes"]
    assert p["rank"] == 3 and p["world_size"] is None and p["local_rank"] is None
    assert p["pid"] == 42 and p["ppid"] is None
    assert p["cats"]["compute"]["count"] >= 1
    for proc in (cli("top", "--once", str(path)),):
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    # each value is an int64 or None: the JSON has no number past 64 bits
    for k in ("pid", "rank", "ppid", "step", "local_rank", "world_size", "step_last_us"):
        assert p[k] is None or abs(p[k]) < 2**63, k


def test_one_bad_line_leaves_the_other_processes_alone(tmp_path):
    good = tmp_path / "job-nodeA-41-app.pfw"
    good.write_text(head(41) + line(3, "fwd", "compute", T0, 7, pid=41))
    bad = tmp_path / "job-nodeA-42-app.pfw"
    bad.write_text(HEAD + HOSTILE[0] + HOSTILE[4])
    snap = top_json(tmp_path)
    assert sorted(p["pid"] for p in snap["processes"]) == [41, 42]


# ---- 4. bad durations ---------------------------------------------------------------

def test_bad_durations_are_counted_apart_and_left_out(tmp_path):
    dmax = top_figures.DUR_MAX_US
    text = (HEAD
            + line(3, "fwd", "compute", T0, 1000)
            + line(4, "fwd", "compute", T0 + 10, 40_000_000 * 10**6)  # 40,000,000 s
            + line(5, "fwd", "compute", T0 + 20, -7)
            + line(6, "fwd", "compute", T0 + 30, dmax + 1)
            + line(7, "fwd", "compute", 2**63 - 10, 100)              # end past 64 bits
            + line(8, "fwd", "compute", T0 + 40, dmax, ',"step":3')    # the longest that is good
            + line(9, "read", "POSIX", T0 + 50, -1, ',"ret":4096'))
    path = tmp_path / "job-nodeA-42-app.pfw"
    path.write_text(text)
    snap = top_json(path)
    (p,) = snap["processes"]
    assert p["bad_duration_events"] == 5
    assert p["events"] == 9 == summary_events(path)
    assert p["complete_events"] == 7
    assert p["cats"] == {"compute": {"count": 2, "total_us": 1000 + dmax}}
    assert p["io_read_bytes"] == 0
    assert p["mark"] == "5 events with a bad duration"
    assert p["by_cat"]["compute"] <= 1.0 + 1e-9


# ---- 6. the one rank rule -----------------------------------------------------------

@pytest.mark.parametrize("pname,events,rank", [
    ("python3 rank 5", [], 5),
    ("python3 --Rank 5 x", [], None),
    ("frank 3", [], None),
    ("python3 rank -3", [], None),
    ("python3 rank 99999999999999999999999999", [], None),
    ("python3", [{"name": "rank", "value": -3}], None),
    ("python3", [{"name": "rank", "value": 10**26}], None),
    ("python3", [{"name": "rank", "value": 1.5}], None),
    ("python3", [{"name": "rank", "value": "7"}], 7),
    ("python3 rank 1", [{"name": "rank", "value": 2, "source": "torch.distributed"},
                        {"name": "rank", "value": 4, "source": "RANK"}], 4),  # the last valid
    ("python3 rank 1", [{"name": "rank", "value": 2}, {"name": "rank", "value": -1}], 2),
])
def test_rank_is_read_by_the_one_rule(tmp_path, pname, events, rank):
    text = (HEAD.replace("python3 rank 3", pname)
            + "".join(meta(5 + k, "rank", a) for k, a in enumerate(events))
            + line(20, "fwd", "compute", T0, 7))
    path = tmp_path / "job-nodeA-42-app.pfw"
    path.write_text(text)
    (p,) = top_json(path)["processes"]
    assert p["rank"] == rank


# ---- 3. memory ----------------------------------------------------------------------

def _time_v(args):
    """Peak RSS in KiB of a command, by /usr/bin/time -v."""
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "dftracer", *args],
                          env=env(), capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    kb = [int(x.split(":")[1]) for x in proc.stderr.splitlines()
          if "Maximum resident set size" in x]
    return proc, kb[0]


needs_time = pytest.mark.skipif(not os.access("/usr/bin/time", os.X_OK),
                                reason="needs /usr/bin/time")


@needs_time
@pytest.mark.no_asan  # ASan's allocator (redzones, quarantine) is not the memory users get
def test_memory_of_a_long_run_and_of_a_huge_line(tmp_path):
    # one event a second for 400,000 s
    long_ = tmp_path / "long-nodeA-42-app.pfw.gz"
    with gzip.open(long_, "wt", compresslevel=1) as f:
        f.write(HEAD)
        for s in range(400_000):
            f.write(line(10 + s, "fwd", "compute", T0 + s * 1_000_000, 100))
    # one member inflating to a 512 MiB line
    huge = tmp_path / "huge-nodeA-43-app.pfw.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(huge, "wb") as f:
        f.write(gz(HEAD))
        f.write(c.compress(b'{"id":5,"name":"' ))
        block = b"a" * (1 << 20)
        for _ in range(512):
            f.write(c.compress(block))
        f.write(c.compress(b'","cat":"x","ph":"X","ts":1,"dur":1}\n') + c.flush())
        f.write(gz(line(6, "fwd", "compute", T0, 5)))
    base, base_kb = _time_v(["top", "--help"])
    results = {}
    for path in (long_, huge):
        proc, kb = _time_v(["top", "--once", "--json", str(path)])
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[path.name] = (json.loads(proc.stdout)["processes"][0], kb)
    p, kb = results[long_.name]
    assert p["events"] == 400_002
    # the bound: the interpreter as `top --help` needs it, plus 64 MiB (summary: 25 MiB in all)
    assert kb - base_kb < 64 * 1024, (kb, base_kb)
    print("peak RSS over `top --help`, KiB:", {k: v[1] - base_kb for k, v in results.items()})
    p, kb = results[huge.name]
    assert p["cats"]["compute"]["count"] == 1 and "do not parse" in p["mark"]
    assert kb - base_kb < 96 * 1024, (kb, base_kb)


# ---- 5. identifying columns are never cut -------------------------------------------

def _tmux_view():
    from test_top import Tmux, needs_view
    return Tmux, needs_view


@pytest.mark.parametrize("width", [120, 160])
def test_pids_of_running_processes_are_shown_in_full(tmp_path, width):
    Tmux, needs_view = _tmux_view()
    if needs_view.args[0]:
        pytest.skip(needs_view.kwargs["reason"])
    pids = [7012345, 7012346, 7012347]
    for pid in pids:
        text = (head(pid).replace("nodeA", "node-with-a-long-name-0042")
                + "".join(line(10 + k, "forward", "compute", T0 + k * 10_000, 9000, pid=pid)
                          for k in range(50))
                + "not json at all: a note for the row\n" * 3)
        (tmp_path / f"x-nodeA-{pid}-app.pfw.gz").write_bytes(gz(text))
    tm = Tmux(tmp_path)
    try:
        tm.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", "30",
                f"{sys.executable} -m dftracer top --flush-interval 3600 .")
        screen = tm.wait_for(lambda s: s.count(" running ") >= 3)
        rows = [ln for ln in screen.splitlines() if " running " in ln]
        assert len(rows) == 3, screen
        for pid in pids:
            row = next(r for r in rows if str(pid) in r.split())
            assert "node-with-a-long-name-0042" in row.split() and "…" not in row.split()[:3], row
        if width >= 160:  # the note, cut first, is there when it fits at all
            assert all("3 lines do not" in r for r in rows), screen
        tm.tmux("send-keys", "-t", "t", "q")
    finally:
        tm.kill()
