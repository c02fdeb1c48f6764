"""Training iterations (`pipeline/iteration` events), numbered per process.

An iteration runs from the end of one optimizer step to the end of the next.
With several optimizers, it ends at the end of the last one that steps
before the first steps again: the set of optimizers of an iteration is
learned from the first one (whose event is written when the next begins)
and every later iteration ends as soon as all of them stepped.  A process in
which no optimizer ever stepped counts DataLoader batches instead: an
iteration runs from one `next()` on a DataLoader iterator to the next.  The
first iteration starts at the first batch fetch, top-level forward or step.
Until a second batch iteration closes, the first is held back: a script that
peeks at its loader (next(iter(loader))) before training with an optimizer
gets no extra iteration for the peek (iterations = optimizer steps).
"""

from __future__ import annotations

import atexit
from typing import List, Optional

from dftracer._autotrace._base import emit, part, span_close, span_open

P = part("steps")

NONE, LOADER, OPTIM = 0, 1, 2


class _Steps:
    def __init__(self) -> None:
        self.step = 0                   # number of the current iteration
        self.start: Optional[int] = None  # its start, once something happened
        self.mode = NONE
        self.epoch: Optional[int] = None  # epoch of the loader last fetched from
        self.stepped: List[int] = []    # optimizers (ids) stepped in this iteration
        self.cycle: Optional[frozenset] = None  # the optimizers of one iteration
        self.last_end = 0               # end of the last optimizer step
        self.batch_pending = False      # LOADER: a batch was fetched, not closed
        self.last_activity = 0
        self.tok = 0                    # the open span of the current iteration
        self.held: Optional[tuple] = None  # LOADER: the first iteration, (start, end, ints)
        self.loader_sure = False        # LOADER: two batch iterations closed, no optimizer


S = _Steps()


def _close(end: int) -> None:
    start = S.start if S.start is not None and S.start <= end else end
    ints = {"step": S.step}
    if S.epoch is not None:
        ints["epoch"] = S.epoch
    S.step += 1
    S.start = end
    _reopen(end)
    if S.mode == LOADER and not S.loader_sure:
        if S.held is None:
            S.held = (start, end, ints)
            return
        S.loader_sure = True
        _emit_held()
    try:
        emit("iteration", "pipeline", start, end, ints)
    except Exception as exc:
        P.fail(exc)


def _reopen(start: Optional[int]) -> None:
    """The open span of the iteration: closed, and opened again from start."""
    if S.tok:
        span_close(S.tok)
        S.tok = 0
    if start is not None:
        S.tok = span_open("iteration", "pipeline", start, None, S.step)


def _emit_held() -> None:
    held, S.held = S.held, None
    if held is not None:
        try:
            emit("iteration", "pipeline", *held)
        except Exception as exc:
            P.fail(exc)


def activity(start: int, end: int = 0) -> None:
    """Something of an iteration (a forward, a backward, a step) ran from
    start to end."""
    if S.start is None:
        S.start = start
        _reopen(start)
    if end > S.last_activity:
        S.last_activity = end


def fetch_begin(ts: int) -> None:
    if S.mode != OPTIM and S.batch_pending:
        S.batch_pending = False
        _close(ts)
    activity(ts)


def fetch_end(start: int, end: int, epoch: Optional[int]) -> None:
    if epoch is not None:
        S.epoch = epoch
    if S.mode != OPTIM:
        S.mode = LOADER
        S.batch_pending = True
    activity(start, end)


def loader_exhausted(ts: int) -> None:
    """A DataLoader iterator ended: the last batch's iteration ends here."""
    if S.mode != OPTIM and S.batch_pending:
        S.batch_pending = False
        _close(ts)
        S.start = None
        _reopen(None)


def optimizer_begin(opt: int, ts: int) -> None:
    if opt in S.stepped:  # a new round: the previous iteration ended at the last step
        S.cycle = frozenset(S.stepped)
        S.stepped = []
        _close(S.last_end)
    activity(ts)


def optimizer_end(opt: int, ts: int) -> None:
    if S.held is not None:  # batches were iterations only until an optimizer stepped
        S.start, S.held = S.held[0], None
        S.step -= 1
    S.mode = OPTIM
    S.batch_pending = False
    S.stepped.append(opt)
    S.last_end = ts
    activity(ts, ts)
    if S.cycle is not None and S.cycle.issubset(S.stepped):
        S.stepped = []
        _close(ts)


def current() -> int:
    return S.step


def _at_exit() -> None:
    """The iteration still open at exit: steps seen before the end, or the
    last batch of a loop left with `break`."""
    try:
        S.loader_sure = True  # what is held is an iteration after all
        _emit_held()
        if S.stepped:
            S.stepped = []
            _close(S.last_end)
        elif S.mode == LOADER and S.batch_pending:
            S.batch_pending = False
            _close(S.last_activity)
    except Exception:
        pass


def install() -> None:
    # atexit runs last-registered first: this runs before the trace's finalize.
    atexit.register(_at_exit)
    P.started()
