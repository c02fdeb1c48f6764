"""The bytes an I/O call moved are counted by one rule, written once in C
(src/reader/iobytes.c): the passes reach it through the line parser,
`dftracer top`'s live tail (dftracer/tools/top_figures.py, io_bytes)
through _core._io_bytes with the arguments it took from the line. This
holds the two paths equal on every data-moving POSIX/STDIO call of
reader/classify.c's table and every combination of ret (absent, failed,
zero, positive), size and count (absent or present), as docs/cli.md,
"I/O bytes", states the rule."""

from __future__ import annotations

import itertools
import json

from tracefile import get_testcore

CALLS = [("POSIX", n) for n in ("read", "write", "pread", "pread64", "pwrite64", "readv",
                                "writev", "sendfile", "open64", "lseek64")] + \
        [("STDIO", n) for n in ("fread", "fwrite", "fgetc", "fputc", "fputs", "fopen", "fseek")]
RET = (None, -1, 0, 7)
SIZE = (None, 3)
COUNT = (None, 5)


def lines():
    out, want = [], []
    i = 0
    for (cat, name), ret, size, count in itertools.product(CALLS, RET, SIZE, COUNT):
        args = {"hhash": "00000000000000aa", "level": 1, "p_idx": -1}
        for k, v in (("ret", ret), ("size", size), ("count", count)):
            if v is not None:
                args[k] = v
        i += 1
        out.append(json.dumps({"id": i, "name": name, "cat": cat, "pid": 1, "tid": 1,
                               "ts": 1000 + i, "dur": 1, "ph": "X", "args": args},
                              separators=(",", ":")))
        want.append((cat, name, ret, size, count))
    return out, want


def test_c_and_python_count_the_same_bytes(tmp_path):
    get_testcore()
    from dftracer import _core
    from dftracer.tools import top_figures

    text, calls = lines()
    path = tmp_path / "rule-1.pfw"
    path.write_text("[\n" + "\n".join(text) + "\n]\n")
    got = [e for batch in _core._EventReader(str(path)) for e in batch]
    assert len(got) == len(calls)
    moving = 0
    diffs = []
    for (cat, name, ret, size, count), e in zip(calls, got):
        flags = top_figures.io_direction(cat, name)
        if not flags & (top_figures.F_READ | top_figures.F_WRITE):
            continue  # top counts no bytes for it; the C passes may count a declared size
        moving += 1
        c_bytes = max(e[6], 0)  # -1: the pass found nothing to count
        py_bytes = top_figures.io_bytes(cat, name, ret, size, count)
        if c_bytes != py_bytes:
            diffs.append(f"{cat}/{name} ret={ret} size={size} count={count}: C {e[6]}, top {py_bytes}")
    assert moving >= 10 * len(RET) * len(SIZE) * len(COUNT), moving
    assert not diffs, "\n".join(diffs)
