"""The dftracer command line (docs/cli.md) on traces the project writes,
hand-made traces in the older tools' dialect, and broken files."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import subprocess
import sys
import zlib

import pytest

from tracefile import find_traces, read_lines, read_trace, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What each traced process logs: (name, cat, durations, int args)
READS = [3, 5, 8, 13, 21, 34, 55, 89, 144, 233]
FORWARDS = list(range(1, 101))

WRITER = """
from dftracer.python import dftracer
log = dftracer.initialize_log({stem!r}, None, -1)
t = log.get_time()
for i, d in enumerate({reads!r}):
    log.log_event("read", "POSIX", t + i, d, int_args={{"size": 4096 * (i + 1)}},
                  string_args={{"fname": "/data/f%d" % i}})
log.enter_event()
for d in {forwards!r}:
    log.log_event("forward", "compute", t + 100, d, int_args={{"step": d}})
log.exit_event()
log.log_metadata_event("job", "unit-test")
log.finalize()
"""


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(kw.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "dftracer", *args], capture_output=True,
                          text=True, env=env, timeout=120, **kw)


def write_project_traces(directory, ranks=(0,)):
    for rank in ranks:
        env = {"DFTRACER_ENABLE": "1"}
        if rank is not None:
            env["RANK"] = str(rank)
        run_python(WRITER.format(stem=str(directory / "trace"), reads=READS, forwards=FORWARDS),
                   env=env, cwd=str(directory))
    paths = find_traces(str(directory))
    assert len(paths) == len(ranks)
    return paths


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    return d, write_project_traces(d, ranks=(0, 1))


def nearest_rank(values, q):
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def close(measured, exact):
    """The histogram's resolution: exact below 16 us, else 1/16 of the value."""
    return abs(measured - exact) <= max(0.5, exact / 16)


# ---- summary -----------------------------------------------------------------

def test_summary_json_numbers_match_the_events(two_ranks):
    d, paths = two_ranks
    traces = [read_trace(p) for p in paths]
    proc = cli("summary", str(d), "--json", "--by", "name", "--by", "cat", "--by", "pid")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)

    rows = {(r["cat"], r["name"]): r for r in out["by_name"]}
    assert set(rows) == {("POSIX", "read"), ("compute", "forward")}
    traced = sum(max(e["ts"] + e.get("dur", 0) for e in t.events if "ts" in e)
                 - min(e["ts"] for e in t.events if "ts" in e) for t in traces)
    assert out["overview"]["traced_us"] == traced
    for (cat, name), expect in ((("POSIX", "read"), READS), (("compute", "forward"), FORWARDS)):
        events = [e for t in traces for e in t.of("X", cat=cat, name=name)]
        durs = [e["dur"] for e in events]
        assert sorted(durs) == sorted(expect * 2)
        r = rows[(cat, name)]
        assert r["count"] == len(durs)
        assert r["total_us"] == sum(durs)
        assert r["mean_us"] == pytest.approx(sum(durs) / len(durs))
        assert (r["min_us"], r["max_us"]) == (min(durs), max(durs))
        assert close(r["p50_us"], nearest_rank(durs, 0.5)), (r["p50_us"], durs)
        assert close(r["p99_us"], nearest_rank(durs, 0.99)), (r["p99_us"], durs)
        assert r["share"] == pytest.approx(sum(durs) / traced)
        sizes = [e["args"].get("size", 0) for e in events]
        assert r["io_bytes"] == sum(sizes)

    cats = {r["cat"]: r for r in out["by_cat"]}
    assert cats["POSIX"]["count"] == 2 * len(READS)
    assert cats["compute"]["total_us"] == 2 * sum(FORWARDS)

    pids = sorted(t.events[0]["pid"] for t in traces)
    assert sorted(r["pid"] for r in out["by_pid"]) == pids
    assert {r["host"] for r in out["by_pid"]} == {t.of("M", name="HH")[0]["args"]["name"]
                                                  for t in traces}
    procs = out["processes"]
    assert [p["rank"] for p in procs] == [0, 1]
    assert sorted(p["pid"] for p in procs) == pids
    hosts = {t.of("M", name="HH")[0]["args"]["name"] for t in traces}
    assert {p["host"] for p in procs} == hosts
    assert all(p["finalized"] for p in procs)
    assert out["overview"]["events"] == sum(len(t.events) for t in traces)
    assert out["overview"]["complete_events"] == sum(len(t.of("X")) for t in traces)


