"""The ranks pass and the alignment on absurd data (issue 34): events with a
bad duration are no sync points, a host whose clock reads 1970 does not take
the others back to 1970, and absurd rank or clock data gets one warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array

from dftracer.tools import clock_align, ranks, work

YEAR_US = 365 * 86_400_000_000
T0 = 1_800_000_000_000_000


def trace(path, host, rank, collectives, world=4, pid=None):
    """A trace of one rank: collectives is [(seq, ts, dur)] of all_reduce on
    the world group."""
    pid = pid or 100 + rank
    lines = ["["]
    meta = [("HH", {"name": host, "value": host}),
            ("process_name", {"name": f"python rank {rank}", "value": "process_name"}),
            ("rank", {"name": "rank", "value": rank, "world_size": world, "source": "RANK"})]
    for i, (name, args) in enumerate(meta):
        lines.append(json.dumps({"id": i + 1, "name": name, "cat": "dftracer", "pid": pid,
                                 "tid": pid, "ph": "M", "args": args}))
    for i, (seq, ts, dur) in enumerate(collectives):
        lines.append(json.dumps({"id": 10 + i, "name": "all_reduce", "cat": "comm", "pid": pid,
                                 "tid": pid, "ts": ts, "dur": dur, "ph": "X",
                                 "args": {"group": "world", "seq": seq, "bytes": 4}}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_bad_durations_are_no_sync_points(tmp_path):
    shift = 250_000
    good = [(s, T0 + s * 100_000, 1_000) for s in range(20)]
    a = trace(tmp_path / f"t-a-100-app.pfw", "a", 0, good)
    bad = [(s, ts + shift, d) for s, ts, d in good]
    # five collectives with bad durations (docs/cli.md: negative, over 365 days,
    # an end past 64 bits)
    for s in range(5):
        bad[s] = (s, bad[s][1], (400 * 86_400_000_000, -5_000_000, 40 * YEAR_US, 2**63 - 1,
                                 -1)[s])
    b = trace(tmp_path / f"t-b-101-app.pfw", "b", 1, bad)
    res = clock_align.align([work.sync_points(a), work.sync_points(b)])
    assert res["offsets_us"] == {"a": 0, "b": shift}
    assert res["matched"]["b"] == 15
    assert res["spread_us"]["max"] == 0
    assert res["warnings"] == []


def sync_result(host, rank, ends, world=-1):
    data = array("q")
    for key, end in ends.items():
        data.extend((key, end))
    return {"path": f"{host}-{rank}", "status": "ok", "host": host, "pid": rank,
            "rank": rank, "own_rank": rank, "world_size": world, "process_name": "", "sync": data.tobytes(),
            "clock": (0, 0, 0, 0)}


def test_a_host_whose_clock_reads_1970_does_not_pull_the_others_back():
    keys = range(1, 31)
    ok = {k: T0 + 10_000 * k for k in keys}
    epoch = {k: 5_000_000 + 10_000 * k for k in keys}  # 1970, and rank 0
    res = clock_align.align([sync_result("old", 0, epoch), sync_result("b", 1, ok),
                       sync_result("c", 2, {k: v + 30 for k, v in ok.items()})])
    assert res["reference"] == "b"
    assert res["offsets_us"]["c"] == 30
    assert res["offsets_us"]["old"] == 5_000_000 - T0  # moved forward to the others
    (w,) = res["warnings"]
    assert w.startswith("host old's clock is 20,833 days behind the reference host b's")
    lines = clock_align.describe_alignment(res)
    assert lines[0] == "warning: clock alignment: " + w
    files = clock_align.file_offsets([sync_result("old", 0, epoch), sync_result("b", 1, ok)], res)
    assert files == {"b-1": 0, "old-0": T0 - 5_000_000}


def test_shifted_sequence_numbers_on_one_rank_are_warned_about():
    keys = range(1, 41)
    step = 100_000
    ok = {k: T0 + step * k for k in keys}
    results = [sync_result("h", r, {k: v + r for k, v in ok.items()}) for r in range(4)]
    # rank 3 counts one collective more: its seq k is the others' k - 1
    results[3] = sync_result("h", 3, {k: ok[k - 1] for k in keys if k > 1})
    res = clock_align.align(results)
    assert any("rank 3: its collectives end 100.00 ms away" in w or
               ("rank 3: its collectives end" in w and "shifted" in w) for w in res["warnings"]), \
        res["warnings"]


def test_absurd_rank_data_is_warned_about_once():
    def rank(n, world):
        r = sync_result("h", n, {}, world)
        r.update(steps=b"", events=1, ppid=1, job_id="")
        return r
    _, _, warnings = ranks.identify([rank(0, 4), rank(1, 4), rank(5, 4), rank(7, 4),
                                     rank(2, 10**9), rank(3, 10**9)])
    text = "\n".join(warnings)
    assert "rank 2: world size 1000000000 is not a real job's" in text
    assert "(2 ranks say so)" in text
    assert "the ranks disagree on the world size: 4 (rank 0), 1000000000 (rank 2)" in text
    assert "rank 5 is not below its world size 4 (2 ranks are not)" in text
    assert sum("world size 1000000000 is not" in w for w in warnings) == 1


def test_summary_ranks_prints_the_warnings(tmp_path):
    good = [(s, T0 + s * 100_000, 1_000) for s in range(10)]
    for r in range(2):
        trace(tmp_path / f"t-h-{100 + r}-app.pfw", "h", r if r == 0 else 9, good, world=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--ranks", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr
    assert "rank 9 is not below its world size 2" in proc.stdout + proc.stderr
