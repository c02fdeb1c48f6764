"""`top`'s shares of a process's steps, split as `summary --ranks` splits a
rank's (docs/cli.md, "dftracer top", "Shares"; reader/ranks_steps.c is the
C twin): each share event waits, with its share, until the step it is in
ends (a step is written after its events), then counts in the second that
step ended in; a comm or compute event's share is read when the shares are
shown, as another thread's collectives are often written after the step.
The state lives on top_figures.Process (pending, step_split, last_rec)."""

from __future__ import annotations

from collections import deque
from typing import Any, Dict, Optional, Tuple

from dftracer.tools import classes

GROUPS = classes.CLASSES
PENDING_MAX = 4096  # events kept, with their share, until the step they are in ends
US = 1_000_000


def pend(p: Any, ts: int, end: int, tid: int, group: str, own: int) -> None:
    """An event whose share waits for its step (a comm or compute event
    keeps its record: a later event on another thread may still take
    communication wait off it)."""
    rec = p.last_rec if group in ("comm", "compute") else None
    if rec is not None:
        own = p.last_own  # before the waits already matched took theirs off
    p.pending.append((ts, end, tid, group, rec, own))


def split_step(p: Any, ts: int, end: int, tid: int) -> None:
    """The step [ts, end) of thread tid ended: its split, as
    reader/ranks_steps.c makes it (docs/cli.md, "How a rank's time is
    split"): the self time of the events of its thread inside it, a
    compute event's time while another thread's collective ran counted
    as comm, the rest other.  A comm or compute event's share is read
    when the split is (step_shares): another thread's collectives are
    often written after the step (each thread's buffer is its own)."""
    sec = end // US
    if sec < p.low:
        sec = -1  # older than the window: nothing is kept of it
    b = p.step_split.get(sec) if sec >= 0 else None
    if b is None and sec >= 0:
        b = p.step_split[sec] = [dict.fromkeys(GROUPS, 0.0), 0.0, []]
    keep: deque = deque(maxlen=PENDING_MAX)
    for item in p.pending:
        t0, e, t, group, rec, own = item
        if e > end or t0 >= end:
            keep.append(item)  # (also) in a later step
        if b is None or t != tid or e <= ts or t0 >= end:
            continue
        frac = (min(e, end) - max(t0, ts)) / (e - t0) if (t0 < ts or e > end) and e > t0 else 1.0
        if rec is not None and len(b[2]) < PENDING_MAX:
            b[2].append((rec, frac, own, group))
        else:
            b[0][group] += (rec[4] if rec is not None else own) * frac
    p.pending = keep
    if b is not None:
        b[1] += end - ts


def step_shares(p: Any, window: int) -> Optional[Tuple[float, Dict[str, float]]]:
    """(the steps' time, their split by group) of the steps that ended in
    the last `window` seconds, or None when none did."""
    if not p.head or not p.step_split:
        return None
    last = p.head // US
    first = last - window + 1
    total, split = 0.0, dict.fromkeys(GROUPS, 0.0)
    for sec, (fixed, steps, recs) in p.step_split.items():
        if not first <= sec <= last:
            continue
        total += steps
        for g in GROUPS:
            split[g] += fixed[g]
        for rec, frac, own, group in recs:
            left = rec[4]
            split[group] += left * frac
            if group == "compute" and own > left:  # its communication wait
                split["comm"] += (own - left) * frac
    return (total, split) if total > 0 else None
