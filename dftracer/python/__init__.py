"""The pydftracer-compatible API: ``from dftracer.python import dftracer``.

``dynamo``, ``Dynamo`` and ``dftracer_dynamo_backend`` (the torch.compile
integration) are imported on first use, so importing this package does not
import torch.
"""

from typing import Any

from dftracer._core import dftracer

__all__ = ["dftracer", "dynamo", "Dynamo", "dftracer_dynamo_backend"]

_DYNAMO_NAMES = ("Dynamo", "dftracer_dynamo_backend")


def __getattr__(name: str) -> Any:
    if name == "dynamo" or name in _DYNAMO_NAMES:
        import importlib

        module = importlib.import_module("dftracer.python.dynamo")
        return module if name == "dynamo" else getattr(module, name)
    raise AttributeError(f"module 'dftracer.python' has no attribute {name!r}")
