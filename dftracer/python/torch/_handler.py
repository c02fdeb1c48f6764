"""``trace_handler``, torch.profiler's ``on_trace_ready`` callback, in a module
of its own: the package, ``common`` and the profiler context all take it
from here (the package re-exports it, as pydftracer does)."""

from __future__ import annotations

from typing import Any

from dftracer import _core


def trace_handler(profiler_result: Any) -> None:
    """``on_trace_ready`` callback for :class:`torch.profiler.profile`.

    Writes every event of the cycle that just finished as a ``PP`` complete
    event on the tracer's clock (see docs/torch-profiler.md).  Returns at once
    when tracing is disabled.  Raises RuntimeError when the trace was finalized
    before the cycle ended or the profiler results cannot be read.
    """
    try:
        _core._torch_trace_handler(profiler_result)
    except (TypeError, RuntimeError, MemoryError):
        raise
    except Exception as exc:  # an accessor of torch's results failed
        raise RuntimeError(f"trace_handler: reading the profiler results failed: {exc}") from exc


trace_handler.__module__ = "dftracer.python.torch"  # where users (and pickle) find it
