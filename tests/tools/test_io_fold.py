"""The I/O summary's folds (src/reader/iostats_fold.c, dftracer/tools/iofold.py):
each path's counters are kept packed and summed as each trace arrives, and
give the same sums as adding the int64 counters one by one; `summary --io`'s
files come out in the documented order (docs/cli.md, "I/O": bytes moved,
most first, then path)."""

from __future__ import annotations

import random
from array import array

import pytest

from dftracer import _core
from dftracer.tools import iofold

N = len(_core._IO_COUNTERS)
MAX = {i for i, n in enumerate(_core._IO_COUNTERS) if "MAX_BYTE" in n}


def some_counters(rng, sparse=True):
    vals = []
    for i in range(N):
        v = rng.choice([0, 0, 0, 1, 2**58, rng.randrange(0, 2**40)]) if sparse else \
            rng.randrange(-2**58, 2**58)
        vals.append(abs(v) if i in MAX else v)
    return array("q", vals)


def test_a_packed_row_sums_as_the_counters_do():
    rng = random.Random(53)
    for _ in range(200):
        files = [some_counters(rng, sparse=rng.random() < 0.7) for _ in range(rng.randrange(1, 6))]
        row, total, want = b"", array("q", iofold.ZERO), list(iofold.ZERO)
        for c in files:
            row = _core._io_fold(row, c.tobytes())
            _core._io_add(total, c.tobytes())
            iofold.add(want, c)  # the Python rule: sums, the MAX_BYTE counters the largest
        got = iofold.counters(_core._io_unfold(row))
        assert got.tolist() == total.tolist() == want
    # a file with a few counters set packs into far less than its 78 int64
    c = array("q", iofold.ZERO)
    c[iofold.IDX["POSIX_OPENS"]], c[iofold.IDX["bytes_read"]] = 1, 65536
    assert len(_core._io_fold(b"", c.tobytes())) < 20 < 8 * N


def test_sums_of_packed_rows():
    rng = random.Random(7)
    cs = [some_counters(rng) for _ in range(50)]
    rows = [_core._io_fold(b"", c.tobytes()) for c in cs] + [b""]
    at = (iofold.IDX["bytes_read"], iofold.IDX["bytes_written"])
    got = iofold.counters(_core._io_sums(rows, at)).tolist()
    assert got == [c[at[0]] + c[at[1]] for c in cs] + [0]


@pytest.mark.parametrize("bad", [b"x", b"\x01" + b"\x00" * 9, b"\xff" * 10 + b"\x80" * 11])
def test_a_row_that_is_not_packed_is_refused(bad):
    with pytest.raises(ValueError, match="row: not a packed counter row"):
        _core._io_unfold(bad)
    with pytest.raises(ValueError, match="row"):
        _core._io_fold(bad, bytes(8 * N))


def test_counters_of_another_size_are_named():
    with pytest.raises(ValueError, match=r"counters: 8 bytes, \d+ expected"):
        _core._io_fold(b"", bytes(8))
    with pytest.raises(ValueError, match="into: "):
        _core._io_add(array("q", [0]), bytes(8 * N))
    with pytest.raises(ValueError, match="indexes: 999 is not a counter"):
        _core._io_sums([b""], (999,))
    with pytest.raises(TypeError, match="rows: bytes expected"):
        _core._io_sums(["x"], (0,))


def one_file(path, nbytes, ivs=(0, 10)):
    c = array("q", iofold.ZERO)
    c[iofold.IDX["bytes_read"]] = nbytes
    return (path, c.tobytes(), [(None, nbytes, 0, array("q", ivs).tobytes(), 0)])


def test_the_fold_and_its_rows():
    """Two traces of the same paths: one row per path, the counters summed,
    the trace's own totals kept, its files packed; the rows by bytes (most
    first), ties by path; a slice, an index and iteration agree."""
    fold = iofold.Fold()
    a = {"status": "ok", "files": [one_file("/d/b", 5), one_file("/d/a", 5), one_file("/d/c", 9)]}
    b = {"status": "ok", "files": [one_file("/d/a", 1, (10, 20))]}
    fold.add(a)
    fold.add(b)
    assert fold.paths == ["/d/b", "/d/a", "/d/c"]
    assert fold.counters_of(1)[iofold.IDX["bytes_read"]] == 6
    assert a["io_total"][iofold.IDX["bytes_read"]] == 19
    row, slots = iofold.unpack_slots(b["files"][0], None)
    assert row == 1 and slots[0][:3] == (None, 1, 0) and slots[0][3].tolist() == [10, 20]
    assert iofold.unpack_slots(b["files"][0], 3)[1][0][0] == 3
    rows = iofold.file_rows(fold, {0, 1, 2, 4}, 2, set(), 0, 1, list(iofold.ZERO))
    assert [r["path"] for r in rows] == ["/d/c", "/d/a", "/d/b"]
    assert [r["bytes_read"] for r in rows[:2]] == [9, 6] and rows[2]["path"] == "/d/b"
    assert len(rows) == 3 and [r["processes"] for r in rows] == [1, 1, 2]


def test_a_job_without_data_files_writes_an_empty_list():
    """`summary --io --json` of traces that read no data file (an FSDP2 loop
    with I/O off): "files" is [], as the text says "0 files"."""
    import io
    import json

    from dftracer.tools import iostats

    r = {"status": "ok", "files": [], "host": "h", "pid": 1, "read_ts": None, "marks": []}
    a = iostats.analyze([r])
    assert len(a["files"]) == 0 and a["totals"]["files"] == 0
    out = io.StringIO()
    iostats.write_json(a, out)
    assert json.loads(out.getvalue())["files"] == []