def test_summary_text_tables_and_top(two_ranks):
    d, _ = two_ranks
    proc = cli("summary", str(d), "--top", "1")
    assert proc.returncode == 0, proc.stderr
    assert "By category (top 1 of 2)" in proc.stdout
    assert "By name (top 1 of 2)" in proc.stdout
    assert "forward" in proc.stdout and "read" not in proc.stdout.split("Processes")[0]
    assert "Processes (first 1 of 2)" in proc.stdout


def test_summary_by_tid_and_glob(two_ranks):
    d, paths = two_ranks
    proc = cli("summary", str(d / "trace-*.pfw.gz"), "--by", "tid", "--json", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"overview", "processes", "by_tid"}
    tids = {(e["pid"], e["tid"]) for p in paths for e in read_trace(p).user_events()}
    assert {(r["pid"], r["tid"]) for r in out["by_tid"]} == tids


def test_summary_same_with_one_and_two_processes(two_ranks):
    d, _ = two_ranks
    one = json.loads(cli("summary", str(d), "--json", "-j", "1").stdout)
    two = json.loads(cli("summary", str(d), "--json", "-j", "2").stdout)
    assert one == two


# ---- older dialect -----------------------------------------------------------

OLD = """[
{"id":1,"name":"HH","cat":"dftracer","pid":77,"tid":77,"ph":"M","args":{"hhash":123,"name":"oldhost","value":123}}
{"id":2,"name":"start","cat":"dftracer","pid":77,"tid":77,"ts":1700000000000000,"dur":0,"ph":"X","args":{"hhash":123,"version":"1.0.8"}}
{"id":3,"name":"FH","cat":"dftracer","pid":77,"tid":77,"ph":"M","args":{"hhash":123,"name":"C:\\data\\file.npz","value":456}}
{"id":4,"name":"read","cat":"POSIX","pid":77,"tid":78,"ts":1700000000000010,"dur":30,"ph":"X","args":{"hhash":123,"fhash":456,"fd":3,"count":100,"ret":64}}
{"id":5,"name":"say "hi" now","cat":"cpp","pid":77,"tid":77,"ts":1700000000000020,"dur":7,"ph":"X","args":{"hhash":123}}
{"id":6,"name":"PR","cat":"dftracer","pid":77,"tid":77,"ph":"M","args":{"hhash":123,"name":"rank","value":3}}
{"id":7,"name":"read","cat":"POSIX","pid":77,"tid":78,"ts":1700000000000050,"dur":10,"ph":"X","args":{"hhash":123,"fhash":456,"fd":3,"count":100,"ret":36}}
]
"""


@pytest.fixture
def old_trace(tmp_path):
    p = tmp_path / "old-77.pfw"
    p.write_text(OLD)
    return p


