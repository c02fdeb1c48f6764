"""The pydftracer-compatible API.

``from dftracer.python import dftracer`` (the logger), ``dft_fn`` (imported as
``Profile`` in most code: decorators, loops, context managers) and ``ai`` (the
AI/ML event tree), plus pydftracer's aliases for the ``ai`` categories.
"""

from dftracer._core import dft_fn, dftracer
from dftracer.python.ai import (
    AI,
    DFTracerAI,
    ai,
    checkpoint,
    comm,
    compute,
    data,
    dataloader,
    device,
    pipeline,
)

__all__ = [
    "dftracer",
    "dft_fn",
    "ai",
    "AI",
    "DFTracerAI",
    "comm",
    "compute",
    "data",
    "dataloader",
    "device",
    "checkpoint",
    "pipeline",
]
