"""The line encoder (src/core/deflate_lines.c, deflate_block.c): every member
it writes is a standard, independent gzip member that zlib reads back byte for
byte, whatever the input; and on trace lines it is smaller than the deflate
library's fastest level (docs/performance.md, "The line encoder")."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefile import find_traces, get_testcore, read_trace, run_python

ENCODERS = ("lines", "auto", "library", "fastest")


def inflate_member(member: bytes) -> bytes:
    """zlib's reading of one gzip member: it must end exactly where the data
    ends (a member stands alone) and its CRC-32 and length must hold."""
    d = zlib.decompressobj(31)
    out = d.decompress(member) + d.flush()
    assert d.eof, "the member is not complete"
    assert d.unused_data == b"", "bytes after the member's trailer"
    return out


def assert_round_trip(data: bytes, encoder: str = "lines") -> bytes:
    member = get_testcore()._compress_member(data, encoder)
    assert member[:3] == b"\x1f\x8b\x08"
    assert inflate_member(member) == data
    return member


# ---- trace-like text ----------------------------------------------------------

NAMES = ["aten::addmm", "aten::mm", "read", "w,r{i}t\\\"e", "caf\u00e9", "", "x" * 40]

line_fields = st.tuples(
    st.integers(0, 10**7),                    # id
    st.sampled_from(NAMES),
    st.integers(0, 2**53),                    # ts
    st.integers(-3, 300),                     # dur
    st.lists(st.tuples(st.sampled_from(["device", "input_size", "fhash", "k,{}"]),
                       st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12))),
             max_size=3),
)


def trace_line(f) -> bytes:
    i, name, ts, dur, args = f
    extra = "".join(f',"{k}":{v!r}' if isinstance(v, int) else f',"{k}":"{v}"' for k, v in args)
    return (f'{{"id":{i},"name":"{name}","cat":"PP","pid":4242,"tid":4242,"ts":{ts},'
            f'"dur":{dur},"ph":"X","args":{{"hhash":"f9ff883caaf21863","level":1,'
            f'"p_idx":-1{extra}}}}}\n').encode()


@settings(max_examples=150, deadline=None)
@given(st.lists(line_fields, max_size=200), st.randoms(use_true_random=False))
def test_trace_like_lines_round_trip(fields, rnd):
    lines = [trace_line(f) for f in fields]
    # Repeats at random distances, so that matches come from near and far.
    for _ in range(len(lines)):
        if lines:
            lines.append(lines[rnd.randrange(len(lines))])
    data = b"".join(lines)
    for encoder in ENCODERS:
        assert_round_trip(data, encoder)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_round_trip(data):
    for encoder in ENCODERS:
        assert_round_trip(data, encoder)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([b",", b"{", b"}", b"\n", b"a", b"ab", b"\x00", b"\xff", b"::"]),
                max_size=4000))
def test_delimiter_soup_round_trips(parts):
    """Fields of every length from one byte up, and matches one byte apart."""
    assert_round_trip(b"".join(parts))


# ---- the limits of deflate and of the encoder's own structures ---------------


def test_empty_and_tiny_inputs():
    for data in (b"", b"\n", b",", b"{}", b"a" * 3, b"{" * 5):
        assert_round_trip(data)


def test_matches_longer_than_258_bytes_are_split():
    line = b'{"name":"' + b"n" * 1000 + b'","cat":"c"}\n'
    member = assert_round_trip(line * 50)
    assert len(member) < len(line) * 2  # 49 repeats come out as matches


def test_matches_reach_back_32_kib_and_no_further():
    """The same field 32,760 and 32,770 bytes back: the first is in deflate's
    window, the second is not and must not be used."""
    rnd = random.Random(7)
    for gap in (32_700, 32_760, 32_767, 32_768, 32_769, 32_800):
        field = b',"name":"' + bytes(rnd.choice(b"abcdefgh") for _ in range(60)) + b'"'
        filler = bytes(rnd.choice(b"0123456789") for _ in range(gap - len(field)))
        assert_round_trip(field + filler + field + b"\n")


def test_many_blocks_in_one_member():
    """More matches than one block holds (16,384): the encoder starts new
    blocks with their own codes."""
    rnd = random.Random(3)
    lines = [b'{"a":%d,"b":%d}\n' % (rnd.randrange(100), i) for i in range(120_000)]
    data = b"".join(lines)
    assert len(data) > 1 << 20
    member = assert_round_trip(data)
    assert len(member) < len(data) / 3


def test_incompressible_input_stays_within_the_bound():
    """Random bytes go out as stored blocks: never more than deflate's stored
    overhead (5 bytes per 64 KiB) over the input."""
    data = random.Random(5).randbytes(300_000)
    member = assert_round_trip(data)
    assert len(member) <= len(data) + 5 * (len(data) // 65535 + 1) + 18 + 16


def test_every_byte_value_and_skewed_counts():
    """Codes up to deflate's 15-bit limit: byte counts that follow a steep
    (Fibonacci-like) curve make the unlimited Huffman code deeper than that."""
    data = bytearray()
    a, b = 1, 1
    for v in range(40):
        data += bytes([v + 40]) * a
        a, b = b, min(a + b, 200_000)
    data += bytes(range(256)) * 3
    for encoder in ("lines", "library"):
        assert_round_trip(bytes(data), encoder)


def test_bad_encoder_name_is_a_value_error():
    with pytest.raises(ValueError, match="encoder must be"):
        get_testcore()._compress_member(b"x", "fast")
    with pytest.raises(TypeError):
        get_testcore()._compress_member("not bytes")


# ---- what it is for: trace lines, smaller ---------------------------------------


def test_trace_lines_come_out_smaller_than_the_library_makes_them(tmp_path):
    """A real trace's lines, recompressed both ways: the line encoder's member
    must be the smaller by the margin docs/performance.md states (at least
    a fifth smaller than the library at its fastest level)."""
    run_python(
        f"""
        import random
        from dftracer.python import dftracer
        random.seed(1)
        names = ["aten::addmm", "aten::relu", "aten::mm", "aten::view", "aten::t", "aten::add_"]
        log = dftracer.initialize_log({str(tmp_path / 'trace.pfw')!r})
        t = log.get_time()
        for i in range(30000):
            t += random.randint(0, 30)
            log.log_event(random.choice(names), "PP", t, random.choice([0, 1, 2, 5, 13, 40]))
        log.finalize()
        """,
        {"DFTRACER_ENABLE": "1"},
    )
    [path] = find_traces(str(tmp_path))
    text = b"".join(inflate_member(m) for m in split_members(open(path, "rb").read()))
    assert len(read_trace(path).of("X", cat="PP")) == 30000
    lines = assert_round_trip(text, "lines")
    library = assert_round_trip(text, "library")
    assert len(lines) < 0.8 * len(library), (len(lines), len(library))
    assert get_testcore()._compress_member(text) == lines  # the writer's choice on trace lines


def split_members(data: bytes) -> list[bytes]:
    out = []
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        used = len(data) - len(d.unused_data)
        out.append(data[:used])
        data = d.unused_data
    return out


@pytest.mark.parametrize("threads", [1, 6])
def test_traced_program_members_are_independent(tmp_path, threads):
    """Many writer pieces, several writer threads: each member of the file
    inflates on its own."""
    tmp = tmp_path
    run_python(
        f"""
        import threading
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp / 'trace.pfw')!r})
        def work(k):
            t = log.get_time()
            for i in range(3000):
                log.log_event("op%d" % (i % 7), "c%d" % k, t + 3 * i, i % 11, {{"k": k, "i": i}})
        ts = [threading.Thread(target=work, args=(k,)) for k in range({threads})]
        [t.start() for t in ts]
        [t.join() for t in ts]
        log.finalize()
        """,
        {"DFTRACER_ENABLE": "1", "DFTRACER_WRITE_BUFFER_SIZE": "64K"},
    )
    [path] = find_traces(str(tmp))
    members = split_members(open(path, "rb").read())
    assert len(members) > 1
    for m in members:
        inflate_member(m)
    events = read_trace(path).user_events()
    assert sorted((e["args"]["k"], e["args"]["i"]) for e in events) == \
        [(k, i) for k in range(threads) for i in range(3000)]
