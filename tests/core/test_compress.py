"""The deflate backend chosen at build time (docs/performance.md): whichever it
is, the trace is a series of standard gzip members that zlib and Python's
gzip module read, and the writer's own benchmark hook (the test extension's
_bench_writer) measures real work."""

from __future__ import annotations

import gzip
import json
import os
import zlib

import pytest

from dftracer import _core
from tracefile import check_event, find_traces, get_testcore, read_trace, run_python

ENABLED = {"DFTRACER_ENABLE": "1"}
BACKENDS = {"isal", "libdeflate", "zlib"}


def test_backend_is_named_with_version_and_level():
    name, version, level = _core._compression_backend()
    assert name in BACKENDS
    assert version and version[0].isdigit()
    assert level >= 1
    # CI builds once per backend with DFTRACER_COMPRESSION_BACKEND and tells
    # the tests which one it asked for: the build must not fall back silently.
    want = os.environ.get("DFTRACER_EXPECT_BACKEND")
    if want:
        assert name == want


def test_many_members_decode_with_zlib_and_gzip(tmp_path):
    n = 60000
    run_python(
        f"""
        from dftracer.python import dftracer
        names = ["aten::addmm", "aten::relu", "aten::_convolution", "caf\\u00e9 \\"q\\""]
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        t = log.get_time()
        for i in range({n}):
            log.log_event(names[i % 4], "PP", t + i, i % 50,
                          {{"device": 0, "input_size": i}},
                          string_args={{"s": "x" * (i % 7)}})
        log.finalize()
        """,
        dict(ENABLED, DFTRACER_WRITE_BUFFER_SIZE="256K"),
    )
    [path] = find_traces(str(tmp_path))
    data = open(path, "rb").read()
    members, text = 0, b""
    while data:
        d = zlib.decompressobj(31)
        part = d.decompress(data)
        assert d.eof, "a member does not end where its trailer says"
        assert part.endswith(b"\n"), "a member must hold whole lines"
        text += part
        data = d.unused_data
        members += 1
    assert members > 3
    assert gzip.decompress(open(path, "rb").read()) == text
    events = read_trace(path).of("X", cat="PP")
    assert len(events) == n
    assert sorted(e["args"]["input_size"] for e in events) == list(range(n))
    for e in events:  # members may land in any order: index by the arg
        i = e["args"]["input_size"]
        assert e["name"] == ["aten::addmm", "aten::relu", "aten::_convolution", 'caf\u00e9 "q"'][i % 4]
        assert e["dur"] == i % 50
        assert e["args"]["s"] == "x" * (i % 7)


# A torch-like op mix (the benchmarks' is benchmarks/core/op_mix.py).
MIX = (["aten::addmm", "aten::relu", "aten::_convolution", "aten::view"],
       [0, 1, 2, 5, 13, 200], [0, 64, 1024, 4096])


def test_bench_writer_formats_and_compresses():
    bench = get_testcore()._bench_writer
    r = bench(50000, *MIX)
    assert r["events"] >= 50000
    assert 150 < r["json_bytes"] / r["events"] < 250  # the op mix's lines
    assert 0 < r["gz_bytes"] < r["json_bytes"] / 5
    assert r["format_s"] > 0 and r["compress_s"] > 0
    plain = bench(50000, *MIX, compress=False)
    assert plain["gz_bytes"] == 0 and plain["compress_s"] == 0
    assert plain["json_bytes"] == r["json_bytes"]
    bare = bench(50000, *MIX, compress=False, args=False)
    # the same events less ',"device":0,"input_size":N' (26 to 29 bytes)
    per_line = plain["json_bytes"] / plain["events"] - bare["json_bytes"] / bare["events"]
    assert 26 < per_line < 29
    # one name, one duration, one size: the lines differ only in their ids
    one = bench(50000, ["x" * 100], [7], [4096], compress=False)
    assert one["json_bytes"] / one["events"] - plain["json_bytes"] / plain["events"] > 80


def test_bench_writer_rejects_bad_arguments():
    bench = get_testcore()._bench_writer
    with pytest.raises(ValueError, match="n must be positive"):
        bench(0, *MIX)
    with pytest.raises(TypeError):
        bench("10", *MIX)
    with pytest.raises(ValueError, match="must not be empty"):
        bench(10, [], [1], [1])
    with pytest.raises(TypeError, match="names must be strs"):
        bench(10, [b"x"], [1], [1])
    with pytest.raises(TypeError, match="durations_us must be ints"):
        bench(10, ["x"], ["1"], [1])


