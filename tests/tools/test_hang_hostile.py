"""The hang rule on hostile values (issue 48): `summary --ranks`, `report` and
`top` give no traceback and stay bounded in memory whatever the `open`,
`stack`, `rank` and complete events hold (docs/hang.md, "After the job")."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from test_hang_post_mortem import S, T0, Trace, ar, it

RSS_MAX_KB = 100 * 1024


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dftracer", *args], capture_output=True,
                          text=True, timeout=timeout)


def hostile_job(folder: Path) -> Path:
    """Ranks 0, 1 wait in all_reduce #3 of a group that names 3 billion ranks;
    rank 2's trace says world_size 2147483647; every odd value a JSON line
    can hold where a number is expected."""
    folder.mkdir()
    for r in range(3):
        t = Trace(100 + r, rank=r, world=2147483647 if r == 2 else 3).steps(3)
        t.x("compute", "app", T0, "5").x("compute", "app", T0, [1]).x("compute", "app", T0, None)
        t.x("all_reduce", "comm", T0, 10, {"group": "pg[0-3000000000]", "seq": "x"})
        if r < 2:
            t.snapshot(T0 + 9 * S, [dict(it(T0 + 3 * S, 3), depth="0"),
                                    dict(ar(T0 + 3 * S + 5, 3, group="pg[0-3000000000]"), depth=1)])
            t.snapshot(T0 + 9 * S, [{"value": "x", "span_cat": 5, "since": "1", "seq": [1],
                                     "depth": None, "step": {"a": 1}}], tid="7")
            t.meta("open", {"name": "open", "value": ["v"], "at": T0 + 9 * S, "n": "2"})
        else:
            t.snapshot(T0 + 9 * S, [{"value": "iteration", "span_cat": "pipeline",
                                     "since": "soon", "step": "3", "depth": "0"}])
        t.meta("stack", {"name": "stack", "value": 5, "at": T0 + 9 * S, "req": "1", "why": [],
                         "frames": "/x.py:99999999999999999999 f\n:: \n\n/y.py:-1 g"})
        t.meta("stack", {"name": "stack", "at": "late", "frames": 3})
        t.meta("FH", {"name": 5, "value": "zz"})
        t.meta("clock", {"name": "clock", "value": "now", "wall_us": 1})
        t.write(folder)
    return folder


def test_hostile_values_give_no_traceback(tmp_path):
    runs = hostile_job(tmp_path / "runs")
    p = run("summary", "--ranks", "--json", str(runs))
    assert "Traceback" not in p.stderr and p.returncode == 0, p.stderr
    h = json.loads(p.stdout)["hang"]
    # the group's range is cut to the ranks that exist: rank 2 is stuck
    assert h["stuck_ranks"] == [2] and h["waiting_ranks"] == [0, 1]
    assert h["group"] == "pg[0-3000000000]" and "stuck_more" not in h
    p = run("summary", "--ranks", str(runs))
    assert "Traceback" not in p.stderr and p.stdout.startswith("hang: rank 2 stopped"), p.stderr
    pytest.importorskip("plotly", reason="the report needs plotly")
    p = run("report", str(runs), "-o", str(tmp_path / "r.html"))
    assert "Traceback" not in p.stderr and p.returncode == 0, p.stderr


def test_top_on_hostile_values(tmp_path):
    runs = hostile_job(tmp_path / "runs")
    for gz in runs.iterdir():  # top reads what is written now: plain text, as a live file
        gz.with_suffix("").write_bytes(zlib.decompress(gz.read_bytes(), 31))
        gz.unlink()
    p = run("top", "--once", "--json", "--hang-after", "0", str(runs))
    assert "Traceback" not in p.stderr and p.returncode == 0, p.stderr
    json.loads(p.stdout)


def bomb(path: Path) -> None:
    """About 1.3 MB of gzip that inflates to 0.5 GB: a rank's header,
    then `open` and `stack` events over and over, then one line with no end."""
    head = Trace(100, rank=0).steps(2)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [c.compress(("\n".join(head.lines) + "\n").encode())]
    rep = (json.dumps({"id": 9, "name": "open", "cat": "dftracer", "pid": 100, "tid": 100,
                       "ph": "M", "args": {"name": "open", "value": "all_reduce", "at": T0,
                                           "n": 1, "depth": 0, "since": T0, "span_cat": "comm",
                                           "group": "world", "seq": 1}},
                      separators=(",", ":")) + "\n").encode() * 4096
    for _ in range(250 * (1 << 20) // len(rep)):
        out.append(c.compress(rep))
    chunk = b"x" * (1 << 20)
    for _ in range(250):
        out.append(c.compress(chunk))
    out.append(c.flush())
    path.write_bytes(b"".join(out))


def peak_rss_kb(*args: str) -> int:
    """The peak RSS of `dftracer ARGS` run as the only child of a fresh
    Python (resource.getrusage of its children)."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run([sys.executable, '-m', 'dftracer'] + sys.argv[1:],"
            " capture_output=True, text=True)\n"
            "assert 'Traceback' not in p.stderr, p.stderr\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.split()[-1])


@pytest.mark.no_asan  # ASan's shadow memory is not the reader's
def test_a_gzip_bomb_stays_bounded(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    bomb(runs / "trace-h-100-python.pfw.gz")
    assert (runs / "trace-h-100-python.pfw.gz").stat().st_size < 2 << 20
    assert peak_rss_kb("summary", "--ranks", "--json", "-j", "1", str(runs)) <= RSS_MAX_KB
