"""`dftracer merge` reads each input twice (issue 67, item 3): one scan for
identity and sync points (the ranks pass, src/reader/identity.c), then the
rewrite.  The count is taken in a subprocess whose `dftracer._core` entry
points and Python file openers are wrapped to record every read of an input."""

from __future__ import annotations

import json
import subprocess
import sys

from tracefile import read_lines

T0 = 1_700_000_000_000_000

# Every callable of _core and Python's openers, wrapped: each call naming an
# input path (first argument, or first item of a tuple argument) is recorded.
COUNTER = r"""
import builtins, collections, gzip, json, sys
from dftracer import _core
from dftracer.tools import cli

inputs = set(json.loads(sys.argv[1]))
reads = collections.Counter()

def _path_of(args):
    a = args[0] if args else None
    a = a[0] if isinstance(a, tuple) and a else a
    return a if isinstance(a, str) and a in inputs else None

def wrap(name, fn):
    def wrapped(*args, **kwargs):
        p = _path_of(args)
        if p:
            reads[(name, p)] += 1
        return fn(*args, **kwargs)
    return wrapped

for name in dir(_core):
    fn = getattr(_core, name)
    if name.startswith("_") and not name.startswith("__") and callable(fn):
        setattr(_core, name, wrap(name, fn))
builtins.open = wrap("open", builtins.open)
gzip.open = wrap("gzip.open", gzip.open)
rc = cli.main(["merge", *sorted(inputs), "-o", sys.argv[2], "-j", "1"])
print(json.dumps({"rc": rc, "reads": [[n, p, k] for (n, p), k in sorted(reads.items())]}))
"""


def _trace(path, pid, meta, ppid=None):
    lines = ["["]
    for i, (name, args) in enumerate(meta):
        lines.append(json.dumps({"id": i + 1, "name": name, "cat": "dftracer", "pid": pid,
                                 "tid": pid, "ph": "M", "args": args}))
    start = {"id": 20, "name": "start", "cat": "dftracer", "pid": pid, "tid": pid,
             "ts": T0, "dur": 0, "ph": "X", "args": {} if ppid is None else {"ppid": ppid}}
    lines.append(json.dumps(start))
    for k in range(5):
        lines.append(json.dumps({"id": 30 + k, "name": "all_reduce", "cat": "comm", "pid": pid,
                                 "tid": pid, "ts": T0 + 1000 * k, "dur": 10, "ph": "X",
                                 "args": {"group": "world", "seq": k}}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_merge_reads_each_file_twice(tmp_path):
    host = ("HH", {"name": "h", "value": "1"})
    files = [
        # rank 0 by a rank event written after the launcher's process name
        _trace(tmp_path / "a-100-app.pfw", 100,
               [host, ("process_name", {"name": "python", "value": "process_name"}),
                ("rank", {"name": "rank", "value": 0, "world_size": 2, "source": "RANK"})]),
        # rank 1 by its process name only
        _trace(tmp_path / "b-101-app.pfw", 101,
               [host, ("process_name", {"name": "python rank 1", "value": "process_name"})]),
        # a DataLoader worker of pid 100
        _trace(tmp_path / "c-102-app.pfw", 102,
               [host, ("process_name", {"name": "python", "value": "process_name"}),
                ("worker", {"name": "worker", "value": 0, "num_workers": 1})], ppid=100),
    ]
    out = tmp_path / "m.pfw"
    proc = subprocess.run([sys.executable, "-c", COUNTER, json.dumps(files), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0, proc.stderr
    per_file = {f: {} for f in files}
    for name, path, k in result["reads"]:
        per_file[path][name] = k
    for f in files:
        assert per_file[f] == {"_rank_file": 1, "_rewrite_file": 1}, (f, per_file[f])
    # the identity the scan read names the processes as the rule says
    events = [json.loads(line) for line in read_lines(str(out))[1:] if line]
    labels = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert labels == ["python [host h, pid 100, rank 0]",
                      "python [host h, pid 102, worker 0, child of pid 100]",
                      "python rank 1 [host h, pid 101, rank 1]"], labels
    assert sum(e["name"] == "all_reduce" for e in events) == 15
