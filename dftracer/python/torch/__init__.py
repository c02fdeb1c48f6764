"""PyTorch integrations (``from dftracer.python.torch import ...``).

Importing this module does not import torch.
"""

from __future__ import annotations

from dftracer.python.torch.profiler_context import (
    ProfilerContext,
    add_profiler_args,
    create_profiler_from_args,
    profile_function,
    profiler,
    step_profiler,
)

__all__ = [
    "ProfilerContext",
    "add_profiler_args",
    "create_profiler_from_args",
    "profile_function",
    "profiler",
    "step_profiler",
]
