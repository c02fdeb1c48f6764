"""The pydftracer-compatible API.

``from dftracer.python import dftracer`` (the logger), ``dft_fn`` (imported as
``Profile`` in most code: decorators, loops, context managers) and ``ai`` (the
AI/ML event tree), plus pydftracer's aliases for the ``ai`` categories.
``dynamo``, ``Dynamo`` and ``dftracer_dynamo_backend`` (the torch.compile
integration) are imported on first use, so importing this package does not
import torch.
"""

from typing import Any

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

from dftracer.python.ai import __all__ as _AI_NAMES

_DYNAMO_NAMES = ("Dynamo", "dftracer_dynamo_backend")
__all__ = ["dftracer", "dft_fn", *_AI_NAMES, "dynamo", *_DYNAMO_NAMES]


def __getattr__(name: str) -> Any:
    if name == "dynamo" or name in _DYNAMO_NAMES:
        import importlib

        module = importlib.import_module("dftracer.python.dynamo")
        return module if name == "dynamo" else getattr(module, name)
    raise AttributeError(f"module 'dftracer.python' has no attribute {name!r}")
