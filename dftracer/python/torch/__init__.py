"""PyTorch integrations (``from dftracer.python.torch import trace_handler``,
``ProfilerContext``, ``profiler``, ...).

Importing this module does not import torch; the handler only touches the
profiler object it is given, and the profiler conveniences import torch when
a profiler is created.
"""

from __future__ import annotations

from typing import Any

from dftracer import _core

__all__ = [
    "trace_handler",
    "TagDType",
    "TagType",
    "TagValue",
    "common",
    "dftracer",
    "get_time_scale",
    "MemoryTracker",
    "ProfilerContext",
    "add_profiler_args",
    "create_profiler_from_args",
    "profile_function",
    "profiler",
    "step_profiler",
]


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


# After trace_handler: the profiler context looks it up in this module.
from dftracer.python.torch.profiler_context import ProfilerContext, profile_function  # noqa: E402
from dftracer.python.torch.profiler_context import profiler, step_profiler  # noqa: E402
from dftracer.python.torch._profiler_args import add_profiler_args, create_profiler_from_args  # noqa: E402
from dftracer.python.torch.memory import MemoryTracker  # noqa: E402
from dftracer.python.common import TagDType, TagType, TagValue, dftracer, get_time_scale  # noqa: E402
from dftracer.python.torch import common  # noqa: E402,F401  (pydftracer's submodule)
