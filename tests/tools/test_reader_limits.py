"""What the readers do with hostile or wrong input (issue 20): the line limit,
memory, nesting, files that are not gzip or not traces, and merged files that
validate.  docs/trace-format.md "Reading" and "Valid files"; docs/cli.md."""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import zlib

import pytest

from tracefile import find_traces, read_lines, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 16 << 20
LIMIT_TEXT = "longer than the 16 MiB line limit; skipped"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "dftracer", *args, "-j", "1"],
                          capture_output=True, text=True, env=env, timeout=300)


def cli_peak_rss(*args: str):
    """(returncode, stderr, peak RSS in bytes) of one dftracer command, measured
    with getrusage in a process of its own."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stderr.write(p.stdout + p.stderr)\n"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "dftracer", *args,
                           "-j", "1"], capture_output=True, text=True, env=env, timeout=300)
    rc, kib = proc.stdout.split()
    return int(rc), proc.stderr, int(kib) * 1024


def event(i: int, pid: int = 5, name: str = "step") -> str:
    return ('{"id":%d,"name":"%s","cat":"app","pid":%d,"tid":%d,"ts":%d,"dur":%d,"ph":"X",'
            '"args":{"hhash":"00000000000000aa","level":1,"p_idx":-1}}'
            % (i, name, pid, pid, 1700000000000000 + i, i))


HEADER = [
    "[",
    '{"id":1,"name":"HH","cat":"dftracer","pid":5,"tid":5,"ph":"M",'
    '"args":{"hhash":"00000000000000aa","name":"h","value":"00000000000000aa"}}',
    '{"id":2,"name":"process_name","cat":"dftracer","pid":5,"tid":5,"ph":"M",'
    '"args":{"hhash":"00000000000000aa","name":"app","value":"process_name"}}',
    '{"id":3,"name":"start","cat":"dftracer","pid":5,"tid":5,"ts":1700000000000000,"dur":0,'
    '"ph":"X","args":{"hhash":"00000000000000aa","level":1,"p_idx":-1}}',
]


def member(text: bytes) -> bytes:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    return c.compress(text) + c.flush()


def nul_member(total: int) -> bytes:
    """One gzip member of `total` NUL bytes, made from one repeated
    full-flushed deflate block (so it takes no time to build)."""
    chunk = 1 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(chunk)) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush(zlib.Z_FINISH)
    crc, zeros = 0, bytes(chunk)
    for _ in range(total // chunk):
        crc = zlib.crc32(zeros, crc)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * (total // chunk) + end +
            struct.pack("<II", crc, total & 0xFFFFFFFF))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A trace with, as lines 7 and 9, a line over the limit and one nested
    100,000 deep; events before and after them."""
    d = tmp_path_factory.mktemp("hostile")
    p = d / "hostile-5-app.pfw.gz"
    before = [event(i) for i in (10, 11)]
    after = [event(i) for i in (20, 21, 22)]
    deep = ('{"id":30,"name":"deep","cat":"app","pid":5,"tid":5,"ts":1,"dur":1,"ph":"X",'
            '"args":{"a":' + "[" * 100000 + "]" * 100000 + "}}")
    long_line = b'{"id":40,"name":"' + b"x" * (LIMIT + 1000) + b'","ph":"X"}'
    with open(p, "wb") as f:
        f.write(member(("\n".join(HEADER + before) + "\n").encode()))
        f.write(member(long_line + b"\n"))  # line 7
        f.write(member((event(12) + "\n" + deep + "\n").encode()))  # lines 8, 9
        f.write(member(("\n".join(after) + "\n").encode()))
    return p


