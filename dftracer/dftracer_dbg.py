"""The debug native-library module of pydftracer (``dftracer.dftracer_dbg``):
the same functions as :mod:`dftracer.dftracer`; dftracer has one core, whose
diagnostics ``DFTRACER_LOG_LEVEL=DEBUG`` turns on."""

from dftracer.dftracer import *  # noqa: F401,F403
from dftracer.dftracer import __all__  # noqa: F401