def test_summary_reads_the_older_dialect(old_trace):
    proc = cli("summary", str(old_trace), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rows = {(r["cat"], r["name"]): r for r in out["by_name"]}
    assert rows[("POSIX", "read")]["count"] == 2
    assert rows[("POSIX", "read")]["total_us"] == 40
    assert rows[("POSIX", "read")]["io_bytes"] == 64 + 36  # what read() returned
    assert rows[("cpp", 'say "hi" now')]["total_us"] == 7
    assert out["processes"][0]["rank"] == 3
    assert out["processes"][0]["host"] == "oldhost"
    assert out["overview"]["events"] == 7
    assert out["overview"]["bad_lines"] == 0


def test_merge_resolves_integer_hashes_of_the_older_dialect(old_trace, tmp_path):
    out = tmp_path / "merged.pfw.gz"
    proc = cli("merge", str(old_trace), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in read_lines(str(out))[1:-1]]
    reads = [e for e in events if e["name"] == "read"]
    assert [e["args"]["file"] for e in reads] == ["C:\\data\\file.npz"] * 2
    assert all(e["args"]["host"] == "oldhost" for e in reads)
    assert any(e["name"] == 'say "hi" now' for e in events)


def test_validate_flags_the_older_dialect(old_trace):
    proc = cli("validate", str(old_trace))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "INVALID" in proc.stdout and str(old_trace) in proc.stdout


# ---- merge and convert -------------------------------------------------------

def test_merge_one_file_for_perfetto(two_ranks, tmp_path):
    d, paths = two_ranks
    traces = [read_trace(p) for p in paths]
    out = tmp_path / "all.pfw.gz"
    proc = cli("merge", str(d), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = read_lines(str(out))
    assert lines[0] == "[" and lines[-1] == ""
    events = [json.loads(line) for line in lines[1:-1]]
    kept = [e for t in traces for e in t.events
            if not (e["ph"] == "M" and e["name"] in ("HH", "FH", "SH", "process_name"))]
    names = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    order = [e for e in events if e["ph"] == "M" and e["name"] == "process_sort_index"]
    assert len(events) == len(kept) + len(names) + len(order)
    assert len(names) == 2 and len(order) == 2
    assert {e["pid"] for e in order} == {e["pid"] for e in names}
    labels = sorted(e["args"]["name"] for e in names)
    pids = sorted(t.events[0]["pid"] for t in traces)
    host = traces[0].of("M", name="HH")[0]["args"]["name"]
    for label in labels:
        assert f"host {host}" in label and "rank " in label
    assert {e["pid"] for e in names} == set(pids)
    ids = [e["id"] for e in events]
    assert len(ids) == len(set(ids))
    by_id = {e["id"] for e in events}
    for e in events:
        args = e.get("args", {})
        assert not any(k.endswith("hash") for k in args), e
        if args.get("p_idx", -1) != -1:
            assert args["p_idx"] in by_id
    reads = [e for e in events if e["name"] == "read"]
    assert all(e["args"]["host"] == host for e in reads)
    start = [e for e in events if e["name"] == "start"]
    assert all(os.path.isabs(e["args"]["cwd"]) and e["args"]["exec"] for e in start)
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".dftracer-merge-")]


