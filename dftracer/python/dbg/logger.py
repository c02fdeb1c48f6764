"""``dftracer.python.dbg.logger``: :mod:`dftracer.python.logger`, reloaded
with it (importing or reloading this module re-reads the environment too)."""

import importlib
import sys

if "dftracer.python.logger" in sys.modules:
    importlib.reload(sys.modules["dftracer.python.logger"])

from dftracer.python.logger import *  # noqa: F401,F403,E402
from dftracer.python.logger import __all__  # noqa: F401,E402
