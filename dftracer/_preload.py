"""Starts tracing at interpreter start-up (``dftracer run``).

Imported by the ``dftracer-preload.pth`` file installed next to the package
(or by ``dftracer/_startup/sitecustomize.py`` when running from a source
tree) only when ``DFTRACER_ENABLE`` is on (the core's boolean rule, dftracer/_envflag.py) and either ``DFTRACER_INIT=PRELOAD``,
so that every Python process of a run -- the script and its forked or
spawned workers -- traces from its first line and finalizes at exit, or
``DFTRACER_TORCH`` is set, so that an unchanged torch program gets its torch
events (docs/ai.md) with tracing starting at the first one.  The .pth line
also imports it when either variable holds a value that is not off and not
usable (``DFTRACER_ENABLE=maybe``, ``DFTRACER_INIT=BOGUS``): the core reads
them then and says so in one warning line each, naming the value it used,
instead of tracing nothing silently.
"""

from __future__ import annotations

import os
import sys

from dftracer._envflag import flag, preload


def enabled() -> bool:
    """True when the environment asks for tracing from start-up."""
    return flag("DFTRACER_ENABLE") and preload()


def script_missing() -> bool:
    """`python nosuch.py`: the interpreter will exit (status 2) without
    running a line, so there is nothing to trace (no trace file is made)."""
    arg0 = sys.argv[0] if sys.argv else ""
    return arg0 not in ("", "-", "-c", "-m") and not os.path.exists(arg0)


def start() -> None:
    """Starts the trace from the environment; never raises."""
    if script_missing():
        return
    try:
        # importing dftracer installs the exit and fork hooks, and the wait for
        # torch when DFTRACER_TORCH asks for it (dftracer._autotrace)
        import dftracer  # noqa: F401
        from dftracer import _core

        on, at_start = _core._start_env()  # the core's rules: an unusable value warns once
        if not on:
            return
        if at_start:
            _core.logger.initialize_log()
        if _core.is_active():
            from dftracer import _rank_hook

            _rank_hook.install()  # the rank of a process that learns it from torch.distributed
    except Exception as exc:  # the traced program must run regardless
        sys.stderr.write(f"dftracer: tracing not started at start-up: {exc}\n")


start()
