"""Process lifecycle glue that needs Python APIs: exit and forked workers.

The core already flushes before fork() and finalizes from a C ``atexit``
handler.  Two exits bypass both: ``os._exit`` in a forked multiprocessing
child (DataLoader workers), and interpreter teardown ordering.  This module
closes those gaps.
"""

from __future__ import annotations

import atexit
import os

from dftracer import _core

_installed = False


def _finalize_in_worker() -> None:
    _core.finalize()


def _after_fork_in_child() -> None:
    # multiprocessing's fork start method ends children with os._exit() after
    # running its own finalizers; register one so the child's trace is complete.
    if not _core.is_active():
        return
    try:
        from multiprocessing import util
    except ImportError:  # pragma: no cover - multiprocessing is always present
        return
    util.Finalize(None, _finalize_in_worker, exitpriority=-100)


def install() -> None:
    """Registers the exit and fork hooks once per interpreter."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(_core.finalize)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
