"""The native-library module of pydftracer (``import dftracer.dftracer``).

Programs import it to check that the native library is present, and
``dftracer.python.logger`` sets it as ``dftracer.python.common.profiler`` when
tracing is enabled.  Every function writes through the core (``dftracer._core``).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple, Union

from dftracer import _core

__all__ = [
    "enter_event",
    "exit_event",
    "finalize",
    "get_config",
    "get_time",
    "initialize",
    "log_event",
    "log_metadata_event",
    "mark_used",
    "set_app_metadata_int",
    "set_app_metadata_string",
]

get_time = _core.get_time
finalize = _core.finalize
exit_event = _core.logger.exit_event
log_metadata_event = _core.logger.log_metadata_event


def _facade() -> Any:
    from dftracer.python.common import dftracer

    return dftracer.get_instance()


def initialize(log_file: Optional[str] = None, data_dirs: Optional[str] = None,
               process_id: int = -1) -> None:
    """Starts tracing (when DFTRACER_ENABLE is on) to ``log_file``."""
    _facade().initialize_log(log_file, data_dirs, process_id)


def enter_event() -> int:
    """Opens a nesting scope on this thread; returns 0."""
    _core.logger.enter_event()
    return 0


def log_event(name: str, cat: str, start_time: int, duration: int,
              int_args: Mapping[str, Tuple[int, int]] = {},  # noqa: B006 (read only)
              string_args: Mapping[str, Tuple[int, str]] = {},  # noqa: B006
              float_args: Mapping[str, Tuple[int, Union[int, float]]] = {}) -> None:  # noqa: B006
    """Records a complete event (the native module's argument order)."""
    _core.logger.log_event(name, cat, start_time, duration, int_args=int_args,
                           float_args=float_args, string_args=string_args)


def get_config(key: str) -> str:
    """The value of the DFTRACER_* setting ``key`` while tracing, else ""."""
    return str(_facade().get_config(key))


def mark_used(name: str) -> None:
    """Notes that an integration was used."""
    _facade().mark_used(name)


def set_app_metadata_int(key: str, value: int) -> None:
    """Writes key = value as a CM metadata event."""
    _facade().set_app_metadata_int(key, value)


def set_app_metadata_string(key: str, value: str) -> None:
    """Writes key = value as a CM metadata event."""
    _facade().set_app_metadata_string(key, value)


