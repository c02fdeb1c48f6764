"""pydftracer's debug build of the API (``dftracer.python.dbg``).

dftracer has one native core, so this package is the same API with the same
objects as :mod:`dftracer.python`; set ``DFTRACER_LOG_LEVEL=DEBUG`` for the
core's diagnostics (docs/compat.md).
"""

from typing import Any

from dftracer.python import __all__ as _NAMES
from dftracer.python import __getattr__ as _lazy
from dftracer.python import common  # noqa: F401
from dftracer.python.dbg.ai import *  # noqa: F401,F403
from dftracer.python.dbg.logger import *  # noqa: F401,F403
from dftracer.python.dbg.logger import logger  # noqa: F401

__all__ = [n for n in _NAMES if n not in ("env", "ai_init")]


def __getattr__(name: str) -> Any:
    return _lazy(name)
