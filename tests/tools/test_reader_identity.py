"""Who wrote a trace file is read once for the ranks and the I/O passes
(src/reader/identity.c, issue 38): both give the same identity, by the one
rank rule, and both walk the args with the one member iterator
(src/reader/members.c)."""

from __future__ import annotations

import json

import pytest


IDENTITY = ("host", "process_name", "pid", "ppid", "rank", "local_rank", "world_size", "job_id",
            "rank_source", "worker", "num_workers", "loader", "dataset")


def _write(path, meta, start_args):
    ev = [{"id": 1, "name": "HH", "cat": "dftracer", "pid": 42, "tid": 42, "ph": "M",
           "args": {"name": "node-7", "value": "0123456789abcdef"}},
          {"id": 2, "name": "process_name", "cat": "dftracer", "pid": 42, "tid": 42, "ph": "M",
           "args": {"name": "python rank 3", "value": "process_name"}}]
    for i, (name, args) in enumerate(meta, 3):
        ev.append({"id": i, "name": name, "cat": "dftracer", "pid": 42, "tid": 42, "ph": "M",
                   "args": args})
    ev.append({"id": 90, "name": "start", "cat": "dftracer", "pid": 42, "tid": 42, "ts": 10,
               "dur": 0, "ph": "X", "args": start_args})
    ev.append({"id": 91, "name": "read", "cat": "POSIX", "pid": 42, "tid": 42, "ts": 20,
               "dur": 5, "ph": "X", "args": {"fd": 3, "ret": 10, "file": "/d/x"}})
    # whitespace around the args' members: the readers' lenient walk
    lines = ["["] + [json.dumps(e) for e in ev] + [
        '{"id": 92, "name": "write", "cat": "POSIX", "pid": 42, "tid": 42, "ts": 30, '
        '"dur": 5, "ph": "X", "args": { "fd" : 3 , "ret" : 4 , "file" : "/d/x" } }']
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("meta, start, want", [
    ([("rank", {"name": "rank", "value": "5", "local_rank": "1", "world_size": 8,
                "job_id": "j1", "source": "torch.distributed"}),
      ("worker", {"name": "worker", "value": 2, "num_workers": 4, "loader": 1,
                  "dataset": "ImageFolder"})],
     {"ppid": 7},
     {"rank": 5, "local_rank": 1, "world_size": 8, "job_id": "j1",
      "rank_source": "torch.distributed", "worker": 2, "num_workers": 4, "ppid": 7,
      "loader": 1, "dataset": "ImageFolder"}),
    ([("rank", {"name": "rank", "value": 2**31})], {"ppid": "x"},
     {"rank": -1, "local_rank": -1, "world_size": -1, "job_id": "", "rank_source": "",
      "worker": -1, "num_workers": -1, "ppid": -1, "loader": -1, "dataset": ""}),
    ([("CM", {"name": "rank", "value": "4"}), ("worker", {"name": "worker", "value": 1,
                                                          "num_workers": 1, "loader": -2})], {},
     {"rank": 4, "rank_source": "CM", "worker": 1, "num_workers": -1, "loader": -1}),
])
def test_both_passes_read_the_same_identity(tmp_path, meta, start, want):
    from dftracer import _core

    path = _write(tmp_path / "t-node-7-42-app.pfw", meta, start)
    rk, io = _core._rank_file(path), _core._io_file(path)
    assert rk["status"] == io["status"] == "ok"
    assert {k: rk[k] for k in IDENTITY} == {k: io[k] for k in IDENTITY}
    assert (rk["host"], rk["process_name"], rk["pid"]) == ("node-7", "python rank 3", 42)
    for k, v in want.items():
        assert rk[k] == v, k
    # the spaced-out write line was read: two I/O events on one file
    assert io["io_events"] == 2 and rk["bad_lines"] == io["bad_lines"] == 0
    [f] = io["files"]
    assert f[0] == "/d/x"


