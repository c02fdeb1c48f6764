"""What a program can see of `dftracer run`'s zero-code module hooks
(docs/ai.md, "What the program can see"): exactly the hooks documented
there, and an exception raised in `forward` carries torch's own frame while
modules have hooks and no frame of dftracer's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tracefile import find_traces, read_trace  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "visible_prog.py")


def run(tmp_path, traced):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    cmd = [sys.executable, PROG]
    if traced:
        cmd = [sys.executable, "-m", "dftracer", "run", "--log-file", str(tmp_path / "t"),
               "--"] + cmd
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[0])


def test_hooks_left_visible_are_exactly_the_documented_ones(tmp_path):
    plain = run(tmp_path, traced=False)
    traced = run(tmp_path, traced=True)
    for when in ("searching", "after"):
        assert plain[when]["global"] == [0, 0] and plain[when]["top"] == [0, 0]
        assert plain[when]["attrs"]["own"] == [] and plain[when]["attrs"]["types"] == []
    # while the top-level modules are searched for: one global pre-hook and hook
    assert traced["searching"]["global"] == [1, 1]
    assert traced["searching"]["top"] == [0, 0] and traced["searching"]["sub"] == [0, 0]
    assert traced["searching"]["attrs"] == plain["searching"]["attrs"]
    # then: no hook anywhere; the top-level module found has a `forward`
    # attribute of its own, a C object that shows the forward it replaced
    assert traced["after"]["global"] == [0, 0]
    assert traced["after"]["top"] == [0, 0] and traced["after"]["sub"] == [0, 0]
    after = traced["after"]["attrs"]
    assert after["own"] == ["forward"] and after["types"] == ["_AtForward"]
    for key in ("signature", "name", "func", "self", "pickled"):
        assert after[key] == plain["after"]["attrs"][key], key
    assert after["func"] and after["self"] and not after["pickled"]
    # searching: torch's own path for a module with hooks, one more frame (`inner`)
    frames = traced["searching"]["frames"]
    assert not any(os.sep + "dftracer" + os.sep in f for _, f in frames), frames
    names = [n for n, _ in frames]
    assert [n for n, _ in plain["searching"]["frames"]] == [n for n in names if n != "inner"]
    assert names.count("inner") == 1
    (inner,) = [f for n, f in frames if n == "inner"]
    assert inner.endswith(os.path.join("torch", "nn", "modules", "module.py"))
    # after: the C forward adds no frame at all
    assert traced["after"]["frames"] == plain["after"]["frames"]
    # backward(): torch's entry into the autograd engine, a C object of ours
    # around torch's own
    assert plain["engine"] == ["function", True, "torch.autograd.graph"]
    assert traced["engine"] == ["_AtEngineRun", True, "torch.autograd.graph"]
    # and each top-level call is one `forward`, the two that raised included
    # (one through the global hooks, one through the C forward): 1 + 1 + 120 + 1
    (path,) = find_traces(str(tmp_path), "t")
    forwards = read_trace(path).of(cat="compute", name="forward")
    assert len(forwards) == 123 and {e["args"]["module"] for e in forwards} == {"M"}
