"""``dftracer.python.dbg.torch.profiler`` is :mod:`dftracer.python.torch.profiler`."""

import sys

import dftracer.python.torch.profiler as _profiler

sys.modules[__name__] = _profiler
