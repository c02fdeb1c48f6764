"""How many steps a killed rank had done (docs/hang.md, "After the job").

SIGKILL (the OOM killer's signal) lets nothing run: the rank's trace loses
what it had not written yet, up to one flush interval of events, so its own
last step is short by as many steps as fit in that interval.  Its peers'
traces hold the rest.  A collective completes only once every rank of its
group has entered it, so the newest collective a peer completed in a group
the dead rank belongs to (the ranks pass keeps each group's newest sync
point: `last_sync`) was entered by the dead rank too.  In ranks that keep
in lock step (a collective in every step), the step the peer was in at that
moment was the dead rank's step then: it had finished the step before, and
not the step after (that step's collectives would have completed on the
peer as well).  Which of the two: by where in the peer's step the collective
ended.  In its second half (a gradient all-reduce, a loss all-reduce at the
step's end), the rank most likely died in the next step's time before its
collectives: it finished the step; in its first half, in the rest of that
step.  Either way the count is within one step of the truth."""

from __future__ import annotations

import bisect
import statistics
from typing import Any, Callable, Dict, List, Optional, Tuple

from dftracer import _core
from dftracer.tools.line_keys import unescape

LOCKSTEP_LOOK = 16   # a peer's last steps looked at for a collective in each
PAST_STEPS = 1.5     # a collective this many median steps after the last step is past them

_COMM = _core._RANK_CLASSES.index("comm")

Steps = List[Tuple[int, int, int]]  # (number, ts, dur), by ts


def steps_of(raw: Any) -> Tuple[Steps, List[bool]]:
    """A ranks pass result's steps (its `steps`, a _core.RankSteps of int64
    columns) as (number, ts, dur) by start, and for each whether it holds
    collective time."""
    if not isinstance(raw, _core.RankSteps):
        return [], []
    cols = [memoryview(c).cast("q") for c in (raw.number, raw.ts, raw.dur, raw.by_class[_COMM])]
    if len({len(c) for c in cols}) != 1:
        return [], []
    rows = sorted(zip(cols[1], cols[0], cols[2], (x > 0 for x in cols[3])))
    return [(num, ts, dur) for ts, num, dur, _ in rows], [c for *_, c in rows]


def _lockstep(comm: List[bool]) -> bool:
    """A collective in every one of the last steps but one at most (the first
    step of a job may have none)."""
    tail = comm[-LOCKSTEP_LOOK:]
    return len(tail) >= 2 and tail.count(False) <= 1


def step_at(steps: Steps, end: int) -> Optional[int]:
    """The last step a rank had finished when a collective it took part in
    ended at `end` on a peer whose steps are `steps` (the module's rule), or
    None when the peer had no step before it."""
    i = bisect.bisect_right([s[1] for s in steps], end) - 1
    if i < 0:
        return None
    number, ts, dur = steps[i]
    if end <= ts + dur:
        return number if (end - ts) * 2 >= dur else number - 1
    if i + 1 < len(steps):
        return number  # between two steps: that one was finished
    med = statistics.median(d for _, _, d in steps[-LOCKSTEP_LOOK:])
    after = end - (ts + dur)
    if med <= 0 or after > PAST_STEPS * med:
        return number  # after the steps were over
    return number + 1 if after * 2 >= med else number


def _steps(p: Dict[str, Any]) -> Tuple[Steps, List[bool]]:
    """A process's steps, read from its pass result's bytes once."""
    if "_steps" not in p:
        p["_steps"] = steps_of(p.get("_steps_raw"))
    return p["_steps"]


def last_step(dead: Dict[str, Any], peers: List[Dict[str, Any]],
              member: Callable[[str], bool]) -> Optional[int]:
    """The last step the dead rank finished by its peers' collectives (None
    when they cannot say: no common group, no lock step, no steps).  dead
    and peers: hang.procs_of's processes (`step_kind`, `last_sync`,
    `_steps_raw`); member(group) says whether the dead rank is one of a
    group's ranks.  The peer must keep in lock step: a collective in each of
    its last steps, which the dead rank, of the same group, took part in too
    (the dead rank's own steps cannot say: each of its threads lost its own
    last interval, so the steps it wrote last lack the collectives that
    another thread, a DDP bucket's completion callback, had not written)."""
    mine = {g for g, _seq, _end in dead.get("last_sync") or []}
    if not mine:
        return None
    best = None
    for p in peers:
        if p is dead or p.get("step_kind") != dead.get("step_kind") or \
                not _lockstep(_steps(p)[1]):
            continue
        for group, _seq, end in p.get("last_sync") or []:
            if group not in mine or not member(unescape(group)):
                continue
            s = step_at(_steps(p)[0], end)
            if s is not None and (best is None or s > best):
                best = s
    return best
