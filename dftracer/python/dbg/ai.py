"""``dftracer.python.dbg.ai``: the same objects as :mod:`dftracer.python.ai`."""

from dftracer.python.ai import *  # noqa: F401,F403
from dftracer.python.ai import __all__  # noqa: F401
