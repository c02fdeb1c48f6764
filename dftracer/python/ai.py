"""The AI/ML event tree of pydftracer: ``from dftracer.python.ai import ai``.

Everything of :mod:`dftracer.python.ai_common` (the node class, the category
classes, their enums) and of :mod:`dftracer.python.ai_init` (the ``ai`` tree
and its category aliases), as pydftracer's ``dftracer.python.ai`` exports it.
``dft_fn_orig`` and ``dftracer_orig`` are pydftracer's names for the
``dft_fn`` and ``dftracer`` classes the tree writes through.
"""

from __future__ import annotations

from dftracer.python import ai_common
from dftracer.python.ai_common import *  # noqa: F401,F403
from dftracer.python.ai_common import __all__ as _COMMON
from dftracer.python.ai_init import *  # noqa: F401,F403
from dftracer.python.ai_init import __all__ as _INIT
from dftracer.python.common import dft_fn as dft_fn_orig
from dftracer.python.common import dftracer as dftracer_orig

__all__ = list(dict.fromkeys([*_COMMON, *_INIT, "ai_common", "dft_fn_orig", "dftracer_orig"]))
