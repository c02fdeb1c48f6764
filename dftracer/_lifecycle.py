"""Process lifecycle glue that needs Python APIs: exit and forked workers.

The core flushes before fork() and exec(), on SIGTERM, every
DFTRACER_FLUSH_INTERVAL, and finalizes from a C ``atexit`` handler.  Exits
that bypass atexit are closed here:

- ``os._exit``, how every forked multiprocessing child ends (Pool,
  ProcessPoolExecutor and DataLoader workers of the fork and forkserver start
  methods) and how programs skip teardown: ``os._exit`` is wrapped so that it
  finalizes the trace first (every buffered event, the queue, the end event).
- the finalizers of a multiprocessing child, which run before its
  ``os._exit``: one is registered in every child, also when tracing starts
  only later in it (forkserver children, whose server process is not tracing).

- torch's DataLoader worker signal handler, which a worker installs as it
  starts and which ends the worker with a C-level ``_exit()`` on the SIGTERM
  its parent sends at exit (a persistent loader left alive): the core is told
  that this handler ends the process, so its own SIGTERM handler, chained in
  front of torch's, finalizes the trace before torch's runs.

Any other C-level ``_exit()`` (from native code) is not seen; what it loses is
bounded by the time-based flush (docs/configuration.md).
"""

from __future__ import annotations

import atexit
import os

from dftracer import _core, _envflag

_installed = False


class _ForkToken:
    """multiprocessing keeps after-fork callbacks in a weak registry keyed by
    an object; this one lives as long as the module."""


_token = _ForkToken()


def _in_forked_worker(_: object) -> None:
    # multiprocessing clears its finalizer registry at the start of every child
    # (fork, spawn, forkserver), then runs the after-fork callbacks: register
    # the finalizer here so it runs in util._exit_function() before the child's
    # os._exit().  Registered also when tracing is not active yet: a forkserver
    # child starts tracing at its first event.  finalize() is a no-op when
    # nothing was traced.
    from multiprocessing import util

    util.Finalize(None, _core.finalize, exitpriority=-100)


def _register_after_fork() -> None:
    from multiprocessing import util

    util.register_after_fork(_token, _in_forked_worker)


_real_exit = os._exit


def _exit(status: int, /) -> None:  # the signature of os._exit
    """os._exit, after the trace is finalized (dftracer wraps it)."""
    try:
        _core.finalize()
    except BaseException:  # the process ends whatever happens here
        pass
    _real_exit(status)


_exit.__wrapped__ = _real_exit  # type: ignore[attr-defined]


def _wrap_worker_signals() -> None:
    """torch's _worker_loop calls signal_handling._set_worker_signal_handlers()
    first: wrapped so that the core learns its SIGTERM handler ends the worker."""
    import signal

    from torch.utils.data._utils import signal_handling

    original = signal_handling._set_worker_signal_handlers
    if getattr(original, "__wrapped__", None) is not None:
        return

    def _set_worker_signal_handlers(*args: object) -> None:
        original(*args)
        try:
            _core._signal_ends_process(signal.SIGTERM)
        except Exception:  # the worker runs on whatever happens here
            pass

    _set_worker_signal_handlers.__wrapped__ = original  # type: ignore[attr-defined]
    signal_handling._set_worker_signal_handlers = _set_worker_signal_handlers


def install() -> None:
    """Registers the exit and fork hooks once per interpreter."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(_core.finalize)
    if os._exit is _real_exit:
        os._exit = _exit
    # multiprocessing's after-fork hook once the program imports
    # multiprocessing.util (every start method imports it before its first
    # child): importing it here cost every `import dftracer` 7 ms
    from dftracer._autotrace import imports

    imports.when_imported("multiprocessing.util", _register_after_fork)
    imports.when_imported("torch.utils.data._utils.signal_handling", _wrap_worker_signals)
    # The parent's helper threads come back when os.fork() returns, through
    # the wrapper _core installs at import (src/module.c): after CPython's
    # thread count for its fork warning and the program's own after-fork hooks.
    # torch events of an unchanged program (dftracer run, DFTRACER_TORCH=1):
    # waits for torch to be imported, never imports it.
    from dftracer import _autotrace

    _autotrace.install()
    # a value that is not a boolean is off; the core warns about it once
    if _envflag.flag("DFTRACER_ENABLE_CUPTI"):
        # GPU activity starts with the trace (in C); torch.profiler must still
        # find CUPTI free while it runs.
        from dftracer.python import cupti

        cupti._install_profiler_guard()
