"""dftracer: a native tracer for Python AI workloads.

The work happens in the C extension :mod:`dftracer._core`; the user-facing API
lives in :mod:`dftracer.python` (compatible with the ``pydftracer`` package).
"""

import os as _os

try:
    from dftracer import _core
except ImportError as _e:
    _here = _os.path.dirname(_os.path.abspath(__file__))
    if any(n.startswith("_core.") and n.endswith(".so") for n in _os.listdir(_here)):
        raise
    raise ImportError(
        f"dftracer's extension (dftracer._core) is not built in {_here}: that is a source "
        "tree, which hides the installed package when it is the current folder or on "
        "PYTHONPATH. Run from another folder, or build it in place "
        "(python setup.py build_ext --inplace)") from _e

from dftracer import _conflicts, _lifecycle
from dftracer._core import __version__, io_calls

__all__ = ["__version__", "io_calls"]

_conflicts.warn()
_lifecycle.install()
