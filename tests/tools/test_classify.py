"""The one event classifier (src/reader/classify.c, `_core._classify`) and
the readers that use it: `summary --ranks` (the ranks pass), `top` and
`report` give an event the same class, including where their old copies
disagreed (torch.compile's `compile`, `data/*`, `pipeline/*.iter`)."""

from __future__ import annotations

import pytest

from dftracer import _core
from dftracer.tools import analysis, classes, top_figures

CASES = [  # (cat, name, class (None: a container or the tracer's), step kind)
    ("compute", "forward", "compute", None), ("dynamo", "graph", "compute", None),
    ("compile", "compile", "compute", None), ("PP", "aten::mm", "compute", None),
    ("dataloader", "fetch", "data", None), ("dataloader", "fetch.block", "other", None),
    ("data", "item", "data", None), ("pipeline", "train.iter", "data", None),
    ("pipeline", "eval.iter", "data", None), ("PP", "enumerate(DataLoader)#x", "data", None),
    ("POSIX", "read", "io", None), ("STDIO", "fopen", "io", None),
    ("comm", "all_reduce", "comm", None), ("checkpoint", "torch.save", "checkpoint", None),
    ("app", "log", "other", None), ("PP", "[memory]", "other", None),
    ("pipeline", "iteration", None, "iteration"), ("pipeline", "train.block", None, "train"),
    ("PP", "ProfilerStep#7", None, "profiler"), ("dftracer", "start", None, None),
]


@pytest.mark.parametrize("cat,name,cls,kind", CASES)
def test_every_reader_gives_the_same_class(cat, name, cls, kind):
    assert classes.classify(cat, name)[:2] == (cls, kind)
    assert top_figures.category_group(cat, name) == cls  # top's shares
    assert analysis.step_kind(cat, name) == kind  # the report's steps
    want = analysis.WAIT if cls == "data" else analysis.COMPUTE if cls == "compute" else 0
    assert analysis.event_class(cat, name) == want  # the report's wait/compute
    # the ranks pass: a container's self time is other, the tracer's too
    assert classes.self_class(cat, name) == (cls or "other")
    assert _core._CLASSES == _core._RANK_CLASSES


def test_io_direction_and_how_ret_counts():
    io = classes.io_flags
    assert io("POSIX", "read") == classes.IO_READ | _core._IO_BYTES
    assert io("STDIO", "fwrite") == classes.IO_WRITE | classes.IO_ITEMS
    assert io("POSIX", "sendfile") == classes.IO_READ | classes.IO_WRITE | _core._IO_BYTES
    assert io("STDIO", "fputs") == classes.IO_WRITE | classes.IO_STRING
    assert io("STDIO", "fgetc") == classes.IO_READ | classes.IO_CHAR
    assert io("POSIX", "open") == 0 and io("app", "read") == 0
    assert top_figures.io_direction("POSIX", "pread64") == top_figures.F_READ


def test_bad_arguments():
    with pytest.raises(TypeError):
        _core._classify(b"POSIX", "read")
    with pytest.raises(TypeError):
        _core._classify("POSIX")
