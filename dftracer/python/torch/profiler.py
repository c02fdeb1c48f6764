"""pydftracer's ``dftracer.python.torch.profiler``: ``trace_handler`` and the
names of :mod:`dftracer.python.torch.common`.

Importing this submodule makes it the package attribute
``dftracer.python.torch.profiler``, where dftracer keeps the ``@profiler``
decorator; so the module is callable and calling it is calling that decorator:
``from dftracer.python.torch import profiler`` works as either.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from dftracer.python.torch import common
from dftracer.python.torch.common import *  # noqa: F401,F403
from dftracer.python.torch.common import __all__ as _COMMON

__all__ = [*_COMMON, "common"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from dftracer.python.torch.profiler_context import profiler

        return profiler(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
