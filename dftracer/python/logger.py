"""pydftracer's ``dftracer.python.logger``: the environment constants, the
``DFTRACER`` stream logger, ``profiler`` and everything of
:mod:`dftracer.python.common`.

Importing (or reloading) this module re-reads the ``DFTRACER_*`` constants
from ``os.environ`` into every loaded ``dftracer.python`` module, so a program
that changes the environment and then reloads it sees the new values; when
``DFTRACER_ENABLE`` is on, ``profiler`` becomes the native module
:mod:`dftracer.dftracer`.
"""

from __future__ import annotations

import logging
import sys

from dftracer.python import env as _env

_env._refresh(vars(m) for name, m in list(sys.modules.items())
              if m is not None and name.startswith("dftracer.python"))

from dftracer.python import common  # noqa: E402
from dftracer.python.env import *  # noqa: E402,F401,F403
from dftracer.python.env import DFTRACER_ENABLE, setup_stream_logger  # noqa: E402

logger: logging.Logger = setup_stream_logger()

if DFTRACER_ENABLE:
    import dftracer.dftracer as _native  # noqa: E402

    common.profiler = _native  # type: ignore[assignment]
    logger.info("DFTracer was enabled.")
else:
    common.profiler = common.NoOpProfiler()

from dftracer.python.common import *  # noqa: E402,F401,F403
from dftracer.python.common import __all__ as _COMMON  # noqa: E402

__all__ = [*_COMMON, "common", "logger"]
