"""dftracer: a native tracer for Python AI workloads.

The work happens in the C extension :mod:`dftracer._core`; the user-facing API
lives in :mod:`dftracer.python` (compatible with the ``pydftracer`` package).
"""

from dftracer import _conflicts, _lifecycle
from dftracer._core import __version__

__all__ = ["__version__"]

_conflicts.warn()
_lifecycle.install()
