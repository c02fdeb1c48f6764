"""Triggered full-detail windows (docs/windows.md): a training loop under
`dftracer run` opens a `window` on 3 slow steps, none in a clean run, one on
`dftracer capture`'s request and one at a stall; `summary --windows` lists
them with the places of their steps against the normal steps'.

The loop's steps sleep 20 ms; a slow one sleeps 300 ms more (15 times a
step), and the tests ask for 3 slow steps in a row above twice the median
(DFTRACER_WINDOW_SLOW_STEPS=3, DFTRACER_WINDOW_SLOW_MARGIN=1), so a busy
machine's stray slow steps do not open one.  The capture and stall tests
wait on the tracer's own state (_core._window_state), not on the clock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tracefile import find_traces, read_trace  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "windows_prog.py")
ROBUST = {"DFTRACER_WINDOW_SLOW_STEPS": "3", "DFTRACER_WINDOW_SLOW_MARGIN": "1"}
TRACE_FORMAT = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "trace-format.md")


def _env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFTRACER_")}
    env.update(ROBUST)
    env.update(extra or {})
    return env


def _cmd(tmp_path, *args):
    return [sys.executable, "-m", "dftracer", "run", "--log-file", str(tmp_path / "t"), "--",
            sys.executable, PROG, *args]


def run(tmp_path, *args, env=None):
    proc = subprocess.run(_cmd(tmp_path, *args), env=_env(env), capture_output=True, text=True,
                          timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc


def trace_of(tmp_path):
    (path,) = find_traces(str(tmp_path), "t")
    return read_trace(path)


def windows_of(tr):
    return tr.of(cat="dftracer", name="window")


def iterations(tr):
    return {e["args"]["step"]: e for e in tr.of(cat="pipeline", name="iteration")}


def summary_windows(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--windows", "--json",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["windows"]


def documented_window_args():
    text = open(TRACE_FORMAT).read().split("### Windows", 1)[1].split("\n### ", 1)[0]
    names = set()
    for line in text.splitlines():
        if line.startswith("| `"):  # the first column: one or more `arg`s
            names.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return names


def check_window_event(w):
    a = w["args"]
    assert w["ph"] == "X" and w["dur"] > 0
    assert set(a) - {"hhash", "level", "p_idx"} <= documented_window_args(), a
    assert a["steps"] == a["step_last"] - a["step_first"] + 1 > 0
    assert a["bytes"] > 0 and a["cost_us"] >= 0 and a["samples"] >= 0
    assert a["samples_timed"] + a["samples_dropped"] <= a["samples"]


def test_three_slow_steps_open_one_window_on_them(tmp_path):
    state, _ = run(tmp_path, "60", "--slow", "30,31,32")
    tr = trace_of(tmp_path)
    its = iterations(tr)
    durs = sorted(e["dur"] for e in its.values())
    median = durs[len(durs) // 2]
    slow = sorted(s for s, e in its.items() if e["dur"] >= 250000)
    assert len(slow) == 3 and slow == list(range(slow[0], slow[0] + 3)), slow
    (w,) = windows_of(tr)
    assert state["windows"] == 1 and not state["open"]
    check_window_event(w)
    a = w["args"]
    assert a["trigger"] == "slow step"
    # it starts at the first slow step and holds all three
    assert a["step_first"] == slow[0] and a["step_last"] >= slow[-1]
    assert a["trigger_step"] == slow[-1] and a["trigger_us"] >= 250000
    assert w["ts"] == its[slow[0]]["ts"]
    last = its[a["step_last"]]
    assert w["ts"] + w["dur"] == last["ts"] + last["dur"]
    assert a["median_us"] < 250000 and a["median_us"] <= 2 * median
    assert a["threshold_us"] >= 2 * a["median_us"]  # the margin asked for
    assert a["sample_hz"] == 1000
    # a sleep: the wall time crossed its threshold, the CPU time did not
    assert a["signal"] == "wall", a
    assert 0 < a["cpu_median_us"] < a["cpu_threshold_us"] and a["trigger_cpu_us"] >= 0, a
    # summary --windows: the slow steps' place, which the normal steps lack
    (row,) = summary_windows(tmp_path)
    assert row["trigger"] == "slow step" and row["steps"] == a["steps"]
    top = row["places"][0]
    assert "slow_part" in top["place"], row["places"]
    assert top["share"] > 0.5 and top["normal_share"] < 0.05
    text = subprocess.run([sys.executable, "-m", "dftracer", "summary", "--windows",
                           str(tmp_path)], capture_output=True, text=True, timeout=300).stdout
    assert "1 window" in text and "slow step" in text and "slow_part" in text


def test_steps_that_work_more_in_the_same_wall_time_open_a_window_on_the_cpu_time(tmp_path):
    """Steps 30 to 32 spend 15 ms of their 20 on a CPU (the others sleep
    the 20 ms): the wall time is as usual, so only the CPU time's threshold
    (its median + the margin, a share of the step) sees them, as it sees a
    rank's extra work that a loaded machine's run queue would hide."""
    state, _ = run(tmp_path, "60", "--busy", "30,31,32",
                   env={"DFTRACER_WINDOW_SLOW_MARGIN": "0.5"})
    tr = trace_of(tmp_path)
    its = iterations(tr)
    busy = sorted(s for s, e in its.items() if e["args"].get("cpu_us", 0) >= 12_000)
    assert busy == [30, 31, 32], [(s, e["args"].get("cpu_us")) for s, e in its.items()]
    (w,) = windows_of(tr)
    check_window_event(w)
    a = w["args"]
    assert a["trigger"] == "slow step" and "cpu" in a["signal"].split(","), a
    assert a["step_first"] == 30 and a["trigger_step"] == 32, a
    assert a["trigger_cpu_us"] >= 12_000 > a["cpu_threshold_us"] - a["cpu_median_us"] >= \
        0.5 * a["median_us"] - 1, a
    assert state["windows"] == 1


def test_a_clean_run_opens_no_window_and_a_bad_setting_warns_once(tmp_path):
    state, proc = run(tmp_path, "100", env={"DFTRACER_WINDOW_SLOW_K": "lots"})
    tr = trace_of(tmp_path)
    assert len(iterations(tr)) >= 100
    assert windows_of(tr) == [] and state["windows"] == 0
    assert state["threshold_us"] > 0  # it was watching
    lines = [ln for ln in proc.stderr.splitlines() if "DFTRACER_WINDOW_SLOW_K" in ln]
    assert len(lines) == 1 and "'lots'" in lines[0] and "using 6" in lines[0], proc.stderr
    assert summary_windows(tmp_path) == []


def test_capture_opens_a_window_on_request(tmp_path):
    p = subprocess.Popen(_cmd(tmp_path, "30", "--capture", "15"), env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=str(tmp_path))
    try:
        assert p.stdout.readline().strip() == "ready"
        cap = subprocess.run([sys.executable, "-m", "dftracer", "capture", str(tmp_path),
                              "--steps", "4"], capture_output=True, text=True, timeout=120)
        assert cap.returncode == 0, cap.stderr
        assert f"asked pid {p.pid}" in cap.stdout or "asked pid" in cap.stdout, cap.stdout
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    state = json.loads(out.splitlines()[-1])
    tr = trace_of(tmp_path)
    (w,) = windows_of(tr)
    assert state["windows"] == 1
    check_window_event(w)
    a = w["args"]
    assert a["trigger"] == "request" and a["steps"] == 4
    its = iterations(tr)
    assert a["step_first"] >= 15 and a["trigger_step"] == a["step_first"] - 1
    assert w["ts"] == its[a["trigger_step"]]["ts"] + its[a["trigger_step"]]["dur"]
    assert a["sample_hz"] == 1000 and a["samples"] >= 1


def test_a_stall_opens_a_window_and_writes_the_stacks(tmp_path):
    state, _ = run(tmp_path, "40", "--stall", "25",
                   env={"DFTRACER_WINDOW_STALL_MIN_S": "1", "DFTRACER_WINDOW_STALL_K": "5",
                        "DFTRACER_FLUSH_INTERVAL": "0.2"})
    tr = trace_of(tmp_path)
    its = iterations(tr)
    stalled = [s for s, e in its.items() if e["dur"] >= 1000000]
    assert len(stalled) == 1, stalled
    (w,) = windows_of(tr)
    check_window_event(w)
    a = w["args"]
    assert a["trigger"] == "stall" and a["step_first"] == stalled[0] == a["trigger_step"]
    assert a["step_last"] == stalled[0] + 3  # DFTRACER_WINDOW_STEPS' default
    assert a["trigger_us"] == its[stalled[0]]["dur"]
    assert "stalled_part" in a.get("places", ""), a
    # the stacks were written at the stall, the step thread's in stalled_part
    stacks = [e for e in tr.events if e.get("name") == "stack" and e["args"].get("why") == "stall"]
    assert stacks and any("stalled_part" in e["args"]["frames"] for e in stacks)
    assert state["windows"] == 1
