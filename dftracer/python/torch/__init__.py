"""PyTorch integrations (``from dftracer.python.torch import trace_handler``,
``ProfilerContext``, ``profiler``, ...).

Importing this module does not import torch; the handler only touches the
profiler object it is given, and the profiler conveniences import torch when
a profiler is created.
"""

from __future__ import annotations

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

from dftracer.python.torch._handler import trace_handler  # noqa: E402
from dftracer.python.torch.profiler_context import ProfilerContext, profile_function  # noqa: E402
from dftracer.python.torch.profiler_context import profiler, step_profiler  # noqa: E402
from dftracer.python.torch._profiler_args import add_profiler_args, create_profiler_from_args  # noqa: E402
from dftracer.python.torch.memory import MemoryTracker  # noqa: E402
from dftracer.python.common import TagDType, TagType, TagValue, dftracer, get_time_scale  # noqa: E402
from dftracer.python.torch import common  # noqa: E402,F401  (pydftracer's submodule)
