"""pydftracer's ``dftracer.python.torch.common``: ``trace_handler`` (the
``on_trace_ready`` callback for torch.profiler, in C here) and the helpers it
used."""

from __future__ import annotations

from dftracer.python.common import TagDType, TagType, TagValue, dftracer, get_time_scale
from dftracer.python.torch._handler import trace_handler

__all__ = ["TagDType", "TagType", "TagValue", "dftracer", "get_time_scale", "trace_handler"]
