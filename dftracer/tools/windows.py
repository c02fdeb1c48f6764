"""dftracer summary --windows: each full-detail window the traced processes
opened (docs/windows.md), with what its detail shows.

For each `window` event (docs/trace-format.md): its rank and pid, trigger,
steps and cost, and the places its steps' time went (the sampler's tally at
the window's rate, plus the `sampled` places of the steps that came before
the trigger), each beside its share of the rank's normal steps (the
iterations outside every window): a place that takes 60 % of the window's
steps and 1 % of the normal ones is where the window went wrong.

This pass reads only the `window`, `iteration` and `rank` lines of each
file (picked by the C reader, reader/event_lines.c), one file at a time."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List

from dftracer import _core
from dftracer.tools import common, paths as _paths

TOP_PLACES = 5

_WANTED = ("window", "iteration", "rank")


def _lines(path: str) -> List[bytes]:
    """The file's `window`, `iteration` and `rank` lines, as written, by the
    C reader (reader/event_lines.c: one trace reader per language); a torn
    last gzip member (a killed process) ends them."""
    return _core._event_lines(path, _WANTED)


def read_file(path: str) -> Dict[str, Any]:
    """{path, rank, pid, windows: [event], iterations: [event]} of one trace."""
    out: Dict[str, Any] = {"path": path, "rank": None, "pid": None, "windows": [],
                           "iterations": []}
    for line in _lines(path):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        name, cat, args = ev.get("name"), ev.get("cat"), ev.get("args") or {}
        if name == "rank" and cat == "dftracer" and isinstance(args.get("value"), int):
            out["rank"] = args["value"]
        elif name == "window" and cat == "dftracer" and ev.get("ph") == "X":
            out["windows"].append(ev)
            out["pid"] = ev.get("pid")
        elif name == "iteration" and cat == "pipeline" and ev.get("ph") == "X":
            out["iterations"].append(ev)
            if out["pid"] is None:
                out["pid"] = ev.get("pid")
    return out


def _window_places(win: Dict[str, Any]) -> Dict[str, int]:
    """The places of a window's tally: "US PLACE" a line."""
    places: Dict[str, int] = {}
    for line in str((win.get("args") or {}).get("places", "")).split("\n"):
        us, _, place = line.partition(" ")
        if place and us.isdigit():
            places[place] = places.get(place, 0) + int(us)
    return places


def _in(step: Any, lo: int, hi: int) -> bool:
    return isinstance(step, int) and lo <= step <= hi


def describe(f: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One dict per window of file f: the event's figures and its top places
    against the normal steps'."""
    spans = []
    for w in f["windows"]:
        a = w.get("args") or {}
        spans.append((int(a.get("step_first", 0)), int(a.get("step_last", -1))))
    normal: Dict[str, int] = {}
    normal_us = 0
    for it in f["iterations"]:
        step = (it.get("args") or {}).get("step")
        if any(_in(step, lo, hi) for lo, hi in spans):
            continue
        normal_us += int(it.get("dur", 0))
        a = it.get("args") or {}
        if a.get("sampled") and isinstance(a.get("sampled_us"), int):
            normal[a["sampled"]] = normal.get(a["sampled"], 0) + a["sampled_us"]
    out = []
    for w, (lo, hi) in zip(f["windows"], spans):
        a = w.get("args") or {}
        places = _window_places(w)
        # the steps before the tally began (a slow run's first steps): their own places
        tally_from = int(a.get("trigger_step", lo)) if a.get("trigger") == "slow step" else lo - 1
        steps_us = 0
        for it in f["iterations"]:
            ia = it.get("args") or {}
            if not _in(ia.get("step"), lo, hi):
                continue
            steps_us += int(it.get("dur", 0))
            if _in(ia.get("step"), lo, tally_from) and ia.get("sampled") and \
                    isinstance(ia.get("sampled_us"), int):
                places[ia["sampled"]] = places.get(ia["sampled"], 0) + ia["sampled_us"]
        whole = steps_us or int(w.get("dur", 0)) or 1
        top = sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PLACES]
        out.append({
            "rank": f["rank"], "pid": w.get("pid", f["pid"]), "path": f["path"],
            "trigger": a.get("trigger"), "also": a.get("also"),
            "step_first": lo, "step_last": hi, "steps": hi - lo + 1,
            "trigger_step": a.get("trigger_step"), "trigger_us": a.get("trigger_us"),
            "median_us": a.get("median_us"), "threshold_us": a.get("threshold_us"),
            "ts": w.get("ts"), "dur": w.get("dur"), "sample_hz": a.get("sample_hz"),
            "samples": a.get("samples"), "cost_us": a.get("cost_us"),
            "bytes": a.get("bytes"), "refused": a.get("refused"), "cut": bool(a.get("cut")),
            "places": [{"place": p, "us": us, "share": us / whole,
                        "normal_share": normal.get(p, 0) / normal_us if normal_us else 0.0}
                       for p, us in top],
        })
    return out


def render(rows: List[Dict[str, Any]]) -> str:
    if not rows:
        return "no window was opened"
    out = [f"{len(rows)} window{'s' if len(rows) != 1 else ''}"]
    for r in rows:
        who = f"rank {r['rank']}" if r["rank"] is not None else f"pid {r['pid']}"
        trig = r["trigger"] + (f" (also {r['also']})" if r.get("also") else "")
        line = (f"== {who}: {trig}, steps {r['step_first']}-{r['step_last']} "
                f"({common.fmt_us(r['dur'] or 0)})")
        if r["trigger"] == "slow step" and r.get("median_us"):
            line += (f"; slowest {common.fmt_us(r['trigger_us'] or 0)} against a median "
                     f"of {common.fmt_us(r['median_us'])}")
        elif r["trigger"] == "stall":
            line += f"; step {r['trigger_step']} took {common.fmt_us(r['trigger_us'] or 0)}"
        out.append(line)
        out.append(f"   sampler {r['sample_hz']} Hz, {r['samples']} samples, cost "
                   f"{common.fmt_us(r['cost_us'] or 0)} CPU, {r['bytes']} bytes"
                   + (", cut at exit" if r["cut"] else "")
                   + (f", {r['refused']} refused before it" if r.get("refused") else ""))
        if not r["places"]:
            out.append("   no sampled place (the steps' time was in code the events time)")
        for p in r["places"]:
            out.append(f"   {100 * p['share']:5.1f} % of the window  "
                       f"{100 * p['normal_share']:5.1f} % of normal steps  "
                       f"{common.printable(p['place'])}")
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    files, errors = _paths.expand(args.paths)
    status = common.EXIT_OK
    for path, msg in errors:
        common.err(f"{path}: {msg}")
        status = common.EXIT_BAD_INPUT
    rows: List[Dict[str, Any]] = []
    for path in files:
        try:
            rows.extend(describe(read_file(path)))
        except OSError as exc:
            common.err(f"{path}: {exc.strerror or exc}")
            status = max(status, common.EXIT_PROBLEMS)
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0, r["pid"] or 0, r["ts"] or 0))
    if args.json:
        json.dump({"windows": rows}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render(rows))
    return status

