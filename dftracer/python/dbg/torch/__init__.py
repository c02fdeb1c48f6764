"""``dftracer.python.dbg.torch``: the same objects as :mod:`dftracer.python.torch`."""

from dftracer.python.torch import *  # noqa: F401,F403
from dftracer.python.torch import __all__  # noqa: F401