def test_over_long_line_is_reported_and_skipped_by_every_command(hostile, tmp_path):
    p = hostile
    want = f"{p}: line 7: {LIMIT_TEXT}"
    proc = cli("summary", str(p), "--json")
    assert proc.returncode == 0, proc.stderr
    assert want in proc.stderr
    assert "line 9: nested too deeply" in proc.stderr
    steps = [r for r in json.loads(proc.stdout)["by_name"] if r["name"] == "step"]
    assert steps[0]["count"] == 6  # 10, 11, 12, 20, 21, 22

    for cmd, out in (("merge", tmp_path / "m.pfw"), ("convert", tmp_path / "c.json")):
        proc = cli(cmd, str(p), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        assert want in proc.stderr and "line 9: nested too deeply" in proc.stderr
        assert "Traceback" not in proc.stderr
        text = out.read_text()
        assert text.count('"name":"step"') == 6 and '"name":"deep"' not in text

    proc = cli("validate", str(p), "--json")
    r = json.loads(proc.stdout)
    assert proc.returncode == 1 and r["verdict"] == "invalid"
    assert f"line 7: {LIMIT_TEXT} (rule 1: one JSON event per line)" in r["problems"]
    assert "line 9: nested too deeply (rule 1: one JSON event per line)" in r["problems"]
    assert r["events"] == 9  # 3 header events and 6 steps


@pytest.mark.no_asan  # ASan keeps freed memory in quarantine: RSS says nothing there
@pytest.mark.parametrize("what", ["nul", "line"])
def test_reader_memory_is_bounded(tmp_path, what):
    """1 GiB of NUL bytes (one gzip member of about 1 MB), or one 100 MiB line:
    no command's peak RSS grows by more than the line limit and its buffers."""
    p = tmp_path / f"{what}-1-app.pfw.gz"
    if what == "nul":
        p.write_bytes(nul_member(1 << 30))
    else:
        p.write_bytes(member(("\n".join(HEADER) + "\n").encode()) +
                      member(b'{"name":"' + b"y" * (100 << 20) + b'"}\n') +
                      member((event(50) + "\n").encode()))
    # The CLI on a small file: the interpreter, the package and the reader.
    small = tmp_path / "small-1-app.pfw.gz"
    small.write_bytes(member(("\n".join(HEADER + [event(9)]) + "\n").encode()))
    _, _, base = cli_peak_rss("summary", str(small))
    for cmd in (["summary"], ["validate"], ["merge", "-o", str(tmp_path / "m.pfw.gz")],
                ["convert", "-o", str(tmp_path / "c.json.gz")]):
        rc, err, peak = cli_peak_rss(cmd[0], str(p), *cmd[1:])
        assert f"line {1 if what == 'nul' else 5}: {LIMIT_TEXT}" in err, err
        assert peak - base < LIMIT + (24 << 20), (cmd, peak, base)
        if what == "nul":
            assert rc == 2 and f"{p}: not a dftracer trace" in err.replace("ERROR      ", "")
        else:
            assert rc == (1 if cmd[0] == "validate" else 0), err


def test_random_bytes_named_gz_are_not_gzip(tmp_path):
    p = tmp_path / "rand-1-app.pfw.gz"
    p.write_bytes(b"\x00\x01" + os.urandom(8190))
    for cmd in (["summary"], ["validate"], ["merge", "-o", str(tmp_path / "m.pfw.gz")]):
        proc = cli(cmd[0], str(p), *cmd[1:])
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, (cmd, out)
        assert f"{p}" in out and "not gzip: the file starts with bytes 00 01" in out, out
        assert "JSON" not in out


def test_json_objects_that_are_no_trace_events_are_rejected(tmp_path):
    p = tmp_path / "objects-1-app.pfw"
    p.write_text('[\n{"a": 1}\n{"b": [2, 3]}\n')
    why = 'line 2: a JSON object but not a trace event (no "name" or "ph")'
    for cmd in (["summary"], ["validate"], ["merge", "-o", str(tmp_path / "m.pfw.gz")]):
        proc = cli(cmd[0], str(p), *cmd[1:])
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, (cmd, out)
        assert str(p) in out and "not a dftracer trace" in out and why in out, out


# Its traced program forks with writer threads alive, which GCC 12's libasan
# allocator does not survive reliably (as the other fork tests).
@pytest.mark.no_asan
def test_merged_file_is_a_valid_trace(tmp_path):
    code = """
        import os
        from dftracer.python import dftracer
        log = dftracer.initialize_log(os.path.abspath("trace.pfw"), "all", -1)
        with open("data.txt", "w") as f:
            f.write("x")
        log.log_event("a", "c", log.get_time(), 3, string_args={"s": "v"})
        if os.fork() == 0:
            log.log_event("child", "c", log.get_time(), 3)
            log.finalize()
            os._exit(0)
        os.wait()
        log.finalize()
        """
    for rank in ("0", "1"):
        run_python(code, {"DFTRACER_ENABLE": "1", "RANK": rank}, cwd=str(tmp_path))
    files = find_traces(str(tmp_path))
    assert len(files) == 4
    out = tmp_path / "merged.pfw.gz"
    assert cli("merge", *files, "-o", str(out)).returncode == 0
    proc = cli("validate", str(out), "--json")
    r = json.loads(proc.stdout)
    assert proc.returncode == 0 and r["verdict"] == "ok" and r["merged"], r
    lines = read_lines(str(out))
    events = [json.loads(line) for line in lines[1:] if line]
    assert len({e["pid"] for e in events}) == 4
    assert sum(e["name"] == "start" for e in events) == 4
    # The rules bite: a process without its start, or with two ends.
    start = next(i for i, e in enumerate(events) if e["name"] == "start")
    end = next(e for e in events if e["name"] == "end")
    broken = lines[:1] + [json.dumps(e) for i, e in enumerate(events) if i != start]
    broken.append(json.dumps(dict(end, id=10 ** 9)))
    bad = tmp_path / "broken.pfw"
    bad.write_text("\n".join(broken) + "\n")
    r = json.loads(cli("validate", str(bad), "--json").stdout)
    assert r["verdict"] == "invalid" and r["merged"]
    pid = events[start]["pid"]
    assert (f"pid {pid}: 0 start events (expected 1) (rule 3: one HH, process_name and start)"
            in r["problems"])
    assert (f"pid {end['pid']}: 2 end events (rule 5: end last, counting the events before it)"
            in r["problems"])


# ---- memory that must not follow id values or definitions (issue 30) ---------------------

def many_lines_trace(path, kind: str, n: int):
    """n lines after the header: events whose ids are 65,536 apart (sparse),
    FH definitions (fh), or events with n distinct names (names)."""
    if kind == "sparse":
        body = ['{"id":%d,"name":"s","cat":"a","pid":5,"tid":5,"ts":%d,"dur":1,"ph":"X"}'
                % ((i + 1) << 16, 1700000000000000 + i) for i in range(n)]
    elif kind == "fh":
        body = ['{"id":%d,"name":"FH","cat":"dftracer","pid":5,"tid":5,"ph":"M",'
                '"args":{"name":"/d/f%d","value":"%016x"}}' % (i + 4, i, i + 256)
                for i in range(n)]
    else:
        body = ['{"id":%d,"name":"n%d","cat":"a","pid":5,"tid":5,"ts":%d,"dur":%d,"ph":"X"}'
                % (i + 4, i, 1700000000000000 + i, i % 1000) for i in range(n)]
    path.write_bytes(member(("\n".join(HEADER + body) + "\n").encode()))
    return path


@pytest.mark.no_asan  # ASan keeps freed memory in quarantine: RSS says nothing there
def test_memory_follows_neither_id_values_nor_definitions(tmp_path):
    """docs/cli.md, "Memory": validate's id check, merge's hash strings and
    summary's groups stay within what the output needs.  Measured with
    getrusage in a process of its own, against the CLI on a small file; each
    command must also finish well within a time bound (no quadratic work)."""
    import time

    n = 30000
    small = tmp_path / "small-1-app.pfw.gz"
    small.write_bytes(member(("\n".join(HEADER + [event(9)]) + "\n").encode()))
    _, _, base = cli_peak_rss("summary", str(small))
    sparse = many_lines_trace(tmp_path / "sparse-5-app.pfw.gz", "sparse", n)
    fh = many_lines_trace(tmp_path / "fh-5-app.pfw.gz", "fh", n)
    names = many_lines_trace(tmp_path / "names-5-app.pfw.gz", "names", n)
    checks = [
        (["validate", str(sparse)], 8 << 20),  # ids 65,536 apart: no page per id
        (["validate", str(fh)], 8 << 20),
        (["merge", str(fh), "-o", str(tmp_path / "m.pfw.gz")], 8 << 20),  # 30k paths
        (["convert", str(fh), "-o", str(tmp_path / "c.json.gz")], 8 << 20),
        (["summary", str(names)], 64 << 20),  # 30k rows: about 2 KB each in Python
    ]
    for args, allowed in checks:
        t = time.monotonic()
        rc, err, peak = cli_peak_rss(*args)
        took = time.monotonic() - t
        assert rc in (0, 1), (args, err)
        assert peak - base < allowed, (args, (peak - base) >> 20, "MiB over the small file")
        assert took < 30, (args, took)


def test_duplicate_ids_are_found_however_the_ids_are_spread(tmp_path):
    """validate's id set (src/reader/idset.c) keeps a range of ids as a sorted
    array until it would be larger than a bitmap: duplicates are found in
    either form and across the switch, for ids far apart and near 2^63."""
    import random

    rng = random.Random(30)
    ids = [4 + i for i in range(3000)]                      # dense: array, then bitmap
    ids += [(k + 1) << 16 for k in range(2000)]             # one id per range
    ids += [(1 << 40) + rng.randrange(1 << 16) for _ in range(600)]  # around the switch
    ids += [2**63 - 1 - k for k in range(10)]
    dups = rng.sample(ids, 250)
    ids += dups
    rng.shuffle(ids)
    body = ['{"id":%d,"name":"s","cat":"a","pid":5,"tid":5,"ts":1700000000000000,"dur":1,'
            '"ph":"X","args":{"hhash":"00000000000000aa"}}' % i for i in ids]
    p = tmp_path / "dups-5-app.pfw"
    p.write_text("\n".join(HEADER + body) + "\n")
    r = json.loads(cli("validate", str(p), "--json").stdout)
    expected = len(ids) - len(set(ids) | {1, 2, 3}) + 3
    assert r["duplicate_ids"] == expected >= 250


def test_every_pass_counts_bad_lines_one_way(hostile, tmp_path):
    """The summary, ranks, I/O and rewrite passes count a file's lines that
    are not events by one rule (reader.h's dft_rd_bad): the refused lines and
    the over-long ones, with the first refused line's number and reason."""
    from dftracer import _core

    p = str(hostile)
    results = {
        "summary": _core._summarize_file(p),
        "ranks": _core._rank_file(p),
        "io": _core._io_file(p),
        "rewrite": _core._rewrite_file(p, str(tmp_path / "part"), "pfw", -1, -1, 1, 0),
    }
    for name, r in results.items():
        # line 7 is over the limit (skipped by the reader), line 9 refused
        assert (r["bad_lines"], r["first_bad_line"], r["first_bad"], r["long_lines"]) == \
            (2, 9, "nested too deeply", 1), name


def test_a_file_whose_only_bad_line_is_too_long_names_no_refused_line(tmp_path):
    """Over-long lines count as bad lines, but no pass names a reason for a
    line it never parsed: first_bad is None and first_bad_line 0 in every
    pass (the summary said "" before)."""
    from dftracer import _core

    p = tmp_path / "long-5-app.pfw.gz"
    with open(p, "wb") as f:
        f.write(member(("\n".join(HEADER + [event(10)]) + "\n").encode()))
        f.write(member(b'{"id":40,"name":"' + b"x" * (LIMIT + 10) + b'","ph":"X"}\n'))
        f.write(member((event(11) + "\n").encode()))
    for name, r in (("summary", _core._summarize_file(str(p))),
                    ("ranks", _core._rank_file(str(p))),
                    ("io", _core._io_file(str(p))),
                    ("rewrite", _core._rewrite_file(str(p), str(tmp_path / "part"), "pfw",
                                                    -1, -1, 1, 0))):
        assert (r["bad_lines"], r["first_bad_line"], r["first_bad"], r["long_lines"]) == \
            (1, 0, None, 1), name