# ---- the formatter's fast paths -------------------------------------------


def test_timestamps_and_ids_reused_from_the_previous_line(tmp_path):
    """The formatter reuses the high eight digits of the last timestamp and
    counts the last id up by one: every value must still come out exactly,
    across each boundary where that reuse has to stop."""
    tss = [0, 7, 99_999_999, 100_000_000, 100_000_001, 199_999_999, 200_000_000,
           1_795_446_016_619_112, 1_795_446_099_999_999, 1_795_446_100_000_000,
           1_795_446_100_000_000, 9_999_999_999_999_999, 10_000_000_000_000_000,
           2 ** 62, 1_795_446_016_619_112, 123, -5]
    n = 12_000  # ids run through 10, 100, 1,000 and 10,000
    run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        for i, t in enumerate({tss!r}):
            log.log_event("t", "n", t, i)
        for i in range({n}):
            log.log_event("c", "n", 1_795_446_016_619_112 + 37 * i, i)
        log.finalize()
        """,
        dict(ENABLED, DFTRACER_WRITE_BUFFER_SIZE="64K"),
    )
    [path] = find_traces(str(tmp_path))
    # Timestamps out of the epoch's range are the point here: the format
    # checks run on the rest through check=True below.
    trace = read_trace(path, check=False)
    got = {e["dur"]: e["ts"] for e in trace.of("X", name="t")}
    assert [got[i] for i in range(len(tss))] == tss
    counted = sorted(trace.of("X", name="c"), key=lambda e: e["dur"])
    assert [e["ts"] for e in counted] == [1_795_446_016_619_112 + 37 * i for i in range(n)]
    ids = [e["id"] for e in counted]
    # One thread counts its ids up by one within its block of ids; an id it
    # skips at a block's end went to another event of the file (the
    # flusher's memory sample or clock event, taken from the same counter).
    others = {e["id"] for e in trace.events if "id" in e and e.get("name") != "c"}
    assert all(b > a for a, b in zip(ids, ids[1:]))
    assert set(range(ids[0], ids[-1] + 1)) - set(ids) <= others
    all_ids = [e["id"] for e in trace.events if "id" in e]
    assert len(all_ids) == len(set(all_ids))
    for i, e in enumerate(counted):
        check_event(e, f"event {i}")


def test_numbers_and_strings_at_the_fast_path_edges(tmp_path):
    """Integers across every digit count and sign, floats (integral ones
    included, printed as Python's repr does), and strings whose special bytes
    fall at every position of an eight-byte word."""
    ints = sorted({s * (10 ** k + d) for k in range(19) for d in (-1, 0, 1) for s in (1, -1)}
                  | {2 ** 63 - 1, -(2 ** 63), 0})
    floats = [0.0, -0.0, 3.0, -2.0, 1e14, 1e15, 1e16, 0.1, 2.5e-7, 123456.789, -1e300]
    texts = ["a" * n + c + "b" * m for n in range(18) for m in (0, 3, 9)
             for c in ("", '"', "\\", "\n", "\x7f", "\u00e9", "\x01")]
    run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        t = log.get_time()
        for i, v in enumerate({ints!r}):
            log.log_event("i", "n", t, i, {{"v": v}})
        for i, v in enumerate({floats!r}):
            log.log_event("f", "n", t, i, float_args={{"v": v}})
        for i, s in enumerate({texts!r}):
            log.log_event(s, s, t, i, string_args={{s: s}})
        log.finalize()
        """,
        ENABLED,
    )
    [path] = find_traces(str(tmp_path))
    trace = read_trace(path)
    got = {e["dur"]: e["args"]["v"] for e in trace.of("X", name="i")}
    assert [got[i] for i in range(len(ints))] == ints
    got = {e["dur"]: e["args"]["v"] for e in trace.of("X", name="f")}
    assert [got[i] for i in range(len(floats))] == floats
    assert all(isinstance(v, float) for v in got.values())
    lines = [line for line in gzip.open(path, "rt", encoding="utf-8") if '"name":"f"' in line]
    assert any('"v":3.0}' in line for line in lines) and any('"v":-0.0}' in line for line in lines)
    got = {e["dur"]: e for e in trace.of("X", cat=None) if e["cat"] in texts}
    for i, t in enumerate(texts):
        assert got[i]["name"] == t and got[i]["cat"] == t and got[i]["args"][t] == t
