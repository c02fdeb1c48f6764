"""pydftracer's environment constants: ``from dftracer.python.env import *``.

The constants are read from ``os.environ`` when this module is imported, and
again whenever :mod:`dftracer.python.logger` is imported or reloaded (see
:func:`_refresh`), as in pydftracer.  They describe what the native core will
do: ``DFTRACER_ENABLE`` is true for the values the core accepts as on
(``1``, ``true``, ``yes``, ``on``, ``y``, any case), ``DFTRACER_INIT_PRELOAD``
only for ``DFTRACER_INIT=PRELOAD``; the core reads both here (an unusable
value of either warns once, naming the value used).  The core itself reads the environment
when tracing starts (docs/configuration.md), so a program that changes
``os.environ`` before ``initialize_log`` is traced accordingly either way.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterable

from dftracer import _core, _envflag

__all__ = [
    "DFTRACER_ENABLE",
    "DFTRACER_ENABLE_ENV",
    "DFTRACER_INIT_ENV",
    "DFTRACER_INIT_PRELOAD",
    "DFTRACER_LOG_LEVEL",
    "DFTRACER_LOG_LEVEL_ENV",
    "DFTRACER_TIME_METRIC_ENV",
    "setup_stream_logger",
]

DFTRACER_ENABLE_ENV = "DFTRACER_ENABLE"
DFTRACER_INIT_ENV = "DFTRACER_INIT"
DFTRACER_LOG_LEVEL_ENV = "DFTRACER_LOG_LEVEL"
DFTRACER_TIME_METRIC_ENV = "DFTRACER_TIME_METRIC"

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARN,
           "ERROR": logging.ERROR}


def _read() -> Dict[str, Any]:
    """The constants for the current environment (the core's parsing)."""
    enable, preload = _core._start_env()  # an unusable value warns once (the core's table)
    return {
        "DFTRACER_ENABLE": enable,
        "DFTRACER_INIT_PRELOAD": preload,
        "DFTRACER_LOG_LEVEL": os.environ.get(DFTRACER_LOG_LEVEL_ENV, "ERROR"),
    }


def _refresh(namespaces: Iterable[Dict[str, Any]] = ()) -> Dict[str, Any]:
    """Re-reads the environment into this module and into each namespace given
    that already holds the constants (modules that star-imported them)."""
    values = _read()
    globals().update(values)
    for ns in namespaces:
        for key, value in values.items():
            if key in ns:
                ns[key] = value
    return values


DFTRACER_ENABLE: bool = False
DFTRACER_INIT_PRELOAD: bool = False
DFTRACER_LOG_LEVEL: str = "ERROR"
_refresh()


def setup_stream_logger() -> logging.Logger:
    """The ``DFTRACER`` logger, printing ``[LEVEL] message`` on stderr at
    ``DFTRACER_LOG_LEVEL`` (the core's reading: _envflag.log_level).  Calling it
    again does not add a second handler."""
    logger = logging.getLogger("DFTRACER")
    logger.setLevel(_LEVELS[_envflag.log_level(DFTRACER_LOG_LEVEL)])
    if not any(getattr(h, "_dftracer", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
        handler._dftracer = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    return logger
