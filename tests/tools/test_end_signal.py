"""An `end` that names a signal (docs/trace-format.md: `"signal":N`, written
when SIGTERM/SIGHUP with its default action ends a traced process, issue 66)
is read by every reader as "asked to stop / ended by signal N", never as
"finished normally": the hang post mortem (a hung job its launcher killed
is still a hang, its ranks `exited`, none finished or dead), `top`'s live
hang and its note, `summary --memory`'s end, `summary`'s finalized column,
and `validate` (a whole, valid file).  Each case is checked against the
same job whose ends name no signal, where the readers say "finished"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from dftracer import _core
from dftracer.tools import hang
from test_hang_post_mortem import S, T0, Trace, ar, dft, it, ranks_json

SIGTERM = 15


def killed_job(tmp_path: Path, signal_in_end: bool) -> List[str]:
    """4 ranks; 0-2 wait in all_reduce #8, rank 3 stopped in its iteration 8
    (outside the collective); the launcher then ended every rank with
    SIGTERM: each wrote its SIGTERM stacks and its `end` (with the signal,
    as the tracer writes it, or, for the control, without)."""
    paths = []
    for r in range(4):
        t = Trace(100 + r, rank=r).steps(8)
        if r == 3:
            t.snapshot(T0 + 9 * S, [it(T0 + 8 * S, 8)])
        else:
            t.snapshot(T0 + 9 * S, [it(T0 + 8 * S, 8), ar(T0 + 8 * S + 10, 8)])
        t.clock(T0 + 40 * S)
        t.stacks(T0 + 41 * S, "/job/train.py:30 <module>" if r == 3 else "/job/train.py:44 <module>")
        t.x("end", "dftracer", T0 + 41 * S + 5, 0,
            dict({"num_events": t.i}, **({"signal": SIGTERM} if signal_in_end else {})))
        paths.append(t.write(tmp_path))
    return paths


def test_the_end_line_is_as_the_format_says(tmp_path):
    """The control files are what the readers are handed: end last, its
    args num_events then signal."""
    path = killed_job(tmp_path, True)[0]
    import gzip

    with gzip.open(path, "rt") as fh:
        last = json.loads(fh.read().splitlines()[-1])
    assert (last["name"], last["cat"], last["ph"]) == ("end", "dftracer", "X")
    assert list(last["args"])[-2:] == ["num_events", "signal"] and last["args"]["signal"] == 15


@pytest.mark.parametrize("signal_in_end", [True, False])
def test_the_ranks_pass_and_the_post_mortem(tmp_path, signal_in_end):
    paths = killed_job(tmp_path, signal_in_end)
    results = [_core._rank_file(p) for p in paths]
    assert [r["finalized"] for r in results] == [True] * 4
    assert [r["end_signal"] for r in results] == [SIGTERM if signal_in_end else 0] * 4
    states = [p["state"] for p in hang.procs_of(results)]
    h = ranks_json(tmp_path)["hang"]
    if not signal_in_end:  # ends that name no signal: every rank finished, no hang
        assert states == ["finished"] * 4
        assert h is None
        return
    # asked to stop, never finished: the hang the launcher ended is named
    assert states == ["exited"] * 4
    assert h["stuck_ranks"] == [3] and h["waiting_ranks"] == [0, 1, 2] and h["dead_ranks"] == []
    (s,) = h["stuck"]
    assert s["state"] == "exited" and s["pid"] == 103
    # where its SIGTERM stacks found it; waited from all_reduce's start to the kill
    assert h["message"] == ("hang: rank 3 stopped in train.py:30 (<module>) during iteration 8; "
                            "ranks 0, 1, 2 waited 33.0 s in all_reduce #8 (world)")
    rc, text = dft("summary", "--ranks", "-j", "1", str(tmp_path))
    assert rc == 0 and text.splitlines()[0] == h["message"]


@pytest.mark.parametrize("signal_in_end", [True, False])
def test_top_reads_the_signal_in_its_note_and_its_hang(tmp_path, signal_in_end):
    killed_job(tmp_path, signal_in_end)
    rc, out = dft("top", "--once", "--json", "--hang-after", "0", str(tmp_path))
    assert rc == 0
    snap = json.loads(out)
    procs = sorted(snap["processes"], key=lambda p: p["pid"])
    assert [p["state"] for p in procs] == ["finished"] * 4  # the file will not grow
    if signal_in_end:
        assert [(p["end_signal"], p["mark"]) for p in procs] == [(15, "ended by SIGTERM")] * 4
        assert snap["hang"]["stuck_ranks"] == [3] and snap["hang"]["waiting_ranks"] == [0, 1, 2]
    else:
        assert [(p["end_signal"], p["mark"]) for p in procs] == [(None, "")] * 4
        assert snap["hang"] is None


@pytest.mark.parametrize("signal_in_end", [True, False])
def test_memory_summary_and_validate(tmp_path, signal_in_end):
    paths = killed_job(tmp_path, signal_in_end)
    rc, out = dft("summary", "--memory", "--json", "-j", "1", str(tmp_path))
    assert rc == 0
    mem = json.loads(out)["processes"]
    want_end = ("exited", SIGTERM) if signal_in_end else ("finalized", None)
    assert [(p["end"], p["end_signal"]) for p in mem] == [want_end] * 4
    assert mem and not json.loads(out)["running"] and not json.loads(out)["oom"]
    rc, text = dft("summary", "--memory", "-j", "1", str(tmp_path))
    cells = [line.split()[-1] if not signal_in_end else " ".join(line.split()[-2:])
             for line in text.splitlines()[3:7]]
    assert cells == (["exited (SIGTERM)"] if signal_in_end else ["finalized"]) * 4, text

    rc, out = dft("summary", "--json", "-j", "1", str(tmp_path))
    s = json.loads(out)
    assert s["overview"]["signalled_files"] == (4 if signal_in_end else 0)
    assert s["overview"]["unfinalized_files"] == 0  # whole files all the same
    assert [(p["finalized"], p["end_signal"]) for p in s["processes"]] == \
        [(True, SIGTERM if signal_in_end else None)] * 4
    rc, text = dft("summary", "-j", "1", str(tmp_path))
    rows = text.splitlines()[-4:]
    assert all(r.endswith("yes, then SIGTERM" if signal_in_end else "yes") for r in rows), text

    rc, out = dft("validate", "--json", *paths)
    got: List[Dict] = [json.loads(line) for line in out.splitlines()]
    assert [(v["verdict"], v["finalized"], v["end_signal"]) for v in got] == \
        [("ok", True, SIGTERM if signal_in_end else 0)] * 4
    rc, text = dft("validate", paths[0])
    assert rc == 0
    assert text.startswith("OK ") and text.splitlines()[0].endswith(
        "(then ended by SIGTERM)" if signal_in_end else "gzip members"), text


@pytest.mark.parametrize("value", ['"15"', "0", "-15", "65", "15.0", "true", "[15]"])
def test_a_signal_that_is_no_signal_number_is_none(tmp_path, value):
    """Only an integer 1-64 is a signal: anything else reads as no signal
    (a normal end), the same in the C passes and in top's reader."""
    t = Trace(100, rank=0).steps(2)
    t.lines.append(json.dumps({"id": t.i + 1, "name": "end", "cat": "dftracer", "pid": 100,
                               "tid": 100, "ts": T0 + 5 * S, "dur": 0, "ph": "X",
                               "args": {"num_events": t.i}}, separators=(",", ":"))[:-2]
                   + f',"signal":{value}}}}}')
    path = t.write(tmp_path)
    assert json.loads(_gunzip_last(path))["args"]["signal"] == json.loads(value)
    assert _core._rank_file(path)["end_signal"] == 0
    assert _core._memory_file(path)["end_signal"] == 0
    rc, out = dft("top", "--once", "--json", str(tmp_path))
    (p,) = json.loads(out)["processes"]
    assert (p["state"], p["end_signal"], p["mark"]) == ("finished", None, "")


def _gunzip_last(path: str) -> str:
    import gzip

    with gzip.open(path, "rt") as fh:
        return fh.read().splitlines()[-1]
