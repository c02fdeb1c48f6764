"""The one rule for boolean ``DFTRACER_*`` environment variables, the C
core's (src/core/config.c, ``dft_config_flag``): ``1``/``true``/``yes``/``on``/``y``
or ``0``/``false``/``no``/``off``/``n``, in any case; unset or empty is the
default; any other value is the default, with one warning line naming the
variable and the value used.  ``dftracer-preload.pth`` applies the same
tuples inline (it must import nothing but ``os``); tests/python/test_envflag.py
holds the three to the same spellings.  ``choice`` is the same rule for a
variable that names one of a few values; ``log_level`` is DFTRACER_LOG_LEVEL's
(tests/python/test_envflag.py holds it to the core's).  Imports only ``os``."""

from __future__ import annotations

import os
from typing import Optional, Set, Tuple

ON: Tuple[str, ...] = ("1", "true", "yes", "on", "y")
OFF: Tuple[str, ...] = ("0", "false", "no", "off", "n")

_warned: Set[Tuple[str, str]] = set()


def _warn(var: str, value: str, used: str,
          what: str = "a boolean (1/true/yes/on or 0/false/no/off)") -> None:
    if (var, value) in _warned:
        return
    _warned.add((var, value))
    line = f"dftracer: warning: {var}='{value}' is not {what}; using {used}\n"
    try:
        os.write(2, line.encode("utf-8", "replace"))  # one write, as the C warnings
    except OSError:
        pass


def flag(var: str, default: bool = False, warn: bool = False) -> bool:
    """The boolean environment variable var, read by the core's rule.  warn:
    say so when the value is not a boolean (for the variables only Python
    reads; the core warns about its own once when tracing starts)."""
    value = os.environ.get(var, "")
    if not value:
        return default
    low = value.lower()
    if low in ON:
        return True
    if low in OFF:
        return False
    if warn:
        _warn(var, value, "1" if default else "0")
    return default


def choice(var: str, choices: Tuple[str, ...], default: str) -> str:
    """The environment variable var, one of choices (any case); unset or empty
    is default, any other value default with one warning line."""
    value = os.environ.get(var, "")
    if not value:
        return default
    if value.lower() in choices:
        return value.lower()
    _warn(var, value, default, "one of " + "/".join(choices))
    return default


LEVELS: Tuple[str, ...] = ("DEBUG", "INFO", "WARN", "ERROR")  # src/core/config.h, DFT_LOG_*


def log_level(value: Optional[str]) -> str:
    """DFTRACER_LOG_LEVEL's value as the core reads it (src/core/config.c,
    parse_level): one of LEVELS, any case, WARNING for WARN; unset, empty or
    anything else is ERROR (the core warns about an unusable value once)."""
    up = (value or "").upper()
    up = "WARN" if up == "WARNING" else up
    return up if up in LEVELS else "ERROR"


def preload() -> bool:
    """DFTRACER_INIT=PRELOAD (any case, as the core reads it)."""
    return os.environ.get("DFTRACER_INIT", "").upper() == "PRELOAD"