@pytest.mark.parametrize("args_text, why", [
    ('{"fd": 3, "ret": 4,}', "bad key"),                   # a trailing comma
    ('{"fd": 3 "ret": 4}', "missing ',' or '}'"),
    ('{"fd": 3, "ret": 4, "x": {"a": 1,}}', "bad key"),    # inside a nested object
])
def test_one_member_walk_for_the_line_parser_and_the_passes(tmp_path, args_text, why):
    """A malformed args object is the same bad line to the line parser
    (validate's reason) and to the ranks and I/O passes: one walk.  (A key
    followed by no ':' is not among these: lenient reading takes its quote
    for one of the older tools' unescaped quotes.)"""
    import subprocess
    import sys

    from dftracer import _core

    path = _write(tmp_path / "t-node-7-42-app.pfw", [], {})
    bad = ('{"id": 93, "name": "read", "cat": "POSIX", "pid": 42, "tid": 42, "ts": 40, '
           f'"dur": 5, "ph": "X", "args": {args_text}}}')
    with open(path, "a") as f:
        f.write(bad + "\n")
    rk, io = _core._rank_file(path), _core._io_file(path)
    assert rk["bad_lines"] == io["bad_lines"] == 1
    assert io["io_events"] == 2  # the good read and write only
    r = subprocess.run([sys.executable, "-m", "dftracer", "validate", "--json", path],
                       capture_output=True, text=True)
    report = json.loads(r.stdout)
    problems = [p for f in report["files"] for p in f["problems"]] if "files" in report \
        else report["problems"]
    assert any(why in p for p in problems), problems


def test_an_empty_object_followed_by_text_is_a_bad_line(tmp_path):
    """`{}` went past the parser's check of what follows an object (it
    returned early), so `{} junk` read as an (empty) object."""
    import subprocess
    import sys

    from dftracer import _core

    path = _write(tmp_path / "t-node-7-42-app.pfw", [], {})
    with open(path, "a") as f:
        f.write("{} junk\n")
    rk, io = _core._rank_file(path), _core._io_file(path)
    assert rk["bad_lines"] == io["bad_lines"] == 1
    r = subprocess.run([sys.executable, "-m", "dftracer", "validate", "--json", path],
                       capture_output=True, text=True)
    report = json.loads(r.stdout)
    problems = [p for f in report["files"] for p in f["problems"]] if "files" in report \
        else report["problems"]
    assert any("text after the object" in p for p in problems), problems



def test_the_passes_read_their_args_by_one_table(tmp_path):
    """The ranks and I/O passes read their args through one table reader
    (src/reader/members.c, dft_arg_table_read): the ranks pass takes an
    integer written as a string (as the older tools wrote some) as the
    integer; the I/O pass takes a file's path and its calls' integers."""
    from dftracer import _core

    def trace(name, q):
        ev = [{"id": 1, "name": "start", "cat": "dftracer", "pid": 42, "tid": 42, "ts": 10,
               "dur": 0, "ph": "X", "args": {}},
              {"id": 2, "name": "read", "cat": "POSIX", "pid": 42, "tid": 42, "ts": 20, "dur": 5,
               "ph": "X", "args": {"fd": 3, "ret": 10, "file": "/d/x"}},
              {"id": 3, "name": "all_reduce", "cat": "comm", "pid": 42, "tid": 42, "ts": 30,
               "dur": 5, "ph": "X", "args": {"group": "g", "seq": q(0)}},
              {"id": 4, "name": "all_reduce", "cat": "comm", "pid": 42, "tid": 42, "ts": 40,
               "dur": 5, "ph": "X", "args": {"group": "g", "seq": q(1)}}]
        path = tmp_path / f"{name}-42-app.pfw"
        path.write_text("[\n" + "\n".join(json.dumps(e) for e in ev) + "\n")
        return str(path)

    as_int, as_str = trace("int", lambda v: v), trace("str", str)
    rk_int, rk_str = _core._rank_file(as_int), _core._rank_file(as_str)
    assert len(rk_int["sync"]) == 2 * 16 and rk_str["sync"] == rk_int["sync"]
    io = _core._io_file(as_int)
    assert [f[0] for f in io["files"]] == ["/d/x"]