def test_convert_chrome_object(two_ranks, tmp_path):
    d, paths = two_ranks
    out = tmp_path / "all.json.gz"
    proc = cli("convert", str(d), "--format", "chrome", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    with gzip.open(out, "rt") as f:
        obj = json.load(f)
    assert obj["distributedInfo"]["world_size"] == 2
    assert obj["distributedInfo"]["ranks"] == [0, 1]
    n = sum(len([e for e in read_trace(p).events
                 if not (e["ph"] == "M" and e["name"] in ("HH", "FH", "SH", "process_name"))])
            for p in paths)
    assert len(obj["traceEvents"]) == n + 2 + 2  # a process_name and a process_sort_index each
    assert {e["ph"] for e in obj["traceEvents"]} <= {"X", "M", "i", "C"}


def test_merge_renumbers_pids_that_collide(tmp_path):
    a, b = tmp_path / "a.pfw", tmp_path / "b.pfw"
    a.write_text(OLD)
    b.write_text(OLD.replace('"oldhost"', '"otherhost"'))
    out = tmp_path / "m.pfw"
    proc = cli("merge", str(a), str(b), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(names) == 2
    reads = {}
    for e in events:
        if e["name"] == "read":
            reads.setdefault(e["pid"], set()).add(e["args"]["host"])
    assert sorted(map(sorted, reads.values())) == [["oldhost"], ["otherhost"]]


# ---- validate ----------------------------------------------------------------

def test_validate_project_traces(two_ranks):
    d, paths = two_ranks
    proc = cli("validate", str(d), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(r["path"] for r in results) == sorted(paths)
    for r in results:
        t = read_trace(r["path"])
        assert r["verdict"] == "ok" and r["finalized"]
        assert r["events"] == len(t.events)
        assert r["problem_count"] == 0


def test_validate_finds_duplicate_ids_and_missing_metadata(two_ranks, tmp_path):
    _, paths = two_ranks
    lines = read_lines(paths[0])
    bad = [ln for ln in lines if '"name":"process_name"' not in ln]
    fwd = next(i for i, ln in enumerate(bad) if '"name":"forward"' in ln)
    bad[fwd:fwd] = [bad[fwd]] * 2  # two duplicate ids; num_events now one short
    p = tmp_path / "bad-1-app.pfw"
    p.write_text("\n".join(bad))
    proc = cli("validate", str(p))
    assert proc.returncode == 1
    assert "duplicate id" in proc.stdout
    assert "no process_name event" in proc.stdout
    assert "end.num_events is" in proc.stdout
    assert "HH events" not in proc.stdout


# ---- broken files ------------------------------------------------------------

def members(data: bytes):
    """(start, end) of each gzip member."""
    out, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        d.decompress(data[pos:])
        end = len(data) - len(d.unused_data)
        out.append((pos, end))
        pos = end
    return out


def readable_lines(data: bytes) -> int:
    """Event lines a streaming decoder gets from possibly torn gzip data."""
    text, pos = b"", 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        text += d.decompress(data[pos:])
        if not d.eof:
            break
        pos = len(data) - len(d.unused_data)
    complete = text[: text.rfind(b"\n") + 1].split(b"\n")[:-1]
    return sum(1 for line in complete if line not in (b"[", b"]"))


@pytest.fixture
def truncated(two_ranks, tmp_path):
    _, paths = two_ranks
    data = open(paths[0], "rb").read()
    start, end = members(data)[-1]
    cut = data[: start + (end - start) // 2]
    p = tmp_path / "cut-1-app.pfw.gz"
    p.write_bytes(cut)
    return p, readable_lines(cut)


def test_validate_reports_a_truncated_tail(truncated):
    p, n = truncated
    proc = cli("validate", str(p), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(proc.stdout)
    assert r["verdict"] == "truncated" and r["events"] == n and n > 0
    text = cli("validate", str(p)).stdout
    assert f"TRUNCATED  {p}: dftracer trace, {n:,} readable events" in text


def test_summary_uses_the_readable_part_of_a_truncated_file(truncated, two_ranks):
    p, n = truncated
    d, _ = two_ranks
    proc = cli("summary", str(p), str(d), "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"{p}: truncated tail" in proc.stderr
    out = json.loads(proc.stdout)
    assert out["overview"]["truncated_files"] == 1
    assert out["overview"]["files"] == 3


def test_corrupt_member_is_exit_2_naming_the_path(two_ranks, tmp_path):
    _, paths = two_ranks
    data = bytearray(open(paths[0], "rb").read())
    start, end = max(members(bytes(data)), key=lambda m: m[1] - m[0])
    mid = (start + end) // 2
    data[mid: mid + 8] = bytes(b ^ 0x5A for b in data[mid: mid + 8])
    p = tmp_path / "bad-1-app.pfw.gz"
    p.write_bytes(bytes(data))
    for cmd in (["summary", str(p)], ["validate", str(p)], ["merge", str(p), "-o",
                                                            str(tmp_path / "o.pfw.gz")]):
        proc = cli(*cmd)
        assert proc.returncode == 2, (cmd, proc.stdout, proc.stderr)
        assert str(p) in proc.stdout + proc.stderr
        assert "corrupt" in (proc.stdout + proc.stderr).lower()


@pytest.mark.parametrize("content", [b"hello, world\nnot a trace\n", os.urandom(4096)],
                         ids=["text", "binary"])
def test_non_trace_file_is_exit_2(tmp_path, content):
    p = tmp_path / "x.pfw.gz"
    p.write_bytes(content)
    for cmd in ("summary", "validate"):
        proc = cli(cmd, str(p))
        assert proc.returncode == 2, (cmd, proc.stdout, proc.stderr)
        assert str(p) in proc.stdout + proc.stderr


def test_missing_path_is_exit_2(tmp_path, two_ranks):
    d, _ = two_ranks
    missing = tmp_path / "nope.pfw.gz"
    for cmd in ("summary", "validate"):
        proc = cli(cmd, str(d), str(missing))
        assert proc.returncode == 2
        assert str(missing) in proc.stderr


def test_empty_glob_and_directory_are_exit_2(tmp_path):
    proc = cli("summary", str(tmp_path / "*.pfw.gz"))
    assert proc.returncode == 2 and "matches no file" in proc.stderr
    proc = cli("validate", str(tmp_path))
    assert proc.returncode == 2 and "no .pfw" in proc.stderr


# ---- use ---------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["summary", "report", "merge", "convert", "validate", "run"])
def test_help_has_an_example(cmd):
    proc = cli(cmd, "--help")
    assert proc.returncode == 0
    assert ("example:" in proc.stdout or "examples:" in proc.stdout) and \
        f"\n  dftracer {cmd} " in proc.stdout, proc.stdout


def test_no_command_prints_usage():
    proc = cli()
    assert proc.returncode == 2 and "summary" in proc.stderr


def test_progress_bar_only_on_a_terminal():
    from dftracer.tools.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress(2, "summary", stream=stream, delay=0)
        bar.update(1, 10)
        bar.update(1, 10)
        bar.close()
    assert "2/2 files, 20 events" in tty.getvalue()
    assert pipe.getvalue() == ""


# ---- Dask --------------------------------------------------------------------

def test_dask_cluster_gives_the_same_results(two_ranks, tmp_path):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is not installed")
    d, _ = two_ranks
    local = json.loads(cli("summary", str(d), "--json").stdout)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  protocol="tcp", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        addr = cluster.scheduler_address
        proc = cli("summary", str(d), "--json", "--dask", addr)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == local
        proc = cli("validate", str(d), "--dask", addr)
        assert proc.returncode == 0 and proc.stdout.count("OK ") == 2, proc.stdout
        out = tmp_path / "m.pfw.gz"
        proc = cli("merge", str(d), "-o", str(out), "--dask", addr)
        assert proc.returncode == 0, proc.stderr
        assert len(read_lines(str(out))) > 200


def test_zero_filled_tail_is_a_truncated_tail(two_ranks, tmp_path):
    _, paths = two_ranks
    p = tmp_path / "zeros-1-app.pfw.gz"
    p.write_bytes(open(paths[0], "rb").read() + bytes(4096))
    proc = cli("validate", str(p), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(proc.stdout)
    assert r["verdict"] == "truncated" and "zero bytes" in r["message"]
    assert r["events"] == len(read_trace(paths[0]).events)


def test_garbage_after_the_last_member_is_corrupt(two_ranks, tmp_path):
    _, paths = two_ranks
    p = tmp_path / "junk-1-app.pfw.gz"
    p.write_bytes(open(paths[0], "rb").read() + b"junk")
    proc = cli("validate", str(p))
    assert proc.returncode == 2 and "CORRUPT" in proc.stdout and str(p) in proc.stdout


def test_empty_file_is_a_warning(tmp_path):
    p = tmp_path / "empty-1-app.pfw.gz"
    p.write_bytes(b"")
    proc = cli("validate", str(p))
    assert proc.returncode == 0 and "EMPTY" in proc.stdout
    proc = cli("summary", str(p), "--json")
    assert proc.returncode == 0 and "no events" in proc.stderr
    assert json.loads(proc.stdout)["overview"]["events"] == 0


def test_lines_longer_than_the_read_buffer(tmp_path):
    name = "x" * (3 << 20)
    lines = ["[",
             '{"id":1,"name":"HH","cat":"dftracer","pid":5,"tid":5,"ph":"M","args":'
             '{"name":"h","value":"00000000000000aa"}}',
             '{"id":2,"name":"SH","cat":"dftracer","pid":5,"tid":5,"ph":"M","args":'
             f'{{"name":"{name}","value":"00000000000000bb"}}}}']
    lines += ['{"id":%d,"name":"step","cat":"app","pid":5,"tid":5,"ts":1700000000000000,'
              '"dur":%d,"ph":"X","args":{"what":"00000000000000bb_hash","s_hash":'
              '"00000000000000bb"}}' % (i + 3, i) for i in range(5)]
    p = tmp_path / "long-5-app.pfw.gz"
    with gzip.open(p, "wt") as f:
        f.write("\n".join(lines) + "\n")
    out = json.loads(cli("summary", str(p), "--json").stdout)
    assert out["by_name"][0]["count"] == 5 and out["by_name"][0]["total_us"] == 10
    merged = tmp_path / "m.pfw"
    assert cli("merge", str(p), "-o", str(merged)).returncode == 0
    events = [json.loads(line) for line in merged.read_text().splitlines()[1:]]
    steps = [e for e in events if e["name"] == "step"]
    assert len(steps) == 5 and all(e["args"]["s"] == name for e in steps)


def test_validate_reports_a_first_member_holding_only_the_bracket(two_ranks, tmp_path):
    """The member layout rule (docs/trace-format.md): Perfetto refuses a file
    whose first gzip member holds only "[" (as dftracer wrote before)."""
    _, paths = two_ranks
    lines = read_lines(paths[0])
    body = "\n".join(lines[1:]).encode()
    old = tmp_path / "old-1-app.pfw.gz"
    old.write_bytes(gzip.compress(b"[\n") + gzip.compress(body))
    proc = cli("validate", str(old))
    assert proc.returncode == 1 and "INVALID" in proc.stdout, proc.stdout
    assert "first gzip member does not hold '[' and a whole event line" in proc.stdout
    # "[" and only part of the first line: also refused.
    part = tmp_path / "part-1-app.pfw.gz"
    part.write_bytes(gzip.compress(b"[\n" + body[:20]) + gzip.compress(body[20:]))
    assert cli("validate", str(part)).returncode == 1
    # "[" with the first whole line: valid, and so is the same text uncompressed.
    first = body.index(b"\n") + 1
    good = tmp_path / "good-1-app.pfw.gz"
    good.write_bytes(gzip.compress(b"[\n" + body[:first]) + gzip.compress(body[first:]))
    plain = tmp_path / "plain-1-app.pfw"
    plain.write_bytes(b"[\n" + body)
    for p in (good, plain):
        proc = cli("validate", str(p))
        assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout
    # merge rewrites the old file into one that keeps the rule.
    out = tmp_path / "fixed.pfw.gz"
    assert cli("merge", str(old), "-o", str(out)).returncode == 0
    head = zlib.decompressobj(31).decompress(out.read_bytes()).split(b"\n")
    assert head[0] == b"[" and len(head) >= 3 and json.loads(head[1])
    assert "first gzip member" not in cli("validate", str(out)).stdout


def test_summary_of_no_trace_prints_only_the_error(tmp_path):
    """A file that is not a trace: one error line naming it, exit status 2,
    and no empty table on stdout (issue 52)."""
    p = tmp_path / "notatrace.txt"
    p.write_text("hello\n")
    proc = cli("summary", str(p))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.strip().splitlines() == [
        f"dftracer: {p}: not a dftracer trace (line 1: not a JSON object)"], proc.stderr


# ---- small things a user sees (issue 71, item 4) ------------------------------


def test_the_help_names_every_command_and_says_it_traces_too():
    from dftracer.tools.cli import COMMANDS

    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("positional arguments:")[1].split("options:")[0]
    for name in COMMANDS:
        assert f"\n    {name} " in listed, name
    assert "Trace Python programs (run)" in " ".join(proc.stdout.split())


def test_run_of_a_script_that_does_not_exist_writes_no_trace(tmp_path):
    proc = cli("run", "-q", "--log-file", str(tmp_path / "t"), "--", sys.executable,
               str(tmp_path / "nosuch.py"), cwd=str(tmp_path))
    assert proc.returncode == 2  # python's own status for a missing script
    assert "nosuch.py" in proc.stderr
    assert os.listdir(tmp_path) == []


def test_stacks_of_a_folder_without_traces_prints_only_its_two_lines(tmp_path):
    proc = cli("stacks", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and "holds no .pfw" in lines[0] and "no live traced process" in lines[1]
