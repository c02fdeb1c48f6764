"""The torch functions `dftracer run` times per call (collectives, the
functional collectives, send/recv, torch.save/load; docs/ai.md): C
wrappers (_core._AtCall) that add no Python frame of dftracer's to a call,
look to the program like the functions they replace, leave torch.compile's
handling of a collective as it is, and write the documented events."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tracefile import find_traces, read_trace  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls_prog.py")


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run(tmp_path, traced):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    cmd = [sys.executable, PROG, free_port()]
    if traced:
        cmd = [sys.executable, "-m", "dftracer", "run", "--log-file", str(tmp_path / "t"),
               "--"] + cmd
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[0])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    plain_dir, traced_dir = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("traced")
    plain = run(plain_dir, traced=False)
    traced = run(traced_dir, traced=True)
    (path,) = find_traces(str(traced_dir), "t")
    return plain, traced, read_trace(path), traced_dir


def test_the_wrappers_are_c_and_look_like_the_functions(runs):
    plain, traced, _, _ = runs
    for name, fn in plain["seen"].items():
        assert fn["type"] == "function", name
        mine = traced["seen"][name]
        assert mine["type"] == "_AtCall", name
        assert {k: v for k, v in mine.items() if k != "type"} == \
            {k: v for k, v in fn.items() if k != "type"}, name
        assert fn["pickled"] and fn["callable"]
    # no Python frame of dftracer's runs in a call (after the first, which
    # looks the default group up once)
    assert traced["frames"] == plain["frames"] == {"all_reduce": [], "save": [], "load": []}
    # nor one of torch's that the untraced call does not run
    assert plain["all_frames"] and traced["all_frames"] == plain["all_frames"]


def test_torch_compile_still_remaps_a_collective_in_a_full_graph(runs):
    plain, traced, trace, _ = runs
    assert traced["compiled"] == plain["compiled"] == [3.0, 3.0, 3.0]
    # the compiled call is no event: the all_reduce events are the eager
    # calls (seq 4 and 6 are the broadcast and all_gather_object)
    assert [e["args"]["seq"] for e in trace.of(cat="comm", name="all_reduce")] == [0, 1, 2, 3, 5, 7, 8]


def test_comm_and_checkpoint_events(runs):
    _, _, trace, traced_dir = runs
    comm = [(e["name"], {k: v for k, v in e["args"].items()
                         if k in ("bytes", "group", "group_size", "seq", "async")})
            for e in trace.of(cat="comm")]
    world = {"group": "world", "group_size": 1}
    assert comm == [
        ("all_reduce", dict(world, bytes=16, seq=0)),
        ("all_reduce", dict(world, bytes=16, seq=1)),
        ("all_reduce", dict(world, bytes=16, seq=2)),
        ("all_reduce", dict(world, bytes=16, seq=3)),
        ("broadcast", dict(world, bytes=16, seq=4)),
        ("all_reduce", dict(world, bytes=16, seq=5, **{"async": 1})),
        # all_gather_object's own all_gathers are part of it, no events
        ("all_gather_object", dict(world, bytes=0, seq=6)),
        # the functional all_reduce over the ranks [0] (the default group
        # here): the issue, counted with the group's other collectives
        ("all_reduce", dict(world, bytes=16, seq=7, **{"async": 1})),
        # the one run while torch.compiler's flag said compiling is none
        ("all_reduce", dict(world, bytes=16, seq=8)),
    ]
    ckpt = [(e["name"], e["args"].get("path"), e["args"].get("bytes"))
            for e in trace.of(cat="checkpoint")]
    path = os.path.join(str(traced_dir), "ck.pt")
    size = os.path.getsize(path)
    assert ckpt[:4] == [("torch.save", path, size), ("torch.load", path, size)] * 2
    # a file object: what its position moved (load reads the tensor's bytes
    # and the archive's directory, not all of it)
    assert [c[:2] for c in ckpt[4:]] == [("torch.save", None), ("torch.load", None)]
    assert ckpt[4][2] > 0 and 0 < ckpt[5][2] <= ckpt[4][2]
    for e in trace.of(cat="comm") + trace.of(cat="checkpoint"):
        assert e["ph"] == "X" and e["dur"] >= 0
