"""Process lifecycle glue that needs Python APIs: exit and forked workers.

The core flushes before fork() and finalizes from a C ``atexit`` handler.  Two
exits bypass both: ``os._exit`` at the end of a forked multiprocessing child
(Pool and DataLoader workers), and interpreter teardown ordering.  This module
closes those gaps.
"""

from __future__ import annotations

import atexit
import os

from dftracer import _core

_installed = False


class _ForkToken:
    """multiprocessing keeps after-fork callbacks in a weak registry keyed by
    an object; this one lives as long as the module."""


_token = _ForkToken()


def _in_forked_worker(_: object) -> None:
    # multiprocessing clears its finalizer registry at the start of a forked
    # child, then runs the after-fork callbacks: register the finalizer here so
    # it runs in util._exit_function() before the child's os._exit().
    if _core.is_active():
        from multiprocessing import util

        util.Finalize(None, _core.finalize, exitpriority=-100)


def install() -> None:
    """Registers the exit and fork hooks once per interpreter."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(_core.finalize)
    from multiprocessing import util

    util.register_after_fork(_token, _in_forked_worker)
    if os.environ.get("DFTRACER_ENABLE_CUPTI", "").lower() in ("1", "true", "yes", "on"):
        # GPU activity starts with the trace (in C); torch.profiler must still
        # find CUPTI free while it runs.
        from dftracer.python import cupti

        cupti._install_profiler_guard()
