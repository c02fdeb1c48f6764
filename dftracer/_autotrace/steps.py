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

The state machine runs in C (src/torch/autotrace_steps.c), called by the C
hooks of the fetches, forwards, backwards and optimizer steps.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any, Callable, Tuple, Union

from dftracer import _core
from dftracer._autotrace._base import _say, part

P = part("steps")

current: Callable[[], int] = _core._at_step  # number of the current iteration


def _at_exit() -> None:
    """The iteration still open at exit: steps seen before the end, or the
    last batch of a loop left with `break`."""
    try:
        _core._at_steps_exit()
    except Exception:
        pass


def _cuda_memory() -> Union[Tuple[int, int, int, int, int], bool]:
    """The CUDA caching allocator's figures of torch's current device at an
    iteration's end (docs/memory.md): (device, allocated, reserved, peak
    allocated, peak reserved) bytes, the numbers `torch.cuda.memory_allocated`,
    `memory_reserved`, `max_memory_allocated` and `max_memory_reserved` give,
    from one call of the allocator's statistics.  Called by the C step
    boundary only once torch.cuda is initialized; False (the C side stops
    calling) when they cannot be read."""
    try:
        cuda: Any = sys.modules["torch.cuda"]
        device = int(cuda.current_device())
        stats = getattr(sys.modules["torch"]._C, "_cuda_memoryStats", None)
        if stats is not None:
            st = stats(device)
            a, r = st["allocated_bytes"]["all"], st["reserved_bytes"]["all"]
            return (device, int(a["current"]), int(r["current"]), int(a["peak"]), int(r["peak"]))
        return (device, int(cuda.memory_allocated(device)), int(cuda.memory_reserved(device)),
                int(cuda.max_memory_allocated(device)), int(cuda.max_memory_reserved(device)))
    except Exception as exc:
        _say(f"torch CUDA memory counters off ({type(exc).__name__}: {exc})")
        return False


def install() -> None:
    # atexit runs last-registered first: this runs before the trace's finalize.
    atexit.register(_at_exit)
    _core._at_cuda_mem_setup(_cuda_memory)
    P.started()
