"""log_event with more arguments than an event holds (64): tracing never
raises into the traced program for what it records; the first 64 are kept,
the others counted in the `end` event's num_args_dropped
(docs/trace-format.md, "Start and end")."""

from __future__ import annotations

import os
import subprocess
import sys

from tracefile import find_traces, read_trace

PROG = r"""
import sys
from dftracer.python import dftracer
log = dftracer.initialize_log(sys.argv[1], None, -1)
t = log.get_time()
many = {f"k{i}": i for i in range(100)}
log.log_event("many", "app", t, 5, int_args=many)            # 100 int args: returns normally
log.log_event("mixed", "app", t, 5, int_args=many,
              string_args={f"s{i}": str(i) for i in range(10)})  # 110 in all
log.log_event("few", "app", t, 5, int_args={"a": 1})
print("returned", flush=True)
log.finalize()
"""


def run(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env["DFTRACER_ENABLE"] = "1"
    proc = subprocess.run([sys.executable, "-c", PROG, str(tmp_path / "t.pfw")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "returned\n" and "Traceback" not in proc.stderr, proc.stderr
    return read_trace(find_traces(str(tmp_path), "t")[0])


def test_more_than_64_args_are_kept_up_to_64_and_counted(tmp_path):
    tr = run(tmp_path)
    (many,) = tr.of("X", name="many")
    assert [k for k in many["args"] if k.startswith("k")] == [f"k{i}" for i in range(64)]
    assert all(many["args"][f"k{i}"] == i for i in range(64))
    (mixed,) = tr.of("X", name="mixed")
    user = [k for k in mixed["args"] if k[0] in "ks"]
    assert len(user) == 64 and user == [f"k{i}" for i in range(64)]
    (few,) = tr.of("X", name="few")
    assert few["args"]["a"] == 1
    end = tr.of("X", name="end")[0]
    assert end["args"]["num_args_dropped"] == 36 + 46
    assert "num_dropped" not in end["args"]
    assert end["args"]["num_events"] == len(tr.events) - 1
    for cmd in (["validate"], ["summary", "--json"]):
        res = subprocess.run([sys.executable, "-m", "dftracer", *cmd, tr.path],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
