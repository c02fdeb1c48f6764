"""What a program can see of `dftracer run`'s zero-code module hooks
(docs/ai.md, "What the program can see"): exactly the hooks documented
there, and an exception raised in `forward` carries torch's own frame for
modules with hooks and no frame of dftracer's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

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
    # while the top-level modules are searched for: one global pre-hook and hook
    assert traced["searching"]["global"] == [1, 1]
    assert traced["searching"]["top"] == [0, 0] and traced["searching"]["sub"] == [0, 0]
    # then: one pre-hook and one hook on each top-level module found, none elsewhere
    assert traced["after"]["global"] == [0, 0]
    assert traced["after"]["top"] == [1, 1] and traced["after"]["sub"] == [0, 0]
    for when in ("searching", "after"):
        frames = traced[when]["frames"]
        assert not any(os.sep + "dftracer" + os.sep in f for _, f in frames), frames
        names = [n for n, _ in frames]
        # torch's own path for a module with hooks: one more frame, `inner`
        assert [n for n, _ in plain[when]["frames"]] == [n for n in names if n != "inner"]
        assert names.count("inner") == 1
        (inner,) = [f for n, f in frames if n == "inner"]
        assert inner.endswith(os.path.join("torch", "nn", "modules", "module.py"))
