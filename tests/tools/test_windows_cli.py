"""`dftracer summary --windows` and `dftracer capture` on their own (no
training loop): a trace written by hand in the format of
docs/trace-format.md ("Windows", `iteration`), read back; bad input refused
by name.  The windows a traced loop opens are the integration tests'
test_windows.py's."""

from __future__ import annotations

import json
import subprocess
import sys


def cli(*args):
    return subprocess.run([sys.executable, "-m", "dftracer", *args], capture_output=True,
                          text=True, timeout=120)


def ev(**kw):
    base = {"id": 1, "pid": 4242, "tid": 4242, "ph": "X"}
    base.update(kw)
    return json.dumps(base)


def write_trace(path, n=20, window=(8, 11), trigger_step=9):
    lines = ["[", json.dumps({"id": 2, "name": "rank", "cat": "dftracer", "pid": 4242,
                              "tid": 4242, "ph": "M", "args": {"name": "rank", "value": 3}})]
    t = 1000
    for s in range(n):
        slow = window[0] <= s <= trigger_step
        dur = 300000 if slow else 20000
        args = {"step": s, "sampled": "train.py:slow_part" if slow else "train.py:work",
                "sampled_us": dur - 1000}
        lines.append(ev(name="iteration", cat="pipeline", ts=t, dur=dur, args=args))
        if s == window[0]:
            w_ts = t
        t += dur
        if s == window[1]:
            w_end = t
    lines.append(ev(name="window", cat="dftracer", ts=w_ts, dur=w_end - w_ts, args={
        "trigger": "slow step", "step_first": window[0], "step_last": window[1],
        "steps": window[1] - window[0] + 1, "trigger_step": trigger_step,
        "trigger_us": 300000, "median_us": 20000, "threshold_us": 25001, "sample_hz": 1000,
        "samples": 40, "samples_timed": 3, "samples_dropped": 0, "samples_missed": 0,
        "cost_us": 800, "bytes": 350, "refused": 0,
        "places": "30000 train.py:work\n500 train.py:log"}))
    path.write_text("\n".join(lines) + "\n")


def test_summary_windows_lists_the_window_and_its_places_against_normal_steps(tmp_path):
    write_trace(tmp_path / "t-h-4242-app.pfw")
    proc = cli("summary", "--windows", "--json", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["windows"]
    assert row["rank"] == 3 and row["trigger"] == "slow step"
    assert (row["step_first"], row["step_last"], row["steps"]) == (8, 11, 4)
    by = {p["place"]: p for p in row["places"]}
    # the two slow steps before the tally began (8, 9) bring their own place
    whole = 2 * 300000 + 2 * 20000
    assert by["train.py:slow_part"]["us"] == 2 * 299000
    assert abs(by["train.py:slow_part"]["share"] - 2 * 299000 / whole) < 1e-9
    assert by["train.py:slow_part"]["normal_share"] == 0
    # the normal steps: 16 of 20 ms at work each
    assert abs(by["train.py:work"]["normal_share"] - 19000 / 20000) < 1e-9
    assert row["places"][0]["place"] == "train.py:slow_part"
    text = cli("summary", "--windows", str(tmp_path)).stdout
    assert "1 window" in text and "== rank 3: slow step, steps 8-11" in text
    assert "train.py:slow_part" in text


def test_summary_windows_of_a_trace_without_any(tmp_path):
    (tmp_path / "t-h-1-app.pfw").write_text("[\n" + ev(name="iteration", cat="pipeline", ts=1,
                                                       dur=5, args={"step": 0}) + "\n")
    proc = cli("summary", "--windows", str(tmp_path))
    assert proc.returncode == 0 and proc.stdout.strip() == "no window was opened"
    proc = cli("summary", "--windows", "--ranks", str(tmp_path))
    assert proc.returncode == 2 and "--windows" in proc.stderr


def test_capture_refuses_bad_steps_and_says_when_no_process_listens(tmp_path):
    write_trace(tmp_path / "t-h-4242-app.pfw")
    proc = cli("capture", str(tmp_path), "--steps", "0")
    assert proc.returncode == 2 and "--steps" in proc.stderr
    proc = cli("capture", str(tmp_path))
    assert proc.returncode == 2 and "no live traced process" in proc.stderr
    assert not list(tmp_path.glob("*.req"))
