"""The line's key order is written once per language (issue 38):
format/lines.h's DFT_LINE_* constants in C and dftracer/tools/line_keys.py
in Python.  The tracer's lines, the C constants, the Python tuple and the
lines the tools write (merge's process names, hang's mark) all agree."""

from __future__ import annotations

import json
import os
import re

from dftracer.tools import line_keys
from tracefile import find_traces, read_lines, run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _in_order(keys):
    order = [k for k in line_keys.LINE_KEYS if k in keys]
    return [k for k in keys if k in line_keys.LINE_KEYS] == order


def test_c_constants_are_the_python_order():
    with open(os.path.join(ROOT, "src", "format", "lines.h"), encoding="utf-8") as f:
        text = f.read()
    c = re.findall(r'#define DFT_LINE_[A-Z]+ "[{,]\\"(\w+)\\":"', text)
    assert c == [k for k in line_keys.LINE_KEYS if k != "s"], c


def test_the_tracer_writes_that_order(tmp_path):
    run_python(
        f"""
        from dftracer.python import dftracer
        log = dftracer.initialize_log({str(tmp_path / 't')!r})
        log.log_event("x", "c", log.get_time(), 1, {{"a": 1}})
        log.log_event("y", "c", log.get_time(), 0)
        log.finalize()
        """,
        {"DFTRACER_ENABLE": "1"},
    )
    [path] = find_traces(str(tmp_path), "t")
    lines = [ln for ln in read_lines(path) if ln.startswith("{")]
    assert len(lines) > 5
    for ln in lines:
        keys = list(json.loads(ln))
        assert _in_order(keys), ln
        assert keys[:5] == ["id", "name", "cat", "pid", "tid"], ln


def test_dumps_puts_keys_in_order():
    ev = {"args": {"b": 1}, "ph": "M", "tid": 2, "pid": 2, "cat": "dftracer", "name": "n",
          "id": 7, "extra": 1}
    line = line_keys.dumps(ev)
    assert list(json.loads(line)) == ["id", "name", "cat", "pid", "tid", "ph", "args", "extra"]
    assert line.startswith('{"id":7,"name":"n","cat":"dftracer","pid":2,"tid":2,"ph":"M"')
