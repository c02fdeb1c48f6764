"""Models first called late are timed: a script shaped like pytorch/examples'
word_language_model (no DataLoader; model.train()/eval() per epoch; the model
saved whole and reloaded with torch.load for the test pass) gets a `forward`
event for every call of its model, the reloaded one's included."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tracefile import find_traces, read_trace

torch = pytest.importorskip("torch", reason="needs torch")

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "late_model_prog.py")
EPOCHS, TRAIN, EVAL = 3, 6, 4


def test_every_forward_of_the_model_is_an_event(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, PROG, str(tmp_path / "model.pt"), str(EPOCHS), str(TRAIN), str(EVAL)],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = find_traces(str(tmp_path / "runs"))
    trace = read_trace(path)
    fwd = [e["args"]["module"] for e in trace.of(cat="compute", name="forward")]
    assert fwd.count("RNNModel") == EPOCHS * (TRAIN + EVAL) + EVAL, fwd
    assert len(trace.of(cat="compute", name="backward")) == EPOCHS * TRAIN
    loads = trace.of(cat="checkpoint", name="torch.load")
    last = [e for e in trace.of(cat="compute", name="forward") if e["ts"] > loads[0]["ts"]]
    assert [e["args"]["module"] for e in last].count("RNNModel") == EVAL
    # the by-name table has a row per module (docs/cli.md, "By name"), counted as the events
    out = subprocess.run([sys.executable, "-m", "dftracer", "summary", str(tmp_path / "runs"),
                          "--by", "name", "--json"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    import json

    rows = {r["module"]: r for r in json.loads(out.stdout)["by_name"]
            if (r["cat"], r["name"]) == ("compute", "forward")}
    assert set(rows) == set(fwd) and len(rows) >= 2, rows.keys()
    for module, row in rows.items():
        assert row["count"] == fwd.count(module), (module, row)
    text = subprocess.run([sys.executable, "-m", "dftracer", "summary", str(tmp_path / "runs"),
                           "--by", "name", "--top", "0"], capture_output=True, text=True,
                          env=env).stdout
    assert "forward [RNNModel]" in text, text


HOOKED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hooked_model_prog.py")


def hooked_run(tmp_path, steps, *mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    proc = subprocess.run(
        [sys.executable, "-m", "dftracer", "run", "-q", "--log-file", "runs/trace", "--",
         sys.executable, HOOKED, str(steps), *mode],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = find_traces(str(tmp_path / "runs"))
    trace = read_trace(path)
    fwd = [e for e in trace.of(cat="compute", name="forward") if e["args"]["module"] == "Sequential"]
    assert len(fwd) == steps, fwd
    return trace, [e["dur"] for e in fwd]


def test_hooks_the_program_adds_later_count_from_the_next_forward(tmp_path):
    """Hooks put on the model after its forward is timed by ours (a pre-hook
    on the DDP wrapper after DDP(...)): the forward they are first seen in
    is as before, every later one has them inside."""
    steps, late = 8, 3
    _, durs = hooked_run(tmp_path, steps, "late")
    assert all(d < 1000 * 30 for d in durs[:late + 1]), durs
    assert all(d >= 1000 * (30 + 20) for d in durs[late + 1:]), durs


def test_the_programs_own_hooks_count_inside_forward(tmp_path):
    """A pre-hook and a hook the program put on its model run inside the
    model's `forward` event (issue 49: they were `other (untraced)`)."""
    steps = 6
    trace, durs = hooked_run(tmp_path, steps)
    # the pre-hook's sleep inside every forward (a sleep never returns early);
    # the hook's too once the search for top-level modules ended (the model
    # forwarding a second time ends it: torch runs the global hooks of the
    # search before a module's own, docs/ai.md)
    assert all(d >= 1000 * 30 for d in durs), durs
    assert all(d >= 1000 * (30 + 20) for d in durs[2:]), durs
    its = trace.of(cat="pipeline", name="iteration")
    assert len(its) == steps
    fwd = trace.of(cat="compute", name="forward")
    for it in its[1:]:  # each step's forward lies within its iteration
        assert any(it["ts"] <= e["ts"] and e["ts"] + e["dur"] <= it["ts"] + it["dur"] for e in fwd)
